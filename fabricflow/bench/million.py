"""Benchmark section ``million``: the ``clos-1m`` preset (1,048,576 GPUs) and a 10M-flow
all-to-all on it.

Steps, each timed with its peak memory:

1. **build**: ``clos-1m`` is built in a fresh Python process (so its peak RSS is the
   build's own, not this process's history) under ``FABRICFLOW_MEMORY_BUDGET=12GiB``: a
   build whose estimate exceeds 12 GiB is refused there instead of silently using more.
   Targets: <= 60 s and <= 12 GiB peak RSS on the 2-core machine. The summary (bisection
   included) is timed after it.
2. **route**: MoE-style all-to-all inside 16-GPU expert groups strided across the fabric
   (member ``j`` of group ``i`` is GPU ``i + 65,536 j``, so every flow crosses the core),
   41,667 groups x 240 ordered pairs = 10,000,080 flows, ECMP.
3. **solve**: exact max-min rates (float32). The first call includes JAX compilation;
   the second, with new capacities, is the solve alone. With several JAX devices and the
   flow-sharded solver present (:mod:`fabricflow.solve.maxmin.sharded`), the solve is split
   across the devices (``shard="flows"``); otherwise it runs on the default device.

``--quick``: the full-size build but 1,000,080 flows (4,167 groups), one solve call.
``--gpu``: with a GPU present, also every GPU of the fabric in a 16-GPU group (65,536
groups, 15,728,640 flows); skipped cleanly without one. The 10M case itself runs on
whatever device JAX uses by default (the GPU when one is present).

Run: ``fabricflow bench million --json`` (about 2 minutes and 4 GiB on 2 cores).
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import time

import numpy as np

from fabricflow.bench._measure import measured
from fabricflow.fabric.spec import load_fabric
from fabricflow.routing.route import route
from fabricflow.solve.maxmin.checked import max_min_solution
from fabricflow.traffic.patterns import alltoall_groups

PRESET = "clos-1m"
GROUP_SIZE = 16
GROUPS_FULL = 41_667  # x 16 x 15 = 10,000,080 flows
GROUPS_QUICK = 4_167  # 1,000,080 flows
BUILD_BUDGET = "12GiB"
TARGETS = {"build_s": 60.0, "build_peak_rss_bytes": 12 * 2**30}

# The child process that builds the preset: prints one JSON line with its own figures.
_BUILD_CHILD = """
import json, resource, sys, time
start = time.perf_counter()
from fabricflow.fabric.spec import load_fabric
imported = time.perf_counter()
fabric = load_fabric(sys.argv[1])
built = time.perf_counter()
summary = fabric.summary()
done = time.perf_counter()
print(json.dumps({
    "import_s": imported - start, "build_s": built - imported, "summary_s": done - built,
    "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    "gpus": fabric.num_gpus, "nodes": fabric.num_nodes, "switches": fabric.num_switches,
    "network_switches": fabric.num_network_switches,
    "scale_up_switches": fabric.num_scale_up_switches,
    "links": fabric.num_links,
    "bisection_bandwidth_Bps": summary["bisection_bandwidth_Bps"],
    "switches_per_tier": {t["name"]: t["switches"] for t in summary["tiers"]},
}))
"""


def run(args) -> dict:
    import jax

    quick = bool(getattr(args, "quick", False))
    result: dict = {
        "preset": PRESET,
        "dtype": "float32",
        "load_average_1min": os.getloadavg()[0],  # the machine may be shared: say how busy
    }
    result["build"] = measure_build(PRESET)
    fabric = load_fabric(PRESET)  # this process's own copy, for routing
    capacity = fabric.capacity.astype(np.float32)

    src, dst = alltoall_groups(fabric.num_gpus, GROUP_SIZE, GROUPS_QUICK if quick else GROUPS_FULL)
    result["alltoall"] = solve_case(fabric, capacity, src, dst, second_call=not quick)
    del src, dst

    has_gpu = any(device.platform == "gpu" for device in jax.devices())
    if not getattr(args, "gpu", False):
        result["gpu"] = "not requested"
    elif not has_gpu:
        result["gpu"] = "skipped: no GPU device"
    else:
        src, dst = alltoall_groups(fabric.num_gpus, GROUP_SIZE)  # every GPU: 15.7M flows
        result["gpu"] = solve_case(fabric, capacity, src, dst, second_call=True)
    result["targets"] = TARGETS
    build = result["build"]
    result["meets_targets"] = bool(
        build["build_s"] <= TARGETS["build_s"]
        and build["peak_rss_bytes"] <= TARGETS["build_peak_rss_bytes"]
        and result["alltoall"]["status"] == 0
    )
    return result


def measure_build(preset: str, **overrides) -> dict:
    """Build ``preset`` in a fresh interpreter under a 12 GiB memory budget.

    Returns the child's figures: ``build_s`` (spec to Fabric), ``summary_s``,
    ``peak_rss_bytes`` (the child's peak: interpreter, numpy and the build), sizes and the
    bisection. ``overrides`` (top-level spec keys, e.g. ``gpus``) are for tests.
    """
    code = _BUILD_CHILD
    if overrides:
        code = code.replace(
            "load_fabric(sys.argv[1])", f"load_fabric(sys.argv[1], **{overrides!r})"
        )
    env = dict(os.environ, FABRICFLOW_MEMORY_BUDGET=BUILD_BUDGET, JAX_PLATFORMS="cpu")
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, preset], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"building {preset} failed:\n{done.stderr.strip()[-2000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["process_wall_s"] = time.perf_counter() - start
    figures["memory_budget"] = BUILD_BUDGET
    return figures


def solve_case(fabric, capacity: np.ndarray, src, dst, *, second_call: bool) -> dict:
    """Route ``src -> dst`` (ECMP) and solve max-min rates; times and peak RSS of each."""
    import jax

    case: dict = {"flows": int(src.size), "device": str(jax.devices()[0])}
    with measured(case, "route"):
        routes = route(fabric, src, dst, policy="ecmp", seed=0)
    links = routes.links
    del routes
    case["route_flows_per_s"] = case["flows"] / case["route_s"]
    case["max_hops"] = int(links.shape[1])
    case["links_bytes"] = int(links.nbytes)
    options = shard_options()
    case["sharded_devices"] = len(jax.devices()) if options else 1
    with measured(case, "first_call"):
        solution = max_min_solution(links, capacity, **options)
    if second_call:
        with measured(case, "solve"):
            solution = max_min_solution(links, capacity * np.float32(1.0000001), **options)
        case["solve_flows_per_s"] = case["flows"] / case["solve_s"]
    case["rounds"] = int(solution.rounds)
    case["status"] = int(solution.status)
    rates = solution.rates
    case["rates_Bps"] = {
        "min": float(np.min(rates)),
        "mean": float(np.mean(rates)),
        "max": float(np.max(rates)),
    }
    return case


def shard_options() -> dict:
    """``{"shard": "flows"}`` where several devices are present and the solver takes a
    ``shard`` option (the flow-sharded max-min); ``{}`` (one device) otherwise."""
    import jax

    if len(jax.devices()) < 2:
        return {}
    if "shard" not in inspect.signature(max_min_solution).parameters:
        return {}
    return {"shard": "flows"}
