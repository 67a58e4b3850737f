"""Per-link load of flows at given rates: the one array function every floor shares
(routing's :class:`~fabricflow.routing.routes.Routes`, the solvers' certificate and
reports, the collective model)."""

from __future__ import annotations

import numpy as np

__all__ = ["link_load"]


def link_load(links, rates, num_links: int, coef=None) -> np.ndarray:
    """float64 ``[num_links]``: sum over flows of ``rate * coef`` on every link.

    ``links`` int ``[F, H]`` (``-1`` padded), ``rates`` ``[F]``, ``coef`` ``[F, H]`` or None.
    """
    links = np.asarray(links)
    used = links >= 0
    per_entry = np.broadcast_to(np.asarray(rates, np.float64)[:, None], links.shape)
    if coef is not None:
        per_entry = per_entry * np.asarray(coef, np.float64)
    return np.bincount(links[used], weights=per_entry[used], minlength=num_links)
