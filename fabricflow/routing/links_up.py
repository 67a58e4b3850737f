"""Which padded paths avoid failed links, and the redraw-then-detour step around failures.

Structured routers (Clos, torus, dragonfly) compute paths arithmetically, then replace
the few that cross a failed link (``fabric.without``): first by their own alternatives
(other dimension orders, other cable copies, fresh hashes), and for the flows still cut
off by the shortest working path of the generic router.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fabricflow.routing.generic import shortest_path_links


def all_links_up(fabric, links: np.ndarray) -> np.ndarray:
    """bool ``[F]``: whether every link of each row of ``links`` (int ``[F, H]``, ``-1``
    padded) is working (``fabric.link_up``)."""
    if fabric.link_up.all():  # no failures (the common case): skip the [F, H] gather
        return np.ones(links.shape[0], dtype=bool)
    return np.all((links < 0) | fabric.link_up[np.maximum(links, 0)], axis=1)


def redraw_then_detour(
    fabric,
    links: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    key: np.ndarray,
    *,
    attempts: int,
    redraw: Callable[[np.ndarray, int], np.ndarray],
    why: str,
    min_width: int = 1,
) -> np.ndarray:
    """Replace the rows of ``links`` that cross a failed link; returns the new links.

    Args:
        fabric: the (possibly failed) fabric.
        links: int64 ``[F, H]`` first-choice paths of all flows, ``-1`` padded at the end of
            each row; rows are overwritten in place.
        src, dst: int64 ``[F]`` GPU indices; ``key``: uint64 ``[F]`` flow hashes.
        attempts: ``redraw`` is called with ``attempt = 1 .. attempts - 1``.
        redraw: ``redraw(pending, attempt)`` -> int ``[len(pending), H]`` alternative paths
            of the flows ``pending`` (indices into ``src``).
        why: phrase for the :class:`RoutingError` of flows with no working path at all.
        min_width: the narrowest hop width to return.

    Returns:
        int64 ``[F, H']``: each row a working path, trimmed to the longest row.

    Raises:
        RoutingError: flows with no working path (count and an example).
    """
    pending = np.flatnonzero(~all_links_up(fabric, links))
    for attempt in range(1, attempts):
        if pending.size == 0:
            break
        candidate = redraw(pending, attempt)
        ok = all_links_up(fabric, candidate)
        links[pending[ok]] = candidate[ok]
        pending = pending[~ok]
    if pending.size:
        s_node, t_node = fabric.gpu_node[src[pending]], fabric.gpu_node[dst[pending]]
        detour, _ = shortest_path_links(
            fabric,
            s_node,
            t_node,
            key[pending],
            src_gpu=src,
            dst_gpu=dst,
            flow_index=pending,
            why=why,
        )
        width = max(links.shape[1], detour.shape[1])
        links = np.pad(links, ((0, 0), (0, width - links.shape[1])), constant_values=-1)
        links[pending] = -1
        links[pending, : detour.shape[1]] = detour
    used = int((links >= 0).sum(axis=1).max(initial=min_width))
    return links[:, : max(used, min_width)]
