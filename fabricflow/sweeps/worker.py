"""What a worker does: compute a unit of work of a sweep.

A unit is a few points that share a fabric (or one batch of points that differ only in
array values); :func:`run_unit` computes it and returns one ``(index, metrics, error)``
per point. The backends (:mod:`.backends`) run units in this process, in local worker
processes or on Dask; the caller (the client process) writes the results to the store, so
workers need no access to it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from fabricflow.errors import FabricflowError
from fabricflow.sweeps.overrides import BUILDS
from fabricflow.sweeps.tasks import as_metrics, get_task, resolve


@dataclass
class Unit:
    """Points computed together by one worker.

    Attributes:
        task: the SPEC's task name.
        metrics: metric names to record.
        common: arguments shared by the points (fixed | shared grid values; unresolved).
        points: ``(index, arguments)`` per point (its own grid values).
        batch: True: one ``run_batch(common, [arguments...])`` call; False: ``run`` per point.
    """

    task: str
    metrics: tuple[str, ...]
    common: dict
    points: list[tuple[tuple[int, ...], dict]] = field(default_factory=list)
    batch: bool = False


@dataclass
class UnitResult:
    """What :func:`run_unit` returns: ``results`` = ``(index, metrics|None, error|None)``."""

    results: list
    seconds: float
    worker: str
    fabrics_built: int


def _error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def run_unit(unit: Unit, emit=None) -> UnitResult:
    """Compute ``unit``; an exception of a point is that point's error, never fatal.

    ``emit(results, fabrics_built)``, when given, receives each point's result as soon as
    it is known (the batch's at once): a local worker reports them so, and its parent then
    knows which points a worker that dies had finished.
    """
    start = time.perf_counter()
    first = built = BUILDS["count"]
    results: list = []

    def report(new: list) -> None:
        nonlocal built
        results.extend(new)
        if emit is not None:
            emit(new, BUILDS["count"] - built)
            built = BUILDS["count"]

    try:
        task = get_task(unit.task)
    except Exception as error:  # noqa: BLE001  (recorded, retried next run)
        report([(index, None, _error(error)) for index, _ in unit.points])
        task = None
    if task is not None and unit.batch:
        try:
            common = resolve(unit.common)
            assert task.run_batch is not None
            values = task.run_batch(common, [point for _, point in unit.points])
            if len(values) != len(unit.points):
                raise ValueError(
                    f"run_batch returned {len(values)} results for {len(unit.points)} points"
                )
        except FabricflowError:
            # bad input of one point (capacity_scale -1), one point that does not converge,
            # a batch over the memory budget: not the good points' error; run them one at a
            # time instead, each with its own result or error
            _one_by_one(task, unit, report)
        except Exception as error:  # noqa: BLE001
            report([(index, None, _error(error)) for index, _ in unit.points])
        else:
            report(
                [
                    _checked(index, value, unit.metrics)
                    for (index, _), value in zip(unit.points, values)
                ]
            )
    elif task is not None:
        _one_by_one(task, unit, report)
    return UnitResult(
        results,
        time.perf_counter() - start,
        f"{os.uname().nodename}:{os.getpid()}",
        BUILDS["count"] - first,
    )


def _one_by_one(task, unit: Unit, report) -> None:
    """``task.run`` at each point of ``unit``; a point's exception is its own error."""
    for index, point in unit.points:
        try:
            value = task.run(**resolve({**unit.common, **point}))
        except Exception as error:  # noqa: BLE001
            report([(index, None, _error(error))])
        else:
            report([_checked(index, value, unit.metrics)])


def _checked(index, value, metrics):
    try:
        return (index, as_metrics(value, metrics), None)
    except Exception as error:  # noqa: BLE001
        return (index, None, _error(error))


def failed_unit(unit: Unit, error: BaseException) -> UnitResult:
    """A unit whose worker died (or whose submission failed): every point failed."""
    return UnitResult([(index, None, _error(error)) for index, _ in unit.points], 0.0, "", 0)
