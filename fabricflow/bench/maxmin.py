"""Benchmark section ``maxmin``: the max-min engine's backends on 1M+ flows of ``clos-100k``.

Cases: (a) MoE all-to-all, 16-GPU expert groups strided across the fabric (4,167 groups,
1,000,080 flows); (b) a ring over all GPUs with 16 channels. Each is solved by both
backends of the engine (:func:`fabricflow.solve.maxmin.engine.max_min`): the float64
numpy rounds and the JAX flat kernel (first call with its compile, then a solve with new
capacities), with the rates of the two compared and ``auto``'s pick reported. Target on
the 2-core machine: 1M flows in <= 10 s (merge, transfer and solve; compile apart). (c)
Batch layouts: 8 capacity scenarios of the first 100,000 MoE flows, as one block-diagonal
problem, vmapped, and one after another with numpy (seconds per scenario). With
``--gpu`` and a GPU present: 10M flows (<= 2 s target) and a float32 scatter-add
contention probe; skipped cleanly without one.
"""

from __future__ import annotations

import time

import numpy as np

from fabricflow.bench._measure import measured
from fabricflow.fabric.spec import load_fabric
from fabricflow.routing.route import route
from fabricflow.solve.maxmin.engine import max_min, resolve_method
from fabricflow.solve.maxmin.link_views import link_utilization, tier_summary
from fabricflow.traffic.patterns import alltoall_groups, ring


def run(args) -> dict:
    quick = bool(getattr(args, "quick", False))
    result: dict = {"preset": "clos-100k", "dtype": "float32"}
    fabric = load_fabric("clos-100k", **({"gpus": 4096} if quick else {}))
    capacity = fabric.capacity.astype(np.float32)
    result.update(gpus=fabric.num_gpus, links=fabric.num_links, auto_picks=resolve_method("auto"))

    src, dst = alltoall_groups(fabric.num_gpus, 16, 64 if quick else 4167)
    moe = route(fabric, src, dst, policy="ecmp", seed=0)
    result["moe"] = _solve_case(moe.links, capacity)
    rates = result["moe"].pop("_rates")
    utilization = link_utilization(moe.links, capacity, rates)
    result["moe"]["tiers"] = tier_summary(
        utilization, fabric.link_kind_id, fabric.link_kinds, fabric.link_up
    )

    src, dst = ring(np.arange(fabric.num_gpus), channels=16)
    ring_routes = route(fabric, src, dst, policy="ecmp", seed=0)
    result["ring16"] = _solve_case(ring_routes.links, capacity)
    result["ring16"].pop("_rates")

    subset = moe.links[: (2_000 if quick else 100_000)]
    result["batch_layouts"] = _batch_layouts(subset, capacity)

    result["gpu"] = _gpu_cases(fabric, capacity) if getattr(args, "gpu", False) else "not requested"
    moe_s = min(result["moe"]["numpy_solve_s"], result["moe"]["jax_solve_s"])
    result["targets"] = {"moe_solve_s": 10.0, "backends_agree_rtol": 1e-5}
    result["meets_targets"] = (
        bool(moe_s <= 10.0 and result["moe"]["max_relative_difference"] <= 1e-5)
        if not quick
        else None
    )
    return result


def _solve_case(links: np.ndarray, capacity: np.ndarray) -> dict:
    """Both backends: numpy once, JAX first call (compile + solve) and a second call with
    new capacities (solve only); their rates compared."""
    case: dict = {"flows": int(links.shape[0]), "max_hops": int(links.shape[1])}
    with measured(case, "numpy_solve"):
        numpy_solution = max_min(links, capacity, method="numpy")
    with measured(case, "jax_first_call"):
        max_min(links, capacity, method="jax")
    with measured(case, "jax_solve"):
        solution = max_min(links, capacity * np.float32(1.0000001), method="jax")
    case["rounds"] = int(solution.rounds)
    case["status"] = int(solution.status)
    case["flows_per_s"] = case["flows"] / min(case["jax_solve_s"], case["numpy_solve_s"])
    scaled = np.asarray(numpy_solution.rates, np.float64) * 1.0000001
    finite = np.isfinite(scaled) & (scaled > 0)
    jax_rates = np.asarray(solution.rates, np.float64)
    case["max_relative_difference"] = float(
        np.max(np.abs(jax_rates[finite] - scaled[finite]) / scaled[finite], initial=0.0)
    )
    case["mean_rate_Bps"] = float(np.mean(solution.rates))
    case["_rates"] = solution.rates
    return case


def _batch_layouts(links: np.ndarray, capacity: np.ndarray, scenarios: int = 8) -> dict:
    """Seconds per scenario of ``scenarios`` capacity scenarios over the same flows: JAX
    block-diagonal, JAX vmapped, numpy one after another (each after a warm-up call)."""
    rng = np.random.default_rng(0)
    batch = (capacity[None, :] * rng.uniform(0.5, 1.5, (scenarios, capacity.size))).astype(
        np.float32
    )
    out: dict = {"flows": int(links.shape[0]), "scenarios": scenarios}
    for label, method, layout in (
        ("jax_block", "jax", "block"),
        ("jax_vmap", "jax", "vmap"),
        ("numpy", "numpy", "block"),
    ):
        max_min(links, batch, method=method, batch_layout=layout)  # warm-up (compile)
        started = time.process_time()
        max_min(links, batch, method=method, batch_layout=layout)
        out[f"{label}_cpu_s_per_scenario"] = (time.process_time() - started) / scenarios
    out["fastest"] = min(
        ("jax_block", "jax_vmap", "numpy"), key=lambda k: out[f"{k}_cpu_s_per_scenario"]
    )
    return out


def _gpu_cases(fabric, capacity: np.ndarray) -> dict | str:
    """10M flows and a scatter-add contention probe, only on a GPU."""
    import jax
    import jax.numpy as jnp

    if not any(device.platform == "gpu" for device in jax.devices()):
        return "skipped: no GPU device"
    out: dict = {"device": str(jax.devices()[0])}
    src, dst = alltoall_groups(fabric.num_gpus, 101)  # ~10.2M flows
    links = route(fabric, src, dst, policy="ecmp", seed=0).links
    out["flows"] = int(links.shape[0])
    with measured(out, "first_call"):
        max_min(links, capacity, method="jax")
    with measured(out, "solve"):
        solution = max_min(links, capacity * np.float32(1.0000001), method="jax")
    out["rounds"] = int(solution.rounds)

    # float32 scatter-add contention: the same number of updates spread over all links
    # vs. piled onto 64 hot links (atomics serialise on the hot addresses).
    updates = jnp.ones(links.size, jnp.float32)
    spread = jnp.asarray(np.where(links >= 0, links, 0).reshape(-1))
    hot = spread % 64
    add = jax.jit(lambda v, i: jnp.zeros(fabric.num_links, jnp.float32).at[i].add(v))
    for name, index in (("scatter_spread", spread), ("scatter_hot64", hot)):
        add(updates, index).block_until_ready()
        start = time.perf_counter()
        for _ in range(10):
            add(updates, index).block_until_ready()
        out[f"{name}_s"] = (time.perf_counter() - start) / 10
    return out
