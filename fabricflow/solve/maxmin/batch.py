"""``max_min_batch``: many independent max-min problems solved in one call.

Problems with their own flows and capacities (the phases of many group structures,
candidate layouts, seeds, jobs, rerouted failure scenarios) are solved together, in one
of two layouts (``layout``):

- ``"block"`` (default): one block-diagonal problem, each problem's links offset past
  the previous ones' and its flows appended (:func:`~.entries.block_diagonal`); one
  kernel call whatever the sizes. With the numpy backend the problems are solved one
  after another instead (the rounds then stop per problem, which a CPU prefers).
- ``"vmap"``: every problem padded to the largest one's buckets and the JAX kernel
  vmapped over the stack (each problem keeps its own round count and status).

On 2 CPU cores, stacking collective phases block-diagonally ran 1.5-2.7x faster per
problem than vmapping the kernel over them (docs/solve-performance.md); the vmap layout
is kept for accelerators, where the bench's ``--gpu`` section measures both.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.solve.maxmin.engine import MaxMinSolution, max_min, resolve_method
from fabricflow.solve.maxmin.entries import FlowEntries, block_diagonal

__all__ = ["LAYOUTS", "max_min_batch"]

LAYOUTS = ("block", "vmap")


def max_min_batch(
    problems: Sequence[FlowEntries],
    capacities: Sequence[np.ndarray],
    *,
    weights: Sequence[np.ndarray | None] | None = None,
    demands: Sequence[np.ndarray | None] | None = None,
    method: str = "auto",
    layout: str = "block",
    dtype=None,
    rtol: float | None = None,
    throw: bool = True,
) -> list[MaxMinSolution]:
    """Max-min rates of ``P`` independent problems, one :class:`~.engine.MaxMinSolution`
    each (the same rates as :func:`~.engine.max_min` on each alone, to float rounding).

    Args:
        problems: ``P`` :class:`~.entries.FlowEntries`.
        capacities: ``P`` arrays ``[L_i]`` (``L_i = problems[i].num_links``).
        weights, demands: ``None`` or ``P`` entries, each ``None`` or ``[F_i]``.
        method: ``"auto"`` (by the total size, as :func:`~.engine.resolve_method`),
            ``"jax"`` or ``"numpy"``.
        layout: one of :data:`LAYOUTS` (module docs).
        dtype, rtol, throw: as :func:`~.engine.max_min`.
    """
    count = len(problems)
    if len(capacities) != count:
        raise SpecError(
            "capacities", f"needs one array per problem ({count}), got {len(capacities)}"
        )
    if layout not in LAYOUTS:
        raise SpecError("layout", f"must be one of {list(LAYOUTS)}, got {layout!r}")
    weights = [None] * count if weights is None else list(weights)
    demands = [None] * count if demands is None else list(demands)
    if not count:
        return []
    backend = resolve_method(method, sum(p.num_entries for p in problems))
    options = {"method": backend, "dtype": dtype, "rtol": rtol, "throw": throw}
    if backend == "numpy":
        return [
            max_min(p, c, weight=w, demand=d, **options)
            for p, c, w, d in zip(problems, capacities, weights, demands, strict=True)
        ]
    if layout == "vmap":
        # lazy: the vmap layout's kernel imports JAX; a numpy or block batch stays JAX-free
        from fabricflow.solve.maxmin.stacked import stacked_solve

        return stacked_solve(problems, capacities, weights, demands, dtype, rtol, throw)
    stacked, link_offset, flow_offset = block_diagonal(list(problems))

    def joined(values, size_of, fill):
        parts = [
            np.full(size_of(p), fill) if v is None else np.asarray(v, np.float64)
            for p, v in zip(problems, values, strict=True)
        ]
        return None if all(v is None for v in values) else np.concatenate(parts)

    solution = max_min(
        stacked,
        np.concatenate([np.asarray(c, np.float64) for c in capacities]),
        weight=joined(weights, lambda p: p.num_flows, 1.0),
        demand=joined(demands, lambda p: p.num_flows, np.inf),
        **options,
    )
    out = []
    for i in range(count):
        part = slice(flow_offset[i], flow_offset[i + 1])
        bottleneck = solution.bottleneck[part]
        bottleneck = np.where(bottleneck >= 0, bottleneck - link_offset[i], -1)
        rates = solution.rates[part]
        # with throw=False only the problems holding unsettled (NaN) flows keep the status
        status = solution.status if np.isnan(rates).any() else np.int64(0)
        out.append(MaxMinSolution(rates, bottleneck, solution.rounds, status, solution.method))
    return out
