"""PFC deadlocks: cycles of mutually paused queues (host side, numpy, scipy lazily).

**Buffer dependency graph**: an edge ``k -> l`` when some flow arrives over link ``k`` and
leaves over link ``l`` (its bytes in the ingress buffer of ``k`` wait for the egress of
``l``). A set of links that are all paused and form a cycle in this graph can never
drain: a PFC deadlock (Hu et al., HotNets'16). :func:`deadlock_cycles` returns the
strongly connected components of the paused subgraph that contain a cycle;
:func:`deadlocks_over_time` scans the recorded pause states of a run.
"""

from __future__ import annotations

import numpy as np


def dependency_edges(links: np.ndarray, prev_links: np.ndarray) -> np.ndarray:
    """Unique ``(ingress link, egress link)`` pairs, int ``[E, 2]``, from ``[F, H]`` arrays."""
    mask = (prev_links >= 0) & (links >= 0)
    pairs = np.stack([prev_links[mask], links[mask]], axis=1).astype(np.int64)
    return np.unique(pairs, axis=0) if pairs.size else pairs.reshape(0, 2)


def deadlock_cycles(
    paused: np.ndarray,
    links: np.ndarray,
    prev_links: np.ndarray,
    *,
    edges: np.ndarray | None = None,
) -> list[list[int]]:
    """Cycles among mutually paused queues at one instant.

    Args:
        paused: bool ``[L]`` pause state (``paused[l]``: the egress feeding link l is stopped).
        links, prev_links: ``[F, H]`` hop links and the ingress link of each hop (-1 none).
        edges: the :func:`dependency_edges` of ``links``/``prev_links`` if already known
            (they do not change over a run, so callers scanning many instants pass them).

    Returns:
        One sorted list of link ids per deadlocked set (strongly connected component of
        the paused dependency graph with a cycle); empty if there is none.

    Complexity: one strongly-connected-components pass over the paused edges, then
    vectorized grouping (no Python loop over links or components).
    """
    # scipy lazily: importing the solvers must not pull it in
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    paused = np.asarray(paused, bool)
    edges = dependency_edges(links, prev_links) if edges is None else edges
    if edges.size == 0:
        return []
    edges = edges[paused[edges[:, 0]] & paused[edges[:, 1]]]
    if edges.size == 0:
        return []
    num = paused.shape[0]
    graph = coo_matrix((np.ones(edges.shape[0]), (edges[:, 0], edges[:, 1])), shape=(num, num))
    _, labels = connected_components(graph, directed=True, connection="strong")
    nodes = np.unique(edges)
    size = np.bincount(labels[nodes], minlength=labels.max() + 1)
    looped = np.zeros(labels.max() + 1, bool)
    looped[labels[edges[edges[:, 0] == edges[:, 1], 0]]] = True
    cyclic = nodes[(size[labels[nodes]] > 1) | looped[labels[nodes]]]
    if cyclic.size == 0:
        return []
    order = np.lexsort((cyclic, labels[cyclic]))
    members, member_labels = cyclic[order], labels[cyclic[order]]
    splits = np.flatnonzero(np.diff(member_labels)) + 1
    return sorted([group.tolist() for group in np.split(members, splits)])


def deadlocks_over_time(result) -> list[dict]:
    """Deadlocked link sets found at any recorded instant of a (non-batched) run.

    ``result``: anything with ``links``, ``prev_links`` ``[F, H]``, ``paused`` ``[R, L]``
    and ``time`` ``[R]`` (a :class:`~fabricflow.solve.cc.result.CCResult`).

    Returns a list of ``{"links": [...], "first_seen_s": t, "last_seen_s": t}`` in the
    order the sets first appear. Consecutive records with the same pause pattern form one
    run (found by comparing neighbouring records, vectorized); each distinct pattern is
    analysed once (patterns are packed to bits and keyed by their bytes), and the
    dependency edges once per run. Cost: ``O(R L / 8)`` plus one deadlock search per
    distinct pattern, where a row-wise ``np.unique`` over ``[R, L]`` used to dominate.
    """
    edges = dependency_edges(result.links, result.prev_links)
    paused = np.asarray(result.paused, bool)
    if edges.size == 0 or not paused.any():
        return []
    run_start = np.flatnonzero(np.concatenate([[True], np.any(paused[1:] != paused[:-1], axis=1)]))
    run_end = np.append(run_start[1:], paused.shape[0]) - 1
    packed = np.packbits(paused[run_start], axis=1)
    cycles_of_pattern: dict[bytes, list[list[int]]] = {}
    found: dict[tuple, dict] = {}
    for run, first in enumerate(run_start):
        key = packed[run].tobytes()
        if key not in cycles_of_pattern:
            pattern = paused[first]
            cycles_of_pattern[key] = (
                deadlock_cycles(pattern, result.links, result.prev_links, edges=edges)
                if pattern.any()
                else []
            )
        for cycle in cycles_of_pattern[key]:
            entry = found.setdefault(
                tuple(cycle), {"links": list(cycle), "first_seen_s": float(result.time[first])}
            )
            entry["last_seen_s"] = float(result.time[run_end[run]])
    return list(found.values())


__all__ = ["deadlock_cycles", "deadlocks_over_time", "dependency_edges"]
