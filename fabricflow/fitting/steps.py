"""The compute side of a calibration: measured training steps -> the GPU's efficiencies.

A steps file is a YAML list of measured runs, each with the options of ``fabricflow step``
as keys and the measured ``step_time_s``::

    - name: llama3-8b, 8 GPUs        # optional label
      fabric: dgx-h100-superpod
      gpu: h100-sxm
      model: llama3-8b
      gpus: 8
      tp: 1
      micro_batch: 1
      global_batch: 128
      seq: 8192
      precision: fp8
      step_time_s: 9.07

Keys: ``fabric``, ``gpu``, ``model``, ``gpus``, ``step_time_s`` (required), ``name``,
``stack`` (a preset or file, :func:`~fabricflow.workload.stack.load_stack`), ``placement``, ``order``, ``seq`` (``seq_len``), ``schedule`` (``pipeline_schedule``)
and every :class:`~fabricflow.workload.layout.Layout` field (``tp``, ``pp``, ``dp``
(default ``gpus / (tp cp pp)``), ``cp``, ``ep``, ``vpp``, ``micro_batch``,
``global_batch``, ``precision``, ``recompute``, ``zero``, ...). Every run must be on one
GPU type and stack (a calibration describes one GPU and one stack; calibrate each into its
own file).

Two runs with the same options whose step times differ by more than
:data:`CONTRADICTION` are refused, naming both.
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.fabric.spec import load_fabric
from fabricflow.files import read_structured
from fabricflow.workload.calibration import Calibration
from fabricflow.workload.gpu import GpuSpec, load_gpu
from fabricflow.workload.layout import Layout
from fabricflow.workload.model_spec import ModelSpec, load_model
from fabricflow.workload.placement import DEFAULT_ORDER, DEFAULT_PLACEMENT
from fabricflow.workload.stack import Stack, load_stack
from fabricflow.workload.step import step_time

__all__ = ["CONTRADICTION", "LOG_SIGMA", "StepInput", "read_steps", "step_inputs"]

LOG_SIGMA = 0.02
"""Relative noise of a measured step time (iteration-to-iteration jitter, about 2 %)."""

CONTRADICTION = 0.10
"""Two runs with the same options whose times differ by more than this contradict."""

_LAYOUT_FIELDS = {f.name for f in dataclasses.fields(Layout)}
_ALIASES = {"seq": "seq_len", "schedule": "pipeline_schedule"}
_RUN_KEYS = {
    "name",
    "fabric",
    "gpu",
    "model",
    "gpus",
    "step_time_s",
    "placement",
    "order",
    "stack",
}


@dataclasses.dataclass(frozen=True)
class StepInput:
    """One measured run.

    Attributes:
        name: its label (``FILE[i]`` or the entry's ``name``). model, gpu, layout, fabric:
            what ran. placement, order: as ``fabricflow step``. step_time_s: measured.
        options: the entry as given (without ``step_time_s``), for contradiction checks.
    """

    name: str
    model: ModelSpec
    gpu: GpuSpec
    layout: Layout
    fabric: Fabric
    placement: str
    order: str
    step_time_s: float
    options: tuple
    stack: Stack

    def predict(self, calibration: Calibration) -> float:
        """Modeled step seconds with ``calibration`` applied (no interval)."""
        return step_time(
            self.model,
            self.gpu,
            self.layout,
            self.fabric,
            placement=self.placement,
            order=self.order,
            calibration=calibration,
            interval_level=None,
            stack=self.stack,
        ).step_time_s


def read_steps(path: str | os.PathLike) -> list[dict]:
    """The entries of a steps file (a YAML list of mappings)."""
    data = read_structured(path, what="steps")
    if not isinstance(data, list) or not data or not all(isinstance(e, dict) for e in data):
        raise SpecError(
            "steps", f"{os.fspath(path)}: expected a YAML list of measured runs (mappings)"
        )
    return data


def _entry(entry: dict, label: str, fabrics: dict) -> StepInput:
    known = _RUN_KEYS | _LAYOUT_FIELDS | set(_ALIASES)
    unknown = sorted(set(entry) - known)
    if unknown:
        raise SpecError(
            f"{label}.{unknown[0]}",
            f"unknown key; a measured run has {sorted(_RUN_KEYS)} and the layout's fields",
            value=unknown[0],
            allowed=sorted(known),
        )
    for key in ("fabric", "gpu", "model", "gpus", "step_time_s"):
        if key not in entry:
            raise SpecError(f"{label}.{key}", "missing (a measured run needs it)")
    measured = entry["step_time_s"]
    if (
        isinstance(measured, bool)
        or not isinstance(measured, (int, float))
        or not (math.isfinite(measured) and measured > 0)
    ):
        raise SpecError(f"{label}.step_time_s", f"must be a time > 0 s, got {measured!r}")
    gpus = entry["gpus"]
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise SpecError(f"{label}.gpus", f"must be an integer >= 1, got {gpus!r}")
    fields = {_ALIASES.get(k, k): v for k, v in entry.items() if k not in _RUN_KEYS}
    tp, pp, cp = (fields.get(k, 1) for k in ("tp", "pp", "cp"))
    for key, size in (("tp", tp), ("pp", pp), ("cp", cp)):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise SpecError(f"{label}.{key}", f"must be an integer >= 1, got {size!r}")
    if "dp" not in fields:
        if gpus % (tp * pp * cp):
            raise SpecError(f"{label}.gpus", f"{gpus} is not divisible by tp x cp x pp")
        fields["dp"] = gpus // (tp * pp * cp)
    stack = load_stack(entry.get("stack"))
    try:  # the stack's software choices are the defaults, as 'fabricflow step --stack'
        layout = stack.layout_for(**fields).validate(num_gpus=gpus)
    except SpecError as error:
        raise SpecError(f"{label}.{error.field}", str(error).split(": ", 1)[-1]) from None
    except TypeError as error:
        raise SpecError(label, f"bad layout: {error}") from None
    fabric_name = str(entry["fabric"])
    if fabric_name not in fabrics:
        fabrics[fabric_name] = load_fabric(fabric_name)
    return StepInput(
        name=str(entry.get("name", label)),
        model=load_model(entry["model"]),
        gpu=load_gpu(entry["gpu"]),
        layout=layout,
        fabric=fabrics[fabric_name],
        placement=str(entry.get("placement", DEFAULT_PLACEMENT)),  # as fabricflow step
        order=str(entry.get("order", DEFAULT_ORDER)),
        step_time_s=float(measured),
        options=tuple(
            sorted((k, repr(v)) for k, v in entry.items() if k not in ("step_time_s", "name"))
        ),
        stack=stack,
    )


def step_inputs(entries: list[dict], source: str = "steps") -> list[StepInput]:
    """The measured runs of ``entries`` (:func:`read_steps`), checked (module docstring).

    Raises:
        SpecError: a bad entry (named ``FILE[i].key``), runs on several GPU types, or two
            runs that contradict each other (both named)."""
    fabrics: dict = {}
    inputs = [_entry(e, f"{source}[{i}]", fabrics) for i, e in enumerate(entries)]
    names = sorted({s.gpu.name for s in inputs})
    if len(names) > 1:
        raise SpecError(
            "steps", f"{source}: runs on {names}; calibrate each GPU type into its own file"
        )
    stacks = sorted({s.stack.name for s in inputs})
    if len(stacks) > 1:
        raise SpecError(
            "steps", f"{source}: runs with stacks {stacks}; calibrate each stack into its own file"
        )
    for i, a in enumerate(inputs):
        for b in inputs[i + 1 :]:
            if a.options == b.options and abs(np.log(a.step_time_s / b.step_time_s)) > np.log1p(
                CONTRADICTION
            ):
                raise SpecError(
                    "steps",
                    f"{a.name} and {b.name} contradict each other: the same run measured "
                    f"{a.step_time_s:g} s and {b.step_time_s:g} s (more than "
                    f"{100 * CONTRADICTION:.0f}% apart); drop one, or measure both again",
                )
    return inputs
