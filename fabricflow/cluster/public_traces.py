"""Readers of the public GPU-cluster traces: Alibaba PAI (2020 jobs and tasks, 2023 pod
list), Microsoft Philly, SenseTime Helios and Shanghai AI Lab Acme.

Each trace gives, per job, a GPU count, a submission time, a start and an end (or a
duration) and a final status; none gives the model or the parallel layout, so a job of
``n`` GPUs takes the model mix of :func:`~.synthetic.mix_shape`, its recorded run time
(end - start) as its standalone length, and the GPU type passed in. Arrivals are the
submission times less the first kept job's. Rows that cannot become a training job are
left out and counted by reason, never silently:

- ``cpu_only``: no GPU asked for;
- ``fractional_gpu``: part of a GPU (PAI's ``plan_gpu`` of 50 = half a GPU, the 2023
  pods' ``gpu_milli`` < 1000); with ``fractional="round-up"`` they are kept instead, each
  instance taking whole GPUs, and counted as ``fractional_rounded_up``;
- ``never_started`` (no start time), ``unfinished`` (no end time: running when the trace
  was cut), ``zero_duration`` (end <= start);
- ``larger_than_cluster``: more GPUs than the simulated cluster offers.

A row whose fields are missing or impossible (a GPU count that is not a number, an end
before the start, a time that does not parse) is a :class:`~fabricflow.errors.SpecError`
naming the row and the column. docs/cluster-traces.md lists every column used.
"""

from __future__ import annotations

import datetime
import math
import os
from collections.abc import Callable, Iterator

from fabricflow.cluster.jobspec import JobSpec, LoadedTrace
from fabricflow.cluster.synthetic import JOB_SPEC_BYTES, MixCache
from fabricflow.cluster.trace_files import (
    check_trace_rows,
    count_csv_rows,
    csv_records,
    read_trace_text,
)
from fabricflow.errors import SpecError
from fabricflow.files import parse_structured
from fabricflow.memory_budget import check_memory
from fabricflow.schema import DECIMAL, decimal

PUBLIC_FORMATS = ("pai-2020", "pai-2023", "philly", "helios", "acme")
# Columns of each format (the released files' headers).
PAI_2020_TASK = (
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
)
PAI_2020_JOB = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
# Columns each reader needs (the others are ignored).
_NEEDED = {
    "pai-2020": ("job_name", "inst_num", "start_time", "end_time", "plan_gpu"),
    "pai-2023": (
        "name",
        "num_gpu",
        "gpu_milli",
        "creation_time",
        "scheduled_time",
        "deletion_time",
    ),
    "helios": ("job_id", "gpu_num", "state", "submit_time", "start_time", "end_time"),
    "acme": ("job_id", "gpu_num", "state", "submit_time", "start_time", "end_time"),
}
SKIP_REASONS = (
    "cpu_only",
    "fractional_gpu",
    "never_started",
    "unfinished",
    "zero_duration",
    "larger_than_cluster",
)
FRACTIONAL = ("skip", "round-up")
PROGRESS_ROWS = 20_000  # rows between two progress calls
_ASSUMED = (
    "model and layout: the model mix by GPU count (1-7 GPUs megatron-1.7b, 8-63 llama3-8b "
    "TP 8, 64-1023 llama3-70b TP 8 x PP 4, 1024+ llama3-405b TP 8 x PP 16)",
    "length: the recorded run time (end - start) is the job's standalone duration",
    "arrival: the submission time less the first kept job's",
)


def detect_format(path: str) -> str:
    """The format of the trace at ``path`` from its columns (or ``fabricflow``, this
    project's YAML/CSV, when it is none of the public ones; also for a missing file, so
    that the reader names it)."""
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, "pai_task_table.csv")):
            return "pai-2020"
        return "fabricflow"
    if not os.path.isfile(path):
        return "fabricflow"
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError:
        return "fabricflow"
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    if text.lstrip().startswith(("[", "{")) and '"attempts"' in text:
        return "philly"
    first = text.splitlines()[0] if text else ""
    columns = {cell.strip() for cell in first.split(",")}
    if {"num_gpu", "gpu_milli", "pod_phase"} <= columns:
        return "pai-2023"
    if {"plan_gpu", "inst_num"} <= columns:
        return "pai-2020"
    if {"gpu_num", "submit_time", "start_time"} <= columns:
        return "helios" if "vc" in columns else "acme"
    if "pai_task_table" in os.path.basename(path) and len(first.split(",")) == len(PAI_2020_TASK):
        return "pai-2020"  # the released tables have no header row
    return "fabricflow"


def read_public_trace(
    path: str,
    format: str,
    *,
    gpu: str = "h100-sxm",
    fractional: str = "skip",
    limit: tuple[int, str] | None = None,
    progress: Callable[[int, int], None] | None = None,
):
    """The jobs of the public trace at ``path`` in ``format`` (:data:`PUBLIC_FORMATS`) as a
    :class:`~.jobspec.LoadedTrace` (see the module docs for the mapping and the counts).

    ``limit``: ``(largest job, text)``; larger jobs are counted as ``larger_than_cluster``.
    """
    if format not in PUBLIC_FORMATS:
        raise SpecError(
            "format", f"unknown public trace format {format!r}; one of {list(PUBLIC_FORMATS)}"
        )
    if fractional not in FRACTIONAL:
        raise SpecError("fractional", f"expected one of {list(FRACTIONAL)}, got {fractional!r}")
    builder = _Builder(format, gpu, fractional, limit, progress)
    readers = {
        "pai-2020": _pai_2020,
        "pai-2023": _pai_2023,
        "philly": _philly,
        "helios": _slurm_like,
        "acme": _slurm_like,
    }
    readers[format](path, builder)
    jobs = builder.jobs()
    if not jobs:
        raise SpecError(
            "trace",
            f"{path}: no row of the {format} trace is a GPU job that can run here "
            f"(counts: {builder.counts})",
        )
    return LoadedTrace(jobs, format=format, counts=builder.counts, assumptions=_ASSUMED)


class _Builder:
    """Collects kept jobs (id, GPUs, submit, duration, priority) and the skip counts."""

    def __init__(self, format: str, gpu: str, fractional: str, limit, progress=None):
        self.format = format
        self.progress = progress
        self.gpu = gpu
        self.round_up = fractional == "round-up"
        self.limit = limit
        self.mix = MixCache()
        self.mix.gpu(gpu)  # an unknown GPU fails before any row is read
        self.rows: list[tuple[str, int, float, float, int]] = []
        self.seen: dict[str, int] = {}
        self.counts: dict = {
            "rows": 0,
            "jobs": 0,
            **dict.fromkeys(SKIP_REASONS, 0),
            "fractional_rounded_up": 0,
            "states": {},
        }

    def gpu_rows(
        self, records, total: int, id_column: str, state_column: str, gpu_column: str
    ) -> Iterator[tuple[dict, str, str, int]]:
        """``(row, job id, row name, GPUs)`` of the rows asking for GPUs; the others are
        counted as ``cpu_only``; every row is counted and its state tallied."""
        for index, row in records:
            self.counts["rows"] += 1
            job_id = row.get(id_column, "")
            name = _row(index, job_id)
            self.state(row.get(state_column))
            gpus = _count(row, gpu_column, name)
            if self.progress is not None and (index + 1) % PROGRESS_ROWS == 0:
                self.progress(index + 1, total)
            if gpus == 0:
                self.skip("cpu_only")
                continue
            yield row, str(job_id), name, gpus

    def state(self, value: str | None) -> None:
        if value:
            states = self.counts["states"]
            states[value] = states.get(value, 0) + 1

    def skip(self, reason: str) -> None:
        self.counts[reason] += 1

    def keep(
        self, name: str, job_id: str, gpus: int, submit: float, duration: float, priority: int = 0
    ) -> None:
        if self.limit is not None and gpus > self.limit[0]:
            self.skip("larger_than_cluster")
            return
        if job_id in self.seen:
            raise SpecError(f"{name}.id", f"duplicate job id; row {self.seen[job_id]} has it too")
        self.seen[job_id] = self.counts["rows"] - 1
        self.rows.append((job_id, gpus, submit, duration, priority))

    def jobs(self) -> list[JobSpec]:
        check_memory(len(self.rows) * JOB_SPEC_BYTES, f"a trace of {len(self.rows):,} jobs")
        self.rows.sort(key=lambda row: row[2])  # by submission
        start = self.rows[0][2] if self.rows else 0.0
        jobs = [
            self.mix.job(
                job_id,
                gpus,
                self.gpu,
                arrival_s=submit - start,
                duration_s=duration,
                priority=priority,
            )
            for job_id, gpus, submit, duration, priority in self.rows
        ]
        self.counts["jobs"] = len(jobs)
        return jobs


# ---------------------------------------------------------------------------- cells
def _number(row: dict, column: str, name: str, *, default: float | None = None) -> float:
    """A finite number >= 0 from the cell ``column`` (missing: ``default`` or an error);
    a text cell must be a plain decimal (:func:`~fabricflow.schema.decimal`: not ``inf``,
    ``nan`` or ``1_000``)."""
    cell = row.get(column)
    if cell in (None, "", "nan", "NaN", "NA", "None"):
        if default is not None:
            return default
        raise SpecError(f"{name}.{column}", "missing")
    if isinstance(cell, str):
        value = decimal(cell, f"{name}.{column}")
    elif isinstance(cell, (int, float)) and not isinstance(cell, bool):
        value = float(cell)
    else:
        raise SpecError(f"{name}.{column}", f"expected a number, got {cell!r:.60}")
    if not math.isfinite(value) or value < 0:
        raise SpecError(f"{name}.{column}", f"expected a finite number >= 0, got {cell!r}")
    return value


def _count(row: dict, column: str, name: str) -> int:
    value = _number(row, column, name, default=0.0)
    if not value.is_integer():
        raise SpecError(f"{name}.{column}", f"expected a whole number, got {row.get(column)!r}")
    return int(value)


_EPOCH = datetime.datetime(1970, 1, 1)
_EPOCH_UTC = _EPOCH.replace(tzinfo=datetime.UTC)


def _time(row: dict, column: str, name: str) -> float | None:
    """Seconds of a wall-clock cell (``2023-03-01 00:18:22+08:00``, ``2017-10-07
    01:12:09``; naive times are taken as they are) or of a number of seconds (finite and
    >= 0: ``inf``, ``-inf`` and ``nan`` are refused); None when empty."""
    cell = row.get(column)
    if cell in (None, "", "None", "nan", "NaT"):
        return None
    field = f"{name}.{column}"
    if isinstance(cell, (int, float)) and not isinstance(cell, bool):
        seconds = float(cell)
    elif isinstance(cell, str) and DECIMAL.fullmatch(cell.strip()):
        seconds = decimal(cell, field)
    elif isinstance(cell, str):
        try:
            moment = datetime.datetime.fromisoformat(cell.strip())
        except ValueError:
            raise SpecError(
                field, f"expected a time like 2023-03-01 00:18:22 or seconds, got {cell!r:.60}"
            ) from None
        if moment.tzinfo is None:
            return (moment - _EPOCH).total_seconds()
        return (moment - _EPOCH_UTC).total_seconds()
    else:
        raise SpecError(field, f"expected a time or a number of seconds, got {cell!r:.60}")
    if not math.isfinite(seconds) or seconds < 0:
        raise SpecError(field, f"a time in seconds must be finite and >= 0, got {cell!r}")
    return seconds


def _span(
    builder: _Builder,
    name: str,
    start: float | None,
    end: float | None,
    start_column: str,
    end_column: str,
) -> float | None:
    """Run time ``end - start`` (s), or None after counting why the row is left out."""
    if start is None:
        builder.skip("never_started")
        return None
    if end is None:
        builder.skip("unfinished")
        return None
    if end < start:
        raise SpecError(
            f"{name}.{end_column}", f"ends before its {start_column} ({end - start:.0f} s)"
        )
    if end == start:
        builder.skip("zero_duration")
        return None
    return end - start


def _csv(
    path: str, format: str, header: tuple[str, ...] | None = None
) -> tuple[int, Iterator[tuple[int, dict]]]:
    """``(rows, records)`` of a public CSV (``header`` for the headerless PAI tables)."""
    text, _ = read_trace_text(path)
    total = count_csv_rows(text)
    check_trace_rows(total, path)
    check_memory(total * JOB_SPEC_BYTES, f"a {format} trace of {total:,} rows ({path})")
    if header is not None and not text.lstrip("\ufeff").startswith(header[0] + ","):
        text = ",".join(header) + "\n" + text
        total += 1
    columns, records = csv_records(text, path)
    missing = [column for column in _NEEDED[format] if column not in columns]
    if missing:
        raise SpecError(
            f"trace.{missing[0]}",
            f"{path}: a {format} trace needs the columns {list(_NEEDED[format])}; "
            f"this one has {columns}",
        )
    return total, records


def _row(index: int, job_id: object) -> str:
    return f"jobs[{index}]" + (f" (id {job_id!r})" if job_id not in (None, "") else "")


# ---------------------------------------------------------------------------- formats
def _slurm_like(path: str, builder: _Builder) -> None:
    """Helios ``cluster_log.csv`` and Acme ``trace_seren.csv`` / ``trace_kalos.csv``:
    one row per job, ``gpu_num``, ``submit_time``, ``start_time``, ``end_time``, ``state``."""
    total, records = _csv(path, builder.format)
    for row, job_id, name, gpus in builder.gpu_rows(records, total, "job_id", "state", "gpu_num"):
        submit = _time(row, "submit_time", name)
        if submit is None:
            raise SpecError(f"{name}.submit_time", "missing")
        start, end = _time(row, "start_time", name), _time(row, "end_time", name)
        span = _span(builder, name, start, end, "start_time", "end_time")
        if span is not None:
            builder.keep(name, job_id, gpus, submit, span)


def _pai_2023(path: str, builder: _Builder) -> None:
    """``openb_pod_list_*.csv``: one pod per row; ``num_gpu`` (0-8), ``gpu_milli`` (the
    share of one GPU, in thousandths, when ``num_gpu`` is 1), ``creation_time``,
    ``scheduled_time``, ``deletion_time`` (s), ``qos`` (BE = best effort: priority 0,
    the others 1)."""
    total, records = _csv(path, "pai-2023")
    for row, job_id, name, gpus in builder.gpu_rows(records, total, "name", "pod_phase", "num_gpu"):
        milli = _number(row, "gpu_milli", name, default=1000.0)
        if milli > 1000:
            raise SpecError(f"{name}.gpu_milli", f"a share of one GPU is 0-1000, got {milli:g}")
        if milli < 1000:
            if not builder.round_up:
                builder.skip("fractional_gpu")
                continue
            builder.counts["fractional_rounded_up"] += 1
        submit = _number(row, "creation_time", name)
        start, end = _time(row, "scheduled_time", name), _time(row, "deletion_time", name)
        span = _span(builder, name, start, end, "scheduled_time", "deletion_time")
        if span is not None:
            priority = 0 if row.get("qos", "BE") == "BE" else 1
            builder.keep(name, job_id, gpus, submit, span, priority)


def _pai_2020(path: str, builder: _Builder) -> None:
    """``pai_task_table.csv`` (one row per task, grouped into jobs by ``job_name``; a
    job's GPUs are the sum over its tasks of ``inst_num x plan_gpu / 100``), with the
    submission times of ``pai_job_table.csv`` when ``path`` is the folder holding both
    (else a job's first task launch stands for its submission)."""
    folder = path if os.path.isdir(path) else None
    tasks_path = os.path.join(path, "pai_task_table.csv") if folder else path
    submits: dict[str, float] = {}
    jobs_path = os.path.join(folder, "pai_job_table.csv") if folder else None
    if jobs_path is not None and os.path.exists(jobs_path):
        _, records = _csv_job_table(jobs_path)
        for index, row in records:
            submit = _time(row, "start_time", _row(index, row.get("job_name")))
            if submit is not None:
                submits[row.get("job_name", "")] = submit
    total, records = _csv(tasks_path, "pai-2020", header=PAI_2020_TASK)
    grouped: dict[str, _PaiJob] = {}
    for index, row in records:
        job = row.get("job_name", "")
        name = _row(index, job)
        if not job:
            raise SpecError(f"{name}.job_name", "missing")
        entry = grouped.get(job)
        if entry is None:
            entry = grouped[job] = _PaiJob(name, row.get("status"))
        instances = _count(row, "inst_num", name)
        percent = _number(row, "plan_gpu", name, default=0.0)
        entry.gpus += instances * math.ceil(percent / 100.0)
        entry.fractional |= percent % 100 != 0
        start, end = _time(row, "start_time", name), _time(row, "end_time", name)
        if start is not None:
            entry.start = min(entry.start, start)
        if end is None or start is None:
            entry.finished = False
        elif end < start:
            raise SpecError(f"{name}.end_time", f"ends before its start_time ({end - start:.0f} s)")
        else:
            entry.end = max(entry.end, end)
        if builder.progress is not None and (index + 1) % PROGRESS_ROWS == 0:
            builder.progress(index + 1, total)
    for job, entry in grouped.items():
        builder.counts["rows"] += 1
        builder.state(entry.status)
        if entry.gpus == 0:
            builder.skip("cpu_only")
            continue
        if entry.fractional:
            if not builder.round_up:
                builder.skip("fractional_gpu")
                continue
            builder.counts["fractional_rounded_up"] += 1
        if not math.isfinite(entry.start):
            builder.skip("never_started")
            continue
        end = entry.end if entry.finished else None
        span = _span(builder, entry.name, entry.start, end, "start_time", "end_time")
        if span is not None:
            builder.keep(entry.name, job, entry.gpus, submits.get(job, entry.start), span)


def _philly_gpus(detail: list, field: str) -> int:
    """GPUs of a Philly attempt: the lengths of its servers' ``gpus`` lists (a server is
    ``{"ip": ..., "gpus": ["gpu0", ...]}``); anything else is refused, naming the server:
    a count given as a number or a string would otherwise be miscounted."""
    total = 0
    for index, server in enumerate(detail):
        if not isinstance(server, dict):
            raise SpecError(f"{field}[{index}]", f"expected a server object, got {server!r:.60}")
        gpus = server.get("gpus", [])
        if not isinstance(gpus, list):
            raise SpecError(
                f"{field}[{index}].gpus",
                f'expected a list of GPU names (e.g. ["gpu0", "gpu1"]), got {gpus!r:.60}',
            )
        total += len(gpus)
    return total


class _PaiJob:
    """The tasks of one PAI 2020 job, folded: whole GPUs (each instance's share rounded
    up), whether any share is fractional, first start, last end, all tasks finished."""

    __slots__ = ("end", "finished", "fractional", "gpus", "name", "start", "status")

    def __init__(self, name: str, status: str | None):
        self.name = name
        self.status = status
        self.gpus = 0
        self.fractional = False
        self.start = math.inf
        self.end = -math.inf
        self.finished = True


def _csv_job_table(path: str) -> tuple[int, Iterator[tuple[int, dict]]]:
    text, _ = read_trace_text(path)
    if not text.lstrip("\ufeff").startswith("job_name,"):
        text = ",".join(PAI_2020_JOB) + "\n" + text
    columns, records = csv_records(text, path)
    return count_csv_rows(text), records


def _philly(path: str, builder: _Builder) -> None:
    """``cluster_job_log`` (JSON, a list of jobs): ``jobid``, ``submitted_time``,
    ``status`` and ``attempts``, each with ``start_time``, ``end_time`` and ``detail``
    (servers and their ``gpus``); a job's GPUs and run time are those of its last attempt
    (the earlier ones ended in failures the simulator draws itself)."""
    text, size = read_trace_text(path)
    check_memory(12 * size, f"parsing the Philly job log {path} ({size / 1e6:,.0f} MB)")
    data = parse_structured(text, what="trace", source=path, syntax="json")
    if not isinstance(data, list):
        raise SpecError("trace", f"{path}: a Philly job log is a JSON list of jobs")
    for index, job in enumerate(data):
        builder.counts["rows"] += 1
        if not isinstance(job, dict):
            raise SpecError(f"jobs[{index}]", f"expected a JSON object, got {job!r:.60}")
        job_id = job.get("jobid")
        name = _row(index, job_id)
        if job_id in (None, ""):
            raise SpecError(f"{name}.jobid", "missing")
        builder.state(job.get("status"))
        attempts = job.get("attempts") or []
        if not isinstance(attempts, list):
            raise SpecError(f"{name}.attempts", "expected a list of attempts")
        if not attempts:
            builder.skip("never_started")
            continue
        last = attempts[-1]
        detail = last.get("detail") if isinstance(last, dict) else None
        if not isinstance(detail, list):
            raise SpecError(
                f"{name}.attempts[{len(attempts) - 1}].detail", "expected a list of servers"
            )
        gpus = _philly_gpus(detail, f"{name}.attempts[{len(attempts) - 1}].detail")
        if gpus == 0:
            builder.skip("cpu_only")
            continue
        submit = _time(job, "submitted_time", name)
        if submit is None:
            raise SpecError(f"{name}.submitted_time", "missing")
        where = f"attempts[{len(attempts) - 1}]"
        span = _span(
            builder,
            name,
            _time(last, "start_time", f"{name}.{where}"),
            _time(last, "end_time", f"{name}.{where}"),
            f"{where}.start_time",
            f"{where}.end_time",
        )
        if span is not None:
            builder.keep(name, str(job_id), gpus, submit, span)
        if builder.progress is not None and (index + 1) % PROGRESS_ROWS == 0:
            builder.progress(index + 1, len(data))
