"""Float64 test oracles that production code does not use.

``fluid_completion`` is the plain event-by-event fluid flow-completion reference; the
jitted engine (:mod:`fabricflow.solve.completion`) is checked against it.
"""

from __future__ import annotations

import numpy as np

from fabricflow.solve.maxmin.progressive_filling import progressive_filling


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
