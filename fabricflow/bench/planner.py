"""Benchmark section ``planner``: the planner's path (``ff.step_time``) on each max-min
backend, and the batch layouts of the engine, on the device JAX runs on.

The planner picks its max-min backend by device (numpy on a CPU, JAX on an accelerator;
``$FABRICFLOW_MAXMIN_METHOD`` overrides it). This section times a cold and a warm
``ff.step_time`` with each backend forced, checks that both give the same step time
(to 1e-6 relative), and times the phases of the step's collectives solved as one batch
in the two layouts (block-diagonal, vmapped). Without ``--gpu`` (or without a GPU) it
runs a small case on whatever device JAX has (Llama-3-8B, TP8 PP4 DP8 on 256 GPUs of
``meta-llama3-24k``); with ``--gpu`` on a GPU, the 405B layout of the ``step`` section
on 16,384 GPUs.
"""

from __future__ import annotations

import os
import time

import numpy as np

from fabricflow.bench._measure import measured
from fabricflow.collective import structure_cache
from fabricflow.collective.flow_rates import effective_capacity
from fabricflow.collective.nccl_cost import DEFAULT_COST
from fabricflow.collective.timing import prepare_collective
from fabricflow.fabric.spec import load_fabric
from fabricflow.solve.maxmin.batch import max_min_batch
from fabricflow.solve.maxmin.engine import METHOD_ENV
from fabricflow.solve.maxmin.entries import FlowEntries
from fabricflow.workload.layout import Layout
from fabricflow.workload.placement import place
from fabricflow.workload.step import step_time


def run(args) -> dict:
    import jax

    on_gpu = any(device.platform == "gpu" for device in jax.devices())
    large = bool(getattr(args, "gpu", False)) and on_gpu and not getattr(args, "quick", False)
    result: dict = {"device": str(jax.devices()[0]), "case": "405b-16k" if large else "8b-256"}
    fabric = load_fabric("meta-llama3-24k")
    if large:
        model = "llama3-405b"
        layout = Layout(
            tp=8, pp=16, dp=128, vpp=4, micro_batch=1, global_batch=2048, seq_len=8192,
            sequence_parallel=True,
        )  # fmt: skip
    else:
        model = "llama3-8b"
        layout = Layout(
            tp=8, pp=4, dp=8, micro_batch=1, global_batch=64, seq_len=8192,
            sequence_parallel=True,
        )  # fmt: skip
    times: dict = {}
    before = os.environ.get(METHOD_ENV)
    try:
        for method in ("numpy", "jax"):
            os.environ[METHOD_ENV] = method

            def call(model=model, layout=layout):
                return step_time(model, "h100-sxm", layout, fabric, check_memory=False)

            entry: dict = {}
            structure_cache.clear()
            with measured(entry, "first"):  # compiles (JAX) and imports
                times[method] = call().step_time_s
            entry["cold_cpu_s"], entry["cold_wall_s"] = _cold(call)
            started = time.process_time()
            call()
            entry["warm_cpu_s"] = time.process_time() - started
            result[method] = entry
    finally:
        if before is None:
            os.environ.pop(METHOD_ENV, None)
        else:
            os.environ[METHOD_ENV] = before
    result["step_time_s"] = times
    result["backends_agree"] = bool(
        abs(times["jax"] - times["numpy"]) <= 1e-6 * abs(times["numpy"])
    )
    result["batch_layouts"] = _batch_layouts(fabric, model, layout)
    return result


def _cold(call, repeats: int = 2) -> tuple[float, float]:
    """Best (CPU, wall) seconds of ``call`` with the structure cache cleared first."""
    best_cpu = best_wall = float("inf")
    for _ in range(repeats):
        structure_cache.clear()
        cpu, wall = time.process_time(), time.perf_counter()
        call()
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best_wall = min(best_wall, time.perf_counter() - wall)
    return best_cpu, best_wall


def _batch_layouts(fabric, model, layout) -> dict:
    """Every phase of the layout's DP reduce-scatter and TP all-gather solved as one batch
    with JAX, block-diagonal and vmapped (seconds after a warm-up call), and with numpy."""
    where = place(layout, fabric.num_gpus, gpus_per_node=fabric.gpus_per_node, fabric=fabric)
    problems = []
    for dims, op in ((("dp", "cp"), "reduce_scatter"), ("tp", "all_gather")):
        prepared = prepare_collective(fabric, op, where.groups(dims))
        for solved in prepared.solved:
            for sp in solved.phases:
                problems.append(FlowEntries.from_padded(sp.links, sp.coef, fabric.num_links))
    capacity = effective_capacity(fabric, DEFAULT_COST)
    out: dict = {
        "problems": len(problems),
        "entries": int(sum(p.num_entries for p in problems)),
    }
    for label, method, layout_name in (
        ("jax_block", "jax", "block"),
        ("jax_vmap", "jax", "vmap"),
        ("numpy", "numpy", "block"),
    ):
        capacities = [capacity] * len(problems)
        max_min_batch(problems, capacities, method=method, layout=layout_name, dtype=np.float64)
        started = time.perf_counter()  # after the warm-up call (compiles)
        max_min_batch(problems, capacities, method=method, layout=layout_name, dtype=np.float64)
        out[f"{label}_s"] = time.perf_counter() - started
    out["fastest"] = min(("jax_block", "jax_vmap", "numpy"), key=lambda k: out[f"{k}_s"])
    return out
