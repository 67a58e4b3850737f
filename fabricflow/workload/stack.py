"""Software stacks: the framework release a training run uses, picked like a GPU.

A :class:`Stack` is the software side of a run, in two parts:

* its **choices**, ``layout``: the values of the :class:`~fabricflow.workload.layout.Layout`
  fields that a framework release decides rather than the user's parallel layout
  (:data:`LAYOUT_CHOICES`: overlaps, fusions, recompute modules, CUDA-graph scopes, the FP8
  recipe, the MoE token dispatcher, the gradient dtype, ...). Each is decided in one place,
  the Layout field of the same name: the stack gives its default (:meth:`Stack.layout_for`
  and the CLI's ``--stack``), an explicit value overrides it;
* its **physical parameters**: plain float fields measured on that software (host time of
  a Transformer Engine module, the MoE dispatchers' achieved bandwidth and SM use, host
  ops per FP8 quantization, ...), each with its published source in ``presets/stacks.json``
  (``_sources``) and docs/references.md. Calibration addresses them as ``stack.<field>``:
  ``load_stack("nemo-25.09", deepep_sms=20)``.

Presets live in ``presets/stacks.json``; :func:`list_stacks` names them. The hardware side
(the CPU's time per eager op, clocks, HBM) stays on :class:`~fabricflow.workload.gpu.GpuSpec`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from importlib import resources
from typing import Any

from fabricflow.errors import SpecError
from fabricflow.files import read_structured
from fabricflow.workload.layout import Layout

# Layout fields a software stack decides (its ``layout`` entries may only name these).
LAYOUT_CHOICES = (
    "sequence_parallel",
    "zero",
    "dp_overlap",
    "tp_overlap",
    "tp_backward_overlap",
    "pp_overlap",
    "ep_overlap",
    "grad_accum_fusion",
    "grad_reduce_dtype",
    "adam_moments_dtype",
    "fp8_activation_cache",
    "fused_cross_entropy",
    "recompute",
    "recompute_modules",
    "cuda_graphs",
    "cuda_graph_scope",
    "precision",
    "fp8_recipe",
    "dispatcher",
    "moe_router_fusion",
    "cpu_binding",
    "fp8_dispatch",
    "fp8_norm_fusion",
    "pipeline_schedule",
    "moe_imbalance",
    "moe_capacity_factor",
)

# The stack used when none is named: Megatron-Core / Transformer Engine as the step
# model times it without a preset (the Layout defaults, the priors below).
DEFAULT_STACK = "megatron-core"


@dataclasses.dataclass(frozen=True)
class Stack:
    """One software stack (SI units; see the module docstring).

    Attributes:
        name: preset name.
        framework: the framework and library releases, as published.
        release: the recipe / container release the preset stands for (e.g. ``25.09``).
        layout: ``(field, value)`` pairs: the Layout defaults this stack sets
            (:data:`LAYOUT_CHOICES`).
        host_module_ops: host time of one Transformer Engine module call in units of the
            system's eager-op host time (``GpuSpec.host_op_s``).
        fp8_module_factor: host time of a Transformer Engine module under fp8 relative
            to bf16.
        router_ops, router_unfused_ops: host ops (kernel launches and PyTorch calls) of a
            MoE router's forward with and without the fused router kernels
            (``moe_router_fusion``).
        flex_preprocess_ops: host ops of router and dispatch preprocessing together under a
            flex dispatcher (DeepEP, HybridEP), which fuses the preprocessing.
        mxfp8_quantize_ops: host ops per MXFP8 quantization of one expert's GEMM input
            (allocation of data and scale tensors, their zero-fill, the scale swizzle).
        unbound_host_factor: host time per op without CPU/NUMA binding of the process over
            the bound one (``cpu_binding`` off).
        alltoall_dispatch, alltoall_combine: NCCL all-to-all (and all-gather) dispatch /
            combine, achieved fraction of the rate the collective model gives it (1: NCCL
            as the collective model times it on the fabric).
        deepep_nvlink_dispatch, deepep_nvlink_combine, deepep_rdma_dispatch,
        deepep_rdma_combine: DeepEP normal kernels' achieved bandwidth as a fraction of the
            scale-up (NVLink) / scale-out (RDMA) line rate per GPU and direction.
        hybridep_nvlink_dispatch, hybridep_nvlink_combine, hybridep_rdma_dispatch,
        hybridep_rdma_combine: the same for HybridEP.
        alltoall_sms, deepep_sms, hybridep_sms: SMs the dispatcher's kernels hold while
            they run (what overlapping them with compute costs).
        dispatch_latency_s: fixed seconds per dispatch or combine call of a flex
            dispatcher (its handshake before data moves).
    """

    name: str
    framework: str = ""
    release: str = ""
    layout: tuple[tuple[str, Any], ...] = ()
    host_module_ops: float = 8.53
    fp8_module_factor: float = 1.0
    router_ops: float = 31.0
    router_unfused_ops: float = 72.0
    flex_preprocess_ops: float = 17.0
    mxfp8_quantize_ops: float = 2.0
    unbound_host_factor: float = 1.0
    alltoall_dispatch: float = 1.0
    alltoall_combine: float = 1.0
    deepep_nvlink_dispatch: float = 0.765
    deepep_nvlink_combine: float = 0.79
    deepep_rdma_dispatch: float = 0.86
    deepep_rdma_combine: float = 0.86
    hybridep_nvlink_dispatch: float = 0.596
    hybridep_nvlink_combine: float = 0.59
    hybridep_rdma_dispatch: float = 0.86
    hybridep_rdma_combine: float = 0.86
    alltoall_sms: float = 20.0
    deepep_sms: float = 24.0
    hybridep_sms: float = 16.0
    dispatch_latency_s: float = 0.0

    def __post_init__(self) -> None:
        for field in ("name", "framework", "release"):  # printed and written as text
            if not isinstance(getattr(self, field), str):
                raise SpecError(
                    f"stack.{field}", f"must be text, got {getattr(self, field)!r}"[:300]
                )
        layout = self.layout
        if isinstance(layout, dict):
            layout = tuple(layout.items())
            object.__setattr__(self, "layout", layout)
        if not isinstance(layout, tuple) or not all(
            isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str)
            for pair in layout
        ):
            raise SpecError(
                "stack.layout",
                "must be a mapping of Layout choices (e.g. {zero: 1, dispatcher: deepep}), "
                f"got {layout!r}"[:300],
            )
        for key, _ in layout:
            if key not in LAYOUT_CHOICES:
                raise SpecError(
                    f"stack.layout.{key}",
                    f"not a software choice of a stack; one of {list(LAYOUT_CHOICES)}",
                    value=key,
                    allowed=LAYOUT_CHOICES,
                )
        for field in NUMERIC_FIELDS:
            value = getattr(self, field)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
            ):
                raise SpecError(f"stack.{field}", f"must be a finite number, got {value!r}")
            if field in FRACTION_FIELDS and not 0.0 < value <= 1.0:
                raise SpecError(f"stack.{field}", f"must lie in (0, 1], got {value!r}")
            if value < 0:
                raise SpecError(f"stack.{field}", f"must be >= 0, got {value!r}")
            object.__setattr__(self, field, float(value))
        if self.unbound_host_factor < 1.0:
            raise SpecError(
                "stack.unbound_host_factor",
                f"must be >= 1 (unbound host time over bound), got {self.unbound_host_factor}",
            )

    @property
    def choices(self) -> dict[str, Any]:
        """The Layout defaults this stack sets, as a dict."""
        return dict(self.layout)

    def layout_for(self, **fields):
        """A :class:`~fabricflow.workload.layout.Layout` with this stack's choices as
        defaults and ``fields`` (explicit values) over them."""
        return Layout(**{**self.choices, **fields})

    def to_dict(self) -> dict:
        """Name, releases, choices and every physical parameter (JSON-ready)."""
        out = dataclasses.asdict(self)
        out["layout"] = self.choices
        return out


# The physical parameters: every field but the names and the choices.
NUMERIC_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(Stack)
    if f.name not in ("name", "framework", "release", "layout")
)
# Fields that are fractions of a line rate (in (0, 1]).
FRACTION_FIELDS = tuple(
    f
    for f in NUMERIC_FIELDS
    if f.startswith(("deepep_nvlink", "deepep_rdma", "hybridep_nvlink", "hybridep_rdma"))
    or f.startswith("alltoall_")
    and not f.endswith("_sms")
)


@functools.lru_cache(maxsize=1)
def _presets() -> dict:
    """The presets of ``stacks.json`` (read once; callers copy what they change)."""
    presets = read_structured(
        str(resources.files("fabricflow.workload") / "presets" / "stacks.json"),
        what="stack",
        syntax="json",
    )
    return {k: v for k, v in presets.items() if not k.startswith("_")}


def list_stacks() -> list[str]:
    """Names of the stack presets."""
    return sorted(_presets())


def load_stack(spec: Stack | str | dict | None = None, **overrides) -> Stack:
    """A :class:`Stack` from a preset name, a JSON/YAML file path, a dict or a Stack, with
    ``overrides`` (any field: ``load_stack("nemo-25.09", deepep_sms=20)``; a ``layout``
    override is merged into the preset's choices). ``None``: :data:`DEFAULT_STACK`."""
    if spec is None:
        spec = DEFAULT_STACK
    if isinstance(spec, Stack):
        raw = dataclasses.asdict(spec)
        raw["layout"] = spec.choices
    elif isinstance(spec, dict):
        raw = dict(spec)
    elif isinstance(spec, str):
        presets = _presets()
        if spec in presets:
            raw = {"name": spec, **presets[spec]}
        elif spec.endswith((".json", ".yaml", ".yml")):
            raw = read_structured(spec, what="stack")
            if not isinstance(raw, dict):
                raise SpecError("stack", f"{spec}: expected a mapping of stack fields")
            raw.setdefault("name", spec)
        else:
            raise SpecError(
                "stack",
                f"unknown stack {spec!r}; one of {sorted(presets)} or a .json/.yaml file",
                value=spec,
                allowed=presets,
            )
    else:
        raise SpecError(
            "stack", f"expected a preset name, a file, a dict or a Stack, got {type(spec).__name__}"
        )
    layout: dict = {}
    for given in (raw.get("layout"), overrides.pop("layout", None)):
        if isinstance(given, tuple):  # a Stack's own frozen form
            given = dict(given)
        if given is not None and not isinstance(given, dict):
            raise SpecError(
                "stack.layout",
                "must be a mapping of Layout choices (e.g. {zero: 1, dispatcher: deepep}), "
                f"got {given!r}"[:300],
            )
        layout.update(given or {})
    raw.update(overrides)
    raw["layout"] = layout
    known = [f.name for f in dataclasses.fields(Stack)]
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise SpecError(
            f"stack.{unknown[0]}",
            f"unknown stack field; known {known}",
            value=unknown[0],
            allowed=known,
        )
    return Stack(**raw)


__all__ = ["DEFAULT_STACK", "LAYOUT_CHOICES", "Stack", "list_stacks", "load_stack"]
