"""Collective communication on the fabric: NCCL-like algorithms as concurrent flows.

Each collective becomes the flows an NCCL-like library sends (ring with several rail-aware
channels, double binary tree, recursive halving-doubling, hierarchical two-level, direct
and hierarchical all-to-all, NVLS/SHARP in-network reduction); the flows of all groups
are routed and share the fabric through one max-min solve; times follow NCCL's cost
model (per-step latency + bytes at the fluid rate x protocol efficiency) and are reported
as nccl-tests does (algbw, busbw).

    import fabricflow as ff
    fabric = ff.load_fabric("dgx-h100-superpod")
    result = ff.collective_time(fabric, "all_reduce", groups, 1 << 30)
    result.time_s, result.busbw_Bps, result.group_time_s, result.bottleneck_links
"""

from __future__ import annotations

from .algorithms import ALGORITHMS, algorithms_for
from .cost import DEFAULT_COST, PROTOCOLS, CostModel
from .groups import as_groups, domain_grid, make_groups
from .model import CollectiveResult, PreparedCollective, collective_time, prepare_collective
from .ops import OPS, bandwidths, busbw_factor, canonical_op
from .phase import Phase
from .sweep import collective_sweep, nccl_sizes

__all__ = [
    "ALGORITHMS",
    "DEFAULT_COST",
    "OPS",
    "PROTOCOLS",
    "CollectiveResult",
    "CostModel",
    "Phase",
    "PreparedCollective",
    "algorithms_for",
    "as_groups",
    "bandwidths",
    "busbw_factor",
    "canonical_op",
    "collective_sweep",
    "collective_time",
    "domain_grid",
    "make_groups",
    "nccl_sizes",
    "prepare_collective",
]
