"""The max-min engine's numpy backend: the rounds of :mod:`.flat` in float64 numpy.

The same local-bottleneck water-filling as the JAX kernel (:func:`.flat.flat_water_fill`),
on the same flat entries, with one difference that suits a CPU: every round drops the
entries of the flows it froze, so a round costs the entries still active (the JAX
kernel's shapes are static: it revisits every entry each round). Nothing is compiled, so
small problems, where a JAX call's dispatch and first-trace costs dominate, are faster
here; :func:`.engine.max_min` picks between the two (``method="auto"``).

Frozen loads are summed round by round in float64 (the JAX kernel recomputes them from
all frozen rates every round); the rates agree to float64 rounding.
"""

from __future__ import annotations

import numpy as np

__all__ = ["numpy_water_fill"]


def numpy_water_fill(
    start: np.ndarray,
    link: np.ndarray,
    coef: np.ndarray,
    capacity: np.ndarray,
    weight: np.ndarray,
    demand: np.ndarray,
    *,
    rtol: float,
    max_iters: int,
) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """Weighted, demand-capped max-min rates of flat entries (float64).

    Args:
        start: int ``[F + 1]`` CSR offsets of each flow's entries.
        link: int ``[E]`` link ids; every entry constrains (``coef > 0``, finite capacity).
        coef: float64 ``[E]`` bytes on the link per byte of progress.
        capacity: float64 ``[L]`` (finite, ``>= 0``).
        weight: float64 ``[F]`` positive weights. demand: float64 ``[F]`` caps (``inf``).
        rtol: relative tolerance for equal shares. max_iters: bound on rounds.

    Returns:
        ``(rate [F], bottleneck int64 [F], rounds, unsettled bool [F])``: the saturated
        link that fixed each rate (``-1``: the demand, or nothing; ``inf`` rate), the
        rounds run, and the flows ``max_iters`` left unsettled (their rate is 0).
    """
    num_flows = start.shape[0] - 1
    num_links = capacity.shape[0]
    rate = np.zeros(num_flows)
    bottleneck = np.full(num_flows, -1, np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        demand_level = np.where(np.isinf(demand), np.inf, demand / weight)
    count = np.diff(start)
    empty = count == 0
    # A flow on no link is limited by its demand alone (or by nothing: inf), in round 1.
    rate[empty] = np.where(np.isfinite(demand_level[empty]), demand[empty], np.inf)
    row = np.flatnonzero(~empty)
    count = count[row]
    # per active flow, compacted with ``row`` (no gathers from the full arrays per round)
    row_weight, row_demand, row_level = weight[row], demand[row], demand_level[row]
    entry_row = np.repeat(np.arange(row.size), count)
    entry_link = np.asarray(link, np.intp)
    entry_coef = np.asarray(coef, np.float64)
    unit = bool(np.all(row_weight == 1.0))  # then entry weights are the coefficients
    entry_weight = entry_coef if unit else entry_coef * row_weight[entry_row]
    frozen_load = np.zeros(num_links)
    share = np.empty(num_links)
    rounds = 1 if num_flows and not row.size else 0
    while row.size and rounds < max_iters:
        rounds += 1
        first = np.cumsum(count) - count
        active_weight = np.bincount(entry_link, weights=entry_weight, minlength=num_links)
        crossed = active_weight > 0
        share.fill(np.inf)
        np.divide(np.maximum(capacity - frozen_load, 0.0), active_weight, out=share, where=crossed)
        entry_share = share[entry_link]
        link_level = np.minimum.reduceat(entry_share, first)
        level = np.minimum(link_level, row_level)
        # Not a local bottleneck: some active flow on the link has a lower level.
        lower = entry_share > (level * (1.0 + rtol))[entry_row]
        not_bottleneck = np.zeros(num_links, dtype=bool)
        not_bottleneck[entry_link[lower]] = True
        hit, hit_link = _first_bottleneck(not_bottleneck, entry_link, entry_row, row.size)
        by_demand = row_level <= link_level * (1.0 + rtol)
        freeze = hit | by_demand | np.isinf(level)
        new_rate = np.where(by_demand & ~hit, row_demand, row_weight * level)
        frozen = row[freeze]
        rate[frozen] = new_rate[freeze]
        bottleneck[frozen] = hit_link[freeze]
        if frozen.size == row.size:
            row = row[:0]
            break
        # the frozen flows' load, summed over every entry with the others' rates masked to
        # 0 (x + 0.0 == x: the same sums as over the frozen entries, without compressing)
        frozen_rate = np.where(freeze, new_rate, 0.0)
        frozen_load += np.bincount(
            entry_link, weights=entry_coef * frozen_rate[entry_row], minlength=num_links
        )
        keep = ~freeze[entry_row]
        alive = ~freeze
        renumber = np.cumsum(alive) - 1
        entry_link, entry_coef = entry_link[keep], entry_coef[keep]
        entry_weight = entry_coef if unit else entry_weight[keep]
        entry_row = renumber[entry_row[keep]]
        row, count = row[alive], count[alive]
        row_weight, row_demand, row_level = row_weight[alive], row_demand[alive], row_level[alive]
    unsettled = np.zeros(num_flows, dtype=bool)
    unsettled[row] = True
    return rate, bottleneck, rounds, unsettled


def _first_bottleneck(
    not_bottleneck: np.ndarray, entry_link: np.ndarray, entry_row: np.ndarray, num_rows: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(hit bool [R], link int [R])``: whether each active flow crosses a local
    bottleneck, and the first such link on its path (``-1``: none).

    ``entry_row`` is non-decreasing (each flow's entries are contiguous), so the first
    bottleneck entry of a flow is where the flow of the bottleneck entries changes: one
    pass over the entries and then work on the bottleneck entries only.
    """
    at = np.flatnonzero(~not_bottleneck[entry_link])
    at_row = entry_row[at]
    lead = np.empty(at.size, dtype=bool)
    lead[:1] = True
    np.not_equal(at_row[1:], at_row[:-1], out=lead[1:])
    hit_rows = at_row[lead]
    hit = np.zeros(num_rows, dtype=bool)
    hit[hit_rows] = True
    hit_link = np.full(num_rows, -1, np.int64)
    hit_link[hit_rows] = entry_link[at[lead]]
    return hit, hit_link
