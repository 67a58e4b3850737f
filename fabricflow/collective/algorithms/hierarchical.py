"""Hierarchical two-level collectives (Horovod / NCCL-CollNet style).

AllReduce = reduce-scatter inside each scale-up domain (ring over the ``k`` local
members), AllReduce across domains on each rail ``j`` on the ``S / k`` shard (ring over the
``D`` members with local rank ``j``), then all-gather inside the domain. ReduceScatter and
AllGather use the first/last two of these phases. Phases run one after the other.
"""

from __future__ import annotations

import numpy as np

from fabricflow.collective.algorithms.context import Context, NotApplicable
from fabricflow.collective.algorithms.ring import rings_of
from fabricflow.collective.phase import Phase


def hierarchical(ctx: Context) -> list[Phase]:
    grid = ctx.require_grid("hierarchical")
    num_groups, num_domains, k = grid.shape
    if num_domains == 1 or k == 1:
        raise NotApplicable(
            "hierarchical needs a group spanning >= 2 domains with >= 2 "
            "members in each (otherwise it is the flat ring)"
        )
    if ctx.op not in ("all_reduce", "reduce_scatter", "all_gather"):
        raise NotApplicable(f"hierarchical does not implement {ctx.op}")
    intra = grid  # [G, D, k]: one ring per domain
    rails = np.swapaxes(grid, 1, 2)  # [G, k, D]: one ring per rail
    channels = ctx.channels
    inter_rounds = 2.0 if ctx.op == "all_reduce" else 1.0
    reduce = rings_of(intra, channels, name="intra-reduce-scatter", rounds=1.0, bytes_per_size=1.0)
    across = rings_of(
        rails, max(1, channels // k), name="inter-rail", rounds=inter_rounds, bytes_per_size=1.0 / k
    )
    gather = rings_of(intra, channels, name="intra-all-gather", rounds=1.0, bytes_per_size=1.0)
    if ctx.op == "all_reduce":
        return [reduce, across, gather]
    if ctx.op == "reduce_scatter":
        return [reduce, across]
    return [across, gather]
