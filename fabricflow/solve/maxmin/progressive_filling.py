"""Plain float64 numpy progressive filling: the reference for max-min fair rates.

This is the textbook algorithm (Bertsekas & Gallager, *Data Networks*, 6.5.2), written
for clarity rather than speed so that tests across fabricflow can trust it. It is
independent of the JAX solver in :mod:`fabricflow.solve.maxmin.kernel` (no shared code).

Weighted max-min: every active flow ``f`` runs at ``weight[f] * t`` for a common fill
level ``t`` that rises until some link saturates (or a flow reaches its demand); the flows
through the saturated links freeze at their current rate, and filling goes on with the
rest. One iteration per distinct bottleneck level (at most ``L + F`` iterations).

It is a test oracle and a baseline, not a production path: the tests check the other
solvers against it, and the ``maxmin`` benchmark uses it as its float64 reference.
Production code calls the jitted solver or
:func:`fabricflow.solve.maxmin.incremental_filling.progressive_filling_incremental`
(the same rates bit for bit when weights are 1 and there are no demands, at a cost that
does not grow as ``levels x entries``).
"""

from __future__ import annotations

import numpy as np

from ...errors import SpecError


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
        raise SpecError("links", f"must be a 2-D int array [F, H], got shape {links.shape}")
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
