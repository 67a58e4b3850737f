"""The max-min engine's numpy backend: the rounds of :mod:`.flat` in float64 numpy.

The same local-bottleneck water-filling as the JAX kernel (:func:`.flat.flat_water_fill`),
on the same flat entries, with one difference that suits a CPU: every round drops the
entries of the flows it froze, so a round costs the entries still active (the JAX
kernel's shapes are static: it revisits every entry each round). Nothing is compiled, so
small problems, where a JAX call's dispatch and first-trace costs dominate, are faster
here; :func:`.engine.max_min` picks between the two (``method="auto"``).

Frozen loads are summed round by round in float64 (the JAX kernel recomputes them from
all frozen rates every round); the rates agree to float64 rounding.

A round touches each active entry a few times, at random links (gathers and one
scatter). The per-entry work that is not inherent is avoided: the flow of an entry is
expanded with ``np.repeat`` over the rows' entry counts (sequential) instead of being
stored and compressed, link ids are int32, unit coefficients are not stored, and the
frozen loads are summed over the frozen entries only (the same sums as over every entry
with the others' rates at 0). With unit weights and coefficients the active weight per
link is an integer count, so the frozen flows' counts are taken away exactly; real weights
are summed again over the active entries each round, so no rounding builds up. On the
1M-flow all-to-all of ``clos-100k`` (45 rounds, unit weights) this costs about a quarter
fewer CPU seconds than the earlier rounds, with the same rates and bottlenecks bit for
bit (docs/solve-performance.md).
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
    entry_link = np.asarray(link).astype(np.int32 if num_links < 2**31 else np.int64)
    entry_coef: np.ndarray | None = np.asarray(coef, np.float64)
    if np.all(entry_coef == 1.0):
        entry_coef = None  # unit coefficients: nothing to store or compress
    unit = entry_coef is None and bool(np.all(row_weight == 1.0))
    active_weight = _link_sums(entry_link, row_weight, count, entry_coef, num_links, unit)
    frozen_load = np.zeros(num_links)
    share = np.empty(num_links)
    not_bottleneck = np.zeros(num_links, dtype=bool)
    rounds = 1 if num_flows and not row.size else 0
    while row.size and rounds < max_iters:
        rounds += 1
        first = np.cumsum(count) - count
        share.fill(np.inf)
        np.divide(
            np.maximum(capacity - frozen_load, 0.0),
            active_weight,
            out=share,
            where=active_weight > 0,
        )
        entry_share = share[entry_link]
        link_level = np.minimum.reduceat(entry_share, first)
        level = np.minimum(link_level, row_level)
        # Not a local bottleneck: some active flow on the link has a lower level.
        lower = entry_share > np.repeat(level * (1.0 + rtol), count)
        not_bottleneck.fill(False)
        not_bottleneck[entry_link[lower]] = True
        hit, hit_link = _first_bottleneck(~not_bottleneck[entry_link], entry_link, first)
        by_demand = row_level <= link_level * (1.0 + rtol)
        freeze = hit | by_demand | np.isinf(level)
        new_rate = np.where(by_demand & ~hit, row_demand, row_weight * level)
        frozen = row[freeze]
        rate[frozen] = new_rate[freeze]
        bottleneck[frozen] = hit_link[freeze]
        if frozen.size == row.size:
            row = row[:0]
            break
        # the frozen flows' entries add their load and take their weight away
        keep = np.repeat(~freeze, count)
        gone = ~keep
        gone_link, gone_count = entry_link[gone], count[freeze]
        gone_coef = None if entry_coef is None else entry_coef[gone]
        frozen_load += _link_sums(gone_link, new_rate[freeze], gone_count, gone_coef, num_links)
        alive = ~freeze
        entry_link = entry_link[keep]
        entry_coef = None if entry_coef is None else entry_coef[keep]
        row, count = row[alive], count[alive]
        row_weight, row_demand, row_level = row_weight[alive], row_demand[alive], row_level[alive]
        if unit:  # integer counts: taking the frozen ones away is exact
            active_weight -= np.bincount(gone_link, minlength=num_links)
        else:  # real weights: summed again, so no rounding builds up over the rounds
            active_weight = _link_sums(entry_link, row_weight, count, entry_coef, num_links)
    unsettled = np.zeros(num_flows, dtype=bool)
    unsettled[row] = True
    return rate, bottleneck, rounds, unsettled


def _link_sums(
    entry_link: np.ndarray,
    row_values: np.ndarray,
    count: np.ndarray,
    entry_coef: np.ndarray | None,
    num_links: int,
    unit: bool = False,
) -> np.ndarray:
    """float64 ``[L]``: per link, the sum over entries of ``coef * value`` of the entry's
    row (``unit``: every coefficient and value is 1, a plain count)."""
    if unit:
        return np.bincount(entry_link, minlength=num_links).astype(np.float64)
    values = np.repeat(row_values, count)
    if entry_coef is not None:
        values = values * entry_coef
    return np.bincount(entry_link, weights=values, minlength=num_links)


def _first_bottleneck(
    bottleneck_entry: np.ndarray, entry_link: np.ndarray, first: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(hit bool [R], link int [R])``: whether each active flow crosses a local
    bottleneck, and the first such link on its path (``-1``: none).

    ``first`` holds each flow's first entry (the flows' entries are contiguous, in order),
    so the flow of a bottleneck entry is found by a binary search, and its first
    bottleneck entry is where that flow changes: work on the bottleneck entries only.
    """
    at = np.flatnonzero(bottleneck_entry)
    at_row = np.searchsorted(first, at, side="right") - 1
    lead = np.empty(at.size, dtype=bool)
    lead[:1] = True
    np.not_equal(at_row[1:], at_row[:-1], out=lead[1:])
    hit = np.zeros(first.size, dtype=bool)
    hit[at_row[lead]] = True
    hit_link = np.full(first.size, -1, np.int64)
    hit_link[at_row[lead]] = entry_link[at[lead]]
    return hit, hit_link
