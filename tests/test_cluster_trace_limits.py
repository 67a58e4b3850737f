"""Trace input limits: duplicated or unnamed CSV columns, YAML too large to parse, traces
too large for memory (refused up front with the size), jobs larger than the usable cluster
refused before any layout search, and synthetic traces that respect the spares."""

from __future__ import annotations

import json

import pytest

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.cluster import trace as trace_module
from fabricflow.cluster import trace_files
from fabricflow.cluster.synthetic import mix_shape, synthetic_trace
from fabricflow.cluster.trace import load_trace
from fabricflow.errors import MemoryBudgetError, SpecError

HEADER = "id,model,gpu,gpus,tp,micro_batch,seq,arrival,steps"
ROW = "a,llama3-8b,h100-sxm,16,8,1,8192,0,10"


def test_a_csv_column_named_twice_is_refused(tmp_path):
    path = tmp_path / "dup.csv"
    path.write_text("id,model,gpu,gpus,tp,gpus,steps\na,llama3-8b,h100-sxm,16,8,32,10\n")
    with pytest.raises(SpecError, match="column 'gpus' twice") as info:
        load_trace(str(path))
    assert info.value.field == "trace.gpus" and "columns 4 and 6" in str(info.value)


def test_an_unnamed_csv_column_is_refused(tmp_path):
    path = tmp_path / "blank.csv"
    path.write_text("id,model,,gpus\na,llama3-8b,h100-sxm,16\n")
    with pytest.raises(SpecError, match="column 3 of the header has no name"):
        load_trace(str(path))


def test_csv_rows_with_missing_or_impossible_fields_name_row_and_field(tmp_path):
    cases = {
        "a,llama3-8b,h100-sxm,,8,1,8192,0,10": ("jobs[1] (id 'a').gpus", "missing"),
        "b,llama3-8b,h100-sxm,-16,8,1,8192,0,10": ("jobs[1] (id 'b').gpus", "positive"),
        "c,llama3-8b,h100-sxm,16,8,1,8192,-5h,10": ("jobs[1] (id 'c').arrival", "duration"),
        "d,llama3-8b,h100-sxm,16,8,1,8192,0,1.5": ("jobs[1] (id 'd').steps", "positive"),
        "e,llama3-8b,h100-sxm,16,8,1,8192,0,10,extra": ("jobs[1]", "cells"),
    }
    for line, (field, message) in cases.items():
        path = tmp_path / "bad.csv"
        path.write_text(f"{HEADER}\nok,llama3-8b,h100-sxm,16,8,1,8192,0,10\n{line}\n")
        with pytest.raises(SpecError, match=message) as info:
            load_trace(str(path))
        assert info.value.field.startswith(field), (line, info.value.field)


def test_a_yaml_trace_over_the_limit_is_refused_before_parsing(tmp_path, monkeypatch):
    path = tmp_path / "big.yaml"
    rows = [
        {"id": f"j{i}", "model": "llama3-8b", "gpu": "h100-sxm", "gpus": 8, "layout": {"tp": 8}}
        for i in range(40)
    ]
    path.write_text(json.dumps({"jobs": rows}))
    monkeypatch.setattr(trace_files, "MAX_YAML_BYTES", 1000)
    with pytest.raises(SpecError, match="write it as CSV") as info:
        load_trace(str(path))
    message = str(info.value)
    assert "GiB" in message and "about" in message and "jobs" in message


def test_a_trace_over_the_memory_budget_is_refused_up_front(tmp_path, monkeypatch):
    path = tmp_path / "many.csv"
    path.write_text(
        HEADER
        + "\n"
        + "\n".join(f"j{i},llama3-8b,h100-sxm,16,8,1,8192,0,10" for i in range(5000))
        + "\n"
    )
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "1MiB")
    with pytest.raises(MemoryBudgetError, match="5,000 jobs"):
        load_trace(str(path))
    with pytest.raises(MemoryBudgetError, match="1,000,000 jobs"):
        synthetic_trace(1_000_000)


def test_a_job_larger_than_the_usable_cluster_fails_before_the_layout_search(monkeypatch):
    fabric = ff.load_fabric("dgx-h100-superpod")

    def no_search(*args, **kwargs):
        raise AssertionError("the layout search ran for a job that can never run")

    monkeypatch.setattr(trace_module, "_optimized_layout", no_search)
    row = {
        "id": "big",
        "model": "llama3-8b",
        "gpu": "h100-sxm",
        "gpus": 1024,
        "layout": "optimize",
        "steps": 10,
    }
    with pytest.raises(SpecError, match="1008 usable GPUs") as info:
        load_trace([row], fabric=fabric, usable_gpus=1008)
    assert info.value.field == "jobs[0] (id 'big').gpus"


def test_synthetic_traces_respect_the_usable_gpus(capsys):
    jobs = synthetic_trace(300, seed=1, usable_gpus=1008, size_exponent=0.0)
    assert max(job.gpus for job in jobs) == 512
    argv = [
        "cluster",
        "--fabric",
        "dgx-h100-superpod",
        "--synthetic",
        "20",
        "--spares",
        "2",
        "--no-interference",
        "--json",
    ]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert max(job["gpus"] for job in report["jobs"]) <= 1024 - 2 * 8


def test_a_synthetic_run_over_the_memory_budget_is_refused_before_drawing(capsys, monkeypatch):
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "64MiB")
    argv = ["cluster", "--fabric", "dgx-h100-superpod", "--synthetic", "1000000", "--json"]
    assert main(argv) == 2
    report = json.loads(capsys.readouterr().out)
    assert "1,000,000" in report["message"] and "GiB" in report["message"]


def test_the_model_mix_fits_any_gpu_count():
    assert mix_shape(12) == ("megatron-1.7b", mix_shape(12)[1])  # 8 does not divide 12
    name, layout = mix_shape(72)
    assert name == "llama3-8b" and layout["dp"] * layout["tp"] == 72
    name, layout = mix_shape(2048)
    assert name == "llama3-405b" and layout["tp"] * layout["pp"] * layout["dp"] == 2048
