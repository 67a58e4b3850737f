"""``ff.max_min_rates`` / ``ff.max_min_solution``: the public max-min API.

Both are :func:`~.engine.max_min`, the one entry point of the max-min engine, with the
public contract's signature (padded ``links`` rows, keyword options).
"""

from __future__ import annotations

import numpy as np

from fabricflow.solve.maxmin.engine import MaxMinSolution, max_min
from fabricflow.typing import CapacityLike, CoefLike, FlowValuesLike, LinkIdsLike

__all__ = ["MaxMinSolution", "max_min_rates", "max_min_solution"]


def max_min_rates(
    links: LinkIdsLike,
    capacity: CapacityLike,
    *,
    weight: FlowValuesLike | None = None,
    demand: FlowValuesLike | None = None,
    coef: CoefLike | None = None,
    merge: bool = True,
    max_iters: int | None = None,
    rtol: float | None = None,
    throw: bool = True,
    shard: str | None = None,
    method: str = "auto",
) -> np.ndarray:
    """Exact weighted, demand-capped max-min fair rates of ``F`` flows.

    Args:
        links: int ``[F, H]`` link ids per flow, ``-1`` padded (``Routes.links``).
        capacity: ``[L]`` link capacities (bytes/s for a :class:`Fabric`), or
            ``[B, L]`` for ``B`` scenarios solved in one vmapped call (failures, upgrades).
            Capacity 0 (a failed link) gives the flows crossing it rate 0; ``inf`` means
            the link constrains nothing.
        weight: ``[F]`` (or ``[B, F]``) positive weights, default 1: flows sharing a
            bottleneck get rates proportional to their weights.
        demand: ``[F]`` (or ``[B, F]``) rate caps, default none (``inf``).
        coef: ``[F, H]`` fraction of each flow on each entry (``Routes.coef`` for
            multipath splits), default 1.
        merge: solve flows with identical rows (and demand level) as one weighted flow;
            exact, and much faster for multi-channel collectives.
        max_iters: bound on water-filling rounds, an integer ``>= 1`` (default: enough
            for any input).
        rtol: relative tolerance for equal shares, in ``[0, 1e-3]`` (default a few float
            ulps; larger values freeze links of different shares together).
        throw: raise :class:`SolverError` on a bad status; with ``False`` the flows left
            unsettled get NaN.
        shard: spread the solve over the local devices (:mod:`.sharded`): ``None``
            (default: one device), ``"batch"`` (the ``B`` scenarios of a batch split
            across devices), ``"flows"`` (one scenario's flows split across devices, link
            sums reduced across them: for flow sets too large for one device), or
            ``"auto"`` (``batch`` for a batch and ``flows`` for a scenario that would not
            fit one accelerator's memory, when there are several devices; else none).
            The rates equal the single-device ones up to float rounding.
        method: the engine's backend, ``"auto"`` (default: by size and device),
            ``"jax"`` or ``"numpy"`` (:func:`fabricflow.solve.maxmin.engine.max_min`).

    Returns:
        numpy ``[F]`` (or ``[B, F]``) rates in the unit of ``capacity``: float32 by
        default, float64 when ``capacity`` is float64 and ``jax_enable_x64`` is on, or when
        a rate does not fit float32 (beyond ~3e38, or below its smallest normal ~1e-38).
        A flow crossing no link and with no demand gets ``inf``.

    Range: capacities, demands and weights are scaled by powers of two (exact) before
    the solve, so any magnitude works; when they span more than float32 can resolve
    (over ~2**96 between the smallest and largest), the solve runs in float64, centred
    so that subnormal inputs (below ~2e-308) keep their nonzero rates. Ranges that float64
    cannot hold either (capacity and weight spans together over 2**1900, e.g. ``1e-320``
    next to ``1e300``) raise :class:`~fabricflow.errors.SpecError`.

    Precision: float32 rates agree with the float64 reference to ~1e-6 relative on
    random instances; the error grows like ``eps * capacity / residual`` for a flow
    whose bottleneck link was almost filled by others (enable x64 for such cases).

    Shapes: the JAX backend pads entries, flows and links to power-of-two buckets, so
    new capacities, weights or demands, and most new sizes, reuse a compiled program.

    Example:
        >>> max_min_rates([[0, 1], [0, -1], [1, -1]], [1.0, 1.0])
        array([0.5, 0.5, 0.5], dtype=float32)
    """
    solution = max_min_solution(
        links,
        capacity,
        weight=weight,
        demand=demand,
        coef=coef,
        merge=merge,
        max_iters=max_iters,
        rtol=rtol,
        throw=throw,
        shard=shard,
        method=method,
    )
    return np.asarray(solution.rates)  # Rates [F] or RatesBatch [B, F]


def max_min_solution(
    links: LinkIdsLike,
    capacity: CapacityLike,
    *,
    weight: FlowValuesLike | None = None,
    demand: FlowValuesLike | None = None,
    coef: CoefLike | None = None,
    merge: bool = True,
    max_iters: int | None = None,
    rtol: float | None = None,
    throw: bool = True,
    shard: str | None = None,
    method: str = "auto",
) -> MaxMinSolution:
    """Like :func:`max_min_rates` but returns the whole :class:`MaxMinSolution` (numpy).

    ``bottleneck[f]`` is the link that fixed flow ``f``'s rate (``-1``: its demand, or
    nothing); ``rounds`` and ``status`` are scalars (``[B]`` with a batch); ``method``
    the backend that ran.
    """
    return max_min(
        links,
        capacity,
        coef=coef,
        weight=weight,
        demand=demand,
        method=method,
        merge=merge,
        max_iters=max_iters,
        rtol=rtol,
        throw=throw,
        shard=shard,
    )
