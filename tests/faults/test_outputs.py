"""Output destinations of every command that writes files, under each fault: a nested
folder that does not exist, a read-only disk, a full disk, a path that is a file.

The rule checked: a destination is validated (or created) before the work; a folder that
cannot take files is refused then; a plot that cannot be written, or any output that fails
after the work (a full disk), never loses the result: it is printed, then the error, exit 1.
Files are whole or absent, never partial.
"""

from __future__ import annotations

import pytest
from fault_helpers import leftovers, run_main

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
