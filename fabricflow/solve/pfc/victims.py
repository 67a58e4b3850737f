"""Victim flows of PFC: slowed by pauses, not by a congested link of their own (numpy).

A flow is a victim when, over the averaging window, its throughput is below
``(1 - rtol)`` x its max-min rate, some link on its path was paused, and its path
crosses no *congestion point*: a link that the max-min allocation fills (``>= 1 - rtol``
of its capacity) and that at least two flows share. A flow through a congestion point
(the flows of an incast, the flows of a saturated ring link) may lose throughput to the
congestion control at that point, to its PFC pauses or to both; a victim loses it only
because pauses spread from congestion elsewhere onto a link it shares (head-of-line
blocking). Only flows sending through the whole window are candidates (a flow that
started late or finished early cannot be compared with max-min).
"""

from __future__ import annotations

import numpy as np

from fabricflow.solve.maxmin.link_views import link_utilization


def victim_flows(
    result, max_min_rate: np.ndarray, *, since: float | None = None, rtol: float = 0.05
) -> np.ndarray:
    """Boolean ``[F]``: flows slowed by PFC pauses rather than by their own bottleneck.

    Args:
        result: a non-batched run (:class:`~fabricflow.solve.cc.result.CCResult`: uses
            ``mean_rate``, ``links``, ``capacity``, ``flow_pause_time``, ``start``,
            ``finish_time``, ``duration``).
        max_min_rate: ``[F]`` bytes/s, the ideal rates (e.g. from
            :func:`fabricflow.max_min_rates`).
        since: start of the averaging window, s (default: half the duration).
        rtol: relative tolerance for "below max-min" and for "saturated".
    """
    rate = result.mean_rate(since)
    ideal = np.asarray(max_min_rate, np.float64)
    links = result.links
    valid = links >= 0
    safe = np.where(valid, links, 0)
    filled = link_utilization(links, result.capacity, ideal) >= 1 - rtol
    shared = np.bincount(links[valid], minlength=result.capacity.shape[-1]) >= 2
    congested = np.any((filled & shared)[safe] & valid, axis=1)
    slowed = rate < (1 - rtol) * ideal
    since = result.duration / 2 if since is None else since
    active = (result.start <= since) & ~(result.finish_time < result.duration)
    return slowed & active & (result.flow_pause_time > 0) & ~congested


__all__ = ["victim_flows"]
