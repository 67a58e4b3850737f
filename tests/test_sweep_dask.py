"""A sweep on a real Dask cluster (a scheduler and two workers on localhost) gives the
results of the local run, into the same kind of store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from dask_cluster import local_dask_cluster

import fabricflow as ff

pytest.importorskip("distributed")

TESTS = Path(__file__).parent
ROOT = TESTS.parent
ENV = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{TESTS}", "FABRICFLOW_NO_JAX_CACHE": "1"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """``dask scheduler`` and two ``dask worker`` processes on localhost; torn down after."""
    with local_dask_cluster(tmp_path_factory.mktemp("dask"), ENV, ROOT) as address:
        yield address


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
