"""Interrupts (SIGINT, SIGTERM, kill -9) at every phase of the commands that write files:
a command stops cleanly, prints one JSON object that lists exactly the files whole on disk,
and leaves no partial file under a final name."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from fault_helpers import one_json, run_main, start_cli

from fabricflow import atomic
from fabricflow.commands import interrupts


def test_a_signal_during_an_import_is_raised_once_the_import_is_done(tmp_path, monkeypatch):
    # jaxlib's native modules call back into Python while they load: an exception raised
    # there aborted the process ("terminate called after throwing ... python_error")
    (tmp_path / "slow_import.py").write_text(
        "import os, signal, time\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "time.sleep(0.3)\n"
        "LOADED = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with interrupts.handling():
        with pytest.raises(interrupts.Interrupted) as caught:
            import slow_import  # noqa: F401

            time.sleep(5)  # the deferred interrupt arrives here, not inside the import
    assert caught.value.signum == signal.SIGTERM
    assert sys.modules["slow_import"].LOADED  # the module loaded whole


# ------------------------------------------------------------------ while files are written
# command -> (argv, the file during whose rename the interrupt arrives)
WRITERS = {
    "optimize": (
        ["optimize", "--fabric", "dgx-a100-superpod", "--gpu", "a100-80gb", "--model",
         "megatron-1.7b", "--gpus", "16", "--global-batch", "32", "--seq", "2048",
         "--space", "tp=1,2", "--collectives", "alpha-beta"],
        "pareto.png",
    ),
    "cluster": (
        ["cluster", "--fabric", "dgx-h100-superpod", "--scheduler", "first-fit",
         "--synthetic", "4"],
        "summary.json",
    ),
    "fct": (
        ["fct", "--fabric", "fat-tree-k16", "--traffic", "permutation", "--hosts", "16",
         "--fidelity", "fluid"],
        "summary.json",
    ),
    "report": (
        ["report", "--fabric", "fat-tree-k16", "--model", "megatron-1.7b", "--gpu", "a100-80gb",
         "--gpus", "8", "--tp", "8", "--seq", "2048", "--budget", "0", "--fail-fractions",
         "0.25", "--fail-seeds", "1"],
        "report.html",
    ),
}  # fmt: skip


def whole_files(folder: Path) -> list[str]:
    """The files under their final names in ``folder``, each checked whole by its format."""
    found = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.name.startswith("."):
            continue  # atomic_path's temporary files start with a dot
        data = path.read_bytes()
        if path.suffix == ".png":
            assert data.startswith(b"\x89PNG") and data.rstrip().endswith(b"IEND\xaeB`\x82")
        elif path.suffix == ".json":
            json.loads(data)
        elif path.suffix == ".nc":
            import xarray as xr

            xr.open_dataset(path).close()
        elif path.suffix == ".html":
            assert data.rstrip().endswith(b"</html>")
        elif path.suffix == ".csv":
            assert data.endswith(b"\n")
        found.append(str(path))
    return found


@pytest.mark.parametrize("command", WRITERS)
def test_sigint_while_files_are_written_lists_exactly_the_whole_ones(
    tmp_path, capsys, monkeypatch, command
):
    argv, last = WRITERS[command]
    real = atomic._renaming_into_place

    @contextlib.contextmanager
    def held(path):
        with real(path):  # SIGINT arrives during the rename of `last`: raised right after
            if os.path.basename(path) == last:
                os.kill(os.getpid(), signal.SIGINT)
            yield

    monkeypatch.setattr(atomic, "_renaming_into_place", held)
    out = tmp_path / "out"
    code, data, _ = run_main(capsys, [*argv, "--out", str(out)])
    assert code == 130 and data["error"] == "Interrupted" and "SIGINT" in data["message"]
    on_disk = whole_files(out)
    assert str(out / last) in on_disk
    assert sorted(map(str, data["completed"])) == on_disk  # exactly the whole files


@pytest.mark.parametrize("command", WRITERS)
def test_kill_9_while_files_are_written_leaves_only_whole_files(tmp_path, command):
    argv, _ = WRITERS[command]
    out = tmp_path / "out"
    process = start_cli([*argv, "--out", str(out), "--json"])
    deadline = time.monotonic() + 240
    while process.poll() is None and time.monotonic() < deadline:
        if out.is_dir() and any(not p.name.startswith(".") for p in out.iterdir()):
            os.killpg(process.pid, signal.SIGKILL)  # the first file is whole: the next is
            break  # being written
        time.sleep(0.005)
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL, "the command ended before it was killed"
    assert whole_files(out)  # the first, and every file under its final name, is whole


# ------------------------------------------------------------------ sweep: Ctrl-C, SIGTERM
@pytest.mark.parametrize(
    ("signum", "group", "json_flag", "after"),
    [
        (signal.SIGINT, True, True, 4),
        (signal.SIGINT, True, False, 4),
        (signal.SIGTERM, False, True, 4),
        (signal.SIGINT, False, False, 4),
        (signal.SIGINT, True, True, 0),
    ],
    ids=[
        "ctrl-c-to-the-process-group-json",
        "ctrl-c-to-the-process-group-text",
        "sigterm-to-the-parent-json",
        "sigint-to-the-parent-text",
        "ctrl-c-while-the-workers-start",
    ],
)
def test_an_interrupted_sweep_reports_once_with_the_points_stored(
    tmp_path, signum, group, json_flag, after
):
    import zarr

    spec = tmp_path / "spec.json"
    grid = {"x": list(range(16)), "y": [0.0, 1.0, 2.0]}
    spec.write_text(json.dumps({"task": "sweep_tasks:quad", "fixed": {"delay": 0.2}, "grid": grid}))
    store = tmp_path / "s.zarr"
    flags = ["--json"] if json_flag else []
    process = start_cli(["sweep", str(spec), "--out", str(store), "--workers", "2", *flags])
    deadline = time.monotonic() + 120
    done = -1
    while done < after and time.monotonic() < deadline:
        try:  # after == 0: the store is made, the workers are being started
            done = int((zarr.open_array(store / "status", mode="r")[...] == 1).sum())
        except Exception:  # noqa: BLE001  (not created yet)
            pass
        time.sleep(0.01)
    if group:
        os.killpg(process.pid, signum)  # what a terminal's Ctrl-C does
    else:
        process.send_signal(signum)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    stored = int((zarr.open_array(store / "status", mode="r")[...] == 1).sum())
    assert stored >= after
    name = signal.Signals(signum).name
    assert "Traceback" not in err and "leaked" not in err and "resource_tracker" not in err
    said = f"interrupted by {name}; {stored} of 48 points are stored"
    if json_flag:
        data = one_json(out)  # one object, none from the workers
        assert data["error"] == "Interrupted" and said in data["message"]
        assert (data["points"], data["done"], data["pending"]) == (48, stored, 48 - stored)
        assert err.strip() == ""
    else:
        assert out == ""
        assert err.count("interrupted by") == 1 and said in err  # once, not per worker


def test_a_signal_while_a_sweep_worker_starts_waits_for_the_start(monkeypatch):
    """Ctrl-C while the parent hands a spawned worker its start-up data: raised once the
    start is over, so no child dies on half-sent data with a traceback (it did, now and
    then, when Ctrl-C came while the workers were starting)."""
    from fabricflow.sweeps.pool import LocalPool

    pool = LocalPool(1)
    started = []

    class Starting:
        def __init__(self, target, args, daemon):
            self.pid = None

        def start(self):
            os.kill(os.getpid(), signal.SIGINT)  # arrives in the middle of the start
            time.sleep(0.1)  # the handler runs (and defers) long before this ends
            started.append(atomic.interrupts_held())

    monkeypatch.setattr(pool._context, "Process", Starting)
    with interrupts.handling(), pytest.raises(interrupts.Interrupted):
        try:
            pool._start()
        finally:
            assert started == [True]  # the whole start ran, interrupts held
        time.sleep(1.0)  # the deferred interrupt is raised here at the latest
