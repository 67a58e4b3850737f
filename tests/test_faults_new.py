"""Regression tests for bad input to the cluster, sweep and report features: each case
was a traceback, a silently dropped value or a wrong number before its fix."""

from __future__ import annotations

import pytest

import fabricflow as ff
from fabricflow.errors import SpecError

_ROW = "id,model,gpu,gpus,tp,arrival,steps\n"


def test_trace_csv_row_with_surplus_cells_is_refused(tmp_path):
    # csv.DictReader files surplus cells under None; they used to be dropped silently.
    path = tmp_path / "t.csv"
    path.write_text(_ROW + "a,llama3-8b,h100-sxm,16,8,0s,10,999\n")
    with pytest.raises(SpecError, match=r"jobs\[0\].*8 cells but the header has 7"):
        ff.load_trace(path)


def test_trace_yaml_duplicate_key_is_refused(tmp_path):
    # A repeated `gpus:` used to silently win (the job ran on 32 GPUs, not 16).
    path = tmp_path / "t.yaml"
    path.write_text(
        "jobs:\n  - id: a\n    model: llama3-8b\n    gpu: h100-sxm\n    gpus: 16\n"
        "    gpus: 32\n    layout: {tp: 8}\n    steps: 5\n"
    )
    with pytest.raises(SpecError, match="duplicate key 'gpus'"):
        ff.load_trace(path)


def test_trace_not_utf8_or_a_directory_is_a_spec_error(tmp_path):
    latin = tmp_path / "t.csv"
    latin.write_bytes(_ROW.encode() + b"a\xe9,llama3-8b,h100-sxm,16,8,0s,10\n")
    with pytest.raises(SpecError, match="not UTF-8"):
        ff.load_trace(latin)
    folder = tmp_path / "dir.yaml"
    folder.mkdir()
    with pytest.raises(SpecError, match="trace"):
        ff.load_trace(folder)


def test_trace_csv_still_reads(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(_ROW + "a,llama3-8b,h100-sxm,16,8,0s,10\n")
    (job,) = ff.load_trace(path)
    assert (job.id, job.gpus, job.steps, job.layout.tp, job.layout.dp) == ("a", 16, 10, 8, 2)
