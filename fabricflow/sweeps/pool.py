"""Local worker processes of a sweep, each holding one unit at a time over its own pipe.

Unlike ``concurrent.futures.ProcessPoolExecutor`` (where one dead worker breaks the pool
and fails every pending unit), the parent knows which unit each worker holds and which of
its points it has already reported: a worker that dies (``os._exit`` in a task, out of
memory, ``kill -9``) is replaced by a fresh one, the points it had not reported are given
out again, and the point it was computing is retried once, alone; if it kills its worker
again it fails with that reason. The other workers are untouched.

Workers ignore SIGINT (Ctrl-C reaches the whole process group; the parent stops them) and
die quietly on SIGTERM; their stdout is their stderr, so a task that prints cannot break
the command's one JSON object; and they leave when the parent is gone. Pipes are the only
resources shared with them: no semaphore is left behind when the parent is interrupted.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from fabricflow.atomic import holding_interrupts
from fabricflow.sweeps.worker import Unit, UnitResult, run_unit

ATTEMPTS = 2  # a point that kills its worker this many times fails
TICK_S = 0.25  # the parent's wait: it returns this often to let the caller write results
STOP_S = 5.0  # how long a stopped worker has to leave before it is killed


def _worker_main(connection, parent: int) -> None:
    """A worker: compute the units the parent sends, reporting each point as it is done."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    connection.send(("ready",))
    while True:
        try:
            unit = connection.recv()
        except (EOFError, OSError):
            return
        if unit is None:
            return

        def emit(results, built) -> None:
            connection.send(("points", results, built))

        result = run_unit(unit, emit=emit)
        connection.send(("done", result.seconds, result.worker))


def _exit_with_parent(parent: int, interval_s: float = 1.0) -> None:
    # A parent killed outright (kill -9, out of memory) cannot stop its workers, and a
    # worker blocked on its pipe would wait forever: leave when the parent is gone.
    while os.getppid() == parent:
        time.sleep(interval_s)
    os._exit(1)


@dataclass
class _Worker:
    process: Any  # multiprocessing.Process (of the spawn context)
    connection: Any  # multiprocessing.connection.Connection
    unit: Unit | None = None
    reported: set = field(default_factory=set)
    ready: bool = False  # it has started (imports done): a death is then its unit's
    closed: bool = False  # its pipe was closed


def _exit_reason(process) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class LocalPool:
    """``workers`` processes (``spawn``: a forked JAX runtime is unsafe) that inherit
    ``sys.path`` and the environment; iterate :meth:`results` over the units."""

    def __init__(self, workers: int):
        import multiprocessing

        self._context = multiprocessing.get_context("spawn")
        self._size = workers
        self._workers: list[_Worker] = []
        self._retry: deque[Unit] = deque()
        self._attempts: dict[tuple[int, ...], int] = {}
        self._deaths = 0  # workers in a row that died before they were ready
        self.restarts = 0

    def _start(self) -> _Worker:
        parent_end, child_end = self._context.Pipe()
        process = self._context.Process(
            target=_worker_main, args=(child_end, os.getpid()), daemon=True
        )
        with holding_interrupts():  # a child cut off mid-start dies with a traceback
            process.start()
        child_end.close()
        worker = _Worker(process, parent_end)
        self._workers.append(worker)
        return worker

    def results(self, units: Iterable[Unit]) -> Iterator[UnitResult]:
        """Point results as workers report them (a ``UnitResult`` per message), and an
        empty one every :data:`TICK_S` while waiting, so the caller can write on time.

        Raises:
            RuntimeError: fresh workers keep dying before they report anything (a broken
                environment), naming how they died.
        """
        from multiprocessing.connection import wait

        source = iter(units)
        for _ in range(self._size):
            self._start()
        while True:
            for worker in list(self._workers):
                if worker.unit is None:
                    unit = self._retry.popleft() if self._retry else next(source, None)
                    if unit is None:
                        break
                    yield from self._give(worker, unit)
            busy = [w for w in self._workers if w.unit is not None]
            if not busy:
                if self._retry:
                    continue
                return
            waiting = {w.connection: w for w in busy} | {w.process.sentinel: w for w in busy}
            ready = wait(list(waiting), timeout=TICK_S)
            if not ready:
                yield UnitResult([], 0.0, "", 0)
            for handle in ready:
                worker = waiting[handle]
                if worker not in self._workers:
                    continue  # its pipe and its sentinel were both ready: handled once
                if handle is worker.connection:
                    yield from self._receive(worker)
                elif worker.unit is not None and not worker.process.is_alive():
                    yield from self._died(worker)

    def _give(self, worker: _Worker, unit: Unit) -> Iterator[UnitResult]:
        worker.unit, worker.reported = unit, set()
        try:
            worker.connection.send(unit)
        except OSError:  # it died while idle
            worker.process.join(STOP_S)
            yield from self._died(worker)

    def _drain(self, worker: _Worker) -> Iterator[UnitResult]:
        """Read every message the worker has sent (its pipe closed: ``worker.closed``)."""
        try:
            while worker.connection.poll():
                message = worker.connection.recv()
                if message[0] == "ready":
                    worker.ready = True
                elif message[0] == "points":
                    _, results, built = message
                    worker.reported.update(index for index, _, _ in results)
                    yield UnitResult(results, 0.0, "", built)
                else:  # "done"
                    worker.unit = None
        except (EOFError, OSError):
            worker.closed = True

    def _receive(self, worker: _Worker) -> Iterator[UnitResult]:
        yield from self._drain(worker)
        if worker.closed and worker.unit is not None:
            worker.process.join(STOP_S)
            yield from self._died(worker)

    def _died(self, worker: _Worker) -> Iterator[UnitResult]:
        """Give the dead worker's unreported points out again; replace the worker."""
        if not worker.closed:
            yield from self._drain(worker)  # what it reported before it died counts
        worker.connection.close()
        self._workers.remove(worker)
        self.restarts += 1
        reason = _exit_reason(worker.process)
        self._deaths = 0 if worker.ready else self._deaths + 1
        if self._deaths > 3 * self._size:
            raise RuntimeError(
                f"sweep worker processes keep dying as they start (the last: {reason}); "
                "run with --workers 0 to see the error in this process"
            )
        unit = worker.unit
        fresh = self._start()
        if unit is None:  # it finished its unit, then died: nothing to give out again
            return
        left = [(index, point) for index, point in unit.points if index not in worker.reported]
        if not left:
            return
        # the point being computed when it died is the suspect (all of them in a batch)
        suspects = left if unit.batch else left[:1]
        rest = [] if unit.batch else left[1:]
        if rest:
            self._retry.appendleft(Unit(unit.task, unit.metrics, unit.common, rest, unit.batch))
        keys = [index for index, _ in suspects]
        attempts = max(self._attempts.get(key, 0) for key in keys) + 1
        for key in keys:
            self._attempts[key] = attempts
        if attempts >= ATTEMPTS:
            error = (
                f"WorkerDied: the worker process computing this point died ({reason}), "
                f"{attempts} times; it is not retried again in this run"
            )
            yield UnitResult([(key, None, error) for key in keys], 0.0, "", 0)
        else:  # alone, on the fresh worker
            suspect = Unit(unit.task, unit.metrics, unit.common, suspects, unit.batch)
            yield from self._give(fresh, suspect)

    def close(self) -> None:
        """Stop every worker now (SIGTERM, then SIGKILL after :data:`STOP_S`)."""
        for worker in self._workers:
            if worker.unit is None:
                try:
                    worker.connection.send(None)
                except OSError:
                    pass
        for worker in self._workers:
            if worker.unit is not None and worker.process.is_alive():
                worker.process.terminate()
        deadline = time.monotonic() + STOP_S
        for worker in self._workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(1)
            worker.connection.close()
        self._workers.clear()
