"""Helpers of the fault suite: real tmpfs mounts (full and read-only disks), the CLI run in
this process or as a real process, whole and partial files.

Mounting needs root (as on the development machine); where it is not allowed (CI runs
unprivileged) the cases that need a mount are skipped, saying so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent.parent
ROOT = TESTS.parent
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]),
    "FABRICFLOW_NO_JAX_CACHE": "1",
}


def mount_tmpfs(path: Path, options: str) -> None:
    """Mount a tmpfs at ``path`` (created) with ``options`` (``size=16k``, ``ro``), or skip."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root (not allowed here, as on CI)")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")


def unmount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def one_json(text: str) -> dict:
    """The one JSON object a ``--json`` command printed (fails on any other stdout)."""
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one JSON object on stdout, got {len(lines)} lines: {text!r}"
    return json.loads(lines[0])


def run_main(capsys, argv: list[str]) -> tuple[int, dict, str]:
    """``fabricflow ARGV --json`` in this process: (exit code, its one object, stderr)."""
    from fabricflow.cli import main

    code = main([*argv, "--json"])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err, captured.err
    return code, one_json(captured.out), captured.err


def start_cli(argv: list[str], **kwargs) -> subprocess.Popen:
    """``fabricflow ARGV`` as its own process (and process group, as a shell starts it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "fabricflow.cli", *argv],
        env=ENV,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kwargs,
    )


def leftovers(folder: Path) -> list[str]:
    """Temporary or partial files under ``folder`` (an atomic writer leaves none)."""
    return sorted(
        str(path.relative_to(folder))
        for path in folder.rglob("*")
        if path.name.endswith((".tmp", ".partial")) or path.name.startswith(".fabricflow-probe")
    )


def no_temporaries(folder) -> list[str]:
    """Names in ``folder`` (none may be a temporary file of atomic_path)."""
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    assert not [name for name in names if name.endswith(".tmp")], names
    return names


def check_whole(folder) -> None:
    """Every file under ``folder`` opens: netCDF with xarray, PNG with matplotlib, JSON."""
    import matplotlib.image
    import xarray as xr

    for name in no_temporaries(folder):
        path = os.path.join(folder, name)
        if name.endswith(".nc"):
            with xr.open_dataset(path) as dataset:
                dataset.load()
        elif name.endswith(".png"):
            assert matplotlib.image.imread(path).size > 0
        elif name.endswith(".json"):
            with open(path) as handle:
                json.load(handle)


def raises_named(call, field: str, error=None):
    """``call()`` raises ``error`` (a fabricflow error; any one when None) whose message
    names ``field``; returns the error."""
    from fabricflow.errors import FabricflowError

    with pytest.raises(error or FabricflowError) as caught:
        call()
    assert isinstance(caught.value, FabricflowError)
    assert field in str(caught.value), str(caught.value)
    return caught.value
