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

from fabricflow.collective import structure_cache
from fabricflow.collective.algorithms import ALGORITHMS, algorithms_for
from fabricflow.collective.alpha_beta import alpha_beta_estimate, gpu_bandwidths
from fabricflow.collective.comm import CollectiveCache, collective_seconds, collective_timer
from fabricflow.collective.coupling import CoupledTimes, coupled_seconds, plan_windows
from fabricflow.collective.groups import as_groups, domain_grid, make_groups
from fabricflow.collective.nccl_cost import DEFAULT_COST, PROTOCOLS, CostModel
from fabricflow.collective.ops import OPS, bandwidths, busbw_factor, canonical_op
from fabricflow.collective.phase import Phase
from fabricflow.collective.size_sweep import collective_sweep, nccl_sizes
from fabricflow.collective.timing import (
    CollectiveResult,
    PreparedCollective,
    collective_time,
    prepare_collective,
    prepare_collectives,
)

__all__ = [
    "ALGORITHMS",
    "CollectiveCache",
    "CoupledTimes",
    "DEFAULT_COST",
    "OPS",
    "PROTOCOLS",
    "CollectiveResult",
    "CostModel",
    "Phase",
    "PreparedCollective",
    "algorithms_for",
    "alpha_beta_estimate",
    "as_groups",
    "bandwidths",
    "busbw_factor",
    "canonical_op",
    "collective_seconds",
    "collective_sweep",
    "collective_time",
    "collective_timer",
    "coupled_seconds",
    "domain_grid",
    "gpu_bandwidths",
    "make_groups",
    "nccl_sizes",
    "plan_windows",
    "prepare_collective",
    "prepare_collectives",
    "structure_cache",
]
