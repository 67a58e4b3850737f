"""A calibration: the model's physical parameters fitted to a user's own measurements.

A :class:`Calibration` holds named numeric parameters, each with its prior (the
uncalibrated model's value), its fitted value, a one-sigma uncertainty, where it came
from, and whether the measurements determined it (one they could not determine keeps its
prior). Parameters are addressed by where they live:

* ``gpu.<field>``: a :class:`~fabricflow.workload.gpu.GpuSpec` field of the GPU the
  steps were measured on (:data:`GPU_PARAMETERS`: GEMM, memory-bound and attention
  efficiencies, host time per op and per module);
* ``network.<field>``: a :class:`~fabricflow.collective.nccl_cost.CostModel` field
  (:data:`NETWORK_PARAMETERS`: scale-up and network payload efficiencies, the NVLS and
  SHARP reduction efficiencies, and the scale-up and network latency scales).

A calibration never holds a factor per measured case: applying it replaces physical
constants (:meth:`Calibration.gpu_spec`, :meth:`Calibration.cost_model`), which every
prediction then uses. ``step_time(..., calibration=)`` and ``collective_time(...,
cost=calibration.cost_model())`` take it; the fitter is :func:`fabricflow.calibrate` (:mod:`fabricflow.fitting`).
The file is YAML (:func:`read_calibration`, :func:`calibration_text`), described in
docs/calibration.md.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from types import MappingProxyType

from fabricflow.collective.nccl_cost import DEFAULT_COST, CostModel
from fabricflow.errors import SpecError
from fabricflow.files import read_structured
from fabricflow.workload.gpu import GpuSpec
from fabricflow.workload.stack import Stack

__all__ = [
    "GPU_PARAMETERS",
    "NETWORK_PARAMETERS",
    "STACK_PARAMETERS",
    "all_parameters",
    "Calibration",
    "Parameter",
    "apply_network",
    "as_calibration",
    "calibration_key",
    "calibration_text",
    "read_calibration",
]

GPU_PARAMETERS = (
    "gemm_efficiency",
    "gemm_efficiency_fp8",
    "gemm_efficiency_mxfp8",
    "attention_efficiency",
    "attention_backward_efficiency",
    "memory_efficiency",
    "sustained_clock_fraction",
    "host_op_s",
)
"""The :class:`GpuSpec` fields a calibration may set (``gpu.<field>``)."""

STACK_PARAMETERS = (
    "host_module_ops",
    "fp8_module_factor",
    "unbound_host_factor",
    "alltoall_dispatch",
    "alltoall_combine",
    "deepep_nvlink_dispatch",
    "deepep_nvlink_combine",
    "deepep_rdma_dispatch",
    "deepep_rdma_combine",
    "hybridep_nvlink_dispatch",
    "hybridep_nvlink_combine",
    "hybridep_rdma_dispatch",
    "hybridep_rdma_combine",
)
"""The :class:`~fabricflow.workload.stack.Stack` fields a calibration may set
(``stack.<field>``): host work per module, dispatcher efficiencies."""

NETWORK_PARAMETERS = (
    "scale_up_efficiency",
    "network_efficiency",
    "nvls_efficiency",
    "sharp_efficiency",
    "scale_up_latency_scale",
    "network_latency_scale",
    "protocol_efficiency.LL",
    "protocol_efficiency.LL128",
)
"""The :class:`CostModel` fields a calibration may set (``network.<field>``;
``protocol_efficiency.<protocol>`` is one entry of that mapping: the achieved bandwidth
fraction of NCCL's low-latency protocols, below their wire-format bound)."""

_FRACTIONS = {
    "gemm_efficiency",
    "gemm_efficiency_fp8",
    "gemm_efficiency_mxfp8",
    "sustained_clock_fraction",
    *(f for f in STACK_PARAMETERS if "dispatch" in f or "combine" in f),
    "attention_efficiency",
    "attention_backward_efficiency",
    "memory_efficiency",
    "scale_up_efficiency",
    "network_efficiency",
    "nvls_efficiency",
    "sharp_efficiency",
    "protocol_efficiency.LL",
    "protocol_efficiency.LL128",
}


# A protocol's payload share of its wire format: LL carries 4 data bytes per 8-byte word,
# LL128 120 bytes per 128-byte line; achieved efficiencies lie below.
_WIRE_BOUNDS = {"protocol_efficiency.LL": 0.5, "protocol_efficiency.LL128": 120.0 / 128.0}


def all_parameters() -> list[str]:
    """Every parameter name a calibration may hold."""
    return (
        [f"gpu.{f}" for f in GPU_PARAMETERS]
        + [f"stack.{f}" for f in STACK_PARAMETERS]
        + [f"network.{f}" for f in NETWORK_PARAMETERS]
    )


def parameter_bounds(name: str) -> tuple[float, float]:
    """The physical range of parameter ``name``: ``(0, 1]`` for an efficiency (a
    protocol's: up to its wire format's share), ``[1, inf)`` for the unbound host factor,
    ``[0, inf)`` for a time, a count or a scale."""
    field = name.split(".", 1)[1]
    if field == "unbound_host_factor":  # host time without CPU binding over the bound one
        return (1.0, math.inf)
    if field in _WIRE_BOUNDS:
        return (0.0, _WIRE_BOUNDS[field])
    return (0.0, 1.0) if field in _FRACTIONS else (0.0, math.inf)


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One fitted parameter.

    Attributes:
        name: ``gpu.<field>`` or ``network.<field>``.
        prior: the uncalibrated model's value.
        value: the fitted value (the prior when not ``determined``).
        uncertainty: one standard deviation of ``value``, same unit.
        determined: whether the measurements determined it.
        source: what it was fitted to, or why it kept its prior.
    """

    name: str
    prior: float
    value: float
    uncertainty: float
    determined: bool
    source: str

    def __post_init__(self) -> None:
        space, _, field = self.name.partition(".")
        known = {
            "gpu": GPU_PARAMETERS,
            "stack": STACK_PARAMETERS,
            "network": NETWORK_PARAMETERS,
        }.get(space, ())
        if field not in known:
            allowed = all_parameters()
            raise SpecError(
                "calibration.parameters",
                f"unknown parameter {self.name!r}; one of {allowed}",
                value=self.name,
                allowed=allowed,
            )
        low, high = parameter_bounds(self.name)
        # a host time may be 0 and the unbound host factor 1; an efficiency or scale not 0
        zero_ok = field.endswith("_s") or field == "unbound_host_factor"
        for what in ("prior", "value"):
            number = getattr(self, what)
            inside = (
                isinstance(number, (int, float))
                and not isinstance(number, bool)
                and math.isfinite(number)
                and (low < number or (zero_ok and number == low))
                and number <= high
            )
            if not inside:
                bracket = "[" if zero_ok else "("
                raise SpecError(
                    f"calibration.parameters.{self.name}.{what}",
                    f"must lie in {bracket}{low:g}, {high:g}], got {number!r}",
                )
        if not (isinstance(self.uncertainty, (int, float)) and self.uncertainty >= 0):
            raise SpecError(
                f"calibration.parameters.{self.name}.uncertainty",
                f"must be a number >= 0, got {self.uncertainty!r}",
            )

    def to_dict(self) -> dict:
        return {
            "prior": float(self.prior),
            "value": float(self.value),
            "uncertainty": float(self.uncertainty),
            "determined": bool(self.determined),
            "source": self.source,
        }


@dataclasses.dataclass(frozen=True)
class Calibration:
    """Fitted parameters and how well they reproduce the measurements.

    Attributes:
        parameters: the fitted parameters, by name.
        gpu: the GPU preset the ``gpu.*`` parameters were measured on (None: no steps).
        stack: the software stack the ``stack.*`` parameters were measured with.
        inputs: one entry per measurement given to the fit (a nccl-tests log, a measured
            step): ``{"input": name, "kind": "nccl-tests" | "step", ...}`` with the
            measured and calibrated values and the relative residuals.
        step_log_sigma: one standard deviation of ``log(measured / calibrated)`` of a
            step time predicted with this calibration (the fit's residual scatter and
            parameter uncertainty; None without measured steps).
        collective_log_sigma: the same for a collective time (None without logs).
    """

    parameters: Mapping[str, Parameter]
    gpu: str | None = None
    stack: str | None = None
    inputs: tuple = ()
    step_log_sigma: float | None = None
    collective_log_sigma: float | None = None

    def value(self, name: str, default: float) -> float:
        """The fitted value of ``name``, ``default`` when the calibration lacks it."""
        parameter = self.parameters.get(name)
        return default if parameter is None else parameter.value

    def determined(self, side: str) -> dict:
        """``{field: value}`` of the determined parameters of one side (``gpu``,
        ``stack`` or ``network``), the side's prefix taken off."""
        return {
            name.split(".", 1)[1]: p.value
            for name, p in self.parameters.items()
            if name.startswith(side + ".") and p.determined
        }

    def gpu_spec(self, gpu: GpuSpec) -> GpuSpec:
        """``gpu`` with the ``gpu.*`` parameters applied, when it is the GPU the steps
        were measured on (another GPU is returned unchanged)."""
        if self.gpu is None or gpu.name != self.gpu:
            return gpu
        fields = self.determined("gpu")
        return dataclasses.replace(gpu, **fields) if fields else gpu

    def stack_spec(self, stack: Stack) -> Stack:
        """``stack`` (a :class:`~fabricflow.workload.stack.Stack`) with the ``stack.*``
        parameters applied, when it is the stack the steps ran with."""
        if self.stack is None or stack.name != self.stack:
            return stack
        fields = self.determined("stack")
        return dataclasses.replace(stack, **fields) if fields else stack

    def cost_model(self, base: CostModel = DEFAULT_COST) -> CostModel:
        """``base`` with the ``network.*`` parameters applied (``base`` itself when the
        calibration sets none, so that caches keyed by the default stay shared)."""
        return apply_network(base, self.determined("network"))

    def applies_to(self, gpu: GpuSpec) -> bool:
        """Whether the compute side of this calibration was measured on ``gpu``."""
        return self.gpu is not None and gpu.name == self.gpu

    def to_dict(self) -> dict:
        return {
            "gpu": self.gpu,
            "stack": self.stack,
            "step_log_sigma": self.step_log_sigma,
            "collective_log_sigma": self.collective_log_sigma,
            "parameters": {name: p.to_dict() for name, p in self.parameters.items()},
            "inputs": [dict(entry) for entry in self.inputs],
        }

    @classmethod
    def from_dict(cls, data, source: str = "calibration") -> Calibration:
        """The calibration of a :meth:`to_dict` mapping (a read YAML file)."""
        if not isinstance(data, dict) or not isinstance(data.get("parameters"), dict):
            raise SpecError(source, "a calibration file needs a 'parameters' mapping")
        unknown = set(data) - {
            "gpu",
            "stack",
            "step_log_sigma",
            "collective_log_sigma",
            "parameters",
            "inputs",
        }
        if unknown:
            raise SpecError(
                source,
                f"unknown key(s) {sorted(unknown)}; a calibration file has gpu, stack, "
                "step_log_sigma, collective_log_sigma, parameters and inputs",
            )
        parameters = {}
        for name, entry in data["parameters"].items():
            keys = {"prior", "value", "uncertainty", "determined", "source"}
            if not isinstance(entry, dict) or set(entry) != keys:
                raise SpecError(
                    f"{source}: parameters.{name}", f"needs exactly the keys {sorted(keys)}"
                )
            parameters[name] = Parameter(
                name=str(name),
                prior=entry["prior"],
                value=entry["value"],
                uncertainty=entry["uncertainty"],
                determined=bool(entry["determined"]),
                source=str(entry["source"]),
            )
        sigmas = {}
        for key in ("step_log_sigma", "collective_log_sigma"):
            value = data.get(key)
            if value is not None and not (isinstance(value, (int, float)) and value >= 0):
                raise SpecError(f"{source}: {key}", f"must be a number >= 0, got {value!r}")
            sigmas[key] = None if value is None else float(value)
        inputs = data.get("inputs") or []
        if not isinstance(inputs, list):
            raise SpecError(f"{source}: inputs", "must be a list")
        gpu, stack = data.get("gpu"), data.get("stack")
        return cls(
            parameters=parameters,
            gpu=None if gpu is None else str(gpu),
            stack=None if stack is None else str(stack),
            inputs=tuple(inputs),
            **sigmas,
        )


def apply_network(base: CostModel, fields: Mapping[str, float]) -> CostModel:
    """``base`` with ``{field: value}`` of :data:`NETWORK_PARAMETERS` (without the
    ``network.`` prefix) applied; ``base`` itself when ``fields`` is empty."""
    if not fields:
        return base
    plain = {k: float(v) for k, v in fields.items() if "." not in k}
    protocols = dict(base.protocol_efficiency)
    for key, value in fields.items():
        if key.startswith("protocol_efficiency."):
            protocols[key.split(".", 1)[1]] = float(value)
    if protocols != dict(base.protocol_efficiency):
        plain["protocol_efficiency"] = MappingProxyType(protocols)  # type: ignore[assignment]
    return dataclasses.replace(base, **plain)  # type: ignore[arg-type]


def calibration_key(calibration: Calibration | None) -> tuple:
    """A hashable key of what a calibration changes (for caches of results)."""
    if calibration is None:
        return ()
    return (
        calibration.gpu,
        calibration.stack,
        tuple(
            (name, p.value) for name, p in sorted(calibration.parameters.items()) if p.determined
        ),
        calibration.step_log_sigma,
        calibration.collective_log_sigma,
    )


def calibration_text(calibration: Calibration) -> str:
    """The YAML text of ``calibration`` (what :func:`read_calibration` reads back)."""
    import yaml  # deferred: only writers need the emitter

    header = (
        "# fabricflow calibration: each parameter's prior (the uncalibrated model), fitted\n"
        "# value, one-sigma uncertainty and source; residuals per input (docs/calibration.md)\n"
    )
    return header + yaml.safe_dump(calibration.to_dict(), sort_keys=False, width=100)


def read_calibration(path: str | os.PathLike) -> Calibration:
    """The :class:`Calibration` of a YAML file written by ``fabricflow calibrate``."""
    return Calibration.from_dict(
        read_structured(path, what="calibration"), source=f"calibration {os.fspath(path)}"
    )


def as_calibration(value) -> Calibration | None:
    """``None``, a :class:`Calibration`, or the path of a calibration file."""
    if value is None or isinstance(value, Calibration):
        return value
    if isinstance(value, (str, os.PathLike)):
        return read_calibration(value)
    raise SpecError(
        "calibration",
        f"expected a Calibration or the path of a calibration file, got {type(value).__name__}",
    )
