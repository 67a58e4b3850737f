"""fabricflow: flow-level network planning for AI-training clusters (JAX).

Public API (stable names)::

    import fabricflow as ff
    fabric = ff.load_fabric("clos-100k")
    routes = ff.route(fabric, src, dst, policy="ecmp", seed=0)
    rates = ff.max_min_rates(routes.links, fabric.capacity)

Names are loaded on first use (PEP 562): ``import fabricflow`` imports neither JAX, SciPy,
xarray nor matplotlib, so that the command line starts fast (``fabricflow presets``) and a
user pays for the solver only when calling it. Kernels that used to be exported here
(``stack_params``, ``prepare_collective``, ...) still resolve, with a
``DeprecationWarning``; import them from their modules instead.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# public name -> module that defines it (the attribute has the same name unless the value
# is "module:attribute").
_EXPORTS: dict[str, str] = {
    # fabric
    "Fabric": "fabricflow.fabric.fabric",
    "build_fabric": "fabricflow.fabric.spec",
    "list_presets": "fabricflow.fabric.spec",
    "load_fabric": "fabricflow.fabric.spec",
    "Transport": "fabricflow.fabric.transport",
    # bill of materials, cost and power
    "bill_of_materials": "fabricflow.fabric.bom",
    "BillOfMaterials": "fabricflow.fabric.bom",
    "fabric_cost": "fabricflow.fabric.cost",
    "FabricCost": "fabricflow.fabric.cost",
    "work_cost": "fabricflow.fabric.cost",
    "WorkCost": "fabricflow.fabric.cost",
    # routing
    "route": "fabricflow.routing.route",
    "Routes": "fabricflow.routing.routes",
    # max-min fair rates
    "max_min_rates": "fabricflow.solve.maxmin.checked",
    "max_min_solution": "fabricflow.solve.maxmin.checked",
    "certify_max_min": "fabricflow.solve.maxmin.certificate",
    "Certificate": "fabricflow.solve.maxmin.certificate",
    "SolverStatus": "fabricflow.solve.status",
    # flow completion
    "max_min_completion": "fabricflow.solve.completion",
    "MaxMinCompletion": "fabricflow.solve.completion",
    "flow_completion_times": "fabricflow.dynamics.flow_completion",
    "FlowTimes": "fabricflow.dynamics.flow_completion",
    "PacketParams": "fabricflow.solve.packet.overheads",
    "read_connection_matrix": "fabricflow.traffic.htsim",
    # congestion control / PFC
    "simulate_cc": "fabricflow.dynamics.congestion",
    "simulate_dcqcn": "fabricflow.dynamics.congestion",
    "CCResult": "fabricflow.solve.cc.result",
    "DCQCNParams": "fabricflow.solve.cc.dcqcn",
    "PFCParams": "fabricflow.solve.pfc.params",
    "dcqcn_fixed_point": "fabricflow.solve.cc.dcqcn_analysis",
    "dcqcn_linear_stability": "fabricflow.solve.cc.dcqcn_analysis",
    "tune_cc": "fabricflow.dynamics.tuning",
    "CCTuning": "fabricflow.dynamics.tuning",
    # collectives
    "collective_time": "fabricflow.collective.timing",
    "CollectiveResult": "fabricflow.collective.timing",
    "busbw_factor": "fabricflow.collective.ops",
    # routing optimization
    "optimize_routing": "fabricflow.routing_optimizer.makespan",
    "RoutingPlan": "fabricflow.routing_optimizer.plan",
    "capacity_sensitivity": "fabricflow.routing_optimizer.sensitivity",
    "CapacitySensitivity": "fabricflow.routing_optimizer.sensitivity",
    # training step
    "step_time": "fabricflow.workload.step",
    "StepResult": "fabricflow.workload.step",
    # calibration and prediction intervals
    "calibrate": "fabricflow.fitting.from_measurements",
    "Calibration": "fabricflow.workload.calibration",
    "read_calibration": "fabricflow.workload.calibration",
    "Interval": "fabricflow.workload.intervals",
    "Layout": "fabricflow.workload.layout",
    "place": "fabricflow.workload.placement",
    "Placement": "fabricflow.workload.placement",
    "load_model": "fabricflow.workload.model_spec",
    "list_models": "fabricflow.workload.model_spec",
    "ModelSpec": "fabricflow.workload.model_spec",
    "load_gpu": "fabricflow.workload.gpu",
    "list_gpus": "fabricflow.workload.gpu",
    "GpuSpec": "fabricflow.workload.gpu",
    "load_stack": "fabricflow.workload.stack",
    "list_stacks": "fabricflow.workload.stack",
    "Stack": "fabricflow.workload.stack",
    "memory_per_gpu": "fabricflow.workload.gpu_memory",
    # layout search
    "optimize_layout": "fabricflow.layout_search.optimize",
    "LayoutSearch": "fabricflow.layout_search.optimize",
    # units
    "parse_bandwidth": "fabricflow.units",
    "parse_size": "fabricflow.units",
    "parse_time": "fabricflow.units",
    # errors
    "errors": "fabricflow.errors:",
    "FabricflowError": "fabricflow.errors",
    "SpecError": "fabricflow.errors",
    "RoutingError": "fabricflow.errors",
    "SolverError": "fabricflow.errors",
    "MemoryBudgetError": "fabricflow.errors",
    "OutputError": "fabricflow.errors",
    "simulate_cluster": "fabricflow.cluster.simulate",
    "ClusterRun": "fabricflow.cluster.records",
    "synthetic_trace": "fabricflow.cluster.trace",
    "load_trace": "fabricflow.cluster.trace",
    # sweeps
    "sweep": "fabricflow.sweeps.run",
    # fabric design search
    "design_fabric": "fabricflow.design.search",
    "DesignSearch": "fabricflow.design.search",
}

# Kernels and internals that were exported here once: still reachable, with a warning
# that names the module to import them from.
_DEPRECATED: dict[str, str] = {
    "stack_params": "fabricflow.solve.parameters",
    "DCQCNResult": "fabricflow.solve.cc.result:CCResult",
    "prepare_collective": "fabricflow.collective.timing",
}

# Literal (not derived from _EXPORTS) so that linters see the names the TYPE_CHECKING block
# imports as exported; a test checks that both agree.
__all__ = [
    "BillOfMaterials",
    "CCResult",
    "CCTuning",
    "Calibration",
    "CapacitySensitivity",
    "Certificate",
    "ClusterRun",
    "CollectiveResult",
    "DCQCNParams",
    "DesignSearch",
    "Fabric",
    "FabricCost",
    "FabricflowError",
    "FlowTimes",
    "GpuSpec",
    "Interval",
    "Layout",
    "LayoutSearch",
    "MaxMinCompletion",
    "MemoryBudgetError",
    "ModelSpec",
    "OutputError",
    "PFCParams",
    "PacketParams",
    "Placement",
    "Routes",
    "RoutingError",
    "RoutingPlan",
    "SolverError",
    "SolverStatus",
    "SpecError",
    "Stack",
    "StepResult",
    "Transport",
    "WorkCost",
    "bill_of_materials",
    "build_fabric",
    "busbw_factor",
    "calibrate",
    "capacity_sensitivity",
    "certify_max_min",
    "collective_time",
    "dcqcn_fixed_point",
    "dcqcn_linear_stability",
    "design_fabric",
    "errors",
    "fabric_cost",
    "flow_completion_times",
    "list_gpus",
    "list_models",
    "list_presets",
    "list_stacks",
    "load_fabric",
    "load_gpu",
    "load_model",
    "load_stack",
    "load_trace",
    "max_min_completion",
    "max_min_rates",
    "max_min_solution",
    "memory_per_gpu",
    "optimize_layout",
    "optimize_routing",
    "parse_bandwidth",
    "parse_size",
    "parse_time",
    "place",
    "read_calibration",
    "read_connection_matrix",
    "route",
    "simulate_cc",
    "simulate_cluster",
    "simulate_dcqcn",
    "step_time",
    "sweep",
    "synthetic_trace",
    "tune_cc",
    "work_cost",
]


def _load(name: str, target: str):
    module_name, sep, attribute = target.partition(":")
    module = importlib.import_module(module_name)
    if sep and not attribute:  # "pkg.module:" exports the module itself
        return module
    return getattr(module, attribute or name)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = _load(name, _EXPORTS[name])
    elif name in _DEPRECATED:
        module, _, attribute = _DEPRECATED[name].partition(":")
        warnings.warn(
            f"fabricflow.{name} is deprecated as a top-level name; use "
            f"`from {module} import {attribute or name}`",
            DeprecationWarning,
            stacklevel=2,
        )
        return _load(name, _DEPRECATED[name])  # not cached: every use warns
    elif not name.startswith("_") and "." not in name and _is_submodule(name):
        # Direct submodules only: a dotted name ("solve.maxmin") is no attribute, and
        # caching it would plant a global that no import statement can reach.
        value = importlib.import_module(f"{__name__}.{name}")  # ff.workload, ff.traffic
    else:
        raise AttributeError(f"module 'fabricflow' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip __getattr__
    return value


def _is_submodule(name: str) -> bool:
    from importlib.util import find_spec

    try:
        return find_spec(f"{__name__}.{name}") is not None
    except ModuleNotFoundError:  # a parent package is missing: not a submodule either
        return False


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # real imports for type checkers and IDEs; never run
    from fabricflow import errors
    from fabricflow.cluster.records import ClusterRun
    from fabricflow.cluster.simulate import simulate_cluster
    from fabricflow.cluster.trace import load_trace, synthetic_trace
    from fabricflow.collective.ops import busbw_factor
    from fabricflow.collective.timing import CollectiveResult, collective_time
    from fabricflow.design.search import DesignSearch, design_fabric
    from fabricflow.dynamics.congestion import simulate_cc, simulate_dcqcn
    from fabricflow.dynamics.flow_completion import FlowTimes, flow_completion_times
    from fabricflow.dynamics.tuning import CCTuning, tune_cc
    from fabricflow.errors import (
        FabricflowError,
        MemoryBudgetError,
        OutputError,
        RoutingError,
        SolverError,
        SpecError,
    )
    from fabricflow.fabric.bom import BillOfMaterials, bill_of_materials
    from fabricflow.fabric.cost import FabricCost, WorkCost, fabric_cost, work_cost
    from fabricflow.fabric.fabric import Fabric
    from fabricflow.fabric.spec import build_fabric, list_presets, load_fabric
    from fabricflow.fabric.transport import Transport
    from fabricflow.fitting.from_measurements import calibrate
    from fabricflow.layout_search.optimize import LayoutSearch, optimize_layout
    from fabricflow.routing.route import route
    from fabricflow.routing.routes import Routes
    from fabricflow.routing_optimizer.makespan import optimize_routing
    from fabricflow.routing_optimizer.plan import RoutingPlan
    from fabricflow.routing_optimizer.sensitivity import CapacitySensitivity, capacity_sensitivity
    from fabricflow.solve.cc.dcqcn import DCQCNParams
    from fabricflow.solve.cc.dcqcn_analysis import dcqcn_fixed_point, dcqcn_linear_stability
    from fabricflow.solve.cc.result import CCResult
    from fabricflow.solve.completion import MaxMinCompletion, max_min_completion
    from fabricflow.solve.maxmin.certificate import Certificate, certify_max_min
    from fabricflow.solve.maxmin.checked import max_min_rates, max_min_solution
    from fabricflow.solve.packet.overheads import PacketParams
    from fabricflow.solve.pfc.params import PFCParams
    from fabricflow.solve.status import SolverStatus
    from fabricflow.sweeps.run import sweep
    from fabricflow.traffic.htsim import read_connection_matrix
    from fabricflow.units import parse_bandwidth, parse_size, parse_time
    from fabricflow.workload.calibration import Calibration, read_calibration
    from fabricflow.workload.gpu import GpuSpec, list_gpus, load_gpu
    from fabricflow.workload.gpu_memory import memory_per_gpu
    from fabricflow.workload.intervals import Interval
    from fabricflow.workload.layout import Layout
    from fabricflow.workload.model_spec import ModelSpec, list_models, load_model
    from fabricflow.workload.placement import Placement, place
    from fabricflow.workload.stack import Stack, list_stacks, load_stack
    from fabricflow.workload.step import StepResult, step_time
