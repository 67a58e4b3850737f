"""Module:function tasks for the sweep tests (imported by worker processes by name).

Each call can log itself to a file (one line per call) so that tests count the work done
across processes and runs.
"""

from __future__ import annotations

import os
import time


def _log(path, line: str) -> None:
    if path:
        with open(path, "a") as handle:  # one short append per call: atomic on POSIX
            handle.write(line + "\n")


def quad(x, y=0.0, scale=1.0, log=None, delay=0.0):
    """``value = scale x^2 + y``, ``total = x + y``."""
    _log(log, f"{os.getpid()} {x} {y}")
    if delay:
        time.sleep(delay)
    return {"value": scale * x * x + y, "total": x + y}


quad.metrics = ("value", "total")


def flaky(x, marker):
    """Fails at ``x == 2`` while the file ``marker`` exists."""
    if x == 2 and os.path.exists(marker):
        raise ValueError(f"x = {x} fails while {marker} exists")
    return {"double": 2.0 * x}


flaky.metrics = ("double",)


def affine(x, c, log=None):
    """``value = c x + 1``; ``c`` is a batch key: one ``run_batch`` per ``x``."""
    return {"value": c * x + 1.0}


def _affine_batch(common, varying):
    _log(common.get("log"), f"batch {common['x']} {len(varying)}")
    return [{"value": entry["c"] * common["x"] + 1.0} for entry in varying]


affine.metrics = ("value",)
affine.batch_keys = frozenset({"c"})
affine.run_batch = _affine_batch


def not_a_number(x):
    return {"value": "fast"}


def dies(x, marker=None, log=None, always=False, delay=0.05):
    """Kills its worker process (``os._exit``) at ``x == 3``: the first time only (it leaves
    the file ``marker``, so the retry succeeds), or every time (``always``)."""
    _log(log, f"{os.getpid()} {x}")
    if x == 3 and (always or (marker and not os.path.exists(marker))):
        if marker:
            with open(marker, "w"):
                pass
        os._exit(3)
    time.sleep(delay)
    return {"value": float(x)}


dies.metrics = ("value",)


_CALLS = {"count": 0}


def interrupts(x, y=0, after=50, report=None):
    """``value = x``; at its ``after``-th call in a process it writes the process's peak
    memory to ``report`` and sends SIGINT to its own process (with ``--workers 0`` that is
    the sweep's: a Ctrl-C after the first points)."""
    import resource
    import signal

    _CALLS["count"] += 1
    if _CALLS["count"] == after:
        if report:
            peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            with open(report, "w") as handle:
                handle.write(f"{peak_kib}\n")
        os.kill(os.getpid(), signal.SIGINT)
    return {"value": float(x)}


interrupts.metrics = ("value",)


def fragile(x, c):
    """``value = c x``; a point with ``c < 0`` does not converge. Batched over ``c``: the
    batch call fails whole when one of its points would."""
    from fabricflow.errors import SolverError

    if c < 0:
        raise SolverError(f"c = {c} does not converge")
    return {"value": c * x}


def _fragile_batch(common, varying):
    from fabricflow.errors import SolverError

    if any(entry["c"] < 0 for entry in varying):
        raise SolverError("one point of the batch does not converge")
    return [{"value": entry["c"] * common["x"]} for entry in varying]


fragile.metrics = ("value",)
fragile.batch_keys = frozenset({"c"})
fragile.run_batch = _fragile_batch
