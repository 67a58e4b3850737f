"""``fabricflow.sweeps``: run a SPEC's grid into a resumable zarr store."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fabricflow import schema
from fabricflow.errors import OutputError, SpecError
from fabricflow.memory_budget import check_memory, memory_budget
from fabricflow.sweeps.backends import (
    check_scheduler,
    dask_connect_timeout_s,
    run_dask,
    run_inline,
    run_processes,
)
from fabricflow.sweeps.grid_spec import FABRIC_PREFIX, SweepSpec, make_spec, read_sweep_spec
from fabricflow.sweeps.overrides import check_paths
from fabricflow.sweeps.store import SweepStore, stored_counts
from fabricflow.sweeps.store_layout import FAILED
from fabricflow.sweeps.tasks import SweepTask, check_arguments, get_task
from fabricflow.sweeps.work_units import chunk_size, iter_units
from fabricflow.sweeps.worker import Unit
from fabricflow.units import format_size

DASK_WORKERS = 16  # workers assumed when sizing units for a Dask cluster (unknown up front)
DASK_IN_FLIGHT = 4 * DASK_WORKERS  # units submitted to Dask at a time
# Grid points one run takes unless the caller allows more (max_points): at the fastest a
# point costs tens of us of bookkeeping (a trivial task: 400,000 points a minute, in this
# process) and a step or collective point ms to s, so 10**6 points already run for minutes
# to days. A larger grid is refused before the store is touched, naming its size, unless
# the caller says it means it (the run is resumable and can be interrupted).
MAX_POINTS = 1_000_000
BYTES_PER_POINT = 24  # status, its reordered copy, masks and one metric read while checking
LAZY_FRACTION = 0.25  # a dataset over this share of the memory budget is returned lazily


@dataclass
class SweepRun:
    """Outcome of one run of a sweep (:func:`run_sweep`).

    ``points`` = the grid's size; ``reused`` were done before this run; ``computed`` and
    ``failed`` were evaluated by this run (a failed point is retried by the next run);
    ``batches`` = ``run_batch`` calls; ``units`` = units of work sent to workers.
    """

    dataset: Any  # xarray.Dataset (imported lazily)
    store: str
    points: int
    reused: int
    computed: int = 0
    failed: int = 0
    batches: int = 0
    units: int = 0
    fabrics_built: int = 0
    workers: int = 0
    backend: str = "inline"
    seconds: float = 0.0
    errors: dict = field(default_factory=dict)
    missing_metrics: int = 0
    repaired: list = field(default_factory=list)
    worker_restarts: int = 0

    def summary(self) -> dict:
        """JSON-able counts (what ``fabricflow sweep --json`` prints)."""
        return {
            "points": self.points,
            "computed": self.computed,
            "reused": self.reused,
            "failed": self.failed,
            "pending": self.points - self.reused - self.computed - self.failed,
            "batches": self.batches,
            "units": self.units,
            "fabrics_built": self.fabrics_built,
            "backend": self.backend,
            "workers": self.workers,
            "seconds": self.seconds,
            "store": self.store,
            "errors": self.errors,
            "missing_metrics": self.missing_metrics,
            "repaired": self.repaired,
            "worker_restarts": self.worker_restarts,
        }


def sweep(
    task,
    grid,
    *,
    fixed=None,
    store,
    workers: int | None = None,
    scheduler: str | None = None,
    overwrite: bool = False,
    repair: bool = False,
    metrics=None,
    progress: bool | None = None,
    max_points: int = MAX_POINTS,
):
    """Evaluate ``task`` at every point of ``grid`` into the zarr ``store``; return it.

    Args:
        task: ``step``, ``collective``, ``optimize``, ``maxmin``, ``cc``, ``module:function``
            or a top-level function (see :mod:`fabricflow.sweeps.tasks`).
        grid: key -> list of values, one dimension each (in this order). A key is a task
            argument or ``fabric.<dotted path>`` into the fabric spec of ``fabric``
            (list items by number: ``fabric.topology.tiers.1.oversubscription``).
        fixed: arguments shared by every point (``fabric`` = a preset name or YAML path).
        store: folder of the zarr store. A store of the same SPEC is resumed: only
            points not done are computed; one of another SPEC is refused (SpecError
            naming what differs) unless ``overwrite``.
        workers: local processes (default: ``min(points, os.cpu_count())``; 0 runs in
            this process, any other count in that many worker processes, even for one
            point, so that a point that ends its process is retried as in a full run).
        scheduler: ``tcp://HOST:PORT`` of a Dask scheduler: run there instead.
        overwrite: replace a store of another SPEC (or start this one again).
        repair: rebuild the damaged parts of a store (metadata written again from the
            SPEC, undecodable chunks removed) and compute their points again, keeping
            every intact point; without it a damaged store is refused, naming the damage.
        metrics: metric names to record (default: the task's).
        progress: a tqdm bar with ETA on stderr (default: when stderr is a terminal).
        max_points: the largest grid this run takes (default :data:`MAX_POINTS`, 10**6);
            a larger one is refused before the store is touched. Raise it to run a larger
            grid on purpose.

    Returns:
        :class:`xarray.Dataset`: one dimension per grid key (coordinates = the values),
        one float variable per metric (NaN where a point failed or is pending),
        ``status`` (0 pending, 1 done, 2 failed), ``error`` (text); attributes: the SPEC
        (canonical JSON), its SHA-256, the fabricflow version, the creation time.
        ``attrs["last_run"]`` holds this run's counts as JSON. A store too large for
        memory is returned read on demand (Dask arrays).

    Raises:
        KeyboardInterrupt: Ctrl-C; every point computed so far is in the store (a note
            says how many) and a rerun computes the others.
        OutputError: the store is damaged (named, with the remedies), cannot be written,
            or the disk filled up (the points stored so far stay; the message counts them).

    Example::

        # leaf switches of the k=16 fat-tree with 8 (1:1) or 2 (4:1) uplinks
        up = "fabric.topology.tiers.0.up_ports"
        ds = ff.sweep("step", {up: [8, 2], "pp": [1, 2]},
                      fixed={"fabric": "fat-tree-k16", "model": "llama3-8b", "gpu": "h100-sxm",
                             "gpus": 64, "tp": 8, "micro_batch": 1, "global_batch": 64,
                             "seq_len": 8192}, store="out.zarr")
        ds.step_time_s.sel({up: 2, "pp": 2})
    """
    spec = make_spec(task, grid, fixed=fixed, metrics=metrics)
    run = run_sweep(
        spec,
        store,
        workers=workers,
        scheduler=scheduler,
        overwrite=overwrite,
        repair=repair,
        progress=progress,
        max_points=max_points,
    )
    dataset = run.dataset
    dataset.attrs["last_run"] = json.dumps(run.summary())
    return dataset


def prepare(spec: SweepSpec) -> tuple[SweepTask, tuple[str, ...]]:
    """The task of ``spec`` and the metrics to record, after checking every argument and
    every ``fabric.*`` path (SpecError before any point runs)."""
    task = get_task(spec.task)
    check_arguments(task, [*spec.fixed, *spec.dims])
    if spec.metrics is None:
        if not task.metrics:
            raise SpecError(
                "metrics",
                f"task {spec.task!r} declares no metrics: list them in the SPEC's metrics",
            )
        metrics = task.metrics
    else:
        metrics = spec.metrics
        if task.metrics and task.name in ("step", "collective", "optimize", "maxmin", "cc"):
            unknown = sorted(set(metrics) - set(task.metrics))
            if unknown:
                raise SpecError(
                    "metrics",
                    f"task {task.name!r} has no metric(s) {unknown}; it has {list(task.metrics)}",
                )
    fabric_keys = {key: list(values) for key, values in spec.grid if key.startswith(FABRIC_PREFIX)}
    fabric_keys.update({k: [v] for k, v in spec.fixed.items() if k.startswith(FABRIC_PREFIX)})
    if fabric_keys:
        bases = dict(spec.grid).get("fabric", (spec.fixed.get("fabric"),))
        check_paths(list(bases), fabric_keys)
    return task, tuple(metrics)


def run_sweep(
    spec: SweepSpec | str | Path | dict,
    store,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    overwrite: bool = False,
    repair: bool = False,
    progress: bool | None = None,
    max_points: int = MAX_POINTS,
) -> SweepRun:
    """Run (or resume) ``spec`` into ``store``; the counts and the dataset (see :func:`sweep`)."""
    start = time.perf_counter()
    if not isinstance(spec, SweepSpec):
        spec = read_sweep_spec(spec)
    _check_options(workers, scheduler, store, overwrite, repair)
    limit = schema.integer(max_points, "max_points", minimum=1)
    schema.check_size(
        spec.size,
        limit,
        "grid",
        "the grid",
        "points",
        "a run of that many takes hours at the least; split the grid, or allow it with "
        f"max_points={spec.size} (--max-points {spec.size})",
    )
    task, metrics = prepare(spec)
    check_size(spec, metrics, Path(store))
    if scheduler is not None:  # an address that does not answer fails before the store
        check_scheduler(scheduler, dask_connect_timeout_s())
    opened = SweepStore.open(store, spec, metrics, overwrite=overwrite, repair=repair)
    try:
        run = _run(spec, task, metrics, opened, workers, scheduler, progress)
        run.dataset = opened.load(lazy=_too_large(spec, metrics))
    finally:
        opened.close()
    run.seconds = time.perf_counter() - start
    return run


def _check_options(workers, scheduler, store, overwrite, repair) -> None:
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, int) or workers < 0
    ):
        raise SpecError("workers", f"must be an integer >= 0, got {workers!r}")
    if scheduler is not None and workers is not None:
        raise SpecError("workers", "give workers (local processes) or scheduler (Dask), not both")
    if scheduler is not None and (not isinstance(scheduler, str) or "://" not in scheduler):
        raise SpecError(
            "scheduler", f"expected an address such as tcp://HOST:8786, got {scheduler!r}"
        )
    if isinstance(store, bytes) or not isinstance(store, (str, os.PathLike)) or not str(store):
        raise SpecError("store", f"expected a folder path, got {store!r}")
    for name, value in (("overwrite", overwrite), ("repair", repair)):
        if not isinstance(value, bool):  # "no" is truthy: it would replace the store
            raise SpecError(name, f"expected True or False, got {value!r}")
    if overwrite and repair:
        raise SpecError("repair", "give repair (keep the intact points) or overwrite, not both")


def check_size(spec: SweepSpec, metrics, store: Path) -> None:
    """Refuse, before the store is touched, a grid whose run would not fit: the memory of
    its bookkeeping (a few bytes per point), or the disk its store needs at most.

    Raises:
        MemoryBudgetError: the bookkeeping needs more than the memory budget.
        OutputError: the store may need more than the free disk space.
    """
    points = spec.size
    check_memory(
        points * BYTES_PER_POINT,
        f"a sweep of {points:,} grid points",
        hint="split the grid into several sweeps (several stores)",
    )
    need = points * (8 * len(metrics) + 2)  # float64 per metric, the status, an empty error
    free = disk_free_bytes(store)
    if free is not None and need > free and not (store / "zarr.json").exists():
        raise OutputError(
            f"store {str(store)!r}: a grid of {points:,} points with {len(metrics)} metrics "
            f"needs up to {format_size(need)} on disk, and {format_size(free)} are free "
            "there; free space, write elsewhere, or split the grid"
        )


def _too_large(spec: SweepSpec, metrics) -> bool:
    """Whether the whole dataset would take over :data:`LAZY_FRACTION` of the budget."""
    limit, _ = memory_budget()
    return spec.size * (8 * len(metrics) + 64) > LAZY_FRACTION * limit


def _run(spec, task, metrics, opened: SweepStore, workers, scheduler, progress) -> SweepRun:
    """Compute the store's pending points; write them as they come (see the store)."""
    status = opened.status()
    counts = opened.counts()
    pending = counts["pending"] + counts["failed"]
    run = SweepRun(None, str(opened.path), spec.size, counts["done"])
    run.missing_metrics, run.repaired = opened.missing, list(opened.repaired)
    if scheduler is not None:
        count = 0
        chunk = chunk_size(pending, DASK_WORKERS)
    else:
        count = min(pending, os.cpu_count() or 1) if workers is None else workers
        chunk = chunk_size(pending, count)
    units = _counted(iter_units(spec, task, metrics, status, chunk), run)
    stats: dict = {}
    if scheduler is not None:
        run.backend, stream = "dask", run_dask(units, scheduler, DASK_IN_FLIGHT)
    elif count == 0 or pending == 0:
        # only asked for (workers=0): a point that kills its process would take the run's
        # own process with it (a rerun of one failed point exited 9 with no output)
        run.backend, stream = "inline", run_inline(units)
        count = 0
    else:
        count = min(count, -(-pending // chunk))  # no more workers than units
        run.backend, stream = "processes", run_processes(units, count, stats)
    run.workers = count
    bar = _bar(pending, progress)
    seen = np.zeros(spec.shape, bool)  # points this run has a result for (counted once)
    try:
        for result in stream:
            for index, values, error in result.results:
                if seen[index]:
                    continue
                seen[index] = True
                opened.record(index, values, error)
                if error is None:
                    run.computed += 1
                else:
                    run.failed += 1
                    if len(run.errors) < 10:
                        run.errors[json.dumps(spec.point(index))] = error
            run.fabrics_built += result.fabrics_built
            if opened.due():
                opened.flush()
            if bar is not None and result.results:
                bar.update(len(result.results))
                if run.failed:
                    bar.set_postfix(failed=run.failed, refresh=False)
        opened.flush()
    except KeyboardInterrupt as interrupt:
        _keep(opened)  # the points computed so far are worth a write before leaving
        stored = opened.counts()
        interrupt.add_note(
            f"sweep interrupted: {stored['done']:,} of {spec.size:,} points are stored in "
            f"{str(opened.path)!r}; the same call computes the other {stored['pending']:,}"
        )
        raise
    except OutputError as error:  # the disk filled up, or the store went read-only
        # read back: a status write cut off by the full disk may have stored some chunks
        # (their points are whole: metrics go first), which the in-memory status lacks
        try:
            stored = stored_counts(opened.path)
        except OutputError:
            stored = opened.counts()
        raise OutputError(
            f"{error}; the run stopped: {stored['done']:,} of {spec.size:,} points are stored "
            f"(whole; {run.computed:,} computed by this run), {stored['pending']:,} are not: "
            "free space and rerun to compute them"
        ) from None
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()  # stops the workers when we are leaving early (an interrupt)
        if bar is not None:
            bar.close()
        run.worker_restarts = stats.get("restarts", 0)
    return run


def disk_free_bytes(path: Path) -> int | None:
    """Bytes free for unprivileged writes where ``path`` (or its nearest existing parent)
    lives; None when the system does not say."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        info = os.statvfs(path)
    except OSError:
        return None
    return info.f_bavail * info.f_frsize


def _keep(opened: SweepStore) -> None:
    """Write what is buffered, unless that fails too (a full disk): the store stays whole."""
    try:
        opened.flush()
    except OutputError:
        pass


def _counted(units: Iterator[Unit], run: SweepRun) -> Iterator[Unit]:
    """``units``, counting them (and the batches) in ``run`` as the backend takes them."""
    for unit in units:
        run.units += 1
        run.batches += unit.batch
        yield unit


def _bar(total: int, progress: bool | None):
    """A tqdm bar on stderr (rate and ETA), or None when quiet."""
    if progress is None:
        progress = sys.stderr.isatty()
    if not progress or total == 0:
        return None
    from tqdm import tqdm  # the terminal bar: a notebook's stderr is no TTY anyway

    return tqdm(total=total, unit="pt", desc="sweep", file=sys.stderr, dynamic_ncols=True)


def failed_points(dataset) -> list[dict]:
    """``[{grid key: value, ..., "error": text}]`` of the failed points of a sweep dataset."""
    out = []
    for index in np.argwhere(dataset["status"].values == FAILED):
        point = {
            dim: dataset[dim].values[i].item() for dim, i in zip(dataset["status"].dims, index)
        }
        point["error"] = str(dataset["error"].values[tuple(index)])
        out.append(point)
    return out
