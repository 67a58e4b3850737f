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
