"""One job of a trace (:class:`JobSpec`) and the small parsers every trace reader shares.

- :class:`JobSpec`: a training job with its model, GPU type, GPU count, parallel layout,
  rank order, arrival time, length (steps or a standalone duration) and priority.
- :func:`parse_duration`: ``'3d'``, ``'12h'``, ``'1h30m'`` or a number of seconds.
- :func:`positive_int`: an integer >= 1 (or >= 0) from an int, an integral float or the
  digits of a CSV cell; anything else is a :class:`~fabricflow.errors.SpecError` naming
  the field.
- :class:`LoadedTrace`: what a trace reader returns, the jobs and what it did with the rows.
- :func:`row_name`: ``jobs[3] (id 'ft-8b')``, the prefix of every error about a row.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
from collections.abc import Iterable, Mapping

from fabricflow.errors import SpecError
from fabricflow.files import INT64_MAX
from fabricflow.schema import DECIMAL
from fabricflow.workload.gpu import GpuSpec
from fabricflow.workload.layout import Layout
from fabricflow.workload.model_spec import ModelSpec

DEFAULT_ORDER = "tp-cp-ep-dp-pp"
DURATION_UNITS = {
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 7 * 86400.0,
}
_DURATION = re.compile(r"^\s*([0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE]([-+]?[0-9]+))?\s*([a-z]*)\s*$")
_PART = re.compile(r"([0-9]+\.?[0-9]*|\.[0-9]+)\s*(min|[smhdw])")
_COMPOUND = re.compile(r"^\s*(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)\s*(?:min|[smhdw])\s*){2,}$")
_DIGITS = re.compile(r"\s*[0-9]+\s*")
# Beyond 30 million years a duration is a typo, and sums of such times lose seconds.
MAX_DURATION_S = 1e15


@dataclasses.dataclass(frozen=True, slots=True)
class JobSpec:
    """One training job of a trace (SI units).

    Attributes:
        id: unique name.
        model, gpu: the model and GPU specs.
        gpus: GPUs the job runs on (``layout.num_gpus``).
        layout: the parallel layout (validated against ``model`` and ``gpus``).
        order: Megatron-style rank order, fastest-varying dimension first.
        precision, seq_len, global_batch: copies of the layout's (for readers of the trace).
        priority: larger runs first and may preempt smaller (default 0).
        arrival_s: submission time (seconds from the trace start).
        steps: training steps, or None when ``duration_s`` is given.
        duration_s: standalone length (seconds); the simulator turns it into
            ``ceil(duration_s / standalone step time)`` steps.

    ``slots``: a trace of a million jobs holds a million of these (about 150 bytes each;
    the model, GPU and layout objects are shared between jobs of the same shape).
    """

    id: str
    model: ModelSpec
    gpu: GpuSpec
    gpus: int
    layout: Layout
    order: str = DEFAULT_ORDER
    precision: str = "bf16"
    seq_len: int = 2048
    global_batch: int = 1
    priority: int = 0
    arrival_s: float = 0.0
    steps: int | None = None
    duration_s: float | None = None

    def target_steps(self, standalone_step_s: float) -> int:
        """Steps to run: ``steps``, or ``duration_s`` worth of standalone steps (>= 1)."""
        if self.steps is not None:
            return self.steps
        assert self.duration_s is not None  # every reader requires one of them
        return max(1, math.ceil(self.duration_s / standalone_step_s - 1e-9))

    def to_dict(self) -> dict:
        """A trace row (YAML/JSON-able) that :func:`~.trace.load_trace` reads back."""
        lay = self.layout
        row = {
            "id": self.id,
            "model": self.model.name,
            "gpu": self.gpu.name,
            "gpus": self.gpus,
            "layout": {
                "tp": lay.tp,
                "pp": lay.pp,
                "cp": lay.cp,
                "ep": lay.ep,
                "vpp": lay.vpp,
                "micro_batch": lay.micro_batch,
                "global_batch": lay.global_batch,
                "seq": lay.seq_len,
                "recompute": lay.recompute,
                "precision": lay.precision,
                "zero": lay.zero,
                "sequence_parallel": lay.sequence_parallel,
            },
            "order": self.order,
            "arrival": self.arrival_s,
            "priority": self.priority,
        }
        if self.steps is not None:
            row["steps"] = self.steps
        else:
            row["duration"] = self.duration_s
        return row


class LoadedTrace(list):
    """The jobs of a trace (a ``list`` of :class:`JobSpec`, trace order) with what the
    reader did.

    Attributes:
        format: the format read (``fabricflow`` or one of the public trace formats).
        counts: ``rows`` read, ``jobs`` kept, and for a public trace the rows left out by
            reason (``cpu_only``, ``fractional_gpu``, ``never_started``, ...) and the
            fractional rows rounded up (``fractional_rounded_up``); see
            docs/cluster-traces.md.
        assumptions: what the reader assumed for what the trace does not say (text).
    """

    def __init__(
        self,
        jobs: Iterable[JobSpec] = (),
        *,
        format: str = "fabricflow",
        counts: dict | None = None,
        assumptions: tuple[str, ...] = (),
    ):
        super().__init__(jobs)
        self.format = format
        self.counts = dict(counts or {"rows": len(self), "jobs": len(self)})
        self.assumptions = tuple(assumptions)

    def report(self) -> dict:
        """``{"format", "counts", "assumptions"}`` (JSON-able)."""
        return {
            "format": self.format,
            "counts": dict(self.counts),
            "assumptions": list(self.assumptions),
        }


def parse_duration(value: object, field: str, *, allow_zero: bool = True) -> float:
    """Seconds from ``'3d'``, ``'12h'``, ``'30m'``, ``'45s'``, ``'50000h'`` or a number (s).

    Raises :class:`SpecError` naming ``field`` for negative, non-finite or unitless garbage.
    """
    if isinstance(value, bool) or value is None:
        raise SpecError(field, f"expected a duration such as 45s, 30m, 12h or 3d, got {value!r}")
    if isinstance(value, str) and DECIMAL.fullmatch(value.strip()):
        # a bare number of seconds (the common CSV cell) skips the patterns; float() alone
        # would also read "1_0", "nan" and "inf"
        value = float(value)
    if isinstance(value, (int, float, numbers.Real)):
        seconds = float(value)
    elif isinstance(value, str) and _COMPOUND.match(value):
        # "1h30m", "2d 12h": the sum of its parts
        seconds = sum(float(number) * DURATION_UNITS[unit] for number, unit in _PART.findall(value))
    elif isinstance(value, str):
        match = _DURATION.match(value)
        if match is None or match.group(3) not in DURATION_UNITS and match.group(3) != "":
            raise SpecError(
                field,
                f"expected a duration such as 45s, 30m, 12h or 3d (units "
                f"{sorted(DURATION_UNITS)}), got {value!r}",
            )
        number = float(match.group(1) + (f"e{match.group(2)}" if match.group(2) else ""))
        seconds = number * DURATION_UNITS.get(match.group(3), 1.0)
    else:
        raise SpecError(field, f"expected a duration such as 45s or 3d, got {value!r}")
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise SpecError(field, f"must be a finite duration {bound} s, got {value!r}")
    if seconds > MAX_DURATION_S:
        raise SpecError(field, f"{value!r} is beyond 1e15 s; give a duration in s/m/h/d/w")
    return seconds


def positive_int(value: object, field: str, *, zero: bool = False) -> int:
    """``value`` as an int >= 1 (>= 0 with ``zero``): an int, an integral float, or the
    digits of a CSV cell; anything else is a SpecError naming ``field``."""
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise SpecError(field, f"must be a positive integer, got {value!r}")
    number = int(value)
    if number < (0 if zero else 1):
        raise SpecError(
            field, f"must be a{' non-negative' if zero else ' positive'} integer, got {number}"
        )
    if number > INT64_MAX:  # the simulator's counters are int64
        raise SpecError(field, f"{number} is outside the 64-bit integer range (<= {INT64_MAX})")
    return number


def is_real(value: object) -> bool:
    """True for an int or float that is not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def row_name(index: int, row: object) -> str:
    """``jobs[3] (id 'ft-8b')``: how errors name a trace row (``index`` counts from 0)."""
    job_id = row.get("id") if isinstance(row, Mapping) else None
    return f"jobs[{index}]" + (f" (id {job_id!r})" if job_id not in (None, "") else "")
