"""Job traces: :func:`load_trace` (YAML, CSV, public cluster traces) -> :class:`LoadedTrace`.

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
units ``s``, ``m``/``min``, ``h``, ``d`` and ``w`` (a bare number is seconds). CSV is read
row by row (a million rows take seconds and about 150 bytes each); YAML is parsed whole
and limited in size (:mod:`.trace_files`). The public GPU-cluster traces (Alibaba PAI,
Microsoft Philly, SenseTime Helios, Shanghai AI Lab Acme) are read by
:mod:`.public_traces` (``format=``, or recognised by their columns).

Every error names the row (index and id) and the field, e.g.
``jobs[3] (id 'ft-8b').gpus: must be a positive integer, got -8``. A job larger than the
GPUs the cluster offers is refused when its row is read, before any layout search.
"""

from __future__ import annotations

import numbers
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping

from fabricflow.cluster.jobspec import (
    DEFAULT_ORDER,
    JobSpec,
    LoadedTrace,
    parse_duration,
    positive_int,
    row_name,
)
from fabricflow.cluster.public_traces import detect_format, read_public_trace
from fabricflow.cluster.synthetic import (
    DEFAULT_SIZES,
    JOB_SPEC_BYTES,
    SYNTHETIC_MIX,
    synthetic_trace,
)
from fabricflow.cluster.trace_files import (
    check_trace_rows,
    count_csv_rows,
    csv_records,
    read_trace_text,
    yaml_trace_rows,
)
from fabricflow.collective.structure_cache import fabric_fingerprint
from fabricflow.errors import SpecError
from fabricflow.layout_search.optimize import optimize_layout
from fabricflow.memory_budget import check_memory
from fabricflow.workload.gpu import GpuSpec, list_gpus, load_gpu
from fabricflow.workload.layout import Layout
from fabricflow.workload.model_spec import ModelSpec, list_models, load_model

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
_INTEGER = re.compile(r"\s*-?[0-9]+\s*")
FORMATS = ("auto", "fabricflow", "pai-2020", "pai-2023", "philly", "helios", "acme")
PROGRESS_ROWS = 20_000  # rows between two progress calls

__all__ = [
    "DEFAULT_ORDER",
    "DEFAULT_SIZES",
    "FORMATS",
    "JOB_KEYS",
    "LAYOUT_KEYS",
    "SYNTHETIC_MIX",
    "JobSpec",
    "LoadedTrace",
    "load_trace",
    "parse_duration",
    "synthetic_trace",
    "trace_rows",
]


def load_trace(
    source,
    *,
    fabric=None,
    usable_gpus: int | None = None,
    format: str = "auto",
    gpu: str = "h100-sxm",
    fractional: str = "skip",
    progress: Callable[[int, int], None] | None = None,
) -> LoadedTrace:
    """Read and validate a trace.

    Args:
        source: a YAML or CSV path (or a public trace: a file, or the folder of the
            Alibaba PAI 2020 tables), a list of row mappings (or :class:`JobSpec`), or
            ``{"jobs": [...]}``.
        fabric: when given, jobs larger than it are refused and ``layout: optimize`` is
            resolved with :func:`fabricflow.optimize_layout` (a 20 s budget, cached per
            model, GPU and size); without a fabric ``optimize`` is an error.
        usable_gpus: the GPUs jobs may use (the fabric's less hot spares); a larger job
            is refused when its row is read. Default: the fabric's GPU count.
        format: ``auto`` (by the file's columns), ``fabricflow`` (this page's YAML/CSV),
            or a public trace: ``pai-2020``, ``pai-2023``, ``philly``, ``helios``,
            ``acme`` (docs/cluster-traces.md).
        gpu: the GPU preset of the jobs of a public trace (they name none we model).
        fractional: a public trace's rows that ask for part of a GPU: ``skip`` (counted)
            or ``round-up`` (each instance takes whole GPUs; counted).
        progress: optional ``progress(rows_done, rows_total)``, called every
            :data:`PROGRESS_ROWS` rows of a file.

    Returns:
        :class:`LoadedTrace`: the jobs in trace order, with the format and counts.

    Raises:
        SpecError: naming the row (``jobs[i] (id '...')``) and the field.
        MemoryBudgetError: the trace would not fit in memory (checked before reading).
    """
    if format not in FORMATS:
        raise SpecError("format", f"unknown trace format {format!r}; one of {list(FORMATS)}")
    limit = _limit(fabric, usable_gpus)
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        kind = detect_format(path) if format == "auto" else format
        if kind != "fabricflow":
            return read_public_trace(
                path, kind, gpu=gpu, fractional=fractional, limit=limit, progress=progress
            )
        return _read_file(path, fabric, limit, progress)
    if isinstance(source, Mapping):
        rows = _rows_list(source.get("jobs"))
    else:
        rows = _rows_list(source)
    return _validated(enumerate(rows), len(rows), fabric, limit, progress)


def _limit(fabric, usable_gpus) -> tuple[int, str] | None:
    """``(largest job, how to say it)`` or None without a fabric or a usable count."""
    if usable_gpus is not None:
        usable = positive_int(usable_gpus, "usable_gpus")
        where = "" if fabric is None else f" ({fabric.num_gpus} on {fabric.name}, less the spares)"
        return usable, f"larger than the cluster's {usable} usable GPUs{where}"
    if fabric is not None:
        return fabric.num_gpus, (
            f"larger than the cluster ({fabric.num_gpus} GPUs on {fabric.name})"
        )
    return None


def _rows_list(rows) -> list:
    if not isinstance(rows, (list, tuple)):
        raise SpecError("trace", "expected a path, a list of jobs or {'jobs': [...]}")
    return list(rows)


def _read_file(path: str, fabric, limit, progress) -> LoadedTrace:
    text, size = read_trace_text(path)
    if path.lower().endswith(".csv"):
        total = count_csv_rows(text)
        check_trace_rows(total, path)
        check_memory(total * JOB_SPEC_BYTES, f"a trace of {total:,} jobs ({path})")
        _, records = csv_records(text, path)
        return _validated(_unflattened(records), total, fabric, limit, progress)
    rows = yaml_trace_rows(text, size, path)
    return _validated(enumerate(rows), len(rows), fabric, limit, progress)


def _unflattened(records: Iterator[tuple[int, dict]]) -> Iterator[tuple[int, dict]]:
    for index, row in records:
        try:
            yield index, _unflatten(row)
        except SpecError as error:
            raise SpecError(
                f"{row_name(index, row)}.{error.field}", str(error).split(": ", 1)[-1]
            ) from None


def _validated(rows, total: int, fabric, limit, progress) -> LoadedTrace:
    reader = _RowReader(fabric, limit)
    jobs: list[JobSpec] = []
    seen: dict[str, int] = {}
    count = 0
    for index, row in rows:
        if isinstance(row, JobSpec):
            job = row
            name = f"jobs[{index}] (id {job.id!r})"
            reader.check_size(job.gpus, name)
        else:
            if not isinstance(row, Mapping):
                raise SpecError(f"jobs[{index}]", f"expected a mapping, got {row!r}")
            name = row_name(index, row)
            job = reader.job(row, name)
        if job.id in seen:
            raise SpecError(f"{name}.id", f"duplicate id; jobs[{seen[job.id]}] has it too")
        seen[job.id] = index
        jobs.append(job)
        count += 1
        if progress is not None and count % PROGRESS_ROWS == 0:
            progress(count, total)
    if not jobs:
        raise SpecError("trace", "holds no jobs")
    return LoadedTrace(jobs)


class _RowReader:
    """Validates rows into JobSpecs; models, GPUs and layouts are parsed once per distinct
    value and shared (a CSV of a million rows over a dozen shapes parses a dozen)."""

    def __init__(self, fabric, limit):
        self.fabric = fabric
        self.limit = limit
        self.models: dict[object, ModelSpec] = {}
        self.gpus: dict[object, GpuSpec] = {}
        self.layouts: dict[tuple, Layout] = {}

    def check_size(self, gpus: int, name: str) -> None:
        if self.limit is not None and gpus > self.limit[0]:
            raise SpecError(f"{name}.gpus", f"{gpus} GPUs is {self.limit[1]}")

    def model(self, value: object, field: str) -> ModelSpec:
        return _cached(self.models, value, ModelSpec, _model, field)

    def gpu(self, value: object, field: str) -> GpuSpec:
        return _cached(self.gpus, value, GpuSpec, _gpu, field)

    def layout(self, raw: object, gpus: int, model: ModelSpec, field: str) -> Layout | None:
        key: tuple | None = None
        if isinstance(raw, dict):
            try:  # CSV cells are strings: the row's items in header order are the key
                key = (tuple(raw.items()), gpus, id(model))
                hash(key)
            except TypeError:  # a YAML list or mapping value: not cached
                key = None
        if key is not None and key in self.layouts:
            return self.layouts[key]
        layout = _layout(raw, gpus, model, field)
        if key is not None and layout is not None:
            self.layouts[key] = layout
        return layout

    def job(self, row: Mapping, name: str) -> JobSpec:
        unknown = sorted(set(row) - set(JOB_KEYS) - {"layout_hint"})
        if unknown:
            raise SpecError(f"{name}.{unknown[0]}", f"unknown key; allowed: {list(JOB_KEYS)}")
        for required in ("id", "model", "gpu", "gpus", "layout"):
            if required not in row:
                raise SpecError(f"{name}.{required}", "missing")
        job_id = row["id"]
        if not isinstance(job_id, (str, int)) or isinstance(job_id, bool) or str(job_id) == "":
            raise SpecError(f"{name}.id", f"expected a non-empty name, got {job_id!r}")
        gpus = positive_int(row["gpus"], f"{name}.gpus")
        self.check_size(gpus, name)  # before any layout search: a job that can never run
        model = self.model(row["model"], f"{name}.model")
        gpu = self.gpu(row["gpu"], f"{name}.gpu")
        layout = self.layout(row["layout"], gpus, model, f"{name}.layout")
        order = row.get("order", DEFAULT_ORDER)
        if not isinstance(order, str):
            raise SpecError(f"{name}.order", f"expected a rank order like {DEFAULT_ORDER}")
        if layout is None:
            layout, order = self._optimize(row, name, model, gpu, gpus)
        has_steps = row.get("steps") not in (None, "")
        has_duration = row.get("duration") not in (None, "")
        if has_steps == has_duration:
            raise SpecError(f"{name}.steps", "give exactly one of steps or duration")
        steps = positive_int(row["steps"], f"{name}.steps") if has_steps else None
        duration = (
            parse_duration(row["duration"], f"{name}.duration", allow_zero=False)
            if has_duration
            else None
        )
        arrival = parse_duration(row.get("arrival", 0), f"{name}.arrival")
        priority = row.get("priority", 0)
        if isinstance(priority, str) and _INTEGER.fullmatch(priority):
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

    def _optimize(self, row, name, model, gpu, gpus) -> tuple[Layout, str]:
        if self.fabric is None:
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
        seq = positive_int(hint.get("seq", hint.get("seq_len", 4096)), f"{name}.layout.seq")
        batch = positive_int(hint.get("global_batch", max(gpus, 8)), f"{name}.layout.global_batch")
        try:
            return _optimized_layout(model, gpu, gpus, self.fabric, seq, batch)
        except SpecError as error:
            raise SpecError(f"{name}.layout", f"optimize found no layout: {error}") from None


def _cached(cache: dict, value: object, kind: type, parse: Callable, field: str):
    """``parse(value, field)``, remembered in ``cache`` for a name or a ``kind`` object."""
    key = value if isinstance(value, (str, kind)) else None
    if key is not None and key in cache:
        return cache[key]
    parsed = parse(value, field)
    if key is not None:
        cache[key] = parsed
    return parsed


def _model(value: object, field: str) -> ModelSpec:
    if isinstance(value, ModelSpec):
        return value
    if not isinstance(value, str) or not value:
        raise SpecError(field, f"expected a model preset {list_models()} or a config path")
    if value not in list_models() and not os.path.exists(value):
        raise SpecError(
            field,
            f"unknown model {value!r}; presets are {list_models()} (or a config path)",
            value=value,
            allowed=list_models(),
        )
    try:
        return load_model(value)
    except SpecError as error:
        raise SpecError(field, str(error)) from None


def _gpu(value: object, field: str) -> GpuSpec:
    if isinstance(value, GpuSpec):
        return value
    if not isinstance(value, str) or value not in list_gpus():
        raise SpecError(
            field,
            f"unknown GPU {value!r}; presets are {list_gpus()}",
            value=value,
            allowed=list_gpus(),
        )
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
            values[name] = positive_int(values[name], f"{field}.{name}")
    if "zero" in values:
        values["zero"] = positive_int(values["zero"], f"{field}.zero", zero=True)
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


def _optimized_layout(model, gpu, gpus: int, fabric, seq_len: int, global_batch: int):
    """The best layout of ``optimize_layout`` (small budget), cached per model, GPU, size,
    sequence, batch and fabric."""
    key = (model, gpu, gpus, seq_len, global_batch, fabric_fingerprint(fabric))
    if key not in _OPTIMIZED:
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
        _OPTIMIZED[key] = (
            search.best_kwargs["layout"],
            search.best_kwargs.get("order", DEFAULT_ORDER),
        )
    return _OPTIMIZED[key]


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


def trace_rows(jobs: Iterable[JobSpec]) -> list[dict]:
    """The jobs as trace rows (``{"jobs": trace_rows(...)}`` dumps to a YAML trace)."""
    return [job.to_dict() for job in jobs]
