"""Benchmark section ``sweep``: a 1,000-point step-time sweep on ``clos-100k`` with 2
local worker processes, then the same sweep killed at about half and resumed.

Target (2-core machine): the 1,000 points in at most 10 minutes. The grid is a capacity
planning study of a 1,024-GPU Llama-3-8B job (TP 8) on the 100k-GPU Clos:

* leaf-tier oversubscription 1:1 or 7:1 (``fabric.topology.tiers.0.oversubscription``;
  86,016 GPUs fill whole rail groups and blocks at both ratios; the job stays in one
  4,096-GPU pod, so the leaf's ratio is the one its traffic sees);
* no failures, or 1, 2, 5 or 10% of the leaf-spine cables failed (``fail``);
* PP 1, 2, 4, 8; sequence length 2k..32k; global batch 256..4,096 sequences.

The resume figure: the same SPEC run by ``fabricflow sweep`` (2 workers) into a new store,
the whole process group killed with SIGKILL (power loss) once half of the points are in
the store, then the command run again. ``resume_total_over_uninterrupted`` is the wall
time of both runs over the uninterrupted run's (target: at most 1.05 plus start-up), and
``resume_points_computed`` the points the two runs wrote (exactly the grid's size: no
point is written twice). ``--quick`` runs a 40-point grid.

Command: ``fabricflow bench sweep`` (``--quick`` for the small grid).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from fabricflow.sweeps.run import run_sweep

TARGET_S = 600.0
WORKERS = 2


def spec(quick: bool) -> dict:
    """The benchmark's SPEC (1,000 points; 40 with ``quick``)."""
    grid = {
        "fabric.topology.tiers.0.oversubscription": [1, 7],
        "fail": ["none", "leaf:0.01", "leaf:0.02", "leaf:0.05", "leaf:0.1"],
        "pp": [1, 2, 4, 8],
        "seq_len": [2048, 4096, 8192, 16384, 32768],
        "global_batch": [256, 512, 1024, 2048, 4096],
    }
    if quick:
        grid.update(
            fail=["none", "leaf:0.05"],
            pp=[1, 2],
            seq_len=[8192],
            global_batch=[256, 512, 1024, 2048, 4096],
        )
    return {
        "task": "step",
        "fixed": {
            "fabric": "clos-100k",
            "fabric.gpus": 86016,
            "model": "llama3-8b",
            "gpu": "h100-sxm",
            "gpus": 1024,
            "tp": 8,
            "micro_batch": 1,
        },
        "grid": grid,
        "metrics": ["step_time_s", "mfu", "dp_s", "bubble_s"],
    }


def run(args) -> dict:
    quick = bool(getattr(args, "quick", False))
    sweep_spec = spec(quick)
    result: dict = {"preset": "clos-100k", "workers": WORKERS}
    with tempfile.TemporaryDirectory(prefix="fabricflow-bench-sweep-") as folder:
        root = Path(folder)
        start = time.perf_counter()
        done = run_sweep(sweep_spec, root / "full.zarr", workers=WORKERS, progress=False)
        seconds = time.perf_counter() - start
        summary = done.summary()
        result.update(
            points=summary["points"],
            computed=summary["computed"],
            failed=summary["failed"],
            units=summary["units"],
            fabrics_built=summary["fabrics_built"],
            seconds=seconds,
            points_per_s=summary["points"] / seconds,
            step_time_s_range=[
                float(done.dataset["step_time_s"].min()),
                float(done.dataset["step_time_s"].max()),
            ],
        )
        result.update(_resume(sweep_spec, root, seconds, done.dataset))
    result["target_s"] = TARGET_S
    result["meets_target"] = bool(result["seconds"] <= TARGET_S and result["failed"] == 0)
    return result


def _resume(sweep_spec: dict, root: Path, uninterrupted_s: float, reference) -> dict:
    """Kill a CLI run at about half (the whole process group, SIGKILL), rerun it."""
    import zarr

    spec_path = root / "spec.json"
    spec_path.write_text(json.dumps(sweep_spec))
    store = root / "resumed.zarr"
    command = [
        sys.executable,
        "-m",
        "fabricflow.cli",
        "sweep",
        str(spec_path),
        "--out",
        str(store),
        "--workers",
        str(WORKERS),
        "--json",
    ]
    total = reference["status"].size
    start = time.perf_counter()
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    written = 0
    try:
        while process.poll() is None:
            try:
                written = _done(zarr, store)
            except Exception:  # noqa: BLE001  (the store is not created yet)
                written = 0
            if written >= total // 2:
                break
            time.sleep(0.2)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    first_s = time.perf_counter() - start
    written = _done(zarr, store)
    start = time.perf_counter()
    rerun = subprocess.run(command, capture_output=True, text=True)
    second_s = time.perf_counter() - start
    report: dict = json.loads(rerun.stdout) if rerun.stdout.strip() else {}
    resumed = zarr.open_array(store / "step_time_s", mode="r")[...]
    return {
        "resume_killed_at_points": written,
        "resume_rerun_computed": report.get("computed"),
        "resume_rerun_reused": report.get("reused"),
        "resume_points_computed": written + int(report.get("computed") or 0),
        "resume_rerun_error": None if report else rerun.stderr[-500:],
        "resume_first_s": first_s,
        "resume_rerun_s": second_s,
        "resume_total_over_uninterrupted": (first_s + second_s) / uninterrupted_s,
        "resume_equals_uninterrupted": bool(
            np.array_equal(resumed, reference["step_time_s"].values, equal_nan=True)
        ),
    }


def _done(zarr, store: Path) -> int:
    """Points with status done in ``store``."""
    return int(np.count_nonzero(np.asarray(zarr.open_array(store / "status", mode="r")[...]) == 1))
