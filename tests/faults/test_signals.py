"""Signals and closed pipes at the command line, run as a user would (a subprocess) where the
fault needs a real process: exit 130 for an interrupt with one JSON object under ``--json``,
the files finished kept whole, no traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from fault_helpers import check_whole as _check_whole
from fault_helpers import no_temporaries as _no_leftovers
from fault_helpers import one_json as _one_json

from fabricflow.cli import main


def _cli(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "fabricflow.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def test_stdout_closed_early_is_quiet():
    proc = _cli("presets")
    proc.stdout.close()  # the reader went away (`| head -0`)
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


# ------------------------------------------------------------------ signals
def _interrupt(args: list[str], delay: float, signum=signal.SIGINT, until=None):
    """Start the CLI, send ``signum`` after ``delay`` s (or once ``until()`` holds).

    The JAX compilation cache is off: the delays aim at phases of a run (imports, JAX
    compilation, simulation), and a warm cache would skip the compilation and let a run
    end before its signal."""
    proc = _cli(*args, env={**os.environ, "FABRICFLOW_NO_JAX_CACHE": "1"})
    start = time.monotonic()
    while time.monotonic() - start < (60 if until else delay):
        if until is not None and until():
            break
        time.sleep(0.02)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


@pytest.mark.parametrize("delay", [0.6, 1.5, 3.0])  # imports, JAX compilation, simulation
def test_cc_interrupted_exits_130_with_one_json_object(tmp_path, delay):
    out_dir = tmp_path / "run"
    code, out, err = _interrupt(
        [
            "cc",
            "--scenario",
            "dumbbell",
            "--flows",
            "2",
            "--duration",
            "2s",
            "--out",
            str(out_dir),
            "--json",
        ],
        delay,
    )
    assert code == 130, (out, err)
    assert "Traceback" not in err, err
    data = _one_json(out)
    assert data["error"] == "Interrupted" and "SIGINT" in data["message"]
    assert isinstance(data["completed"], list)
    _check_whole(out_dir)


def test_cc_interrupted_after_first_file_keeps_it_whole(tmp_path):
    out_dir = tmp_path / "run"
    code, out, err = _interrupt(
        [
            "cc",
            "--scenario",
            "dumbbell",
            "--flows",
            "2",
            "--duration",
            "20ms",
            "--out",
            str(out_dir),
            "--json",
        ],
        0,
        until=lambda: (out_dir / "dcqcn.nc").exists(),
    )
    assert "Traceback" not in err, err
    data = _one_json(out)
    if code == 0:  # the run finished before the signal landed: a whole result
        assert data["flows"] == 2
    else:
        assert code == 130 and data["error"] == "Interrupted"
        assert str(out_dir / "dcqcn.nc") in data["completed"]
    assert "dcqcn.nc" in _no_leftovers(out_dir)
    _check_whole(out_dir)


def test_demo_terminated_exits_130_without_traceback(tmp_path):
    out_dir = tmp_path / "demo"
    # once its first figure is written, mid-run on any machine (a fixed 1.5 s let a quiet
    # machine finish the demo first)
    code, out, err = _interrupt(
        ["demo", "--fabric", "dgx-h100-superpod", "--out", str(out_dir)],
        0.0,
        signal.SIGTERM,
        until=lambda: out_dir.is_dir() and any(out_dir.glob("*.png")),
    )
    assert code == 130, (out, err)
    assert "Traceback" not in err and "interrupted by SIGTERM" in err, err
    _check_whole(out_dir)


def test_bench_interrupted_reports_the_sections_it_finished():
    proc = _cli("bench", "step", "cc", "--quick")
    lines = []
    for line in proc.stdout:  # the text report prints a section when it is done
        lines.append(line)
        if line.startswith("== step"):
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (lines, out, err)
    assert "Traceback" not in err and "completed: step" in err, err


def _fake_bench(monkeypatch, second):
    """``bench`` with two tiny sections; the second runs ``second()``."""
    import types

    import fabricflow.commands.bench as bench

    sections = {
        "first": types.SimpleNamespace(run=lambda args: {"value": 1}),
        "second": types.SimpleNamespace(run=lambda args: second()),
    }
    monkeypatch.setattr(bench, "SECTIONS", dict.fromkeys(sections, "a tiny section"))
    monkeypatch.setattr(bench, "load", sections.__getitem__)


def test_bench_json_interrupt_keeps_completed_sections(monkeypatch, capsys):
    _fake_bench(monkeypatch, lambda: os.kill(os.getpid(), signal.SIGINT) or time.sleep(5))
    before = signal.getsignal(signal.SIGINT)
    assert main(["bench", "--json"]) == 130
    data = _one_json(capsys.readouterr().out)
    assert data["error"] == "Interrupted" and data["completed"] == ["first"]
    assert data["partial"]["first"]["value"] == 1
    assert signal.getsignal(signal.SIGINT) is before  # restored (not left ignored)


def test_interrupt_swallowed_by_library_code_still_stops_the_report(monkeypatch, capsys):
    def swallowing():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        except BaseException:  # what a bare `except:` in a dependency does
            pass
        return {"value": 2}

    _fake_bench(monkeypatch, swallowing)
    assert main(["bench", "--json"]) == 130
    data = _one_json(capsys.readouterr().out)
    assert data["error"] == "Interrupted" and "SIGTERM" in data["message"]


def test_signal_after_the_report_keeps_one_json_object(monkeypatch, capsys):
    import fabricflow.commands.presets as presets
    from fabricflow.commands.common import print_json

    def report_then_signal(args):
        print_json({"presets": []})
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)

    monkeypatch.setattr(presets, "run", report_then_signal)
    assert main(["presets", "--json"]) == 130
    captured = capsys.readouterr()
    assert _one_json(captured.out) == {"presets": []}
    assert "interrupted by SIGINT" in captured.err


def test_signal_landing_in_a_gc_callback_is_not_lost_or_printed(monkeypatch, capsys):
    """JAX's gc callback runs Python code; a signal handled there must still stop the run."""
    import gc

    def callback(phase, info):
        if phase == "start":
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(1000))  # the handler runs here, inside the callback

    slept = []

    def collect_then_work():
        gc.callbacks.append(callback)
        try:
            gc.collect()
        finally:
            gc.callbacks.remove(callback)
        time.sleep(5)  # cut short by the interrupt, unless it was lost
        slept.append(True)
        return {"value": 2}

    _fake_bench(monkeypatch, collect_then_work)
    assert main(["bench", "--json"]) == 130
    assert not slept  # (a time bound on main() failed on a loaded machine: its start-up)
    captured = capsys.readouterr()
    assert _one_json(captured.out)["completed"] == ["first"]
    assert "Exception ignored" not in captured.err and "Traceback" not in captured.err
