"""``fabricflow cluster``: the --json object, --out files, bad input, interrupts."""

from __future__ import annotations

import json
import os
import signal

import pytest
import yaml

from fabricflow.cli import main

JOB_KEYS = {
    "id",
    "start_s",
    "end_s",
    "gpus",
    "steps_done",
    "standalone_step_s",
    "mean_step_s",
    "slowdown",
    "failures",
    "restarts",
    "lost_work_s",
    "goodput",
}
CLUSTER_KEYS = {"utilization", "goodput", "failures", "fragmentation", "queue_wait_s"}


def _trace(tmp_path, rows=None):
    rows = rows or [
        {
            "id": "pretrain",
            "model": "llama3-8b",
            "gpu": "h100-sxm",
            "gpus": 256,
            "layout": {"tp": 8, "micro_batch": 1, "seq": 8192},
            "steps": 3000,
            "priority": 0,
        },
        {
            "id": "eval",
            "model": "megatron-1.7b",
            "gpu": "h100-sxm",
            "gpus": 2,
            "layout": {"tp": 1, "micro_batch": 2, "seq": 2048},
            "arrival": "10m",
            "duration": "30m",
        },
    ]
    path = tmp_path / "trace.yaml"
    path.write_text(yaml.safe_dump({"jobs": rows}))
    return str(path)


BASE = ["cluster", "--fabric", "dgx-h100-superpod", "--scheduler", "first-fit"]


def test_json_object_and_out_folder(tmp_path, capsys):
    out = tmp_path / "run"
    argv = [
        *BASE,
        "--trace",
        _trace(tmp_path),
        "--mtbf",
        "default",
        "--mtbf",
        "gpu=500h",
        "--mttr",
        "gpu=1h",
        "--checkpoint-interval",
        "10m",
        "--checkpoint-write-time",
        "20s",
        "--restart-time",
        "2m",
        "--spares",
        "1",
        "--horizon",
        "2d",
        "--seed",
        "3",
        "--no-interference",
        "--json",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)  # exactly one object
    assert [job["id"] for job in report["jobs"]] == ["pretrain", "eval"]
    for job in report["jobs"]:
        assert JOB_KEYS <= set(job)
        assert 0 < job["goodput"] <= 1 and job["slowdown"] == pytest.approx(1.0)
    assert CLUSTER_KEYS <= set(report["cluster"])
    assert set(report["cluster"]["queue_wait_s"]) == {"p50", "p99", "mean"}
    assert report["cluster"]["horizon_s"] == 2 * 86400
    assert report["settings"]["failures"]["mtbf_s"]["gpu"] == 500 * 3600
    assert report["settings"]["checkpoint"]["spares"] == 1
    files = set(os.listdir(out))
    assert {"timeline.nc", "jobs.csv", "summary.json", "gantt.png", "utilization.png"} <= files
    assert "slowdown_cdf.png" in files and "goodput_map.png" in files
    rows = (out / "jobs.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[0].startswith("id,gpus")
    import xarray as xr

    with xr.open_dataset(out / "timeline.nc") as data:
        assert data["state"].dims == ("time", "job")


def test_table_and_synthetic(capsys):
    argv = [*BASE, "--synthetic", "12", "--no-interference", "--seed", "2"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "cluster: utilization" in text and "job-0011" in text


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--mtbf", "psu=100h"], "unknown component"),
        (["--mtbf", "gpu"], "COMPONENT=DURATION"),
        (["--mtbf", "gpu=-3h"], "gpu"),
        (["--mttr", "gpu=1h"], "needs --mtbf"),
        (["--checkpoint-interval", "0s"], "interval"),
        (["--spares", "-1"], "spares"),
        (["--horizon", "soon"], "horizon"),
    ],
)
def test_bad_flags_exit_2(tmp_path, capsys, extra, message):
    assert main([*BASE, "--trace", _trace(tmp_path), *extra, "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert message in report["message"]


def test_bad_trace_names_row_and_field(tmp_path, capsys):
    rows = [
        {
            "id": "ok",
            "model": "llama3-8b",
            "gpu": "h100-sxm",
            "gpus": 8,
            "layout": {"tp": 8},
            "steps": 10,
        },
        {
            "id": "huge",
            "model": "llama3-8b",
            "gpu": "h100-sxm",
            "gpus": 4096,
            "layout": {"tp": 8},
            "steps": 10,
        },
    ]
    assert main([*BASE, "--trace", _trace(tmp_path, rows), "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert "jobs[1] (id 'huge').gpus" in report["message"]
    assert "larger than the cluster" in report["message"]
    assert main([*BASE, "--trace", str(tmp_path / "missing.yaml"), "--json"]) == 2


def test_unwritable_out_fails_before_simulating(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main([*BASE, "--trace", _trace(tmp_path), "--out", str(blocker), "--json"]) == 1
    assert "not a folder" in json.loads(capsys.readouterr().out)["message"]


def test_interrupt_exits_130_and_writes_nothing(tmp_path, capsys, monkeypatch):
    from fabricflow.commands import cluster as cluster_command
    from fabricflow.commands.interrupts import Interrupted

    def interrupted(*args, **kwargs):
        raise Interrupted(signal.SIGINT)

    # the command's own name for the simulation (imported at the command module's top)
    monkeypatch.setattr(cluster_command, "simulate_cluster", interrupted)
    out = tmp_path / "run"
    argv = [*BASE, "--trace", _trace(tmp_path), "--out", str(out), "--json"]
    assert main(argv) == 130
    report = json.loads(capsys.readouterr().out)
    assert report["error"] == "Interrupted"
    assert not out.exists() or os.listdir(out) == []
