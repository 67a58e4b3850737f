"""Per-link and per-tier views of a max-min solution (host-side numpy, arrays only).

Used by design reviews: which tier saturates, how loaded each tier is, and where each
flow is bottlenecked. Tiers are link kinds given as ``link_kind_id`` ``[L]`` (an index
into the labels ``link_kinds``: ``nvlink``, ``nic``, ``leaf``, ``spine``, ``core``, ...),
as a fabric holds them (``fabric.link_kind_id``, ``fabric.link_kinds``).
"""

from __future__ import annotations

import numpy as np

from fabricflow.link_loads import link_load

__all__ = ["bottleneck_summary", "link_load", "link_utilization", "tier_summary"]


def link_utilization(links, capacity, rates, coef=None) -> np.ndarray:
    """float64 ``[L]``: load / capacity (0 on idle links, ``inf`` on a loaded failed link)."""
    capacity = np.asarray(capacity, np.float64)
    load = link_load(links, rates, capacity.shape[0], coef)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(capacity > 0, load / capacity, np.where(load > 0, np.inf, 0.0))


def tier_summary(
    utilization, link_kind_id, link_kinds, link_up=None, *, saturated_at: float = 1 - 1e-4
) -> dict:
    """Per link kind: ``links``, ``mean``, ``p99``, ``max`` utilization, ``saturated`` count.

    ``utilization`` ``[L]``; ``link_kind_id`` int ``[L]`` into the labels ``link_kinds``;
    links with ``link_up`` ``[L]`` False (failed) are left out. A link counts as saturated
    at ``utilization >= saturated_at``.
    """
    utilization = np.asarray(utilization, np.float64)
    kind_id = np.asarray(link_kind_id)
    up = np.ones(kind_id.shape, bool) if link_up is None else np.asarray(link_up, bool)
    summary = {}
    for index, kind in enumerate(link_kinds):
        chosen = (kind_id == index) & up
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


def bottleneck_summary(bottleneck, link_kind_id, link_kinds) -> dict:
    """Flows per link kind of their bottleneck link (``demand/none`` for ``-1``)."""
    bottleneck = np.asarray(bottleneck)
    limited = bottleneck >= 0
    kinds = np.bincount(
        np.asarray(link_kind_id)[bottleneck[limited]].astype(np.int64), minlength=len(link_kinds)
    )
    counts = {kind: int(kinds[index]) for index, kind in enumerate(link_kinds) if kinds[index]}
    if (~limited).any():
        counts["demand/none"] = int((~limited).sum())
    return counts
