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
exact for the bottleneck direction). The switch's reduction runs at ``nvls_efficiency``.
Pipelined, the NVLS reduce-scatter and all-gather of a hierarchical AllReduce together
load each direction with ``S (k+1)/k``, as the single-domain NVLS AllReduce does.

Groups spanning several domains (NCCL's NVLS multi-node scheme, and SHARP / CollNet)
are pipelined: NVLS reduce-scatter inside each domain, AllReduce of the ``S / k`` shard
across domains on every rail, NVLS all-gather -- all stages at once in steady state, so
the group is one transfer loading the links of every stage (:func:`~..phase.pipelined`).

SHARP AllReduce across domains: on each rail, the members' NICs send their shard up an
aggregation tree of switches and receive the result; every link of the tree carries the
stream once in each direction (max-merged), so the network moves ``S / k`` per member
instead of ``2 (D-1)/D S / k`` for a ring.
"""

from __future__ import annotations

import numpy as np

from fabricflow.collective.algorithms.context import Context, NotApplicable
from fabricflow.collective.algorithms.hops import plain_rings
from fabricflow.collective.algorithms.ring import rings_of
from fabricflow.collective.phase import Phase, make_phase, pipelined


def _nvls_stage(ctx: Context, grid: np.ndarray, name: str, load: float, steps: int = 1) -> Phase:
    k = grid.shape[2]
    src, dst = plain_rings(grid, 1)  # [G, D, k]: one switch transfer per domain
    return make_phase(
        name,
        "nvls",
        src,
        dst,
        hop_load=load / ctx.nvls_efficiency,
        hop_latency_count=steps / k,
        bytes_per_size=1.0,
    )


def nvls(ctx: Context) -> list[Phase]:
    if not ctx.nvls:
        raise NotApplicable("the fabric declares no NVLS (scale_up: {nvls: true})")
    if ctx.op not in ("all_reduce", "reduce_scatter", "all_gather"):
        raise NotApplicable(f"nvls does not implement {ctx.op}")
    grid = ctx.require_grid("nvls")
    num_domains, k = grid.shape[1:]
    if k == 1:
        raise NotApplicable("nvls needs >= 2 group members in a scale-up domain")
    if num_domains == 1:
        load = (k + 1) / k if ctx.op == "all_reduce" else 1.0
        return [_nvls_stage(ctx, grid, "nvls", load)]
    rails = np.swapaxes(grid, 1, 2)
    inter_rounds = 2.0 if ctx.op == "all_reduce" else 1.0
    across = rings_of(
        rails,
        max(1, ctx.channels // k),
        name="inter-rail",
        rounds=inter_rounds,
        bytes_per_size=1.0 / k,
    )
    # Pipelined, the reduce-scatter (up S, down S/k) and all-gather (up S/k, down S) run at
    # once: together the NVLS AllReduce load (k+1)/k in each direction, in two steps.
    both = _nvls_stage(ctx, grid, "nvls", (k + 1) / k, steps=2)
    stages = {
        "all_reduce": [both, across],
        "reduce_scatter": [_nvls_stage(ctx, grid, "reduce-scatter", 1.0), across],
        "all_gather": [across, _nvls_stage(ctx, grid, "all-gather", 1.0)],
    }[ctx.op]
    return [pipelined("nvls-pipelined", "nvls", stages)]


def sharp(ctx: Context) -> list[Phase]:
    if not ctx.sharp:
        raise NotApplicable(
            "the fabric declares no in-network reduction (in_network_reduction: true)"
        )
    if ctx.op != "all_reduce":
        raise NotApplicable("sharp implements all_reduce only")
    grid = ctx.require_grid("sharp")
    num_groups, num_domains, k = grid.shape
    if num_domains == 1:
        raise NotApplicable("sharp needs a group spanning >= 2 domains")
    channels = max(1, ctx.channels // k)
    rails = np.repeat(np.swapaxes(grid, 1, 2), channels, axis=1)  # [G, k*C, D]
    root = rails[:, :, :1]
    members = rails[:, :, 1:]
    src = np.concatenate([members, np.broadcast_to(root, members.shape)], axis=2)
    dst = np.concatenate([np.broadcast_to(root, members.shape), members], axis=2)
    tree = make_phase(
        "sharp",
        "tree",
        src,
        dst,
        hop_load=1.0 / ctx.sharp_efficiency,
        hop_latency_count=1.0 / (num_domains - 1),
        bytes_per_size=1.0 / k / channels,
        merge="max",
    )
    if k == 1:
        return [tree]
    if ctx.nvls:
        stages = [_nvls_stage(ctx, grid, "nvls", (k + 1) / k, steps=2), tree]
    else:
        stages = [
            rings_of(grid, ctx.channels, name="reduce-scatter", rounds=1.0, bytes_per_size=1.0),
            tree,
            rings_of(grid, ctx.channels, name="all-gather", rounds=1.0, bytes_per_size=1.0),
        ]
    return [pipelined("sharp-pipelined", "tree", stages)]
