"""The public API of fabricflow, listed once.

Each ``from MODULE import NAME as NAME`` line (the explicit re-export form of typed
stubs) makes ``NAME`` public: type checkers and IDEs read this stub, and
``fabricflow/__init__.py`` reads the same lines to load each name from its module on
first use (``import fabricflow`` itself imports no JAX).
A new public name is one line here; ``__all__`` and ``dir(fabricflow)`` follow.
"""

from fabricflow import errors as errors
from fabricflow.cluster.records import ClusterRun as ClusterRun
from fabricflow.cluster.simulate import simulate_cluster as simulate_cluster
from fabricflow.cluster.trace import load_trace as load_trace
from fabricflow.cluster.trace import synthetic_trace as synthetic_trace
from fabricflow.collective.ops import busbw_factor as busbw_factor
from fabricflow.collective.timing import CollectiveResult as CollectiveResult
from fabricflow.collective.timing import collective_time as collective_time
from fabricflow.design.search import DesignSearch as DesignSearch
from fabricflow.design.search import design_fabric as design_fabric
from fabricflow.dynamics.congestion import simulate_cc as simulate_cc
from fabricflow.dynamics.flow_completion import FlowTimes as FlowTimes
from fabricflow.dynamics.flow_completion import flow_completion_times as flow_completion_times
from fabricflow.dynamics.tuning import CCTuning as CCTuning
from fabricflow.dynamics.tuning import tune_cc as tune_cc
from fabricflow.errors import FabricflowError as FabricflowError
from fabricflow.errors import MemoryBudgetError as MemoryBudgetError
from fabricflow.errors import OutputError as OutputError
from fabricflow.errors import RoutingError as RoutingError
from fabricflow.errors import SolverError as SolverError
from fabricflow.errors import SpecError as SpecError
from fabricflow.fabric.bom import BillOfMaterials as BillOfMaterials
from fabricflow.fabric.bom import bill_of_materials as bill_of_materials
from fabricflow.fabric.cost import FabricCost as FabricCost
from fabricflow.fabric.cost import WorkCost as WorkCost
from fabricflow.fabric.cost import fabric_cost as fabric_cost
from fabricflow.fabric.cost import work_cost as work_cost
from fabricflow.fabric.fabric import Fabric as Fabric
from fabricflow.fabric.spec import build_fabric as build_fabric
from fabricflow.fabric.spec import list_presets as list_presets
from fabricflow.fabric.spec import load_fabric as load_fabric
from fabricflow.fabric.transport import Transport as Transport
from fabricflow.fitting.from_measurements import calibrate as calibrate
from fabricflow.layout_search.optimize import LayoutSearch as LayoutSearch
from fabricflow.layout_search.optimize import optimize_layout as optimize_layout
from fabricflow.routing.route import route as route
from fabricflow.routing.routes import Routes as Routes
from fabricflow.routing_optimizer.makespan import optimize_routing as optimize_routing
from fabricflow.routing_optimizer.plan import RoutingPlan as RoutingPlan
from fabricflow.routing_optimizer.sensitivity import CapacitySensitivity as CapacitySensitivity
from fabricflow.routing_optimizer.sensitivity import capacity_sensitivity as capacity_sensitivity
from fabricflow.solve.cc.dcqcn import DCQCNParams as DCQCNParams
from fabricflow.solve.cc.dcqcn_analysis import dcqcn_fixed_point as dcqcn_fixed_point
from fabricflow.solve.cc.dcqcn_analysis import dcqcn_linear_stability as dcqcn_linear_stability
from fabricflow.solve.cc.result import CCResult as CCResult
from fabricflow.solve.completion import MaxMinCompletion as MaxMinCompletion
from fabricflow.solve.completion import max_min_completion as max_min_completion
from fabricflow.solve.maxmin.certificate import Certificate as Certificate
from fabricflow.solve.maxmin.certificate import certify_max_min as certify_max_min
from fabricflow.solve.maxmin.checked import max_min_rates as max_min_rates
from fabricflow.solve.maxmin.checked import max_min_solution as max_min_solution
from fabricflow.solve.packet.overheads import PacketParams as PacketParams
from fabricflow.solve.pfc.params import PFCParams as PFCParams
from fabricflow.solve.status import SolverStatus as SolverStatus
from fabricflow.sweeps.run import sweep as sweep
from fabricflow.traffic.htsim import read_connection_matrix as read_connection_matrix
from fabricflow.units import parse_bandwidth as parse_bandwidth
from fabricflow.units import parse_size as parse_size
from fabricflow.units import parse_time as parse_time
from fabricflow.workload.calibration import Calibration as Calibration
from fabricflow.workload.calibration import read_calibration as read_calibration
from fabricflow.workload.gpu import GpuSpec as GpuSpec
from fabricflow.workload.gpu import list_gpus as list_gpus
from fabricflow.workload.gpu import load_gpu as load_gpu
from fabricflow.workload.gpu_memory import memory_per_gpu as memory_per_gpu
from fabricflow.workload.intervals import Interval as Interval
from fabricflow.workload.layout import Layout as Layout
from fabricflow.workload.model_spec import ModelSpec as ModelSpec
from fabricflow.workload.model_spec import list_models as list_models
from fabricflow.workload.model_spec import load_model as load_model
from fabricflow.workload.placement import Placement as Placement
from fabricflow.workload.placement import place as place
from fabricflow.workload.stack import Stack as Stack
from fabricflow.workload.stack import list_stacks as list_stacks
from fabricflow.workload.stack import load_stack as load_stack
from fabricflow.workload.step import StepResult as StepResult
from fabricflow.workload.step import step_time as step_time

__version__: str
