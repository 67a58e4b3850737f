"""How long and how much memory a collective's routing and solving will take, before it starts.

Routing, merging and solving cost about the same per flow hop whatever the algorithm, so
the work is estimated from the phases alone (built in milliseconds): a hop between two
GPUs of one scale-up domain is routed on one NVLink hop and solved in one round; a hop
across the network has a path of up to ``2 x tiers`` links and shares them with other
groups' flows, which takes more water-filling rounds. Measured on a 2-core machine
(``clos-100k``, 102,400 GPUs): all-reduce in groups of 8 inside nodes (9.5M hops over 6
phases) ~5 s; the same across nodes (1.2M network hops) ~2-3 s; all-to-all in groups
of 32 (11.5M scale-up hops, then 2.5M network hops in one phase) ~35 s and ~4 GiB.
"""

from __future__ import annotations

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.memory_budget import check_memory

# Seconds per hop (2-core CPU, generous: the estimate should rather say more than less).
NETWORK_HOP_S = 4e-6
SCALE_UP_HOP_S = 1e-6
# Peak bytes of the process per hop of the largest phase (measured 370-580 on clos-100k:
# all-to-all in groups of 32 and 64, all-reduce in groups of 8 and of all 102,400 GPUs).
BYTES_PER_HOP = 700
# Above this estimate the model refuses to start; from PROGRESS_AFTER_S on it reports.
MAX_ESTIMATE_S = 1800.0
PROGRESS_AFTER_S = 10.0

SHRINK_HINT = (
    "use fewer or smaller groups, fewer channels (channels=, --channels), one algorithm "
    "instead of auto (algorithm=, --algorithm), or the hierarchical algorithm"
)


def check_hop_memory(num_hops: int, what: str) -> None:
    """Refuse, before routing, a phase of ``num_hops`` flow hops over the memory budget.

    The one estimate of a phase's memory: :data:`BYTES_PER_HOP` per hop, checked by
    :func:`fabricflow.memory_budget.check_memory` (``$FABRICFLOW_MEMORY_BUDGET`` or the process's
    limit). Phase builders call it before they allocate, :func:`check_work` for the
    largest phase of every candidate algorithm.

    Raises:
        MemoryBudgetError: naming ``what``, the GiB needed and the budget.
    """
    check_memory(num_hops * BYTES_PER_HOP, what, hint=SHRINK_HINT)


def count_hops(fabric: Fabric, phases) -> tuple[int, int]:
    """``(scale-up hops, network hops)`` of ``phases`` (each a :class:`~.phase.Phase`)."""
    intra = network = 0
    for phase in phases:
        valid = phase.hop_src >= 0
        src, dst = phase.hop_src[valid], phase.hop_dst[valid]
        local = int(np.count_nonzero(fabric.gpu_domain[src] == fabric.gpu_domain[dst]))
        intra += local
        network += src.size - local
    return intra, network


def check_work(fabric: Fabric, op: str, groups_shape: tuple, built) -> float:
    """Estimated seconds for routing and solving every phase of ``built`` (a list of
    ``(algorithm, phases, protocols)``); raises before any work when it is absurd.

    Raises:
        SpecError: (field ``groups``) the estimate exceeds :data:`MAX_ESTIMATE_S`; the
            message gives the estimate, the hop counts and how to shrink the problem.
        MemoryBudgetError: the largest phase would not fit the memory budget
            (:func:`check_hop_memory`).
    """
    intra = network = 0
    largest = 0
    for _algorithm, phases, _protocols in built:
        for phase in phases:
            a, b = count_hops(fabric, [phase])
            intra, network = intra + a, network + b
            largest = max(largest, a + b)
    seconds = intra * SCALE_UP_HOP_S + network * NETWORK_HOP_S
    what = f"collective {op} over {groups_shape[0]:,} groups of {groups_shape[1]:,}"
    if seconds > MAX_ESTIMATE_S:
        raise SpecError(
            "groups",
            f"{what} would take ~{seconds / 60:.0f} min to route and solve "
            f"({network:,} network hops and {intra:,} scale-up hops over all phases and "
            f"candidate algorithms; refused above {MAX_ESTIMATE_S / 60:.0f} min): " + SHRINK_HINT,
        )
    check_hop_memory(largest, f"{what} (largest phase: {largest:,} hops)")
    return seconds
