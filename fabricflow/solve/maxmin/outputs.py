"""Per-link and per-tier views of a max-min solution (host-side numpy).

Used by design reviews: which tier saturates, how loaded each tier is, and where each
flow is bottlenecked. Tiers are the fabric's link kinds (``fabric.link_kinds``:
``nvlink``, ``nic``, ``leaf``, ``spine``, ``core``, ...).
"""

from __future__ import annotations

import numpy as np

from ...routing.routes import link_load

__all__ = ["bottleneck_summary", "link_load", "link_utilization", "tier_summary"]


def link_utilization(links, capacity, rates, coef=None) -> np.ndarray:
    """float64 ``[L]``: load / capacity (0 on idle links, ``inf`` on a loaded failed link)."""
    capacity = np.asarray(capacity, np.float64)
    load = link_load(links, rates, capacity.shape[0], coef)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(capacity > 0, load / capacity, np.where(load > 0, np.inf, 0.0))


def tier_summary(fabric, utilization, *, saturated_at: float = 1 - 1e-4) -> dict:
    """Per link kind: ``links``, ``mean``, ``p99``, ``max`` utilization, ``saturated`` count.

    Failed links (``fabric.link_up == False``) are left out; a link counts as saturated
    at ``utilization >= saturated_at``.
    """
    utilization = np.asarray(utilization, np.float64)
    summary = {}
    for kind_id, kind in enumerate(fabric.link_kinds):
        chosen = (fabric.link_kind_id == kind_id) & fabric.link_up
        if not chosen.any():
            continue
        values = utilization[chosen]
        summary[kind] = {
            "links": int(chosen.sum()),
            "mean": float(values.mean()),
            "p99": float(np.percentile(values, 99)),
            "max": float(values.max()),
            "saturated": int((values >= saturated_at).sum()),
        }
    return summary


def bottleneck_summary(fabric, bottleneck) -> dict:
    """Flows per link kind of their bottleneck link (``demand/none`` for ``-1``)."""
    bottleneck = np.asarray(bottleneck)
    counts = {}
    limited = bottleneck >= 0
    kinds = np.bincount(
        fabric.link_kind_id[bottleneck[limited]].astype(np.int64), minlength=len(fabric.link_kinds)
    )
    for kind_id, kind in enumerate(fabric.link_kinds):
        if kinds[kind_id]:
            counts[kind] = int(kinds[kind_id])
    if (~limited).any():
        counts["demand/none"] = int((~limited).sum())
    return counts
