"""fabricflow.workload: models, GPUs, layouts, placement and the training step-time model.

Example::

    import fabricflow as ff
    fabric = ff.load_fabric("dgx-a100-superpod")
    layout = ff.Layout(tp=8, pp=2, dp=32, micro_batch=4, global_batch=1536, recompute="full")
    result = ff.step_time("megatron-39.1b", "a100-80gb", layout, fabric)
    result.step_time_s, result.mfu, result.breakdown
"""

from __future__ import annotations

from fabricflow.workload.compute import CommTimes, ComputeTable, compose, compute_table
from fabricflow.workload.flops import (
    executed_flops_per_step,
    hardware_flops_per_step,
    model_flops_per_step,
)
from fabricflow.workload.gpu import GpuSpec, list_gpus, load_gpu
from fabricflow.workload.gpu_memory import (
    MemoryEstimate,
    MemoryTable,
    memory_headroom,
    memory_per_gpu,
    memory_table,
    usable_hbm,
)
from fabricflow.workload.layout import Layout, for_layout, layout_table, table_problems
from fabricflow.workload.layout_table import LayoutTable
from fabricflow.workload.model_spec import ModelSpec, list_models, load_model, model_from_config
from fabricflow.workload.placement import Placement, place
from fabricflow.workload.stack import Stack, list_stacks, load_stack
from fabricflow.workload.step import (
    StepResult,
    compose_step,
    issue_rates,
    register_groups,
    step_time,
)

__all__ = [
    "CommTimes",
    "ComputeTable",
    "GpuSpec",
    "Layout",
    "LayoutTable",
    "MemoryEstimate",
    "MemoryTable",
    "ModelSpec",
    "Placement",
    "Stack",
    "StepResult",
    "compose",
    "compose_step",
    "compute_table",
    "executed_flops_per_step",
    "for_layout",
    "hardware_flops_per_step",
    "issue_rates",
    "list_gpus",
    "layout_table",
    "list_models",
    "list_stacks",
    "load_gpu",
    "load_model",
    "load_stack",
    "memory_headroom",
    "memory_per_gpu",
    "memory_table",
    "model_flops_per_step",
    "model_from_config",
    "place",
    "register_groups",
    "step_time",
    "table_problems",
    "usable_hbm",
]
