"""Co-location on a shared, oversubscribed fabric: every scheduler on the same trace.

    python studies/cluster_colocation.py OUT [--jobs N] [--days D] [--seed S]

The fabric is dgx-h100-superpod (rail-optimized two-tier Clos) cut to 768 H100 with its
leaf tier oversubscribed 3:1 (48 down / 16 up ports per leaf), so that jobs sharing spine
links slow each other down. The trace is ``synthetic_trace(N)`` (200 jobs by default over two
days, sizes 1-256 GPUs equally likely per power of two, standalone lengths 30 min - 6 h:
about 70% of the GPU-hours offered, so that several multi-node jobs run at once). Each
scheduler (first-fit, packed, topology, block) runs it with interference on and no
failures. Writes ``OUT/colocation.nc`` (per scheduler and job: slowdown, queue wait,
start, end, GPUs), ``OUT/slowdown_cdf.png`` and ``OUT/summary.json`` (mean and p90
slowdown, utilization and mean queue wait per scheduler), and prints the summary. The
numbers are measured, not tuned: docs/cluster.md quotes them.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

import fabricflow as ff
from fabricflow.cluster.simulate import simulate_cluster
from fabricflow.cluster.trace import synthetic_trace
from fabricflow.plots.cluster import plot_slowdown_cdf

SCHEDULERS = ("first-fit", "packed", "topology", "block")


def oversubscribed_superpod(ratio: int = 3):
    """dgx-h100-superpod (768 GPUs) with ``ratio``:1 leaf oversubscription."""
    return ff.load_fabric(
        "dgx-h100-superpod",
        name=f"dgx-h100-superpod-{ratio}to1",
        gpus=768,  # whole rail groups of 48-port leaves (a multiple of 384)
        topology={
            "tiers": [
                {"name": "leaf", "radix": 64, "oversubscription": ratio, "latency": "0.6us"},
                {"name": "spine", "radix": 64},
            ]
        },
    )


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--days", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ratio", type=int, default=3, help="leaf oversubscription (3)")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    fabric = oversubscribed_superpod(args.ratio)
    trace = synthetic_trace(
        args.jobs,
        seed=args.seed,
        mean_interarrival_s=args.days * 86400.0 / args.jobs,
        sizes=(1, 2, 4, 8, 16, 32, 64, 128, 256),
        size_exponent=0.0,  # equally likely per power of two: multi-node jobs share spines
        duration_range=(1800.0, 6 * 3600.0),
        fabric=fabric,
    )
    runs = {}
    summary: dict = {"fabric": fabric.name, "jobs": args.jobs, "seed": args.seed}
    for name in SCHEDULERS:
        began = time.perf_counter()
        run = simulate_cluster(fabric, trace, scheduler=name, interference=True, seed=args.seed)
        runs[name] = run
        slowdown = np.array([j["slowdown"] for j in run.jobs if j["slowdown"] is not None])
        waits = np.array([j["queue_wait_s"] for j in run.jobs if j["queue_wait_s"] is not None])
        summary[name] = {
            "mean_slowdown": float(slowdown.mean()),
            "p90_slowdown": float(np.percentile(slowdown, 90)),
            "max_slowdown": float(slowdown.max()),
            "utilization": run.cluster["utilization"],
            "mean_queue_wait_s": float(waits.mean()),
            "makespan_s": run.cluster["horizon_s"],
            "seconds": time.perf_counter() - began,
        }
        print(name, json.dumps(summary[name]), flush=True)
    _write(args.out, runs, summary)
    return summary


def _write(out: str, runs: dict, summary: dict) -> None:
    import xarray as xr

    ids = [job["id"] for job in next(iter(runs.values())).jobs]

    def column(key):
        return (
            ("scheduler", "job"),
            np.array(
                [
                    [np.nan if job[key] is None else job[key] for job in run.jobs]
                    for run in runs.values()
                ],
                dtype=np.float64,
            ),
        )

    data = xr.Dataset(
        {key: column(key) for key in ("slowdown", "queue_wait_s", "start_s", "end_s", "goodput")},
        coords={
            "scheduler": list(runs),
            "job": ids,
            "gpus": ("job", [job["gpus"] for job in next(iter(runs.values())).jobs]),
        },
        attrs={"fabric": summary["fabric"], "seed": summary["seed"]},
    )
    data.to_netcdf(os.path.join(out, "colocation.nc"))
    plot_slowdown_cdf(runs, os.path.join(out, "slowdown_cdf.png"))
    with open(os.path.join(out, "summary.json"), "w") as handle:
        json.dump(summary, handle, indent=1)


if __name__ == "__main__":
    main()
