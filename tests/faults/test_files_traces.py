"""This project's CSV traces: a number with an underscore and a count beyond int64 are
refused naming the row and column (``1_0`` was read as 10 seconds; a step count of 10^20
was accepted)."""

from __future__ import annotations

import pytest

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
