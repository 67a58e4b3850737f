"""Ring algorithms (NCCL's default for large messages): AllReduce, ReduceScatter,
AllGather, and the pipelined chain for Broadcast.

A ring over ``n`` ranks moves ``2 (n-1)/n S`` bytes through every edge for AllReduce
(reduce-scatter then all-gather, ``2 (n-1)`` steps) and ``(n-1)/n S`` for ReduceScatter /
AllGather (``n - 1`` steps). The data is split evenly over ``C`` channels, each its own ring
(one pipelined transfer), so a channel that hashes onto a congested path slows the whole
collective down -- what ECMP collisions do to real jobs. A broadcast is a chain from the
root carrying ``S`` through ``n - 1`` edges.
"""

from __future__ import annotations

import numpy as np

from fabricflow.collective.algorithms.context import Context, NotApplicable
from fabricflow.collective.algorithms.hops import chains_from_rings, flat_rings, plain_rings
from fabricflow.collective.phase import Phase, make_phase

_ROUNDS = {"all_reduce": 2.0, "reduce_scatter": 1.0, "all_gather": 1.0}


def ring_grid(ctx: Context) -> np.ndarray:
    """The group as ``[G, D, k]`` for ring ordering (one domain row per member when the
    group is not a regular grid: no rail structure to exploit then)."""
    if ctx.grid is not None:
        return ctx.grid
    return ctx.ordered[:, :, None]


def ring(ctx: Context) -> list[Phase]:
    """Ring AllReduce / ReduceScatter / AllGather, or chain Broadcast."""
    n, channels = ctx.size, ctx.channels
    src, dst = flat_rings(ring_grid(ctx), channels, ctx.rail_aware)
    if ctx.op == "broadcast":
        src, dst = chains_from_rings(src, dst, ctx.groups[:, 0])
        # Pipelined: the first chunk crosses every edge once before the stream flows.
        return [make_phase("chain", "ring", src, dst, bytes_per_size=1.0 / channels)]
    if ctx.op not in _ROUNDS:
        raise NotApplicable(f"ring does not implement {ctx.op}")
    rounds = _ROUNDS[ctx.op]
    hops = src.shape[2]
    # Latency: rounds x (n-1) steps, spread over the hops of the ring (exact when the
    # hops have equal latency; PXN hops count as part of the step they serve).
    count = rounds * (n - 1) / hops
    return [
        make_phase(
            "ring",
            "ring",
            src,
            dst,
            hop_latency_count=count,
            bytes_per_size=rounds * (n - 1) / n / channels,
        )
    ]


def rings_of(
    rings: np.ndarray,
    channels: int,
    *,
    name: str,
    rounds: float,
    bytes_per_size: float,
    family: str = "ring",
) -> Phase:
    """A phase of ``R`` independent plain rings per group (``rings`` ``[G, R, m]``),
    each moving ``bytes_per_size * rounds * (m-1)/m`` per channel (used by hierarchical)."""
    m = rings.shape[2]
    src, dst = plain_rings(rings, channels)
    return make_phase(
        name,
        family,
        src,
        dst,
        hop_latency_count=rounds * (m - 1) / m,
        bytes_per_size=bytes_per_size * rounds * (m - 1) / m / channels,
    )
