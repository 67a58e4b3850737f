"""In-network reduction: NVLS (NVLink SHARP, reduction in the NVSwitch) and SHARP
(reduction in the scale-out switches). Used only where the fabric declares it:
``fabric.meta["nvls"]`` (``scale_up: {nvls: true}`` in a spec) and
``fabric.meta["in_network_reduction"]`` (``in_network_reduction: true``).

NVLS AllReduce inside a domain of ``k`` GPUs: the switch reads every GPU's buffer once
(multimem ld_reduce) and multicasts each reduced chunk to all GPUs (multimem st), so each
GPU's link to the switch carries ``S (1 + 1/k)`` in each direction, against ``2 (k-1)/k S``
for a ring. The transfer is modelled as a ring of hops ``i -> i+1`` through the switch with
load ``(k+1)/k`` (every uplink and downlink once). ReduceScatter / AllGather load one
direction with ``S`` (the other with ``S / k``; the model loads both with ``S``, which is
exact for the bottleneck direction). Groups spanning several domains run NVLS inside
each domain and a ring across domains on every rail (NCCL's NVLS multi-node scheme).

SHARP AllReduce across domains: on each rail, the members' NICs send their shard up an
aggregation tree of switches and receive the result; every link of the tree carries the
stream once in each direction (``merge="max"``), so the network moves ``S / k`` per
member instead of ``2 (D-1)/D S / k``.
"""

from __future__ import annotations

import numpy as np

from ..phase import Phase, make_phase
from .context import Context, NotApplicable
from .hops import plain_rings
from .ring import rings_of


def nvls(ctx: Context) -> list[Phase]:
    if not ctx.nvls:
        raise NotApplicable("the fabric declares no NVLS (scale_up: {nvls: true})")
    if ctx.op not in ("all_reduce", "reduce_scatter", "all_gather"):
        raise NotApplicable(f"nvls does not implement {ctx.op}")
    grid = ctx.require_grid("nvls")
    num_domains, k = grid.shape[1:]
    if k == 1:
        raise NotApplicable("nvls needs >= 2 group members in a scale-up domain")

    def intra(name: str, load: float) -> Phase:
        src, dst = plain_rings(grid, 1)          # [G, D, k]: one switch transfer per domain
        return make_phase(name, "nvls", src, dst, hop_load=load, hop_latency_count=1.0 / k,
                          bytes_per_size=1.0, efficiency="nvls")

    if num_domains == 1:
        load = (k + 1) / k if ctx.op == "all_reduce" else 1.0
        return [intra("nvls", load)]
    rails = np.swapaxes(grid, 1, 2)
    inter_rounds = 2.0 if ctx.op == "all_reduce" else 1.0
    across = rings_of(rails, max(1, ctx.channels // k), name="inter-rail", rounds=inter_rounds,
                      bytes_per_size=1.0 / k)
    if ctx.op == "all_reduce":
        return [intra("nvls-reduce-scatter", 1.0), across, intra("nvls-all-gather", 1.0)]
    if ctx.op == "reduce_scatter":
        return [intra("nvls-reduce-scatter", 1.0), across]
    return [across, intra("nvls-all-gather", 1.0)]


def sharp(ctx: Context) -> list[Phase]:
    if not ctx.sharp:
        raise NotApplicable("the fabric declares no in-network reduction "
                            "(in_network_reduction: true)")
    if ctx.op != "all_reduce":
        raise NotApplicable("sharp implements all_reduce only")
    grid = ctx.require_grid("sharp")
    num_groups, num_domains, k = grid.shape
    if num_domains == 1:
        raise NotApplicable("sharp needs a group spanning >= 2 domains")
    channels = max(1, ctx.channels // k)
    rails = np.repeat(np.swapaxes(grid, 1, 2), channels, axis=1)   # [G, k*C, D]
    root = rails[:, :, :1]
    members = rails[:, :, 1:]
    src = np.concatenate([members, np.broadcast_to(root, members.shape)], axis=2)
    dst = np.concatenate([np.broadcast_to(root, members.shape), members], axis=2)
    phase = make_phase("sharp", "tree", src, dst, hop_latency_count=1.0 / (num_domains - 1),
                       bytes_per_size=1.0 / k / channels, merge="max", efficiency="sharp")
    if k == 1:
        return [phase]
    reduce = rings_of(grid, ctx.channels, name="intra-reduce-scatter", rounds=1.0,
                      bytes_per_size=1.0)
    gather = rings_of(grid, ctx.channels, name="intra-all-gather", rounds=1.0,
                      bytes_per_size=1.0)
    return [reduce, phase, gather]
