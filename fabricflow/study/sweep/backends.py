"""Where the units of work of a sweep run: inline, local processes, or Dask distributed.

A unit is a few points that share a fabric (or one batch of points that differ only in
array values); :func:`run_unit` computes it and returns one ``(index, metrics, error)``
per point. Each backend yields finished units as they complete; the caller (the client
process) writes them to the store, so workers need no access to it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from ...errors import SpecError
from .overrides import BUILDS
from .tasks import as_metrics, get_task, resolve


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


def run_unit(unit: Unit) -> UnitResult:
    """Compute ``unit``; an exception of a point is that point's error, never fatal."""
    start = time.perf_counter()
    built = BUILDS["count"]
    results: list = []
    try:
        task = get_task(unit.task)
    except Exception as error:  # noqa: BLE001  (recorded, retried next run)
        results = [(index, None, _error(error)) for index, _ in unit.points]
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
        except SpecError:
            # bad input of one point (capacity_scale -1) must not fail the good points of
            # its batch with that point's message: run them one at a time instead
            results = _one_by_one(task, unit)
        except Exception as error:  # noqa: BLE001
            results = [(index, None, _error(error)) for index, _ in unit.points]
        else:
            for (index, _), value in zip(unit.points, values):
                results.append(_checked(index, value, unit.metrics))
    elif task is not None:
        results = _one_by_one(task, unit)
    return UnitResult(
        results,
        time.perf_counter() - start,
        f"{os.uname().nodename}:{os.getpid()}",
        BUILDS["count"] - built,
    )


def _one_by_one(task, unit: Unit) -> list:
    """``task.run`` at each point of ``unit``; a point's exception is its own error."""
    results: list = []
    for index, point in unit.points:
        try:
            value = task.run(**resolve({**unit.common, **point}))
        except Exception as error:  # noqa: BLE001
            results.append((index, None, _error(error)))
        else:
            results.append(_checked(index, value, unit.metrics))
    return results


def _checked(index, value, metrics):
    try:
        return (index, as_metrics(value, metrics), None)
    except Exception as error:  # noqa: BLE001
        return (index, None, _error(error))


def failed_unit(unit: Unit, error: BaseException) -> UnitResult:
    """A unit whose worker died (or whose submission failed): every point failed."""
    return UnitResult([(index, None, _error(error)) for index, _ in unit.points], 0.0, "", 0)


# ----------------------------------------------------------------------------- backends


def run_inline(units: list[Unit]) -> Iterator[tuple[Unit, UnitResult]]:
    """In this process, in order."""
    for unit in units:
        yield unit, run_unit(unit)


def _worker_init() -> None:
    # Ctrl-C goes to the whole process group: the parent stops the workers itself, so a
    # worker must not die mid-unit printing a traceback of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A parent killed outright (kill -9, out of memory) cannot stop its workers, and a
    # worker blocked on the task queue would wait forever: leave when the parent is gone.
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()


def _exit_with_parent(parent: int, interval_s: float = 1.0) -> None:
    while os.getppid() == parent:
        time.sleep(interval_s)
    os._exit(1)


def run_processes(units: list[Unit], workers: int) -> Iterator[tuple[Unit, UnitResult]]:
    """In ``workers`` local processes, started with ``spawn`` (a forked JAX runtime is
    unsafe); they inherit ``sys.path`` and the environment (JAX cache settings)."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    context = multiprocessing.get_context("spawn")
    executor = ProcessPoolExecutor(workers, mp_context=context, initializer=_worker_init)
    finished = False
    try:
        futures = {executor.submit(run_unit, unit): unit for unit in units}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                unit = futures.pop(future)
                error = future.exception()
                yield unit, (failed_unit(unit, error) if error else future.result())
        finished = True
    finally:
        if not finished:  # interrupted: stop the workers now, not after their units
            processes = list(getattr(executor, "_processes", {}).values())
            executor.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                process.terminate()
            for process in processes:
                process.join(5)
        else:
            executor.shutdown(wait=True)


def run_dask(units: list[Unit], scheduler: str) -> Iterator[tuple[Unit, UnitResult]]:
    """On a Dask distributed cluster (``tcp://HOST:PORT`` of a ``dask scheduler``); the
    workers need fabricflow importable (and the module of a ``module:function`` task)."""
    from distributed import Client

    from ...errors import SpecError

    try:
        client = Client(scheduler, timeout="30s", set_as_default=False)
    except (OSError, TimeoutError, ValueError) as error:
        raise SpecError(
            "scheduler", f"cannot connect to the Dask scheduler {scheduler!r}: {error}"
        ) from None
    try:
        futures = [client.submit(run_unit, unit, pure=False) for unit in units]
        yield from _completed(client, futures, units)
    finally:
        client.close()


def _completed(client, futures, units):
    from distributed import as_completed

    with client.as_current():  # as_completed looks for the current client
        index = {future.key: unit for future, unit in zip(futures, units)}
        for future in as_completed(futures):
            unit = index[future.key]
            if future.status == "finished":
                yield unit, future.result()
                continue
            try:
                error = future.exception()  # a lost or cancelled unit raises here
            except BaseException as lost:  # noqa: BLE001
                if isinstance(lost, KeyboardInterrupt):
                    raise
                error = lost
            yield unit, failed_unit(unit, error or RuntimeError(f"unit {future.status}"))
