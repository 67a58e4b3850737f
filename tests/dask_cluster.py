"""A real Dask cluster on localhost for the sweep tests: ``dask scheduler`` and two
single-thread ``dask worker`` processes (each under a nanny, which starts a new worker
process when one dies), started as Dask documents them."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path


def _start(args: list[str], log: Path, env: dict, cwd: Path) -> subprocess.Popen:
    handle = open(log, "w")  # noqa: SIM115  (closed with the process)
    return subprocess.Popen(
        [sys.executable, "-m", "dask", *args], env=env, cwd=cwd, stdout=handle,
        stderr=handle, start_new_session=True,
    )  # fmt: skip


@contextlib.contextmanager
def local_dask_cluster(folder: Path, env: dict, cwd: Path):
    """The scheduler's address (``tcp://127.0.0.1:PORT``) once both workers have joined;
    every process terminated (killed after 20 s) on exit. Logs go to ``folder``."""
    scheduler_file = folder / "scheduler.json"
    processes = [
        _start(["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                "--scheduler-file", str(scheduler_file)], folder / "scheduler.log", env, cwd)
    ]  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        address = None
        while address is None and time.monotonic() < deadline:
            try:  # the scheduler writes the file in place: read it once it parses
                address = json.loads(scheduler_file.read_text())["address"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.1)
        assert address, (folder / "scheduler.log").read_text()
        for number in range(2):
            processes.append(
                _start(["worker", address, "--nworkers", "1", "--nthreads", "1",
                        "--no-dashboard", "--name", f"w{number}"],
                       folder / f"worker{number}.log", env, cwd)
            )  # fmt: skip
        from distributed import Client  # distributed: only where these tests run

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
