"""Output destinations of every command that writes files, under each fault: a nested
folder that does not exist, a read-only disk, a full disk, a path that is a file.

The rule checked: a destination is validated (or created) before the work; a folder that
cannot take files is refused then; a plot that cannot be written, or any output that fails
after the work (a full disk), never loses the result: it is printed, then the error, exit 1.
Files are whole or absent, never partial.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest
from cli_args import STEP
from fault_helpers import check_whole as _check_whole
from fault_helpers import leftovers, run_main
from fault_helpers import no_temporaries as _no_leftovers
from fault_helpers import one_json as _one_json
from small_cases import small_figure as _figure

from fabricflow.cli import main

# command -> (argv without the output flag, the output flag, files it writes, a result key)
COMMANDS = {
    "report": (
        ["report", "--fabric", "fat-tree-k16", "--model", "megatron-1.7b", "--gpu", "a100-80gb",
         "--gpus", "8", "--tp", "8", "--seq", "2048", "--budget", "0", "--fail-fractions",
         "0.25", "--fail-seeds", "1"],
        "--out",
        ["report.html"],
        "title",
    ),
    "optimize": (
        ["optimize", "--fabric", "dgx-a100-superpod", "--gpu", "a100-80gb", "--model",
         "megatron-1.7b", "--gpus", "16", "--global-batch", "32", "--seq", "2048",
         "--space", "tp=1,2", "--collectives", "alpha-beta"],
        "--out",
        ["best.json", "candidates.nc", "pareto.png", "top_breakdown.png"],
        "best",
    ),
    "cluster": (
        ["cluster", "--fabric", "dgx-h100-superpod", "--scheduler", "first-fit",
         "--synthetic", "4"],
        "--out",
        ["timeline.nc", "jobs.csv", "summary.json", "gantt.png", "utilization.png",
         "slowdown_cdf.png"],
        "cluster",
    ),
    "fct": (
        ["fct", "--fabric", "fat-tree-k16", "--traffic", "permutation", "--hosts", "16"],
        "--out",
        ["flows.csv", "summary.json", "fct_cdf.png"],
        "fct_us",
    ),
    "demo": (
        ["demo", "--fabric", "fat-tree-k16"],
        "--out",
        ["fabric_tiers.png", "alltoall_utilization.png", "alltoall_flows_per_link.png"],
        "alltoall_flows",
    ),
    "step": (
        ["step", "--fabric", "fat-tree-k16", "--gpu", "h100-sxm", "--model", "llama3-8b",
         "--gpus", "16", "--tp", "8", "--global-batch", "16", "--seq", "2048",
         "--micro-batch", "1"],
        "--plot",
        ["breakdown.png"],
        "step_time_s",
    ),
}  # fmt: skip


def destination(command: str, folder) -> str:
    """The output flag's value for ``command`` under ``folder`` (a file for --plot)."""
    _, flag, files, _ = COMMANDS[command]
    return str(folder / files[0]) if flag == "--plot" else str(folder)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_nested_folder_that_does_not_exist_is_created(tmp_path, capsys, command):
    argv, flag, files, key = COMMANDS[command]
    folder = tmp_path / "a" / "b" / "new"
    code, data, _ = run_main(capsys, [*argv, flag, destination(command, folder)])
    assert code == 0, data
    assert key in data and "error" not in data
    for name in files:
        assert (folder / name).stat().st_size > 0, name
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_a_read_only_disk(tmpfs, capsys, command):
    """--out: refused before the work; --plot: the result, then the error. One message."""
    argv, flag, _, key = COMMANDS[command]
    disk = tmpfs("ro,size=64k")
    code, data, err = run_main(capsys, [*argv, flag, destination(command, disk / "run")])
    assert code == 1
    assert data["error"] == "OutputError"
    message = data["message"]
    assert message.startswith(f"{flag}:") and "the file system is read-only" in message
    if flag == "--plot":  # the figure beside a printed result: the result is not lost
        assert key in data
        assert "read-only" in err  # said at once, before the work
    else:  # nothing ran for an output it could not write
        assert key not in data


@pytest.mark.parametrize("command", COMMANDS)
def test_a_full_disk_keeps_the_result_and_leaves_no_partial_file(tmpfs, capsys, command):
    argv, flag, files, key = COMMANDS[command]
    disk = tmpfs("size=12k")
    code, data, _ = run_main(capsys, [*argv, flag, destination(command, disk)])
    assert code == 1
    assert key in data, "the finished work is printed"
    assert data["error"] == "OutputError" and "the disk is full" in data["message"]
    assert leftovers(disk) == []
    for path in disk.iterdir():  # whatever is there is whole (small files fit)
        assert path.name in files and path.stat().st_size > 0


@pytest.mark.parametrize("command", COMMANDS)
def test_a_destination_under_a_file_is_refused_before_the_work(tmp_path, capsys, command):
    argv, flag, _, key = COMMANDS[command]
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, data, _ = run_main(capsys, [*argv, flag, destination(command, blocker / "sub")])
    assert code == 1
    assert data["error"] == "OutputError" and data["message"].startswith(f"{flag}:")
    assert "not a folder" in data["message"]
    assert blocker.read_text() == "x"
    if flag == "--out":
        assert key not in data


def test_text_mode_prints_the_result_then_the_error(tmpfs, capsys):
    from fabricflow.cli import main

    argv, flag, _, _ = COMMANDS["step"]
    disk = tmpfs("ro,size=64k")
    assert main([*argv, flag, str(disk / "x.png")]) == 1
    captured = capsys.readouterr()
    assert "step time" in captured.out
    last = captured.err.strip().splitlines()[-1]
    assert last.startswith("fabricflow step: error: --plot:") and "read-only" in last


CC = ["cc", "--scenario", "dumbbell", "--flows", "2", "--duration", "1ms"]


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


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize(
    "argv",
    [
        ["presets", "--json"],
        ["presets"],
        ["fabric", "--json", "dgx-h100-superpod"],
    ],
)
def test_full_disk_on_stdout_is_one_line_and_exit_1(argv):
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "fabricflow.cli", *argv],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "fabricflow: error: cannot write the output to stdout: No space left on device"
    ], done.stderr


# ------------------------------------------------- step --plot: checked as it is written


def _step(tmp_path, plot: str) -> list[str]:
    return [*STEP, "--plot", str(tmp_path / plot), "--json"]


@pytest.mark.parametrize("plot", ["out", "out.png", "new/folder/out.PNG"])
def test_step_plot_writes_png_with_or_without_extension(tmp_path, capsys, plot):
    # save_figure writes PNG when the name has no extension; the early check must agree,
    # and a missing folder is created, as --out creates its folder.
    assert main(_step(tmp_path, plot)) == 0
    assert json.loads(capsys.readouterr().out)["plot"] == str(tmp_path / plot)
    assert (tmp_path / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_step_plot_format_refused_before_the_model_runs(tmp_path, capsys, monkeypatch):
    from fabricflow.workload import step

    def no_model(*args, **kwargs):
        raise AssertionError("the step model ran before --plot was checked")

    monkeypatch.setattr(step, "step_time", no_model)
    assert main(_step(tmp_path, "out.xyz")) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["error"] == "SpecError"
    assert all(word in data["message"] for word in ("--plot", "'xyz'", "png")), data["message"]
    assert sorted(tmp_path.rglob("*")) == []


@pytest.mark.parametrize(
    ("plot", "words"),
    [("a_folder", ("--plot", "is a folder")), ("a_file/out.png", ("--plot", "not a folder"))],
)
def test_step_plot_that_cannot_be_written_keeps_the_result(tmp_path, capsys, plot, words):
    # the destination is checked before the model runs (a warning says so at once); the
    # result is printed all the same, then the error, exit 1
    (tmp_path / "a_folder").mkdir()
    (tmp_path / "a_file").write_text("")
    before = sorted(tmp_path.rglob("*"))
    assert main(_step(tmp_path, plot)) == 1
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["error"] == "OutputError" and data["step_time_s"] > 0 and "plot" not in data
    assert all(word in data["message"] for word in words), data["message"]
    assert "warning: --plot" in captured.err
    assert sorted(tmp_path.rglob("*")) == before  # nothing created, nothing left behind


@pytest.mark.skipif(
    not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() == 0,
    reason="root writes into read-only folders",
)
def test_save_figure_into_a_read_only_folder_raises_output_error(tmp_path):
    from fabricflow.errors import OutputError
    from fabricflow.plots.figures import save_figure

    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(OutputError, match="permission denied"):
            save_figure(_figure(), folder / "a.png")
        assert list(folder.iterdir()) == []
    finally:
        folder.chmod(0o755)


def test_save_figure_under_a_file_raises_output_error(tmp_path):
    from fabricflow.errors import OutputError
    from fabricflow.plots.figures import save_figure

    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="file"):
        save_figure(_figure(), tmp_path / "file" / "a.png")


def test_save_figure_on_a_full_disk_leaves_no_file(tmp_path, monkeypatch):
    import errno

    from matplotlib.figure import Figure

    from fabricflow.errors import OutputError
    from fabricflow.plots.figures import save_figure

    def half_written(self, target, **options):
        with open(target, "wb") as handle:
            handle.write(b"\x89PNG truncated")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", half_written)
    with pytest.raises(OutputError, match="disk is full"):
        save_figure(_figure(), tmp_path / "a.png")
    assert list(tmp_path.iterdir()) == []
