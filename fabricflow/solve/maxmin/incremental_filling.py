"""Progressive filling for the collective model's wide flow sets, with incremental updates.

Collective transfers are merged into one flow per pipelined transfer, so a ring over
``n`` ranks gives rows of ~``n x path length`` links: too wide for the jitted solver
(its compile time grows with the row width), so :mod:`fabricflow.collective.flow_rates` solves them with
float64 progressive filling. The textbook loop
(:func:`fabricflow.solve.maxmin.progressive_filling.progressive_filling`) recomputes every link's load
from every route entry at each bottleneck level; ECMP collisions give thousands of
distinct levels on a 100k-GPU fabric, so that loop costs ``levels x entries`` (minutes).

:func:`progressive_filling_incremental` runs the same iterations but, after a level
freezes some flows, recomputes the active weight and frozen load only on the links those
flows cross, summing each link's entries in the same (entry) order as the textbook loop.
The rates are therefore bit-for-bit those of the textbook loop (tests compare with
``np.array_equal``); the cost is ``levels x links used`` for the level search plus, per
level, the entries of the links it touches.

:func:`local_bottleneck_filling` reaches the same allocation in far fewer iterations
(rounds of the jitted kernel's local-bottleneck rule, in float64 numpy): rates within
``rtol`` of the textbook loop's. The collective model uses it above ~100k route entries,
where its 1-20 rounds beat both thousands of levels and the jitted kernel's compile time.
"""

from __future__ import annotations

import numpy as np


def _segments(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(starts[i], starts[i] + counts[i])`` (int64), vectorized."""
    total = int(counts.sum())
    offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    return offsets + np.arange(total, dtype=np.int64)


def progressive_filling_incremental(
    links, capacity, coef=None, *, rtol: float = 1e-9
) -> np.ndarray:
    """Max-min fair rates ``[F]`` (float64), equal to ``progressive_filling(links,
    capacity, coef=coef, rtol=rtol)`` bit for bit (unit weights, no demands).

    Args:
        links: int ``[F, H]`` link ids, ``-1`` padded.
        capacity: ``[L]`` capacities (the rates come out in this unit).
        coef: ``[F, H]`` bytes carried per byte of progress on each entry (default 1);
            entries with ``coef <= 0`` do not constrain the flow.
    """
    links = np.asarray(links)
    num_flows = links.shape[0]
    coef = np.ones(links.shape) if coef is None else np.asarray(coef, dtype=np.float64)
    used = (links >= 0) & (coef > 0)
    entry_flow, entry_hop = np.nonzero(used)  # entry order = row-major
    # Only the links some flow crosses matter; renumber them 0..U-1 (order preserved).
    link_ids, entry_link = np.unique(links[entry_flow, entry_hop], return_inverse=True)
    entry_link = entry_link.reshape(-1)
    entry_coef = coef[entry_flow, entry_hop]
    capacity = np.asarray(capacity, dtype=np.float64)[link_ids]
    num_links = link_ids.size

    # Entries grouped by link, each group in entry order (stable sort), and by flow.
    by_link = np.argsort(entry_link, kind="stable")
    link_count = np.bincount(entry_link, minlength=num_links)
    link_start = np.cumsum(link_count) - link_count
    flow_count = np.bincount(entry_flow, minlength=num_flows)
    flow_start = np.cumsum(flow_count) - flow_count

    rate = np.zeros(num_flows)
    active = np.ones(num_flows, dtype=bool)
    active_weight = np.zeros(num_links)
    frozen_load = np.zeros(num_links)
    level = np.full(num_links, np.inf)

    def update(chosen: np.ndarray) -> None:
        """Recompute weight, frozen load and level of links ``chosen`` (sorted)."""
        entries = by_link[_segments(link_start[chosen], link_count[chosen])]
        slot = np.repeat(np.arange(chosen.size), link_count[chosen])
        flows = entry_flow[entries]
        on = active[flows]
        weights = entry_coef[entries]
        active_weight[chosen] = np.bincount(
            slot, weights=np.where(on, weights, 0.0), minlength=chosen.size
        )
        frozen_load[chosen] = np.bincount(
            slot, weights=np.where(on, 0.0, weights * rate[flows]), minlength=chosen.size
        )
        residual = np.maximum(capacity[chosen] - frozen_load[chosen], 0.0)
        crossed = active_weight[chosen] > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            level[chosen] = np.where(crossed, residual / active_weight[chosen], np.inf)

    update(np.arange(num_links))  # level 0: every flow active, nothing frozen
    while active.any():
        fill = level.min(initial=np.inf)
        if not np.isfinite(fill):
            rate[active] = np.inf  # nothing limits the remaining flows
            break
        bottleneck = np.flatnonzero(level <= fill * (1.0 + rtol))
        entries = by_link[_segments(link_start[bottleneck], link_count[bottleneck])]
        flows = np.unique(entry_flow[entries])
        freeze = flows[active[flows]]
        rate[freeze] = fill
        active[freeze] = False
        touched = entry_link[_segments(flow_start[freeze], flow_count[freeze])]
        update(np.unique(touched))
    return rate


# Rows up to this wide are reduced column by column: numpy's reductions along a short last
# axis cost several times more per element than elementwise ops on whole columns.
_NARROW_ROWS = 8


def _row_min(values: np.ndarray) -> np.ndarray:
    """``values.min(axis=1)`` of a 2-D array (the same values: a minimum is exact)."""
    if values.shape[1] == 0 or values.shape[1] > _NARROW_ROWS:
        return values.min(axis=1)
    out = values[:, 0].copy()
    for column in range(1, values.shape[1]):
        np.minimum(out, values[:, column], out=out)
    return out


def _row_any(values: np.ndarray) -> np.ndarray:
    """``values.any(axis=1)`` of a 2-D bool array."""
    if values.shape[1] == 0 or values.shape[1] > _NARROW_ROWS:
        return np.asarray(values.any(axis=1))
    out = values[:, 0].copy()
    for column in range(1, values.shape[1]):
        out |= values[:, column]
    return out


# Rows padded to the widest one hold mostly padding (a joint solve of narrow rows with a
# few wide ones): below this share of used entries the rounds run on the used entries only.
_SPARSE_BELOW = 0.5


def _sparse_rounds(row, slot, weight_of, capacity, rate, rtol) -> np.ndarray:
    """The rounds of :func:`local_bottleneck_filling` on the used entries only.

    ``slot`` / ``weight_of``: ``[A, H]`` padded rows of the active flows ``row`` (padding
    at the sentinel slot ``L``, weight 0; every row has a used entry). The used entries
    are kept in row-major order, so every per-link sum adds the same terms in the same
    order as the padded rounds (padding only ever adds zeros to the sentinel) and each
    row's minimum is the same: the same rates bit for bit, at a cost per round of the used
    entries instead of ``A x H``.
    """
    num_links = capacity.size
    used = slot < num_links
    entry_slot, entry_weight = slot[used], weight_of[used]  # row-major order
    count = np.count_nonzero(used, axis=1)
    return _entry_rounds(row, count, entry_slot, entry_weight, capacity, rate, rtol)


def entry_filling(count, entry_link, entry_coef, capacity, *, rtol: float = 1e-9) -> np.ndarray:
    """:func:`local_bottleneck_filling` on flows given as their used entries, row-major:
    ``count`` int ``[F]`` entries of each flow (each ``>= 1``), ``entry_link`` int and
    ``entry_coef`` float64 (``> 0``) ``[E]``. For joint solves of rows of very different
    widths, whose padding to the widest row would hold mostly nothing. Returns float64
    ``[F]``, as the padded solver does on the same flows."""
    count = np.asarray(count, dtype=np.int64)
    capacity = np.asarray(capacity, dtype=np.float64)
    rate = np.full(count.size, np.inf)
    if not count.size:
        return rate
    entry_slot = np.asarray(entry_link, dtype=np.intp)
    entry_weight = np.asarray(entry_coef, dtype=np.float64)
    return _entry_rounds(
        np.arange(count.size), count, entry_slot, entry_weight, capacity, rate, rtol
    )


def _entry_rounds(row, count, entry_slot, entry_weight, capacity, rate, rtol) -> np.ndarray:
    """The rounds of :func:`_sparse_rounds` on used entries (``count`` per row of ``row``)."""
    num_links = capacity.size
    entry_row = np.repeat(np.arange(row.size), count)
    frozen_load = np.zeros(num_links + 1)
    share = np.empty(num_links + 1)
    while row.size:
        start = np.cumsum(count) - count
        active_weight = np.bincount(entry_slot, weights=entry_weight, minlength=num_links + 1)
        residual = np.maximum(capacity - frozen_load[:-1], 0.0)
        crossed = active_weight[:-1] > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            share[:-1] = np.where(crossed, residual / active_weight[:-1], np.inf)
        share[-1] = np.inf
        entry_share = share[entry_slot]
        level = np.minimum.reduceat(entry_share, start)
        finite = np.isfinite(level)
        if not finite.any():
            break  # nothing limits the remaining flows: they keep inf
        lower = entry_share > (level * (1.0 + rtol))[entry_row]
        not_bottleneck = np.zeros(num_links + 1, dtype=bool)
        not_bottleneck[entry_slot[lower]] = True
        at_bottleneck = ~not_bottleneck[entry_slot]
        freeze = np.logical_or.reduceat(at_bottleneck, start) & finite
        rate[row[freeze]] = level[freeze]
        if freeze.all():
            break
        frozen_entry = freeze[entry_row]
        frozen_load += np.bincount(
            entry_slot[frozen_entry],
            weights=entry_weight[frozen_entry] * level[entry_row[frozen_entry]],
            minlength=num_links + 1,
        )
        keep = ~frozen_entry
        alive = ~freeze
        renumber = np.cumsum(alive) - 1
        entry_slot, entry_weight = entry_slot[keep], entry_weight[keep]
        entry_row = renumber[entry_row[keep]]
        row, count = row[alive], count[alive]
    return rate


def local_bottleneck_filling(links, capacity, coef=None, *, rtol: float = 1e-9) -> np.ndarray:
    """Max-min fair rates ``[F]`` (float64) by rounds of local-bottleneck water-filling.

    The round of :mod:`fabricflow.solve.maxmin.kernel` in float64 numpy, on the padded
    rows directly: every link's fair share ``residual / active weight``, every active
    flow's level (the smallest share on its row), and every link whose share is within
    ``rtol`` of the levels of all its active flows (a *local bottleneck*) freezes those
    flows at their level. A round freezes whole groups of levels at once, so the count
    of rounds is the length of the longest chain of links whose levels depend on each
    other (1 when every group of a collective is alike, ~10-20 for ECMP collisions on a
    100k-GPU Clos), not the number of distinct levels (thousands there), and nothing is
    compiled. Each round costs ``O(active rows x H + L)``: rows whose flows froze point at
    a sentinel link (no load, never the minimum) and are dropped once they are half the rows.

    The allocation is the one of progressive filling (max-min fair rates are unique);
    only the rounding differs: a flow gets its own bottleneck's share, where the textbook
    loop gives every link within ``rtol`` of the smallest share that smallest share, and
    frozen loads are summed round by round. Rates agree within ``rtol`` relative (within
    ``1e-13`` on collective phases of ``clos-100k``).

    Args:
        links: int ``[F, H]`` link ids, ``-1`` padded.
        capacity: ``[L]`` capacities (the rates come out in this unit).
        coef: ``[F, H]`` bytes carried per byte of progress on each entry (default 1);
            entries with ``coef <= 0`` do not constrain the flow.
        rtol: relative tolerance for equal shares.

    Returns:
        float64 ``[F]``; ``inf`` for a flow no finite capacity limits, ``0`` for one that
        crosses a link of capacity 0.

    Raises:
        SpecError: a capacity is NaN or negative, or a link id is ``>= L``.
    """
    from ...errors import SpecError

    links = np.asarray(links)
    num_flows = links.shape[0]
    capacity = np.asarray(capacity, dtype=np.float64)
    num_links = capacity.size
    if np.isnan(capacity).any() or (capacity < 0).any():
        raise SpecError("capacity", "capacities must be >= 0 (inf allowed), not NaN or negative")
    if links.size and int(links.max()) >= num_links:
        raise SpecError("links", f"link ids must lie in -1..{num_links - 1}, got {links.max()}")
    coef = np.ones(links.shape) if coef is None else np.asarray(coef, dtype=np.float64)
    used = (links >= 0) & (coef > 0)
    # Padding and unused entries point at a sentinel slot ``num_links``: share inf, no load.
    slot = np.where(used, links, num_links).astype(np.intp)
    weight_of = np.where(used, coef, 0.0)
    rate = np.full(num_flows, np.inf)  # flows crossing nothing keep inf
    row = np.flatnonzero(_row_any(used))  # the active flows, in order
    if row.size < num_flows:  # (slot and weight_of are fresh arrays: rewritten below)
        slot, weight_of = slot[row], weight_of[row]
    frozen_load = np.zeros(num_links + 1)
    share = np.empty(num_links + 1)
    if row.size and _SPARSE_BELOW * slot.size > np.count_nonzero(weight_of):
        return _sparse_rounds(row, slot, weight_of, capacity, rate, rtol)
    alive = np.ones(row.size, dtype=bool)
    while alive.any():
        active_weight = np.bincount(
            slot.ravel(), weights=weight_of.ravel(), minlength=num_links + 1
        )
        residual = np.maximum(capacity - frozen_load[:-1], 0.0)
        crossed = active_weight[:-1] > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            share[:-1] = np.where(crossed, residual / active_weight[:-1], np.inf)
        share[-1] = np.inf
        entry_share = share[slot]  # [A, H]
        level = _row_min(entry_share)  # [A]
        finite = np.isfinite(level)
        if not finite.any():
            break  # nothing limits the remaining flows: they keep inf
        # A link is not a local bottleneck when an active flow on it has a lower level.
        lower = entry_share > (level * (1.0 + rtol))[:, None]
        not_bottleneck = np.zeros(num_links + 1, dtype=bool)
        not_bottleneck[slot[lower]] = True
        not_bottleneck[-1] = True
        freeze = _row_any(~not_bottleneck[slot]) & finite
        # The link of the smallest share is always a local bottleneck, so every round
        # freezes some flow and the loop ends after at most F rounds.
        rate[row[freeze]] = level[freeze]
        if np.array_equal(freeze, alive):
            break  # every flow froze (one round, when all groups are alike): no loads needed
        frozen_load += np.bincount(
            slot[freeze].ravel(),
            weights=(weight_of[freeze] * level[freeze, None]).ravel(),
            minlength=num_links + 1,
        )
        alive &= ~freeze
        if 2 * np.count_nonzero(alive) < alive.size:  # copy the live rows when few are left
            row, slot, weight_of, alive = row[alive], slot[alive], weight_of[alive], alive[alive]
        else:  # frozen rows point at the sentinel: they load nothing and never freeze again
            slot[freeze] = num_links
            weight_of[freeze] = 0.0
    return rate
