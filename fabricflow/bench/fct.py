"""Benchmark section ``fct``: flow completion times of a 2 MB random permutation.

The packet-simulation test case: every host of a k-ary three-tier fat-tree (400 Gb/s,
1 us links, PFC on, no congestion control) sends 2 MB to one other host, all at once,
ECMP routes. For k = 16 (1,024 hosts) and k = 32 (8,192 hosts; ``--quick``: k = 8 and
16) it reports FCT percentiles (us) at fluid and packet fidelity, and the solve time of
each: the first call (compile + solve) and a second call (solve only). Target on the
2-core machine: the packet-fidelity solve at 8,192 hosts in <= 5 s.
"""

from __future__ import annotations

import time

import numpy as np

from fabricflow.dynamics.flow_completion import flow_completion_times
from fabricflow.fabric.spec import load_fat_tree
from fabricflow.routing.route import route
from fabricflow.traffic.patterns import permutation_flows


def run(args) -> int | dict:
    quick = bool(getattr(args, "quick", False))
    result: dict = {"size_bytes": 2e6, "traffic": "permutation", "pfc": True, "cc": None}
    for k in (8, 16) if quick else (16, 32):
        result[f"k{k}"] = _case(k)
    if not quick:
        solve = result["k32"]["packet"]["solve_s"]
        result["targets"] = {"packet_solve_s_at_8192_hosts": 5.0}
        result["meets_targets"] = bool(solve <= 5.0)
    return result


def _case(k: int) -> dict:
    began = time.perf_counter()
    fabric = load_fat_tree(k)
    src, dst = permutation_flows(fabric.num_gpus, seed=0)
    built = time.perf_counter()
    routes = route(fabric, src, dst, seed=0)
    out: dict = {
        "hosts": fabric.num_gpus,
        "flows": int(routes.num_flows),
        "build_s": built - began,
        "route_s": time.perf_counter() - built,
    }
    for fidelity in ("fluid", "packet"):
        first = time.perf_counter()
        flow_completion_times(fabric, routes, 2e6, fidelity=fidelity)
        first_s = time.perf_counter() - first
        times = flow_completion_times(fabric, routes, 2e6, fidelity=fidelity)
        out[fidelity] = {
            "fct_us": times.percentiles(),
            "first_call_s": first_s,
            "solve_s": times.seconds["solve"],
            "events_or_steps": times.events,
            "dominant": times.dominant_counts(),
        }
    ratio = out["packet"]["fct_us"]["p99"] / out["fluid"]["fct_us"]["p99"]
    out["packet_over_fluid_p99"] = float(np.round(ratio, 4))
    return out
