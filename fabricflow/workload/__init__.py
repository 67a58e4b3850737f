"""fabricflow.workload: models, GPUs, layouts, placement and the training step-time model.

Example::

    import fabricflow as ff
    fabric = ff.load_fabric("dgx-a100-superpod")
    layout = ff.Layout(tp=8, pp=2, dp=32, micro_batch=4, global_batch=1536, recompute="full")
    result = ff.step_time("megatron-39.1b", "a100-80gb", layout, fabric)
    result.step_time_s, result.mfu, result.breakdown
"""

from __future__ import annotations

from .flops import executed_flops_per_step, hardware_flops_per_step, model_flops_per_step
from .gpu import GpuSpec, list_gpus, load_gpu
from .layout import Layout
from .memory import MemoryEstimate, memory_per_gpu
from .model import ModelSpec, list_models, load_model, model_from_config
from .placement import Placement, place
from .step import StepResult, compose_step, issue_rates, register_groups, step_time

__all__ = [
    "GpuSpec",
    "Layout",
    "MemoryEstimate",
    "ModelSpec",
    "Placement",
    "StepResult",
    "compose_step",
    "executed_flops_per_step",
    "hardware_flops_per_step",
    "issue_rates",
    "list_gpus",
    "list_models",
    "load_gpu",
    "load_model",
    "memory_per_gpu",
    "model_flops_per_step",
    "register_groups",
    "model_from_config",
    "place",
    "step_time",
]
