"""A sweep on a real Dask cluster (a scheduler and two workers on localhost) gives the
results of the local run, into the same kind of store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import fabricflow as ff

pytest.importorskip("distributed")

TESTS = Path(__file__).parent
ROOT = TESTS.parent
ENV = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{TESTS}", "FABRICFLOW_NO_JAX_CACHE": "1"}


def start(args: list[str], log: Path) -> subprocess.Popen:
    """``dask ARGS`` as Dask documents it (the ``dask`` entry point of this Python)."""
    handle = open(log, "w")  # noqa: SIM115  (closed with the process)
    return subprocess.Popen(
        [sys.executable, "-m", "dask", *args],
        env=ENV,
        cwd=ROOT,
        stdout=handle,
        stderr=handle,
        start_new_session=True,
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """``dask scheduler`` and two ``dask worker`` processes on localhost; torn down after."""
    tmp_path = tmp_path_factory.mktemp("dask")
    scheduler_file = tmp_path / "scheduler.json"
    processes = [
        start(
            [
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(scheduler_file),
            ],
            tmp_path / "scheduler.log",
        )
    ]
    try:
        deadline = time.monotonic() + 60
        address = None
        while address is None and time.monotonic() < deadline:
            try:  # the scheduler writes the file in place: read it once it parses
                address = json.loads(scheduler_file.read_text())["address"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.1)
        assert address, (tmp_path / "scheduler.log").read_text()
        for number in range(2):
            processes.append(
                start(
                    [
                        "worker",
                        address,
                        "--nworkers",
                        "1",
                        "--nthreads",
                        "1",
                        "--no-dashboard",
                        "--name",
                        f"w{number}",
                    ],
                    tmp_path / f"worker{number}.log",
                )
            )
        from distributed import Client

        with Client(address, timeout="30s") as client:
            client.wait_for_workers(2, timeout=60)
        yield address
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def test_dask_run_equals_local_run(tmp_path, cluster):
    grid = {"x": [1, 2, 3, 4, 5], "y": [0.0, 0.5, 1.0]}
    fixed = {"scale": 1.5}
    local = ff.sweep(
        "sweep_tasks:quad", grid, fixed=fixed, store=tmp_path / "local.zarr", workers=0
    )
    remote = ff.sweep(
        "sweep_tasks:quad", grid, fixed=fixed, store=tmp_path / "dask.zarr", scheduler=cluster
    )
    run = json.loads(remote.attrs["last_run"])
    assert run["backend"] == "dask" and run["computed"] == 15
    for name in ("value", "total", "status"):
        np.testing.assert_array_equal(local[name].values, remote[name].values)
    assert remote.attrs["spec"] == local.attrs["spec"]
    # a rerun against the cluster reuses every point
    again = ff.sweep(
        "sweep_tasks:quad", grid, fixed=fixed, store=tmp_path / "dask.zarr", scheduler=cluster
    )
    assert json.loads(again.attrs["last_run"])["reused"] == 15


def test_cli_on_dask(tmp_path, cluster):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"task": "sweep_tasks:quad", "grid": {"x": [1, 2, 3]}}))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "fabricflow.cli",
            "sweep",
            str(spec),
            "--out",
            str(tmp_path / "s"),
            "--scheduler",
            cluster,
            "--json",
        ],
        env=ENV,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["backend"] == "dask" and report["computed"] == 3
