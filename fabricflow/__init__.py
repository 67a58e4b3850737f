"""fabricflow: flow-level network planning for AI-training clusters (JAX).

Public API (stable names, see docs/architecture.md):

    import fabricflow as ff
    fabric = ff.load_fabric("clos-100k")
    routes = ff.route(fabric, src, dst, policy="ecmp", seed=0)
    rates = ff.max_min_rates(routes.links, fabric.capacity)
"""

from __future__ import annotations

from .collective import CollectiveResult, busbw_factor, collective_time, prepare_collective
from .errors import FabricflowError, MemoryBudgetError, RoutingError, SolverError, SpecError
from .fabric.fabric import Fabric
from .fabric.spec import build_fabric, list_presets, load_fabric
from .routing.route import route
from .routing.routes import Routes
from .solve.completion import Completion, complete_flows, simulate_completion
from .solve.dcqcn.analysis import dcqcn_fixed_point, dcqcn_linear_stability
from .solve.dcqcn.params import DCQCNParams, PFCParams, stack_params
from .solve.dcqcn.result import DCQCNResult
from .solve.dcqcn.simulate import simulate_dcqcn, simulate_dcqcn_arrays
from .solve.maxmin.certificate import Certificate, certify_max_min
from .solve.maxmin.checked import max_min_rates, max_min_solution
from .solve.maxmin.kernel import MaxMinSolution, solve_max_min
from .solve.status import Status as SolverStatus
from .units import parse_bandwidth, parse_size, parse_time
from .workload import (
    GpuSpec,
    Layout,
    ModelSpec,
    Placement,
    StepResult,
    list_gpus,
    list_models,
    load_gpu,
    load_model,
    memory_per_gpu,
    place,
    step_time,
)

__version__ = "0.1.0"

__all__ = [
    "CollectiveResult",
    "busbw_factor",
    "collective_time",
    "prepare_collective",
    "Fabric",
    "FabricflowError",
    "MemoryBudgetError",
    "Routes",
    "RoutingError",
    "SolverError",
    "SpecError",
    "build_fabric",
    "list_presets",
    "load_fabric",
    "parse_bandwidth",
    "parse_size",
    "parse_time",
    "route",
    "DCQCNParams",
    "DCQCNResult",
    "PFCParams",
    "dcqcn_fixed_point",
    "dcqcn_linear_stability",
    "simulate_dcqcn",
    "simulate_dcqcn_arrays",
    "Certificate",
    "Completion",
    "MaxMinSolution",
    "SolverStatus",
    "certify_max_min",
    "complete_flows",
    "max_min_rates",
    "max_min_solution",
    "simulate_completion",
    "solve_max_min",
    "stack_params",
    "GpuSpec",
    "Layout",
    "ModelSpec",
    "Placement",
    "StepResult",
    "list_gpus",
    "list_models",
    "load_gpu",
    "load_model",
    "memory_per_gpu",
    "place",
    "step_time",
]
