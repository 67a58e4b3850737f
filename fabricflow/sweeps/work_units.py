"""Units of work of a sweep, made as the backends take them (never all at once).

A grid of 10^7 points needs the status array (one byte per point) and a slab of indices
at a time, not a list of 10^7 points: :func:`iter_units` walks the pending points in
slabs of :data:`SLAB` and yields each unit when it is full.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from fabricflow.sweeps.grid_spec import FABRIC_PREFIX, SweepSpec
from fabricflow.sweeps.store_layout import DONE
from fabricflow.sweeps.tasks import SweepTask
from fabricflow.sweeps.worker import Unit

MAX_BATCH = 4096  # points per run_batch call: bounds the vmapped batch's memory
MAX_CHUNK = 8  # points per unit of a task without batching (lost at most per worker on kill)
SLAB = 1 << 16  # grid points examined at a time


def chunk_size(points: int, workers: int) -> int:
    """Points per unit for ``workers`` processes: up to :data:`MAX_CHUNK` (fewer when there
    are under 4 units per worker); 1 in this process, where the fabric cache is shared
    anyway and a kill then loses no finished point."""
    if workers <= 1:
        return 1
    return max(1, min(MAX_CHUNK, math.ceil(points / (4 * workers))))


def _runs(status: np.ndarray, leading: list[int], limit: int) -> Iterator[list[tuple[int, ...]]]:
    """Pending points (grid indices), in order of the ``leading`` dimensions' values and
    then of the index, in runs of at most ``limit`` points that share the leading values."""
    ndim = status.ndim
    order = leading + [axis for axis in range(ndim) if axis not in leading]
    moved = np.ascontiguousarray(status.transpose(order)).reshape(-1)
    shape = tuple(status.shape[axis] for axis in order)
    back = np.argsort(order)  # transposed position -> original dimension
    run: list[tuple[int, ...]] = []
    key = None
    for start in range(0, moved.size, SLAB):
        flat = np.flatnonzero(moved[start : start + SLAB] != DONE) + start
        if flat.size == 0:
            continue
        moved_index = np.stack(np.unravel_index(flat, shape), axis=1)
        for row in moved_index.tolist():
            point_key = tuple(row[: len(leading)])
            if run and (point_key != key or len(run) >= limit):
                yield run
                run = []
            key = point_key
            run.append(tuple(row[i] for i in back))
    if run:
        yield run


def iter_units(
    spec: SweepSpec, task: SweepTask, metrics, status: np.ndarray, chunk: int
) -> Iterator[Unit]:
    """Units of work for the points of ``status`` not done, made one at a time.

    Points are ordered by their fabric (``fabric`` and ``fabric.*`` values) so that a
    worker's fabric cache serves them. With batching, points that differ only in
    ``task.batch_keys`` form one unit (at most :data:`MAX_BATCH` points); otherwise
    consecutive points of one fabric go in units of ``chunk`` points.
    """
    dims = spec.dims
    fabric_dims = [
        i for i, key in enumerate(dims) if key == "fabric" or key.startswith(FABRIC_PREFIX)
    ]
    batch_dims = [i for i, key in enumerate(dims) if key in task.batch_keys]
    if task.run_batch is not None and batch_dims:
        shared = [i for i in range(len(dims)) if i not in batch_dims]
        leading = fabric_dims + [i for i in shared if i not in fabric_dims]
        for members in _runs(status, leading, MAX_BATCH):
            first = spec.point(members[0])
            common = {**spec.fixed, **{dims[i]: first[dims[i]] for i in shared}}
            points = []
            for index in members:
                point = spec.point(index)
                points.append((index, {dims[i]: point[dims[i]] for i in batch_dims}))
            yield Unit(spec.task, metrics, common, points, batch=True)
        return
    for members in _runs(status, fabric_dims, chunk):
        yield Unit(spec.task, metrics, dict(spec.fixed), [(i, spec.point(i)) for i in members])
