"""The search's one door to the compute and memory model: feasibility, memory per GPU and
lower bounds of the step time for a table of layouts at once.

Every compute or memory number the layout search uses comes through this module, from the
workload's table functions (numpy columns of layout fields in, arrays out; the per-layout
API runs the same code on one row, docs/step-tables.md): the rules of
:func:`~fabricflow.workload.layout.table_problems`, the bytes of
:func:`~fabricflow.workload.gpu_memory.memory_table` against
:func:`~fabricflow.workload.gpu_memory.usable_hbm` (the device less its headroom), and the
step composition :func:`~fabricflow.workload.compute.compose`. No formula of the model is
written again in ``layout_search/``.

Bounds: :func:`fabricflow.step_time` composes collective times with sums, ``max``,
``max(0, t - hidden)`` and positive multiples, so it is non-decreasing in each of them
(docs/optimize.md). The composition with every collective free
(:func:`~fabricflow.workload.compute.compute_table`'s ``bound_s``) is therefore a lower
bound of the step on any order, placement and fabric, and the same composition with each
collective at a lower bound of its time (:func:`step_bound`) is a tighter one.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fabricflow.workload.compute import (
    COLLECTIVES,
    CommTimes,
    collective_sizes,
    compose,
    compute_table,
)
from fabricflow.workload.gpu import GpuSpec
from fabricflow.workload.gpu_memory import GIB, memory_table, usable_hbm
from fabricflow.workload.layout import layout_table, table_problems
from fabricflow.workload.layout_table import LayoutTable
from fabricflow.workload.model_spec import ModelSpec
from fabricflow.workload.stack import Stack
from fabricflow.workload.stages import stage_groups

# Collectives of COLLECTIVES that a row issues only under a setting (the others: whenever
# their size is not 0): TP all-reduce without sequence parallelism, all-gather +
# reduce-scatter with it; DP all-reduce under ZeRO-0, reduce-scatter + all-gather above.
_TP_SP = ("tp_all_gather", "tp_reduce_scatter")
_ZERO0 = ("dp_all_reduce", "edp_all_reduce")
_ZERO123 = ("dp_reduce_scatter", "dp_all_gather", "edp_reduce_scatter", "edp_all_gather")


@dataclasses.dataclass
class ComputeBounds:
    """Per layout (arrays ``[K]``): feasibility, memory and the compute bound.

    ``reason``: why a layout is infeasible (the rule's ``field: message``, or the memory
    it needs against the usable HBM), '' when feasible.
    """

    feasible: np.ndarray
    memory_bytes: np.ndarray
    bound_s: np.ndarray
    reason: list


class ComputeModel:
    """Feasibility, memory and compute bound of layouts of ``num_gpus`` GPUs."""

    def __init__(self, model: ModelSpec, gpu: GpuSpec, num_gpus: int, stack: Stack | None = None):
        self.model, self.gpu, self.num_gpus = model, gpu, num_gpus
        self.stack = stack
        self.usable = usable_hbm(gpu)

    def analyse(self, rows: dict[str, np.ndarray]) -> ComputeBounds:
        """Check, size and bound each row (Layout field -> ``[K]`` values)."""
        table = layout_table(**rows)
        n = len(table)
        ok, field, message = table_problems(table, self.model, num_gpus=self.num_gpus)
        reason = [""] * n
        for i in np.flatnonzero(~ok).tolist():
            reason[i] = f"{field[i]}: {message[i]}"
        memory = np.full(n, np.nan)
        bound = np.full(n, np.inf)
        valid = np.flatnonzero(ok)
        if len(valid):
            total = memory_table(self.model, table.take(valid)).total
            memory[valid] = total
            fits = total <= self.usable
            for i in valid[~fits].tolist():
                reason[i] = (
                    f"memory: {memory[i] / GIB:.1f} GiB per GPU > {self.usable / GIB:.1f} GiB "
                    f"usable of {self.gpu.hbm / GIB:.1f} GiB HBM (headroom kept free)"
                )
            good = valid[fits]
            if len(good):
                bound[good] = compute_table(
                    self.model, self.gpu, table.take(good), self.stack
                ).bound_s
        feasible = np.isfinite(bound)
        return ComputeBounds(feasible, memory, bound, reason)


def collective_needs(
    model: ModelSpec, table: LayoutTable
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """:data:`~fabricflow.workload.compute.COLLECTIVES` key -> (bytes ``[N]``, issued
    ``[N]`` bool): the size of each collective of each row and whether the row issues it
    (a zero size or a setting that does not use it: nothing to time)."""
    sizes = collective_sizes(model, table)
    out = {}
    for key in COLLECTIVES:
        issued = sizes[key] > 0
        if key == "tp_all_reduce":
            issued &= ~table.sequence_parallel
        elif key in _TP_SP:
            issued &= table.sequence_parallel
        elif key in _ZERO0:
            issued &= table.zero == 0
        elif key in _ZERO123:
            issued &= table.zero != 0
        out[key] = (sizes[key], issued)
    return out


def step_bound(
    model: ModelSpec,
    gpu: GpuSpec,
    table: LayoutTable,
    seconds: dict[str, np.ndarray],
    stack: Stack | None = None,
) -> np.ndarray:
    """float64 ``[N]``: the step time of every row of ``table`` composed by the step model
    with collective ``key`` taking ``seconds[key]`` ``[N]`` (missing keys: 0). With lower
    bounds of the collectives, a lower bound of the step (see the module doc)."""
    n = len(table)
    out = np.zeros(n)
    # one call per pipeline structure, so that each call's rows are one stage group and
    # the per-row collective times stay aligned with them
    for group in stage_groups(model, table):
        rows = group.rows
        comm = CommTimes({key: value[rows] for key, value in seconds.items()})
        parts = compose(model, gpu, table.take(rows), comm, stack=stack).breakdown
        out[rows] = sum(parts.values())
    return out


def candidate_table(rows: dict[str, np.ndarray]) -> LayoutTable:
    """A :class:`LayoutTable` of candidate rows (Layout field -> ``[n]`` values)."""
    return layout_table(**rows)
