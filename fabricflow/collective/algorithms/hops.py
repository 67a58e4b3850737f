"""Hop constructions shared by the algorithms (vectorized over groups and channels)."""

from __future__ import annotations

import numpy as np


def plain_rings(rings: np.ndarray, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """Ring hops of ``R`` independent rings per group, each copied on ``channels`` channels.

    Args:
        rings: int64 ``[G, R, m]`` members of each ring in ring order.
    Returns:
        ``(src, dst)`` int64 ``[G, R * channels, m]``: hop ``i`` goes ``rings[i] -> rings[i+1]``.
        The channel copies have identical hops; routing hashes them independently, as NCCL
        channels use distinct connections.
    """
    src = np.repeat(rings, channels, axis=1)
    return src, np.roll(src, -1, axis=2)


def flat_rings(grid: np.ndarray, channels: int, rail_aware: bool) -> tuple[np.ndarray, np.ndarray]:
    """One ring per channel over all members of each group, rail-aware across domains.

    Channel ``c`` visits every domain in order, inside a domain starting at local rank
    ``j = c mod k`` (so channels leave each domain through different rails). Rail-aware
    (NCCL PXN): the last GPU of a domain passes the data over the scale-up link to local
    rank ``j``, which sends it on rail ``j`` to local rank ``j`` of the next domain -- the
    network hop stays on one rail. Otherwise the last GPU sends straight to the next
    domain's first GPU (a cross-rail hop when ``k > 1``).

    Args:
        grid: int64 ``[G, D, k]``.
    Returns:
        ``(src, dst)`` int64 ``[G, channels, P]`` with ``P = n`` (plain) or ``D (k + 1)``
        (rail-aware with ``D > 1`` and ``k > 1``).
    """
    num_groups, num_domains, k = grid.shape
    rotation = (np.arange(channels)[:, None] + np.arange(k)[None, :]) % k  # [C, k]
    ordered = grid[:, :, rotation]  # [G, D, C, k]
    ordered = np.moveaxis(ordered, 2, 1)  # [G, C, D, k]
    if not rail_aware or num_domains == 1 or k == 1:
        src = ordered.reshape(num_groups, channels, num_domains * k)
        return src, np.roll(src, -1, axis=2)
    head = ordered[..., :1]  # [G, C, D, 1]
    src = np.concatenate([ordered, head], axis=3)
    dst = np.concatenate([ordered[..., 1:], head, np.roll(head, -1, axis=2)], axis=3)
    shape = (num_groups, channels, num_domains * (k + 1))
    return src.reshape(shape), dst.reshape(shape)


def chains_from_rings(src: np.ndarray, dst: np.ndarray, root: np.ndarray):
    """Open each ring ``[G, C, P]`` into a chain that starts at ``root[g]`` (pipelined
    broadcast): rotate the hops so the first hop leaving the root comes first and drop the
    last hop (the one closing the ring). Returns ``(src, dst)`` ``[G, C, P - 1]``."""
    num_hops = src.shape[2]
    leaves_root = src == root[:, None, None]
    start = np.argmax(leaves_root, axis=2)  # [G, C]
    index = (start[:, :, None] + np.arange(num_hops - 1)[None, None, :]) % num_hops
    return np.take_along_axis(src, index, axis=2), np.take_along_axis(dst, index, axis=2)


def btree_parents(n: int) -> np.ndarray:
    """Parent of each rank in NCCL's binary tree over ``n`` ranks (root 0 -> ``-1``).

    Rank ``r``'s parent clears ``r``'s lowest set bit ``b`` and sets ``2b`` (or just clears
    ``b`` when that exceeds ``n - 1``), as ``ncclGetBtree`` does.
    """
    ranks = np.arange(n, dtype=np.int64)
    lowbit = ranks & -ranks
    parent = (ranks ^ lowbit) | (lowbit << 1)
    parent = np.where(parent >= n, ranks ^ lowbit, parent)
    parent[0] = -1
    return parent


def dtree_parents(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The two trees of NCCL's double binary tree (``ncclGetDtree``): the binary tree and
    its mirror (even ``n``) or its shift by one (odd ``n``), so that every rank is an
    inner node in at most one of them."""
    first = btree_parents(n)
    ranks = np.arange(n)
    if n % 2:
        shifted = first[(ranks - 1) % n]
        second = np.where(shifted < 0, -1, (shifted + 1) % n)
    else:
        mirrored = first[n - 1 - ranks]
        second = np.where(mirrored < 0, -1, n - 1 - mirrored)
    return first, second


def tree_depth(parent: np.ndarray) -> int:
    """Number of edges on the longest root-to-leaf path of a parent array."""
    depth = np.zeros(parent.size, dtype=np.int64)
    node = parent.copy()
    for _ in range(parent.size):  # bounded: a tree over n nodes has depth < n
        alive = node >= 0
        if not alive.any():
            break
        depth += alive
        node = np.where(alive, parent[np.maximum(node, 0)], -1)
    return int(depth.max(initial=0))
