"""Recursive halving-doubling (Rabenseifner) for AllReduce, ReduceScatter, AllGather.

Ranks are ordered by (domain, GPU), so the first steps (largest messages) stay inside a
scale-up domain. ReduceScatter by recursive halving: in step ``s`` rank ``r`` exchanges
``S / 2^(s+1)`` with rank ``r XOR 2^s``; AllGather mirrors it with the same pairs and sizes;
AllReduce is both (each step's phase runs twice). ``log2 n`` steps each way, so
``~2 log2(n)`` latencies and ``2 (n-1)/n S`` bytes per rank. Needs ``n`` a power of two.
Steps are not pipelined: each is its own phase that ends with its slowest message.
"""

from __future__ import annotations

import numpy as np

from fabricflow.collective.algorithms.context import Context, NotApplicable
from fabricflow.collective.phase import Phase, make_phase

_REPEAT = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1}


def halving_doubling(ctx: Context) -> list[Phase]:
    n = ctx.size
    if ctx.op not in _REPEAT:
        raise NotApplicable(f"halving_doubling does not implement {ctx.op}")
    if n & (n - 1):
        raise NotApplicable(f"halving_doubling needs a power-of-two group size, got {n}")
    ranks = np.arange(n)
    phases = []
    for step in range(int(np.log2(n))):
        partner = ranks ^ (1 << step)
        src = np.repeat(ctx.ordered[:, None, :], ctx.channels, axis=1)  # [G, C, n]
        dst = np.repeat(ctx.ordered[:, None, partner], ctx.channels, axis=1)
        phases.append(
            make_phase(
                f"step-{step}",
                "p2p",
                src.reshape(ctx.num_groups, -1, 1),
                dst.reshape(ctx.num_groups, -1, 1),
                bytes_per_size=1.0 / (2 ** (step + 1)) / ctx.channels,
                repeat=_REPEAT[ctx.op],
            )
        )
    return phases
