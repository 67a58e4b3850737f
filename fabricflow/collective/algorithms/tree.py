"""NCCL's double binary tree AllReduce, with a chain inside each scale-up domain.

Across the ``D`` domains of a group, two binary trees (NCCL ``ncclGetDtree``: a tree
and its mirror/shift, so that each domain is an inner node in at most one) each carry
half of the channels; inside a domain the ``k`` members form a chain whose head (local
rank ``j``) talks to the network on rail ``j``. Reduce (up) and broadcast (down) are
pipelined, so every tree edge carries the channel's ``S / C`` bytes in both directions
at once, and per node about ``2 S`` leave through the NICs: ``algbw = busbw / 2`` for
large messages (NCCL's tree model). The latency is ``2 ((k-1)`` intra-domain steps
``+ depth`` network steps).
"""

from __future__ import annotations

import numpy as np

from fabricflow.collective.algorithms.context import Context, NotApplicable
from fabricflow.collective.algorithms.hops import dtree_parents, tree_depth
from fabricflow.collective.phase import Phase, make_phase


def tree(ctx: Context) -> list[Phase]:
    if ctx.op != "all_reduce":
        raise NotApplicable("tree implements all_reduce only (as in NCCL)")
    grid = ctx.require_grid("tree")
    num_groups, num_domains, k = grid.shape
    channels = max(2, ctx.channels + ctx.channels % 2)  # one or more per tree
    trees = dtree_parents(num_domains)
    depth = max(tree_depth(trees[0]), tree_depth(trees[1]))
    srcs, dsts, counts = [], [], []
    for channel in range(channels):
        parent = trees[channel % 2]
        rail = (channel // 2) % k
        order = grid[:, :, (rail + np.arange(k)) % k]  # [G, D, k], head first
        # Chain edges toward the head (reduce) and away from it (broadcast).
        up_src, up_dst = order[:, :, 1:], order[:, :, :-1]
        chain_src = np.concatenate([up_src, up_dst], axis=2).reshape(num_groups, -1)
        chain_dst = np.concatenate([up_dst, up_src], axis=2).reshape(num_groups, -1)
        child = np.flatnonzero(parent >= 0)
        heads = order[:, :, 0]
        tree_src = np.concatenate([heads[:, child], heads[:, parent[child]]], axis=1)
        tree_dst = np.concatenate([heads[:, parent[child]], heads[:, child]], axis=1)
        srcs.append(np.concatenate([chain_src, tree_src], axis=1))
        dsts.append(np.concatenate([chain_dst, tree_dst], axis=1))
        # Critical path 2 (k-1) chain steps + 2 depth tree steps, spread over the edges.
        chain_count = np.full(chain_src.shape[1], 1.0 / num_domains)
        tree_count = np.full(tree_src.shape[1], depth / max(child.size, 1))
        counts.append(np.concatenate([chain_count, tree_count]))
    src = np.stack(srcs, axis=1)
    dst = np.stack(dsts, axis=1)
    count = np.broadcast_to(np.stack(counts)[None], src.shape)
    if src.shape[2] == 0:
        raise NotApplicable("tree needs at least 2 ranks")
    return [
        make_phase("tree", "tree", src, dst, hop_latency_count=count, bytes_per_size=1.0 / channels)
    ]
