"""Float64 test oracles that production code does not use.

``progressive_filling`` is the textbook max-min algorithm (Bertsekas & Gallager, *Data
Networks*, 6.5.2), written for clarity rather than speed and independent of the engine
(no shared code): every backend of :func:`fabricflow.solve.maxmin.engine.max_min` is
checked against it. ``fluid_completion`` is the plain event-by-event fluid
flow-completion reference the completion engine is checked against.
"""

from __future__ import annotations

import numpy as np


def progressive_filling(
    links, capacity, weight=None, demand=None, coef=None, *, rtol: float = 1e-9
) -> np.ndarray:
    """Exact weighted, demand-capped max-min fair rates by progressive filling (float64).

    Args:
        links: int ``[F, H]`` link ids per flow, ``-1`` padded.
        capacity: ``[L]`` link capacities (any unit; the result is in the same unit).
            A link of capacity 0 that carries a flow gives that flow rate 0.
        weight: ``[F]`` positive weights (default 1): a weighted max-min allocation gives
            flows that share a bottleneck rates proportional to their weights.
        demand: ``[F]`` rate caps (default ``inf``): a flow never gets more than its demand.
        coef: ``[F, H]`` fraction of the flow carried by each entry (default 1), for
            multipath splits; an entry with ``coef == 0`` does not constrain the flow.
        rtol: relative tolerance for "the same level" when freezing links.

    Returns:
        float64 ``[F]`` rates. A flow with no constraining link and no demand gets ``inf``.

    Complexity: ``O(iterations * F * H)`` with one iteration per distinct bottleneck level.

    Example:
        >>> progressive_filling([[0, 1], [0, -1], [1, -1]], [1.0, 1.0])   # parking lot
        array([0.5, 0.5, 0.5])
    """
    links = np.asarray(links)
    if links.ndim != 2:
        raise ValueError(f"links must be a 2-D int array [F, H], got shape {links.shape}")
    num_flows = links.shape[0]
    capacity = np.asarray(capacity, dtype=np.float64)
    weight = np.ones(num_flows) if weight is None else np.asarray(weight, dtype=np.float64)
    demand = np.full(num_flows, np.inf) if demand is None else np.asarray(demand, dtype=np.float64)
    coef = np.ones(links.shape) if coef is None else np.asarray(coef, dtype=np.float64)

    used = (links >= 0) & (coef > 0)
    entry_flow, entry_hop = np.nonzero(used)
    entry_link = links[entry_flow, entry_hop].astype(np.int64)
    entry_coef = coef[entry_flow, entry_hop]
    num_links = capacity.shape[0]

    rate = np.zeros(num_flows)
    active = np.ones(num_flows, dtype=bool)
    while active.any():
        on = active[entry_flow]
        # Weighted active demand on each link, and the load of already-frozen flows
        # (recomputed from the frozen rates every time: no running subtraction).
        active_weight = np.bincount(
            entry_link,
            weights=np.where(on, entry_coef * weight[entry_flow], 0.0),
            minlength=num_links,
        )
        frozen_load = np.bincount(
            entry_link,
            weights=np.where(on, 0.0, entry_coef * rate[entry_flow]),
            minlength=num_links,
        )
        residual = np.maximum(capacity - frozen_load, 0.0)
        crossed = active_weight > 0
        level = np.full(num_links, np.inf)
        level[crossed] = residual[crossed] / active_weight[crossed]
        demand_level = np.where(active, demand / weight, np.inf)
        fill = min(level.min(initial=np.inf), demand_level.min(initial=np.inf))
        if not np.isfinite(fill):
            rate[active] = np.inf  # nothing limits the remaining flows
            break
        bottleneck = crossed & (level <= fill * (1.0 + rtol))
        hits = np.bincount(entry_flow, weights=bottleneck[entry_link] & on, minlength=num_flows) > 0
        freeze = active & (hits | (demand_level <= fill * (1.0 + rtol)))
        rate[freeze] = np.minimum(weight[freeze] * fill, demand[freeze])
        active &= ~freeze
    return rate


def fluid_completion(
    links, capacity, size, start=None, weight=None, coef=None, *, rtol: float = 1e-9
) -> np.ndarray:
    """Event-by-event fluid flow completion times (float64 reference, m3 flowSim style).

    Rates are max-min fair (:func:`progressive_filling`) among the flows present (started,
    not finished) and recomputed at every arrival and completion; the next event is the
    earliest of the next arrival and ``min remaining / rate``.

    Args:
        links, capacity, weight, coef: as for :func:`progressive_filling`.
        size: ``[F]`` amounts to transfer (bytes when capacities are bytes/s).
        start: ``[F]`` arrival times (default 0).
        rtol: events closer than ``rtol`` (relative) are processed together.

    Returns:
        float64 ``[F]`` finish times (``inf`` for a flow that can never finish).

    Complexity: one progressive-filling solve per event, at most ``2 F`` events.
    """
    links = np.asarray(links)
    num_flows = links.shape[0]
    size = np.asarray(size, dtype=np.float64)
    start = np.zeros(num_flows) if start is None else np.asarray(start, dtype=np.float64)
    weight = np.ones(num_flows) if weight is None else np.asarray(weight, dtype=np.float64)
    coef = None if coef is None else np.asarray(coef, dtype=np.float64)
    remaining = size.copy()
    finish = np.full(num_flows, np.inf)
    done = np.zeros(num_flows, dtype=bool)
    now = start.min(initial=0.0)
    while not done.all():
        present = (start <= now) & ~done
        rate = np.zeros(num_flows)
        if present.any():
            rate[present] = progressive_filling(
                links[present],
                capacity,
                weight[present],
                coef=None if coef is None else coef[present],
            )
        with np.errstate(divide="ignore", invalid="ignore"):
            to_finish = np.where(present, np.where(remaining > 0, remaining / rate, 0.0), np.inf)
        pending = ~done & (start > now)
        to_arrival = (start[pending] - now).min(initial=np.inf)
        step = min(to_finish.min(initial=np.inf), to_arrival)
        if not np.isfinite(step):
            break  # the rest can never finish
        finishing = present & (to_finish <= step * (1 + rtol))
        finish[finishing] = now + to_finish[finishing]
        done |= finishing
        moving = present & ~finishing
        remaining[moving] = np.maximum(remaining[moving] - rate[moving] * step, 0.0)
        remaining[finishing] = 0.0
        now += step
    return finish
