"""Costs of the cluster schedulers and of the interference model on a 100k-GPU Clos.

    python studies/cluster_interference_costs.py [--arrivals N] [--fabric clos-100k]
        [--scheduler topology] [--seed 0]

Jobs of 8 to 4,096 GPUs (powers of two; llama3-8b below 256 GPUs, llama3-70b with
TP 8 x PP 4 from 256) arrive one by one, are placed by the scheduler with the current link
load, and start in the interference model; one running job leaves after every 4 arrivals.
Prints one JSON object: per placement (ms), per job preparation (s: the step model at
its placement) and per re-evaluation (s: components and joint solves), the last joint
solve's rows, and the mean and largest slowdown against each job's standalone step. See
docs/cluster-scheduling.md.
"""

from __future__ import annotations

import argparse
import json
import time
import types

import numpy as np

import fabricflow as ff
from fabricflow.cluster.interference import Interference, job_traffic_shape
from fabricflow.cluster.schedulers import SCHEDULERS, Request, make_scheduler
from fabricflow.cluster.state import ClusterState
from fabricflow.workload.gpu import load_gpu
from fabricflow.workload.layout import Layout
from fabricflow.workload.model_spec import load_model

SIZES = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
# small jobs are the most common, as on shared clusters
WEIGHTS = [0.2, 0.12, 0.12, 0.12, 0.1, 0.1, 0.08, 0.07, 0.05, 0.04]


def job_spec(gpus: int) -> types.SimpleNamespace:
    """A JobSpec-like job of ``gpus`` GPUs (the fields the interference model reads)."""
    if gpus >= 256:
        model = "llama3-70b"
        layout = Layout(
            tp=8, pp=4, dp=gpus // 32, global_batch=gpus, seq_len=4096, recompute="full"
        )
    else:
        model = "llama3-8b"
        tp = min(gpus, 8)
        layout = Layout(
            tp=tp, dp=gpus // tp, global_batch=4 * gpus // tp, seq_len=4096, recompute="full"
        )
    return types.SimpleNamespace(
        id=f"{model}-{gpus}",
        model=load_model(model),
        gpu=load_gpu("h100-sxm"),
        gpus=gpus,
        layout=layout,
        order="tp-cp-ep-dp-pp",
        priority=0,
    )


def measure(fabric_name: str, arrivals: int, scheduler: str, seed: int) -> dict:
    fabric = ff.load_fabric(fabric_name)
    rng = np.random.default_rng(seed)
    fits = [size <= fabric.num_gpus for size in SIZES]
    weights = np.asarray(WEIGHTS)[fits] / np.sum(np.asarray(WEIGHTS)[fits])
    sizes = rng.choice(np.asarray(SIZES)[fits], size=arrivals, p=weights).tolist()
    started = time.perf_counter()
    standalone = {}
    for gpus in sorted(set(sizes)):
        spec = job_spec(gpus)
        standalone[gpus] = (spec, ff.step_time(spec.model, spec.gpu, spec.layout, fabric))
    standalone_s = time.perf_counter() - started
    state = ClusterState(fabric)
    policy = make_scheduler(scheduler, fabric)
    inter = Interference(fabric, seed=seed)
    place_s, prepare_s, evaluate_s, running = [], [], [], []
    for key, gpus in enumerate(sizes):
        spec, alone = standalone[gpus]
        request = Request(key, gpus, 0, job_traffic_shape(spec, alone))
        load = inter.link_load()
        started = time.perf_counter()
        placed = policy.place(state, request, load)
        place_s.append(time.perf_counter() - started)
        if placed is None:
            continue
        state.allocate(key, placed)
        started = time.perf_counter()
        inter.add(key, spec, alone, placed)
        prepare_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        inter.step_times()
        evaluate_s.append(time.perf_counter() - started)
        running.append(key)
        if key % 4 == 3:
            gone = running.pop(int(rng.integers(len(running))))
            state.release(gone)
            inter.remove(gone)
            started = time.perf_counter()
            inter.step_times()
            evaluate_s.append(time.perf_counter() - started)
    times = inter.step_times()
    slowdown = [times[k] / standalone[sizes[k]][1].step_time_s for k in times]
    return {
        "fabric": fabric_name,
        "scheduler": scheduler,
        "arrivals": arrivals,
        "jobs_running": len(times),
        "gpus_busy": int((state.owner >= 0).sum()),
        "standalone_steps_s": standalone_s,
        "place_ms": {"mean": 1e3 * float(np.mean(place_s)), "max": 1e3 * float(np.max(place_s))},
        "prepare_s": _summary(prepare_s),
        "evaluate_s": _summary(evaluate_s),
        "components_last": inter.stats["components_last"],
        "rows_solved_last": inter.stats["flows_last"],
        "joint_solves": inter.stats["solves"],
        "joint_solve_s_total": inter.stats["solve_seconds"],
        "slowdown": {"mean": float(np.mean(slowdown)), "max": float(np.max(slowdown))},
        "fragmentation": state.fragmentation(),
    }


def _summary(values: list[float]) -> dict:
    array = np.asarray(values, dtype=np.float64)
    return {
        "mean": float(array.mean()),
        "p90": float(np.percentile(array, 90)),
        "max": float(array.max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arrivals", type=int, default=120)
    parser.add_argument("--fabric", default="clos-100k")
    parser.add_argument("--scheduler", default="topology", choices=SCHEDULERS)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(measure(args.fabric, args.arrivals, args.scheduler, args.seed), indent=1))


if __name__ == "__main__":
    main()
