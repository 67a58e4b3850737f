"""This project's CSV traces: a number with an underscore and a count beyond int64 are
refused naming the row and column (``1_0`` was read as 10 seconds; a step count of 10^20
was accepted)."""

from __future__ import annotations

import pytest

import fabricflow as ff
from fabricflow.cluster.trace import load_trace
from fabricflow.errors import SpecError

HEADER = "id,model,gpu,gpus,tp,micro_batch,seq,arrival,steps\n"


@pytest.mark.parametrize(
    ("row", "column", "words"),
    [
        ("a,llama3-8b,h100-sxm,16,8,1,8192,1_0,10", "arrival", "got '1_0'"),
        ("a,llama3-8b,h100-sxm,16,8,1,8192,0," + "9" * 20, "steps", "64-bit integer range"),
    ],
)
def test_cells_no_tool_writes_are_refused(tmp_path, row, column, words):
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + row + "\n")
    with pytest.raises(SpecError) as error:
        load_trace(str(path))
    assert error.value.field == f"jobs[0] (id 'a').{column}" and words in str(error.value)
    path.write_text(HEADER + "a,llama3-8b,h100-sxm,16,8,1,8192,1.5e3,10\n")
    assert load_trace(str(path))[0].arrival_s == 1500.0


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


def test_trace_csv_layout_columns_with_optimize_are_refused_not_dropped(tmp_path):
    # layout=optimize with a tp column: the tp was silently dropped and optimize chose.
    path = tmp_path / "t.csv"
    path.write_text(
        "id,model,gpu,gpus,layout,tp,arrival,steps\na,llama3-8b,h100-sxm,16,optimize,8,0s,10\n"
    )
    with pytest.raises(SpecError, match=r"layout\.tp: with optimize"):
        ff.load_trace(path, fabric=ff.load_fabric("fat-tree-k16"))


def test_trace_csv_sequence_parallel_yes_is_refused_not_false(tmp_path):
    # Only "1"/"true" meant True; "yes" or "on" silently meant False.
    path = tmp_path / "t.csv"
    path.write_text(
        "id,model,gpu,gpus,tp,sequence_parallel,arrival,steps\n"
        "a,llama3-8b,h100-sxm,16,8,yes,0s,10\nb,llama3-8b,h100-sxm,16,8,True,0s,10\n"
    )
    with pytest.raises(SpecError, match=r"jobs\[0\].*sequence_parallel: expected true"):
        ff.load_trace(path)
    path.write_text(path.read_text().replace(",yes,", ",0,"))
    assert [job.layout.sequence_parallel for job in ff.load_trace(path)] == [False, True]


def test_trace_layout_error_names_the_field_once():
    # Layout's own errors came out as "jobs[0] (id 'a').layout.layout.sequence_parallel".
    row = {"id": "a", "model": "llama3-8b", "gpu": "h100-sxm", "gpus": 16, "steps": 5}
    with pytest.raises(SpecError) as caught:
        ff.load_trace([{**row, "layout": {"tp": 8, "sequence_parallel": 2}}])
    assert caught.value.field == "jobs[0] (id 'a').layout.sequence_parallel"
