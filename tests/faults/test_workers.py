"""Workers of a sweep that die or never answer: a local worker process that dies inside a
task, a Dask worker killed mid-sweep, a scheduler address that accepts and never answers.

The rule checked: the points a dead worker held are computed again (on a fresh worker),
the other points are untouched, nothing is counted twice, stdout stays one JSON object;
an address that does not answer is named within the connect timeout.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from dask_cluster import local_dask_cluster
from fault_helpers import ENV, ROOT, one_json

pytest.importorskip("distributed")


def sweep_cli(spec: dict, store: Path, *flags: str, env=None, timeout=180):
    path = store.parent / f"{store.name}.json"
    path.write_text(json.dumps(spec))
    return subprocess.run(
        [sys.executable, "-m", "fabricflow.cli", "sweep", str(path), "--out", str(store),
         *flags, "--json"],
        capture_output=True, text=True, env=env or ENV, cwd=ROOT, timeout=timeout,
    )  # fmt: skip


def calls(log: Path) -> list[tuple[int, int]]:
    """``(pid, x)`` of every task call logged, in order."""
    return [tuple(map(int, map(float, line.split()[:2]))) for line in log.read_text().splitlines()]


@pytest.mark.parametrize(
    ("always", "code", "failed"),
    [(False, 0, 0), (True, 1, 1)],
    ids=["dies-once-then-succeeds", "dies-every-time"],
)
def test_a_local_worker_that_dies_is_replaced_and_only_its_point_is_retried(
    tmp_path, always, code, failed
):
    log = tmp_path / "calls.log"
    fixed = {"marker": str(tmp_path / "died"), "log": str(log), "always": always}
    done = sweep_cli(
        {"task": "sweep_tasks:dies", "fixed": fixed, "grid": {"x": list(range(12))}},
        tmp_path / "s.zarr",
        "--workers",
        "2",
    )
    assert done.returncode == code, done.stderr
    report = one_json(done.stdout)  # no object from a worker beside it
    assert report["worker_restarts"] == 1 + always
    assert (report["computed"], report["failed"]) == (12 - failed, failed)
    made = calls(log)
    counts = Counter(x for _, x in made)
    assert counts[3] == 2  # the point that killed its worker, retried once...
    assert all(counts[x] == 1 for x in range(12) if x != 3)  # ...the others untouched
    pids = [pid for pid, x in made if x == 3]
    assert pids[0] != pids[1]  # on a fresh worker
    if always:
        assert "WorkerDied" in report["errors"]['{"x": 3}']
        assert "exit code 3" in report["errors"]['{"x": 3}']


@pytest.fixture
def dask_cluster(tmp_path):
    """A Dask scheduler and two single-thread workers (each under a nanny, which starts a
    new worker process when one dies) on localhost, for this test only."""
    with local_dask_cluster(tmp_path, ENV, ROOT) as address:
        yield address


def test_a_dask_worker_killed_mid_sweep_has_its_points_retried(tmp_path, dask_cluster):
    log = tmp_path / "calls.log"
    log.touch()
    spec = {
        "task": "sweep_tasks:quad",
        "fixed": {"log": str(log), "delay": 0.4},
        "grid": {"x": list(range(16))},
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    run = subprocess.Popen(
        [sys.executable, "-m", "fabricflow.cli", "sweep", str(path), "--out",
         str(tmp_path / "s.zarr"), "--scheduler", dask_cluster, "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT,
    )  # fmt: skip
    killed = None
    deadline = time.monotonic() + 120
    while killed is None and time.monotonic() < deadline and run.poll() is None:
        made = calls(log)
        if len(made) >= 3:  # the latest call has just started: its worker is mid-point
            killed = made[-1]
            os.kill(killed[0], signal.SIGKILL)
        time.sleep(0.02)
    out, err = run.communicate(timeout=180)
    assert killed is not None, err
    assert run.returncode == 0, out + err
    report = one_json(out)
    assert (report["computed"], report["failed"], report["reused"]) == (16, 0, 0)
    made = calls(log)
    assert {x for _, x in made} == set(range(16))
    retried = [pid for pid, x in made if x == killed[1]]
    assert len(retried) >= 2 and retried[-1] != killed[0]  # computed again, elsewhere
    import xarray as xr

    with xr.open_zarr(tmp_path / "s.zarr") as ds:
        assert (ds.status.values == 1).all()
        assert ds.value.values.tolist() == [float(x * x) for x in range(16)]


def test_a_scheduler_address_that_never_answers_is_named_within_the_timeout(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept_and_say_nothing():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept_and_say_nothing, daemon=True)
    thread.start()
    address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
    try:
        started = time.monotonic()
        done = sweep_cli(
            {"task": "sweep_tasks:quad", "grid": {"x": [1, 2]}},
            tmp_path / "s.zarr",
            "--scheduler",
            address,
            env={**ENV, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"},
            timeout=60,
        )
        seconds = time.monotonic() - started
    finally:
        stop.set()
        thread.join(5)
        for connection in held:
            connection.close()
        server.close()
    assert done.returncode == 2, done.stderr
    message = one_json(done.stdout)["message"]
    assert address in message and "sent no Dask handshake within 2 s" in message
    assert held, "the address did accept the connection"
    assert seconds < 40  # start-up and imports, then the 2 s timeout: no hang
    assert not (tmp_path / "s.zarr").exists()  # checked before the store is made


def test_a_batch_that_fails_for_one_point_fails_that_point_alone(tmp_path):
    import fabricflow as ff

    ds = ff.sweep(
        "sweep_tasks:fragile", {"x": [2.0], "c": [1.0, -1.0, 3.0]}, store=tmp_path / "s", workers=0
    )
    assert ds.status.values.tolist() == [[1, 2, 1]]
    assert ds.value.values[0, [0, 2]].tolist() == [2.0, 6.0]
    assert "SolverError: c = -1.0 does not converge" in str(ds.error.values[0, 1])


def test_the_rerun_of_a_single_point_runs_in_a_worker_too(tmp_path):
    """A point that ended its worker and failed, run again alone with --workers 2: it runs
    in a worker process (replaced when it dies), never in the run's own process, which
    it would take down with no report (exit 3, no output)."""
    log = tmp_path / "calls.log"
    spec = {
        "task": "sweep_tasks:dies",
        "fixed": {"log": str(log), "always": True},
        "grid": {"x": [2, 3]},
    }
    first = sweep_cli(spec, tmp_path / "s.zarr", "--workers", "2")
    assert first.returncode == 1 and one_json(first.stdout)["failed"] == 1
    again = sweep_cli(spec, tmp_path / "s.zarr", "--workers", "2")
    assert again.returncode == 1, again.stderr
    report = one_json(again.stdout)
    assert (report["computed"], report["failed"], report["backend"]) == (0, 1, "processes")
    assert "WorkerDied" in report["errors"]['{"x": 3}']
