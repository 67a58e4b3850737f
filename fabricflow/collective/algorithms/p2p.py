"""Point-to-point patterns: direct and hierarchical (PXN) all-to-all, and send/recv.

Direct all-to-all: rank ``i`` sends ``S / n`` to each of the ``n - 1`` others, all at once
(NCCL's grouped send/recv). Hierarchical all-to-all (MoE dispatch/combine kernels, NCCL
PXN): first, inside each domain, member ``(d, i)`` hands member ``(d, j)`` everything bound
for local rank ``j`` of any domain (``D S / n``); then ``(d, j)`` sends the ``k S / n``
aggregated for ``(e, j)`` over rail ``j``. Fewer, larger network flows, all rail-local.

Send/recv (nccl-tests ``sendrecv``): rank ``i`` sends ``S`` to rank ``i + 1`` (mod ``n``) in
the order the group lists its members.
"""

from __future__ import annotations

import numpy as np

from fabricflow.collective.algorithms.context import Context, NotApplicable
from fabricflow.collective.estimate import check_hop_memory
from fabricflow.collective.phase import Phase, make_phase


def _pairs(members: np.ndarray, channels: int):
    """All ordered pairs ``i != j`` among ``members[..., m]`` -> ``(src, dst)`` ``[..., m(m-1)*C]``."""
    m = members.shape[-1]
    num_hops = members.size * (m - 1) * channels
    check_hop_memory(num_hops, f"all-to-all ({num_hops:,} flow hops)")
    i, j = np.nonzero(~np.eye(m, dtype=bool))
    src = np.repeat(members[..., i], channels, axis=-1)
    dst = np.repeat(members[..., j], channels, axis=-1)
    return src, dst


def direct_all_to_all(ctx: Context) -> list[Phase]:
    if ctx.op != "all_to_all":
        raise NotApplicable(f"direct implements all_to_all only, not {ctx.op}")
    n, channels = ctx.size, ctx.channels
    src, dst = _pairs(ctx.ordered, channels)
    return [
        make_phase(
            "all-to-all", "p2p", src[..., None], dst[..., None], bytes_per_size=1.0 / n / channels
        )
    ]


def hierarchical_all_to_all(ctx: Context) -> list[Phase]:
    if ctx.op != "all_to_all":
        raise NotApplicable(f"hierarchical all-to-all implements all_to_all only, not {ctx.op}")
    grid = ctx.require_grid("hierarchical all_to_all")
    num_groups, num_domains, k = grid.shape
    if num_domains == 1 or k == 1:
        raise NotApplicable("hierarchical all_to_all needs >= 2 domains with >= 2 members each")
    n, channels = ctx.size, ctx.channels
    intra_src, intra_dst = _pairs(grid, channels)  # [G, D, k(k-1)C]
    rail_src, rail_dst = _pairs(np.swapaxes(grid, 1, 2), channels)  # [G, k, D(D-1)C]
    intra = make_phase(
        "intra-aggregate",
        "p2p",
        intra_src.reshape(num_groups, -1, 1),
        intra_dst.reshape(num_groups, -1, 1),
        bytes_per_size=num_domains / n / channels,
    )
    rail = make_phase(
        "inter-rail",
        "p2p",
        rail_src.reshape(num_groups, -1, 1),
        rail_dst.reshape(num_groups, -1, 1),
        bytes_per_size=k / n / channels,
    )
    return [intra, rail]


def sendrecv(ctx: Context) -> list[Phase]:
    if ctx.op != "sendrecv":
        raise NotApplicable(f"direct send/recv implements sendrecv only, not {ctx.op}")
    channels = ctx.channels
    src = np.repeat(ctx.groups, channels, axis=1)
    dst = np.repeat(np.roll(ctx.groups, -1, axis=1), channels, axis=1)
    return [
        make_phase("sendrecv", "p2p", src[..., None], dst[..., None], bytes_per_size=1.0 / channels)
    ]
