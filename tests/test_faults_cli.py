"""Faults at the command line: start-up cost, signals, broken pipes, unwritable outputs.

Each case runs the CLI as a user would (a subprocess) where the fault needs a real process
(a signal, a closed pipe, a start-up time), and in this process where it does not. The
contract: no traceback, a named error, exit 2 for bad input, 1 for an output that cannot
be written, 130 for an interrupt, and under ``--json`` exactly one JSON object; an output
file is either whole or absent.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import subprocess
import sys
import time
import warnings

import pytest

import fabricflow
from fabricflow.cli import main

CC = ["cc", "--scenario", "dumbbell", "--flows", "2", "--duration", "1ms"]
HEAVY = ("jax", "scipy", "xarray", "matplotlib")


def _cli(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "fabricflow.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def _one_json(text: str) -> dict:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return json.loads(lines[0])


def _no_leftovers(folder) -> list[str]:
    """Names in ``folder`` (none may be a temporary file of atomic_path)."""
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    assert not [name for name in names if name.endswith(".tmp")], names
    return names


def _check_whole(folder) -> None:
    """Every file under ``folder`` opens: netCDF with xarray, PNG with matplotlib, JSON."""
    import matplotlib.image
    import xarray as xr

    for name in _no_leftovers(folder):
        path = os.path.join(folder, name)
        if name.endswith(".nc"):
            with xr.open_dataset(path) as dataset:
                dataset.load()
        elif name.endswith(".png"):
            assert matplotlib.image.imread(path).size > 0
        elif name.endswith(".json"):
            with open(path) as handle:
                json.load(handle)


# ------------------------------------------------------------------ import scheme
def test_import_and_parser_load_no_heavy_module():
    code = (
        f"import sys, json, fabricflow; a = [m for m in {HEAVY!r} if m in sys.modules]; "
        "import fabricflow.cli as c; c.build_parser(); "
        f"print(json.dumps([a, [m for m in {HEAVY!r} if m in sys.modules]]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == [[], []]


@pytest.mark.parametrize("args", [["--help"], ["presets"]])
def test_help_and_presets_start_fast(args):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, "-m", "fabricflow.cli", *args], capture_output=True, text=True
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert proc.returncode == 0, proc.stderr
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    # ~0.2-0.3 s on the 2-core dev machine (was ~2 s when `import fabricflow` loaded JAX);
    # the margin absorbs a loaded machine
    assert cpu < 1.5, cpu


def test_public_names_resolve_and_all_matches_the_map():
    assert fabricflow.__all__ == sorted(fabricflow._EXPORTS)
    for name in fabricflow.__all__:
        assert getattr(fabricflow, name) is not None, name
    assert set(fabricflow.__all__) <= set(dir(fabricflow))
    assert fabricflow.SolverStatus.__name__ == "Status"
    assert fabricflow.errors.SpecError is fabricflow.SpecError
    with pytest.raises(AttributeError, match="no_such_name"):
        fabricflow.no_such_name  # noqa: B018
    assert (
        fabricflow.traffic.patterns.__name__ == "fabricflow.traffic.patterns"
    )  # subpackages on demand


@pytest.mark.parametrize("name", sorted(fabricflow._DEPRECATED))
def test_former_kernel_exports_still_resolve_with_a_warning(name):
    with pytest.warns(DeprecationWarning, match=name):
        value = getattr(fabricflow, name)
    assert callable(value)
    assert name not in fabricflow.__all__


def test_no_module_imports_the_top_level_package():
    """Subpackages import what they use from its module, never through ``fabricflow``."""
    import ast

    root = os.path.dirname(fabricflow.__file__)
    offenders = []
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".py") or path == fabricflow.__file__:
                continue
            with open(path) as handle:
                tree = ast.parse(handle.read())
            depth = os.path.relpath(folder, root).count(os.sep) + (folder != root)
            for node in ast.walk(tree):
                top_level = (  # `import fabricflow`, `from fabricflow import x`, `from .. import x`
                    isinstance(node, ast.Import)
                    and any(a.name == "fabricflow" for a in node.names)
                    or isinstance(node, ast.ImportFrom)
                    and node.module == "fabricflow"
                    and not all(  # `from fabricflow import errors`: a module, not the API
                        os.path.exists(os.path.join(root, a.name + ".py"))
                        or os.path.exists(os.path.join(root, a.name))
                        for a in node.names
                    )
                    or isinstance(node, ast.ImportFrom)
                    and node.module is None
                    and node.level == depth + 1
                    and not all(
                        # a subpackage or a module of the package, not a name of its API
                        os.path.exists(os.path.join(root, a.name))
                        or os.path.exists(os.path.join(root, a.name + ".py"))
                        for a in node.names
                    )
                )
                if top_level:
                    offenders.append(f"{path}:{node.lineno}")
    assert offenders == []


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
    proc = _cli("bench", "step", "dcqcn", "--quick")
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


# ------------------------------------------------------------------ outputs
def _mount_tmpfs(path, options: str) -> bool:
    os.makedirs(path, exist_ok=True)
    if os.geteuid() != 0:
        return False
    return (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True
        ).returncode
        == 0
    )


def _output_error(capsys, *args) -> str:
    assert main([*args, "--json"]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    data = _one_json(captured.out)
    assert data["error"] == "OutputError"
    return data["message"]


def test_out_under_a_file_or_proc_is_an_output_error(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    message = _output_error(capsys, *CC, "--out", str(blocker / "sub"))
    assert message.startswith("--out:") and "not a folder" in message
    message = _output_error(capsys, *CC, "--out", "/proc/fabricflow-out")
    assert message.startswith("--out:") and "/proc/fabricflow-out" in message
    message = _output_error(capsys, "demo", "--fabric", "dgx-h100-superpod", "--out", str(blocker))
    assert "not a folder" in message
    assert blocker.read_text() == "x"


def test_read_only_out_fails_before_running(tmp_path, capsys):
    folder = tmp_path / "ro"
    mounted = _mount_tmpfs(folder, "ro,size=64k")
    if not mounted:
        folder.chmod(0o555)
        if os.access(folder, os.W_OK):
            pytest.skip("cannot make a read-only folder here")
    try:
        message = _output_error(capsys, *CC, "--out", str(folder / "run"))
        assert message.startswith("--out:") and ("read-only" in message or "denied" in message)
        assert not (folder / "run").exists()
    finally:
        if mounted:
            subprocess.run(["umount", str(folder)], check=True)


def test_full_disk_leaves_no_corrupt_netcdf(tmp_path, capsys):
    folder = tmp_path / "full"
    mounted = _mount_tmpfs(folder, "size=16k")
    if not mounted:
        pytest.skip("needs root to mount a tiny tmpfs (the monkeypatched case runs anyway)")
    try:
        message = _output_error(capsys, *CC, "--duration", "20ms", "--out", str(folder))
        assert "dcqcn.nc" in message and "disk is full" in message
        assert _no_leftovers(folder) == []
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_failing_netcdf_write_is_an_output_error_and_no_file(tmp_path, capsys, monkeypatch):
    import xarray as xr

    def full_disk(self, path, *args, **kwargs):
        with open(path, "wb") as handle:
            handle.write(b"CDF\x01 truncated")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(xr.Dataset, "to_netcdf", full_disk)
    message = _output_error(capsys, *CC, "--out", str(tmp_path))
    assert "dcqcn.nc" in message and "disk is full" in message
    assert _no_leftovers(tmp_path) == []


def test_summary_json_written_whole(tmp_path, capsys):
    assert main([*CC, "--out", str(tmp_path), "--json"]) == 0
    report = _one_json(capsys.readouterr().out)
    with open(tmp_path / "summary.json") as handle:
        assert json.load(handle)["flows"] == report["flows"] == 2
    _check_whole(tmp_path)


# ------------------------------------------------------------------ messages
@pytest.mark.parametrize("flag", ["--duration", "--dur"])
def test_negative_value_reaches_the_command(capsys, flag):
    assert main(["cc", "--scenario", "dumbbell", flag, "-1ms", "--json"]) == 2
    data = _one_json(capsys.readouterr().out)
    assert data["error"] == "SpecError"
    assert data["message"].startswith("--duration:") and "> 0" in data["message"]


def test_only_the_running_commands_value_flags_take_negative_values():
    from fabricflow.cli import _attach_negative_values, build_parser
    from fabricflow.commands import COMMANDS

    parser = build_parser(*COMMANDS)
    # --gpu takes a value in `step` but is a switch in `bench`
    assert _attach_negative_values(["step", "--gpu", "-1"], parser) == ["step", "--gpu=-1"]
    assert _attach_negative_values(["bench", "--gpu", "-1"], parser) == ["bench", "--gpu", "-1"]
    assert _attach_negative_values(["collective", "-b", "-8M", "--out", "-x"], parser) == [
        "collective",
        "-b=-8M",
        "--out",
        "-x",
    ]


def test_missing_value_is_still_a_usage_error(capsys):
    assert main(["cc", "--scenario", "dumbbell", "--out", "--json"]) == 2
    data = _one_json(capsys.readouterr().out)
    assert data["error"] == "UsageError" and "--out" in data["message"]


def test_collective_bare_unit_prefix_suggests_bytes(capsys):
    assert (
        main(
            [
                "collective",
                "--fabric",
                "dgx-h100-superpod",
                "--op",
                "all_reduce",
                "--gpus",
                "8",
                "-b",
                "8M",
                "--json",
            ]
        )
        == 2
    )
    message = _one_json(capsys.readouterr().out)["message"]
    assert message.startswith("minbytes:") and "8MiB" in message and "8MB" in message


def test_demo_bad_fabric_creates_no_out_folder(tmp_path, capsys):
    out_dir = tmp_path / "demo"
    assert main(["demo", "--fabric", "no-such-preset", "--out", str(out_dir), "--json"]) == 2
    assert _one_json(capsys.readouterr().out)["error"] == "SpecError"
    assert not out_dir.exists()


# ------------------------------------------------------------------ memory
@pytest.mark.parametrize(
    "raised, words",
    [
        (MemoryError(), "fabricflow presets ran out of memory"),
        (fabricflow.MemoryBudgetError("routing needs 9 GiB; budget 1 GiB"), "routing needs 9 GiB"),
    ],
)
def test_memory_errors_are_named_errors(monkeypatch, capsys, raised, words):
    import fabricflow.commands.presets as presets

    def out_of_memory(args):
        raise raised

    monkeypatch.setattr(presets, "run", out_of_memory)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["presets", "--json"]) == 2
    captured = capsys.readouterr()
    data = _one_json(captured.out)
    assert data["error"] == "MemoryBudgetError" and words in data["message"]
    assert "Traceback" not in captured.err
    assert main(["presets"]) == 2
    assert "fabricflow presets: error:" in capsys.readouterr().err


def test_signal_after_the_report_keeps_one_json_object(monkeypatch, capsys):
    import fabricflow.commands.presets as presets
    from fabricflow.commands._common import print_json

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
