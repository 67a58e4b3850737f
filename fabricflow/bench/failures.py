"""Bench section ``failures``: 4,096 failure scenarios of max-min on 100k flows, one batch.

The fabric is ``clos-100k``; the traffic an MoE all-to-all in 16-GPU strided expert groups
(417 groups, 100,080 flows), ECMP-routed once. Each scenario fails a seeded random
fraction of the cables of one tier (``leaf``: leaf-spine, ``spine``: spine-core) at
0.5 %, 1 %, 2 % or 5 %, 512 seeds each (2 x 4 x 512 = 4,096). Routes are kept (no
reroute): flows crossing a failed cable stall, as in the first milliseconds after a cut,
so every scenario shares one route table and the batch differs only in capacities. It is
solved as one batch by the batch-minor kernel (:mod:`fabricflow.solve.maxmin.batch`),
split into equal chunks only when the memory estimate demands it (one compilation for all
chunks; the chunking is reported), and across devices when there are several.

Reported: compile time (a first chunk call minus a second), solve time, scenarios/s,
peak RSS, the chunking, and per tier and fraction the mean total throughput, the mean
stalled flows and the worst scenario. ``--quick``: clos-100k cut to 4,096 GPUs, 64 groups,
64 scenarios. ``--gpu``: the same batch on the GPU when one is present.

Sizes beyond the section's: ``python -m fabricflow.bench.failures --scenarios 256 --json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from fabricflow.bench import SECTIONS
from fabricflow.bench._measure import measured
from fabricflow.fabric.spec import load_fabric
from fabricflow.memory_budget import memory_budget
from fabricflow.routing.route import route
from fabricflow.solve.maxmin.checked import max_min_rates
from fabricflow.solve.maxmin.engine import max_min
from fabricflow.solve.maxmin.inputs import solve_bytes
from fabricflow.sweeps.solver_tasks import failure_capacities
from fabricflow.traffic.patterns import alltoall_groups

FRACTIONS = (0.005, 0.01, 0.02, 0.05)
KINDS = ("leaf", "spine")


def run(args) -> dict:
    quick = bool(getattr(args, "quick", False))
    scenarios = getattr(args, "scenarios", None) or (64 if quick else 4096)
    result = _case(quick, scenarios)
    if getattr(args, "gpu", False):
        result["gpu"] = _gpu_case()
    else:
        result["gpu"] = "not requested"
    return result


def _setup(quick: bool, scenarios: int):
    """The fabric, the shared routes and the scenario grid ``[(kind, fraction, seed)]``."""
    fabric = load_fabric("clos-100k", **({"gpus": 4096} if quick else {}))
    src, dst = alltoall_groups(fabric.num_gpus, 16, 64 if quick else 417)
    routes = route(fabric, src, dst, policy="ecmp", seed=0)
    per_cell = -(-scenarios // (len(KINDS) * len(FRACTIONS)))
    grid = [(k, f, s) for k in KINDS for f in FRACTIONS for s in range(per_cell)][:scenarios]
    return fabric, routes, grid


def _capacities(fabric, grid, used) -> np.ndarray:
    """float32 ``[len(grid), len(used)]``: each scenario's capacities of the crossed links
    (made chunk by chunk: all 4,096 full ``[L]`` rows would take 22 GB)."""
    out = np.empty((len(grid), used.size), np.float32)
    for kind in KINDS:
        rows = [i for i, g in enumerate(grid) if g[0] == kind]
        for start in range(0, len(rows), 32):  # 32 full rows at a time: ~170 MB
            block = rows[start : start + 32]
            full = failure_capacities(
                fabric, kind, [grid[i][1] for i in block], [grid[i][2] for i in block]
            )
            out[block] = full[:, used]
    return out


def _case(quick: bool, scenarios: int) -> dict:
    import jax

    out: dict = {"preset": "clos-100k", "dtype": "float32", "device": str(jax.devices()[0])}
    with measured(out, "setup"):
        fabric, routes, grid = _setup(quick, scenarios)
    links = routes.links
    used = np.unique(links)
    used = used[used >= 0]
    out.update(
        gpus=fabric.num_gpus,
        links=fabric.num_links,
        links_crossed=int(used.size),
        flows=int(links.shape[0]),
        hops=int(links.shape[1]),
        scenarios=len(grid),
        devices=len(jax.devices()),
    )
    budget, source = memory_budget()
    per = solve_bytes(links.size, links.shape[0], used.size, 1) - links.size * 16
    # An eighth of the budget: the budget counts the machine's RAM, which other processes
    # share; the estimate is about twice the measured peak.
    chunk = int(max(1, min(len(grid), (budget // 8 - links.size * 16) // per)))
    chunks = -(-len(grid) // chunk)
    chunk = -(-len(grid) // chunks)  # equal chunks, as few as the memory allows
    out["chunking"] = {
        "chunk_scenarios": chunk,
        "chunks": chunks,
        "estimated_bytes_per_chunk": int(solve_bytes(links.size, links.shape[0], used.size, chunk)),
        "memory_budget_bytes": int(budget),
        "budget_source": source,
    }
    throughput, stalled = _solve_all(out, fabric, grid, links, used, chunk)
    out["scenarios_per_s"] = len(grid) / out["solve_s"]
    out["by_tier_and_fraction"] = _summary(grid, throughput, stalled)
    out["intact_throughput_Bps"] = float(_intact(links, fabric.capacity, used))
    return out


def _solve_all(out: dict, fabric, grid, links, used, chunk: int):
    """Solve every scenario chunk by chunk; record compile and solve times."""
    remap = np.full(fabric.num_links + 1, -1, np.int32)
    remap[used] = np.arange(used.size, dtype=np.int32)
    compact = remap[links]
    total = len(grid)
    padded = grid + [grid[-1]] * (-total % chunk)  # equal chunks: one compilation

    def solve(part):
        solution = max_min(compact, part, shard="auto")
        out["method"] = solution.method
        return solution

    with measured(out, "first_chunk"):
        solve(_capacities(fabric, padded[:chunk], used))
    throughput = np.empty(len(padded))
    stalled = np.empty(len(padded))
    rounds = []
    started = time.perf_counter()
    with measured(out, "solve"):
        for start in range(0, len(padded), chunk):
            solution = solve(_capacities(fabric, padded[start : start + chunk], used))
            rates = np.asarray(solution.rates, np.float64)
            if np.any(np.asarray(solution.status) != 0):
                raise RuntimeError(f"failure bench: solver status {np.asarray(solution.status)}")
            throughput[start : start + chunk] = rates.sum(axis=1)
            stalled[start : start + chunk] = (rates <= 0).sum(axis=1)
            rounds.append(int(np.asarray(solution.rounds).max()))
            done = min(start + chunk, total)
            elapsed = time.perf_counter() - started
            print(
                f"failures: {done}/{total} scenarios, {elapsed:.0f} s, "
                f"{done / elapsed:.3g} scenarios/s",
                file=sys.stderr,
                flush=True,
            )
    out["compile_s"] = max(out["first_chunk_s"] - out["solve_s"] / (len(padded) // chunk), 0.0)
    out["max_rounds"] = max(rounds)
    return throughput[:total], stalled[:total]


def _intact(links, capacity, used) -> float:
    return float(np.sum(max_min_rates(links, capacity.astype(np.float32))))


def _summary(grid, throughput, stalled) -> dict:
    table: dict = {}
    kinds = np.array([g[0] for g in grid])
    fractions = np.array([g[1] for g in grid])
    for kind in KINDS:
        for fraction in FRACTIONS:
            pick = (kinds == kind) & (fractions == fraction)
            if not pick.any():
                continue
            table[f"{kind}@{fraction:g}"] = {
                "scenarios": int(pick.sum()),
                "mean_throughput_Bps": float(throughput[pick].mean()),
                "min_throughput_Bps": float(throughput[pick].min()),
                "mean_stalled_flows": float(stalled[pick].mean()),
            }
    return table


def _gpu_case() -> dict | str:
    import jax

    if not any(device.platform == "gpu" for device in jax.devices()):
        return "skipped: no GPU device"
    # JAX's default backend is the GPU when one is present, so the case above ran there;
    # the CPU figure comes from a run with JAX_PLATFORMS=cpu.
    return {"device": str(jax.devices()[0]), "note": "the case above ran on this device"}


def main(argv=None) -> None:
    """``python -m fabricflow.bench.failures [--quick] [--scenarios N] [--json]``."""
    parser = argparse.ArgumentParser(description=SECTIONS["failures"])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--scenarios", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    result = run(args)
    result["section_wall_s"] = time.perf_counter() - start
    print(json.dumps(result, indent=None if args.json else 2, default=str))


if __name__ == "__main__":
    main()
