"""``fabricflow.sweep``: run a SPEC's grid into a resumable zarr store."""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import SpecError
from .backends import Unit, run_dask, run_inline, run_processes
from .overrides import check_paths
from .spec import FABRIC_PREFIX, SweepSpec, make_spec, read_sweep_spec
from .store import DONE, FAILED, SweepStore
from .tasks import SweepTask, check_arguments, get_task

MAX_BATCH = 4096  # points per run_batch call: bounds the vmapped batch's memory
MAX_CHUNK = 8  # points per unit of a task without batching (lost at most per worker on kill)
DASK_WORKERS = 16  # workers assumed when sizing units for a Dask cluster (unknown up front)


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
    metrics=None,
    progress: bool | None = None,
):
    """Evaluate ``task`` at every point of ``grid`` into the zarr ``store``; return it.

    Args:
        task: ``step``, ``collective``, ``optimize``, ``maxmin``, ``cc``, ``module:function``
            or a top-level function (see :mod:`fabricflow.study.sweep.tasks`).
        grid: key -> list of values, one dimension each (in this order). A key is a task
            argument or ``fabric.<dotted path>`` into the fabric spec of ``fabric``
            (list items by number: ``fabric.topology.tiers.1.oversubscription``).
        fixed: arguments shared by every point (``fabric`` = a preset name or YAML path).
        store: folder of the zarr store. A store of the same SPEC is resumed: only
            points not done are computed; one of another SPEC is refused (SpecError
            naming what differs) unless ``overwrite``.
        workers: local processes (default: ``min(points, os.cpu_count())``; 0 or 1 runs in
            this process).
        scheduler: ``tcp://HOST:PORT`` of a Dask scheduler: run there instead.
        overwrite: replace a store of another SPEC (or start this one again).
        metrics: metric names to record (default: the task's).
        progress: a tqdm bar with ETA on stderr (default: when stderr is a terminal).

    Returns:
        :class:`xarray.Dataset`: one dimension per grid key (coordinates = the values),
        one float variable per metric (NaN where a point failed or is pending),
        ``status`` (0 pending, 1 done, 2 failed), ``error`` (text); attributes: the SPEC
        (canonical JSON), its SHA-256, the fabricflow version, the creation time.
        ``attrs["last_run"]`` holds this run's counts as JSON.

    Example::

        # leaf switches of the k=16 fat-tree with 8 (1:1) or 2 (4:1) uplinks
        up = "fabric.topology.tiers.0.up_ports"
        ds = ff.sweep("step", {up: [8, 2], "pp": [1, 2]},
                      fixed={"fabric": "fat-tree-k16", "model": "llama3-8b", "gpu": "h100-sxm",
                             "gpus": 64, "tp": 8, "micro_batch": 1, "global_batch": 64,
                             "seq": 8192}, store="out.zarr")
        ds.step_time_s.sel({up: 2, "pp": 2})
    """
    spec = make_spec(task, grid, fixed=fixed, metrics=metrics)
    run = run_sweep(
        spec, store, workers=workers, scheduler=scheduler, overwrite=overwrite, progress=progress
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


def chunk_size(points: int, workers: int) -> int:
    """Points per unit for ``workers`` processes: up to :data:`MAX_CHUNK` (fewer when there
    are under 4 units per worker); 1 in this process, where the fabric cache is shared
    anyway and a kill then loses no finished point."""
    if workers <= 1:
        return 1
    return max(1, min(MAX_CHUNK, math.ceil(points / (4 * workers))))


def plan_units(
    spec: SweepSpec, task: SweepTask, metrics, pending: list[tuple[int, ...]], chunk: int
) -> list[Unit]:
    """Units of work for the ``pending`` points (grid indices).

    Points are ordered by their fabric (``fabric`` and ``fabric.*`` values) so that a
    worker's fabric cache serves them. With batching, points that differ only in
    ``task.batch_keys`` form one unit (at most :data:`MAX_BATCH` points); otherwise
    consecutive points of one fabric go in units of ``chunk`` points (results are written
    when a unit is done: a killed run loses at most the units in flight).
    """
    dims = spec.dims
    fabric_dims = [
        i for i, key in enumerate(dims) if key == "fabric" or key.startswith(FABRIC_PREFIX)
    ]
    batch_dims = [i for i, key in enumerate(dims) if key in task.batch_keys]
    batching = task.run_batch is not None and bool(batch_dims)
    shared_dims = [i for i in range(len(dims)) if not batching or i not in batch_dims]

    def fabric_key(index):
        return tuple(index[i] for i in fabric_dims)

    def group_key(index):
        return tuple(index[i] for i in shared_dims)

    ordered = sorted(pending, key=lambda index: (fabric_key(index), index))
    units: list[Unit] = []
    if batching:
        groups: dict = {}
        for index in ordered:
            groups.setdefault(group_key(index), []).append(index)
        for members in groups.values():
            first = spec.point(members[0])
            common = {**spec.fixed, **{dims[i]: first[dims[i]] for i in shared_dims}}
            for start in range(0, len(members), MAX_BATCH):
                points = [
                    (index, {dims[i]: spec.point(index)[dims[i]] for i in batch_dims})
                    for index in members[start : start + MAX_BATCH]
                ]
                units.append(Unit(spec.task, metrics, common, points, batch=True))
        return units
    for _, members in itertools.groupby(ordered, key=fabric_key):
        members = list(members)
        for start in range(0, len(members), chunk):
            units.append(
                Unit(
                    spec.task,
                    metrics,
                    dict(spec.fixed),
                    [(i, spec.point(i)) for i in members[start : start + chunk]],
                )
            )
    return units


def run_sweep(
    spec: SweepSpec | str | Path | dict,
    store,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    overwrite: bool = False,
    progress: bool | None = None,
) -> SweepRun:
    """Run (or resume) ``spec`` into ``store``; the counts and the dataset (see :func:`sweep`)."""
    start = time.perf_counter()
    if not isinstance(spec, SweepSpec):
        spec = read_sweep_spec(spec)
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
    if not isinstance(overwrite, bool):  # "no" is truthy: it would replace the store
        raise SpecError("overwrite", f"expected True or False, got {overwrite!r}")
    task, metrics = prepare(spec)
    opened = SweepStore.open(store, spec, metrics, overwrite=overwrite)
    status = opened.status()
    pending = [tuple(int(i) for i in index) for index in np.argwhere(status != DONE)]
    run = SweepRun(None, str(store), spec.size, int((status == DONE).sum()))
    if scheduler is not None:
        count = 0
        units = plan_units(spec, task, metrics, pending, chunk_size(len(pending), DASK_WORKERS))
    else:
        count = min(len(pending), os.cpu_count() or 1) if workers is None else workers
        units = plan_units(spec, task, metrics, pending, chunk_size(len(pending), count))
    run.units = len(units)
    run.batches = sum(unit.batch for unit in units)
    if scheduler is not None:
        run.backend, stream = "dask", run_dask(units, scheduler)
    elif count <= 1 or len(units) <= 1:
        run.backend, stream = "inline", run_inline(units)
        count = min(count, 1)
    else:
        count = min(count, len(units))
        run.backend, stream = "processes", run_processes(units, count)
    run.workers = count
    bar = _bar(len(pending), progress)
    try:
        for _unit, result in stream:
            for index, values, error in result.results:
                opened.write(index, values, error)
                if error is None:
                    run.computed += 1
                else:
                    run.failed += 1
                    if len(run.errors) < 10:
                        run.errors[json.dumps(spec.point(index))] = error
            run.fabrics_built += result.fabrics_built
            if bar is not None:
                bar.update(len(result.results))
                if run.failed:
                    bar.set_postfix(failed=run.failed, refresh=False)
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()  # stops the workers when we are leaving early (an interrupt)
        if bar is not None:
            bar.close()
    run.dataset = opened.load()
    run.seconds = time.perf_counter() - start
    return run


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
