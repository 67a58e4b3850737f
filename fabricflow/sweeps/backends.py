"""Where the units of work of a sweep run: inline, local processes, or Dask distributed.

Each backend takes an iterator of units (made as they are needed) and yields results as
they come: one :class:`~.worker.UnitResult` per point or per unit, and an empty one now and
then while it waits, so that the caller writes its buffered results on time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from fabricflow.errors import SpecError
from fabricflow.sweeps.pool import TICK_S, LocalPool
from fabricflow.sweeps.worker import Unit, UnitResult, failed_unit, run_unit

# ----------------------------------------------------------------------------- backends


def run_inline(units: Iterable[Unit]) -> Iterator[UnitResult]:
    """In this process, in order, one result per point as it is done."""
    results: list[UnitResult] = []

    def emit(new: list, built: int) -> None:
        results.append(UnitResult(new, 0.0, "", built))

    for unit in units:
        run_unit(unit, emit=emit)
        yield from results
        results.clear()


def run_processes(
    units: Iterable[Unit], workers: int, stats: dict | None = None
) -> Iterator[UnitResult]:
    """In ``workers`` local processes (:class:`~.pool.LocalPool`): a worker that dies is
    replaced and its points are given out again; they stop when this generator closes.
    ``stats["restarts"]`` counts the workers replaced."""
    pool = LocalPool(workers)
    try:
        yield from pool.results(units)
    finally:
        pool.close()
        if stats is not None:
            stats["restarts"] = pool.restarts


def check_scheduler(address: str, timeout_s: float) -> None:
    """Fail within ``timeout_s`` when ``address`` does not answer as a Dask scheduler.

    A scheduler sends its handshake as soon as it accepts a connection; distributed's own
    connect waits for it without a limit, so an address that accepts and never answers
    would hang the client forever. Only ``tcp://`` addresses are probed (TLS speaks first
    from the client side).

    Raises:
        SpecError: (``scheduler``) naming the address and what did not answer.
    """
    import select
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(address)
    if parts.scheme != "tcp":
        return
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        raise SpecError("scheduler", f"{address!r} has no valid port") from None
    if not host or port is None:
        raise SpecError("scheduler", f"expected tcp://HOST:PORT, got {address!r}")
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as connection:
            readable, _, _ = select.select([connection], [], [], timeout_s)
            if not readable or not connection.recv(1, socket.MSG_PEEK):
                raise SpecError(
                    "scheduler",
                    f"{address!r} accepted the connection but sent no Dask handshake within "
                    f"{timeout_s:g} s: it is not a Dask scheduler, or it is stuck (is the "
                    "port right?)",
                )
    except TimeoutError:
        raise SpecError(
            "scheduler",
            f"cannot connect to the Dask scheduler {address!r}: no answer within {timeout_s:g} s",
        ) from None
    except OSError as error:
        raise SpecError(
            "scheduler", f"cannot connect to the Dask scheduler {address!r}: {error}"
        ) from None


def dask_connect_timeout_s() -> float:
    """Dask's connect timeout (``distributed.comm.timeouts.connect``, 30 s by default; the
    environment variable ``DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT`` sets it)."""
    import dask  # with distributed: only for a run on a Dask cluster
    import distributed  # noqa: F401  (its defaults are dask's configuration)
    from dask.utils import parse_timedelta

    return float(parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), "s"))


def run_dask(units: Iterable[Unit], scheduler: str, in_flight: int) -> Iterator[UnitResult]:
    """On a Dask distributed cluster (``tcp://HOST:PORT`` of a ``dask scheduler``), at
    most ``in_flight`` units submitted at a time; the workers need fabricflow importable
    (and the module of a ``module:function`` task). A unit whose worker dies is run again
    by the scheduler (up to its ``allowed-failures``); one it gives up is that unit's
    points' error."""
    from distributed import Client

    timeout_s = dask_connect_timeout_s()
    check_scheduler(scheduler, timeout_s)
    try:
        client = Client(scheduler, timeout=timeout_s, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as error:
        raise SpecError(
            "scheduler", f"cannot connect to the Dask scheduler {scheduler!r}: {error}"
        ) from None
    try:
        yield from _completed(client, iter(units), in_flight)
    finally:
        client.close()


LOST_RETRIES = 2
"""How many more times a unit is submitted after Dask lost it (its worker died past the
scheduler's own retries, or the worker holding its result died before it was fetched)."""


def _completed(client, units: Iterator[Unit], in_flight: int) -> Iterator[UnitResult]:
    """Results of ``units`` run on ``client``, ``in_flight`` at a time; an empty result
    every :data:`TICK_S` while none finishes, so that the caller writes on time. A unit
    that Dask loses is submitted again, up to :data:`LOST_RETRIES` times (a point's own
    exception is no loss: :func:`~.worker.run_unit` returns it as that point's error)."""
    from distributed import wait  # distributed: only for a run on a Dask cluster

    held: dict = {}  # future -> (unit, submissions so far)

    def submit(unit: Unit | None, tries: int = 0) -> None:
        if unit is not None:
            held[client.submit(run_unit, unit, pure=False)] = (unit, tries + 1)

    for _ in range(in_flight):
        submit(next(units, None))
    with client.as_current():  # wait() looks for the current client
        while held:
            try:
                done, _ = wait(list(held), timeout=TICK_S, return_when="FIRST_COMPLETED")
            except TimeoutError:
                yield UnitResult([], 0.0, "", 0)
                continue
            for future in done:
                unit, tries = held.pop(future)
                result, lost = _outcome(future, unit)
                if lost and tries <= LOST_RETRIES:
                    submit(unit, tries)
                    continue
                yield result
                submit(next(units, None))


def _outcome(future, unit: Unit) -> tuple[UnitResult, bool]:
    """The result of a finished future, or its unit's points failed with why, and whether
    Dask lost the unit (then it may be submitted again)."""
    try:
        if future.status == "finished":
            return future.result(), False
        error = future.exception()  # a lost or cancelled unit raises here
    except BaseException as lost:  # noqa: BLE001
        if isinstance(lost, KeyboardInterrupt):
            raise
        error = lost
    return failed_unit(unit, error or RuntimeError(f"unit {future.status}")), True
