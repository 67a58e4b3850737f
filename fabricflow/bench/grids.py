"""Benchmark section ``grids``: sweep grids of 2x10^5 and 10^7 points.

Each grid is run by ``fabricflow sweep --workers 0`` (in one process) with a task that
costs nothing (:func:`probe_point`), stopped by SIGINT once it has computed
:data:`POINTS` points, then run again and stopped the same way. Figures per grid: wall
seconds of each run (start-up, the store, the check of a resumed store, the points), the
points stored, and the peak resident memory of each run when it was stopped.

Targets: the first points within seconds of the start (before the store had chunks of
4,096 points and units were made lazily, a 2x10^5-point grid spent over 120 s before its
first point and a 10^7-point grid was killed at 6 GiB), memory within a few bytes per
point.

Command: ``fabricflow bench grids`` (``--quick``: the 2x10^5-point grid only).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POINTS = 1000  # points each run computes before it stops itself
GRIDS = {
    "2e5": {"x": list(range(200_000))},
    "1e7": {"x": list(range(10_000)), "y": list(range(1_000))},
}
_CALLS = {"count": 0}


def probe_point(x, y=0, after=POINTS, report=None) -> dict:
    """``value = x``. At its ``after``-th call in a process it writes the process's peak
    RSS (KiB) to ``report`` and sends SIGINT to its process (the sweep's, inline)."""
    _CALLS["count"] += 1
    if _CALLS["count"] == after:
        if report:
            Path(report).write_text(f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}\n")
        os.kill(os.getpid(), signal.SIGINT)
    return {"value": float(x)}


def _stopped_run(spec: Path, store: Path, peak: Path) -> dict:
    command = [sys.executable, "-m", "fabricflow.cli", "sweep", str(spec), "--out", str(store)]
    start = time.perf_counter()
    done = subprocess.run([*command, "--workers", "0", "--json"], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    report = json.loads(done.stdout) if done.stdout.strip() else {}
    return {
        "seconds": seconds,
        "exit_code": done.returncode,
        "points_stored": report.get("done"),
        "peak_rss_bytes": int(peak.read_text()) * 1024 if peak.exists() else None,
        "error": None if done.returncode == 130 else done.stderr[-500:],
    }


def run(args) -> dict:
    quick = bool(getattr(args, "quick", False))
    result: dict = {"points_per_run": POINTS}
    with tempfile.TemporaryDirectory(prefix="fabricflow-bench-grids-") as folder:
        root = Path(folder)
        for name, grid in GRIDS.items():
            if quick and name != "2e5":
                continue
            peak = root / f"{name}.peak"
            spec = root / f"{name}.json"
            fixed = {"after": POINTS, "report": str(peak)}
            task = f"{__name__}:probe_point"
            spec.write_text(
                json.dumps({"task": task, "fixed": fixed, "grid": grid, "metrics": ["value"]})
            )
            store = root / f"{name}.zarr"
            first = _stopped_run(spec, store, peak)
            peak.unlink(missing_ok=True)
            second = _stopped_run(spec, store, peak)  # resumes: checks the store first
            result[name] = {"points": _size(grid), "first_run": first, "resumed_run": second}
    return result


def _size(grid: dict) -> int:
    size = 1
    for values in grid.values():
        size *= len(values)
    return size
