"""Job traces: :class:`JobSpec`, :func:`load_trace` (YAML or CSV) and :func:`synthetic_trace`.

A trace is a list of training jobs, each with a model, a GPU type, a GPU count, a parallel
layout, an arrival time, a length (``steps``, or ``duration`` from which the simulator
derives the steps with the job's standalone step time) and a priority. YAML::

    jobs:
      - id: pretrain-70b
        model: llama3-70b          # preset or config path
        gpu: h100-sxm
        gpus: 1024
        layout: {tp: 8, pp: 4, micro_batch: 1, global_batch: 1024, seq: 8192}   # or: optimize
        arrival: 0s
        steps: 20000               # or duration: 3d
        priority: 1

CSV takes the same columns with the layout flattened (``tp,pp,cp,ep,vpp,micro_batch,
global_batch,seq,...``) or a ``layout`` column holding ``optimize``. Durations take the
units ``s``, ``m``/``min``, ``h``, ``d`` and ``w`` (a bare number is seconds).

Every error names the row (index and id) and the field, e.g.
``jobs[3] (id 'ft-8b').gpus: must be a positive integer, got -8``.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import numbers
import os
import re
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from ..errors import SpecError
from ..files import decode_text, parse_structured
from ..workload.gpu import GpuSpec, list_gpus, load_gpu
from ..workload.layout import Layout
from ..workload.model import ModelSpec, list_models, load_model

JOB_KEYS = (
    "id",
    "model",
    "gpu",
    "gpus",
    "layout",
    "order",
    "arrival",
    "steps",
    "duration",
    "priority",
)
# Layout fields a trace may set (``seq`` is the trace's short name of ``seq_len``).
LAYOUT_KEYS = (
    "tp",
    "pp",
    "cp",
    "ep",
    "dp",
    "vpp",
    "micro_batch",
    "global_batch",
    "seq",
    "seq_len",
    "recompute",
    "precision",
    "zero",
    "sequence_parallel",
)
_INT_LAYOUT = ("tp", "pp", "cp", "ep", "dp", "vpp", "micro_batch", "global_batch", "seq_len")
_DURATION_UNITS = {
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
DEFAULT_ORDER = "tp-cp-ep-dp-pp"


@dataclasses.dataclass(frozen=True)
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
        assert self.duration_s is not None  # load_trace requires one of them
        return max(1, math.ceil(self.duration_s / standalone_step_s - 1e-9))

    def to_dict(self) -> dict:
        """A trace row (YAML/JSON-able) that :func:`load_trace` reads back."""
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


def parse_duration(value: object, field: str, *, allow_zero: bool = True) -> float:
    """Seconds from ``'3d'``, ``'12h'``, ``'30m'``, ``'45s'``, ``'50000h'`` or a number (s).

    Raises :class:`SpecError` naming ``field`` for negative, non-finite or unitless garbage.
    """
    if isinstance(value, bool) or value is None:
        raise SpecError(field, f"expected a duration such as 45s, 30m, 12h or 3d, got {value!r}")
    if isinstance(value, numbers.Real):
        seconds = float(value)
    elif isinstance(value, str) and _COMPOUND.match(value):
        # "1h30m", "2d 12h": the sum of its parts
        seconds = sum(
            float(number) * _DURATION_UNITS[unit] for number, unit in _PART.findall(value)
        )
    elif isinstance(value, str):
        match = _DURATION.match(value)
        if match is None or match.group(3) not in _DURATION_UNITS and match.group(3) != "":
            raise SpecError(
                field,
                f"expected a duration such as 45s, 30m, 12h or 3d (units "
                f"{sorted(_DURATION_UNITS)}), got {value!r}",
            )
        number = float(match.group(1) + (f"e{match.group(2)}" if match.group(2) else ""))
        seconds = number * _DURATION_UNITS.get(match.group(3), 1.0)
    else:
        raise SpecError(field, f"expected a duration such as 45s or 3d, got {value!r}")
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise SpecError(field, f"must be a finite duration {bound} s, got {value!r}")
    if seconds > 1e15:  # 30 million years: a typo, and beyond float-safe sums of times
        raise SpecError(field, f"{value!r} is beyond 1e15 s; give a duration in s/m/h/d/w")
    return seconds


def _positive_int(value: object, field: str, *, zero: bool = False) -> int:
    if isinstance(value, str) and re.fullmatch(r"\s*[0-9]+\s*", value):
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
    return number


def _row_name(index: int, row: Mapping) -> str:
    job_id = row.get("id") if isinstance(row, Mapping) else None
    return f"jobs[{index}]" + (f" (id {job_id!r})" if job_id not in (None, "") else "")


def _model(value: object, field: str) -> ModelSpec:
    if isinstance(value, ModelSpec):
        return value
    if not isinstance(value, str) or not value:
        raise SpecError(field, f"expected a model preset {list_models()} or a config path")
    if value not in list_models() and not os.path.exists(value):
        raise SpecError(
            field, f"unknown model {value!r}; presets are {list_models()} (or a config path)"
        )
    try:
        return load_model(value)
    except SpecError as error:
        raise SpecError(field, str(error)) from None


def _gpu(value: object, field: str) -> GpuSpec:
    if isinstance(value, GpuSpec):
        return value
    if not isinstance(value, str) or value not in list_gpus():
        raise SpecError(field, f"unknown GPU {value!r}; presets are {list_gpus()}")
    return load_gpu(value)


def _layout(raw: object, gpus: int, model: ModelSpec, field: str) -> Layout | None:
    """The Layout of a trace row, dp derived from ``gpus``; None for ``optimize``."""
    if raw == "optimize" or isinstance(raw, Mapping) and raw.get("optimize") is True:
        return None
    if not isinstance(raw, Mapping):
        raise SpecError(field, f"expected a mapping of {list(LAYOUT_KEYS)} or 'optimize'")
    unknown = sorted(set(raw) - set(LAYOUT_KEYS))
    if unknown:
        raise SpecError(
            f"{field}.{unknown[0]}", f"unknown layout key; allowed: {list(LAYOUT_KEYS)}"
        )
    values = dict(raw)
    if "seq" in values:
        if "seq_len" in values:
            raise SpecError(f"{field}.seq", "give seq or seq_len, not both")
        values["seq_len"] = values.pop("seq")
    for name in _INT_LAYOUT:
        if name in values:
            values[name] = _positive_int(values[name], f"{field}.{name}")
    if "zero" in values:
        values["zero"] = _positive_int(values["zero"], f"{field}.zero", zero=True)
    if isinstance(values.get("sequence_parallel"), str):  # a CSV cell
        text = values["sequence_parallel"].strip().lower()
        if text not in ("1", "true", "0", "false"):  # "yes" used to mean False
            raise SpecError(
                f"{field}.sequence_parallel", f"expected true, false, 1 or 0, got {text!r}"
            )
        values["sequence_parallel"] = text in ("1", "true")
    shard = values.get("tp", 1) * values.get("pp", 1) * values.get("cp", 1)
    if gpus % shard:
        raise SpecError(
            field,
            f"tp x pp x cp = {shard} does not divide the job's gpus = {gpus}; "
            "pick a layout that factors the GPU count",
        )
    dp = gpus // shard
    if values.setdefault("dp", dp) != dp:
        raise SpecError(
            f"{field}.dp", f"tp x pp x cp x dp = {shard * values['dp']} is not gpus = {gpus}"
        )
    if "global_batch" not in values:
        # enough micro-batches to fill the pipeline four times over (a common default)
        values["global_batch"] = dp * values.get("micro_batch", 1) * max(1, 4 * values.get("pp", 1))
    try:
        return Layout(**values).validate(model, gpus)
    except SpecError as error:
        # Layout names its fields "layout.<key>"; field already ends in ".layout"
        inner = error.field.removeprefix("layout.") if error.field else ""
        raise SpecError(
            f"{field}.{inner}" if inner and inner != "layout" else field,
            str(error).split(": ", 1)[-1],
        ) from None


_OPTIMIZED: dict[tuple, tuple] = {}


def _optimized_layout(model, gpu, gpus: int, fabric, seq_len: int, global_batch: int, cache):
    """The best layout of ``optimize_layout`` (small budget), cached per model, GPU, size,
    sequence, batch and fabric."""
    from ..collective.structure_cache import fabric_fingerprint

    cache = _OPTIMIZED
    key = (model, gpu, gpus, seq_len, global_batch, fabric_fingerprint(fabric))
    if key not in cache:
        from ..optimize.search import optimize_layout

        search = optimize_layout(
            model,
            gpu,
            fabric,
            gpus=gpus,
            global_batch=global_batch,
            seq_len=seq_len,
            budget_s=20.0,
            top_k=1,
        )
        cache[key] = (search.best_kwargs["layout"], search.best_kwargs.get("order", DEFAULT_ORDER))
    return cache[key]


def _read_rows(source) -> list:
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.exists(path):
            raise SpecError("trace", f"no such file {path!r}")
        # Read bytes and decode with the spec-file rules, so a directory, an unreadable
        # file or non-UTF-8 text is a SpecError naming the file, not a raw OSError.
        try:
            with open(path, "rb") as handle:
                raw = handle.read()
        except OSError as error:
            raise SpecError("trace", f"cannot read {path}: {error.strerror or error}") from None
        text = decode_text(raw, "trace", path)
        if path.lower().endswith(".csv"):
            try:
                parsed = list(csv.DictReader(io.StringIO(text, newline="")))
            except csv.Error as error:
                raise SpecError("trace", f"{path}: not valid CSV ({error})") from None
            for index, row in enumerate(parsed):
                # DictReader files surplus cells under the key None: a row with more
                # cells than the header has shifted or extra values, never to be dropped.
                if None in row:
                    raise SpecError(
                        _row_name(index, row),
                        f"{len(row) - 1 + len(row[None])} cells but the header has "
                        f"{len(row) - 1} columns",
                    )
            rows = [
                {k.strip(): v.strip() for k, v in row.items() if k and v not in (None, "")}
                for row in parsed
            ]
            return [_unflatten(row) for row in rows]
        # The spec-file parser refuses duplicate keys (a repeated `gpus:` would otherwise
        # silently win), alias bombs and non-decimal YAML 1.1 numbers.
        data = parse_structured(text, what="trace", source=path)
        if isinstance(data, Mapping):
            unknown = sorted(set(data) - {"jobs"})
            if unknown:
                raise SpecError(f"trace.{unknown[0]}", "unknown key; a trace holds 'jobs'")
            data = data.get("jobs")
        if not isinstance(data, list):
            raise SpecError("trace", f"{path}: expected 'jobs:' with a list of jobs")
        return data
    if isinstance(source, Mapping):
        return _read_rows_list(source.get("jobs"))
    return _read_rows_list(source)


def _read_rows_list(rows) -> list:
    if not isinstance(rows, (list, tuple)):
        raise SpecError("trace", "expected a path, a list of jobs or {'jobs': [...]}")
    return list(rows)


def _unflatten(row: dict) -> dict:
    """A CSV row -> a YAML-like row (layout columns into ``layout``)."""
    out = {k: v for k, v in row.items() if k not in LAYOUT_KEYS and k != "layout"}
    if row.get("layout") == "optimize":
        out["layout"] = "optimize"
        # every layout column goes to the hint, so one optimize does not choose (tp, pp,
        # ...) is refused by name rather than silently dropped
        for name in LAYOUT_KEYS:
            if name in row:
                out.setdefault("layout_hint", {})[name] = row[name]
    elif "layout" in row:
        raise SpecError(
            "layout", f"a CSV 'layout' column holds only 'optimize', got {row['layout']!r}"
        )
    else:
        out["layout"] = {k: v for k, v in row.items() if k in LAYOUT_KEYS}
    return out


def _real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def load_trace(source, *, fabric=None) -> list[JobSpec]:
    """Read and validate a trace.

    Args:
        source: a YAML or CSV path, a list of row mappings (or :class:`JobSpec`), or
            ``{"jobs": [...]}``.
        fabric: when given, jobs larger than it are refused and ``layout: optimize`` is
            resolved with :func:`fabricflow.optimize_layout` (a 20 s budget, cached per
            model, GPU and size); without a fabric ``optimize`` is an error.

    Returns:
        the jobs in trace order.

    Raises:
        SpecError: naming the row (``jobs[i] (id '...')``) and the field.
    """
    rows = _read_rows(source)
    if not rows:
        raise SpecError("trace", "holds no jobs")
    jobs: list[JobSpec] = []
    seen: dict[str, int] = {}
    cache: dict = {}
    for index, row in enumerate(rows):
        if isinstance(row, JobSpec):
            job = row
            name = f"jobs[{index}] (id {job.id!r})"
        else:
            if not isinstance(row, Mapping):
                raise SpecError(f"jobs[{index}]", f"expected a mapping, got {row!r}")
            name = _row_name(index, row)
            job = _job(row, name, fabric, cache)
        if fabric is not None and job.gpus > fabric.num_gpus:
            raise SpecError(
                f"{name}.gpus",
                f"{job.gpus} GPUs is larger than the cluster ({fabric.num_gpus} GPUs on "
                f"{fabric.name})",
            )
        if job.id in seen:
            raise SpecError(f"{name}.id", f"duplicate id; jobs[{seen[job.id]}] has it too")
        seen[job.id] = index
        jobs.append(job)
    return jobs


def _job(row: Mapping, name: str, fabric, cache) -> JobSpec:
    unknown = sorted(set(row) - set(JOB_KEYS) - {"layout_hint"})
    if unknown:
        raise SpecError(f"{name}.{unknown[0]}", f"unknown key; allowed: {list(JOB_KEYS)}")
    for required in ("id", "model", "gpu", "gpus", "layout"):
        if required not in row:
            raise SpecError(f"{name}.{required}", "missing")
    job_id = row["id"]
    if not isinstance(job_id, (str, int)) or isinstance(job_id, bool) or str(job_id) == "":
        raise SpecError(f"{name}.id", f"expected a non-empty name, got {job_id!r}")
    model = _model(row["model"], f"{name}.model")
    gpu = _gpu(row["gpu"], f"{name}.gpu")
    gpus = _positive_int(row["gpus"], f"{name}.gpus")
    layout = _layout(row["layout"], gpus, model, f"{name}.layout")
    order = row.get("order", DEFAULT_ORDER)
    if not isinstance(order, str):
        raise SpecError(f"{name}.order", f"expected a rank order like {DEFAULT_ORDER}")
    if layout is None:
        if fabric is None:
            raise SpecError(
                f"{name}.layout", "'optimize' needs the fabric (load_trace(..., fabric=))"
            )
        hint = row.get("layout_hint") or (
            row["layout"] if isinstance(row["layout"], Mapping) else {}
        )
        unknown = sorted(set(hint) - {"optimize", "seq", "seq_len", "global_batch"})
        if unknown:
            raise SpecError(
                f"{name}.layout.{unknown[0]}",
                "with optimize a layout gives only seq and global_batch",
            )
        seq = _positive_int(hint.get("seq", hint.get("seq_len", 4096)), f"{name}.layout.seq")
        batch = _positive_int(hint.get("global_batch", max(gpus, 8)), f"{name}.layout.global_batch")
        try:
            layout, order = _optimized_layout(model, gpu, gpus, fabric, seq, batch, cache)
        except SpecError as error:
            raise SpecError(f"{name}.layout", f"optimize found no layout: {error}") from None
    has_steps = row.get("steps") not in (None, "")
    has_duration = row.get("duration") not in (None, "")
    if has_steps == has_duration:
        raise SpecError(f"{name}.steps", "give exactly one of steps or duration")
    steps = _positive_int(row["steps"], f"{name}.steps") if has_steps else None
    duration = (
        parse_duration(row["duration"], f"{name}.duration", allow_zero=False)
        if has_duration
        else None
    )
    arrival = parse_duration(row.get("arrival", 0), f"{name}.arrival")
    priority = row.get("priority", 0)
    if isinstance(priority, str) and re.fullmatch(r"\s*-?[0-9]+\s*", priority):
        priority = int(priority)
    if isinstance(priority, bool) or not isinstance(priority, numbers.Integral):
        raise SpecError(f"{name}.priority", f"must be an integer, got {priority!r}")
    return JobSpec(
        id=str(job_id),
        model=model,
        gpu=gpu,
        gpus=gpus,
        layout=layout,
        order=order,
        precision=layout.precision,
        seq_len=layout.seq_len,
        global_batch=layout.global_batch,
        priority=int(priority),
        arrival_s=arrival,
        steps=steps,
        duration_s=duration,
    )


# ------------------------------------------------------------------ synthetic traces

# (smallest size, model, layout without dp) for the synthetic mix, smallest first: a job
# takes the largest entry whose size it reaches. Each is memory-feasible on an 80 GB GPU
# (tests/test_cluster_trace.py checks every size against the memory model).
SYNTHETIC_MIX: tuple[tuple[int, str, dict], ...] = (
    (1, "megatron-1.7b", {"tp": 1, "pp": 1, "micro_batch": 2, "seq_len": 2048}),
    (8, "llama3-8b", {"tp": 8, "pp": 1, "micro_batch": 1, "seq_len": 8192}),
    (64, "llama3-70b", {"tp": 8, "pp": 4, "micro_batch": 1, "seq_len": 8192, "recompute": "full"}),
    (
        1024,
        "llama3-405b",
        {"tp": 8, "pp": 16, "micro_batch": 1, "seq_len": 8192, "recompute": "full"},
    ),
)
DEFAULT_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


def synthetic_trace(
    num_jobs: int,
    *,
    seed: int = 0,
    mean_interarrival_s: float = 1800.0,
    sizes: Sequence[int] = DEFAULT_SIZES,
    size_exponent: float = 0.5,
    duration_range: tuple[float, float] = (3600.0, 3 * 86400.0),
    gpu: str = "h100-sxm",
    high_priority_fraction: float = 0.1,
    fabric=None,
) -> list[JobSpec]:
    """A seeded random trace: Poisson arrivals, power-of-two sizes, a model mix.

    Sizes are drawn with probability proportional to ``size ** -size_exponent`` (many
    small jobs, few large ones, as published cluster traces show; 0.5 is our assumption,
    see docs/cluster.md), the model from :data:`SYNTHETIC_MIX` by size, durations
    log-uniform in ``duration_range`` (standalone seconds), and a fraction
    ``high_priority_fraction`` of jobs gets priority 1 (the rest 0).

    Args:
        num_jobs: jobs in the trace (>= 1).
        seed: random seed.
        mean_interarrival_s: mean of the exponential gaps between arrivals (s).
        sizes: allowed GPU counts (powers of two); with ``fabric`` those above its GPU
            count are dropped.
        size_exponent: the size distribution's decay (>= 0).
        duration_range: (min, max) standalone length of a job (s).
        gpu: the GPU preset of every job.
        fabric: optional; caps the sizes at its GPU count.
    """
    num_jobs = _positive_int(num_jobs, "num_jobs")
    if not (_real(mean_interarrival_s) and 0 < mean_interarrival_s < math.inf):
        raise SpecError(
            "mean_interarrival_s", f"must be a finite number > 0 s, got {mean_interarrival_s!r}"
        )
    sizes_array = np.asarray([_positive_int(s, "sizes") for s in sizes], dtype=np.int64)
    if np.any(sizes_array & (sizes_array - 1)):
        raise SpecError("sizes", f"must be powers of two, got {sizes_array.tolist()}")
    if fabric is not None:
        sizes_array = sizes_array[sizes_array <= fabric.num_gpus]
    if sizes_array.size == 0:
        raise SpecError("sizes", "no size fits the fabric")
    low, high = (parse_duration(d, "duration_range", allow_zero=False) for d in duration_range)
    if high < low:
        raise SpecError("duration_range", f"(min, max) with min <= max, got {duration_range!r}")
    if not _real(high_priority_fraction) or not 0.0 <= high_priority_fraction <= 1.0:
        raise SpecError(
            "high_priority_fraction", f"must lie in [0, 1], got {high_priority_fraction!r}"
        )
    # NaN or a negative exponent would reach numpy as NaN probabilities or favour big jobs
    if not _real(size_exponent) or not 0.0 <= size_exponent < math.inf:
        raise SpecError("size_exponent", f"must be a finite number >= 0, got {size_exponent!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise SpecError("seed", f"must be an integer >= 0, got {seed!r}")
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(mean_interarrival_s, num_jobs))
    arrivals -= arrivals[0]  # the first job arrives at 0
    weights = sizes_array.astype(np.float64) ** -float(size_exponent)
    drawn = rng.choice(sizes_array, size=num_jobs, p=weights / weights.sum())
    durations = np.exp(rng.uniform(np.log(low), np.log(high), num_jobs))
    priorities = (rng.random(num_jobs) < high_priority_fraction).astype(int)
    gpu_spec = load_gpu(gpu)
    models: dict[str, ModelSpec] = {}
    jobs = []
    for index in range(num_jobs):
        size = int(drawn[index])
        smallest, name, shape = [entry for entry in SYNTHETIC_MIX if entry[0] <= size][-1]
        model = models.setdefault(name, load_model(name))
        shard = shape["tp"] * shape["pp"]
        dp = size // shard
        layout = Layout(
            dp=dp, global_batch=dp * shape["micro_batch"] * max(1, 4 * shape["pp"]), **shape
        ).validate(model, size)
        jobs.append(
            JobSpec(
                id=f"job-{index:04d}",
                model=model,
                gpu=gpu_spec,
                gpus=size,
                layout=layout,
                precision=layout.precision,
                seq_len=layout.seq_len,
                global_batch=layout.global_batch,
                priority=int(priorities[index]),
                arrival_s=float(arrivals[index]),
                duration_s=float(durations[index]),
            )
        )
    return jobs


def trace_rows(jobs: Iterable[JobSpec]) -> list[dict]:
    """The jobs as trace rows (``{"jobs": trace_rows(...)}`` dumps to a YAML trace)."""
    return [job.to_dict() for job in jobs]
