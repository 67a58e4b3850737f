"""htsim connection matrices with numbers no simulator writes (``1_000``, ``nan``) are
refused naming the line (Python's float() read them)."""

from __future__ import annotations

import pytest

from fabricflow.errors import SpecError
from fabricflow.traffic.htsim import read_connection_matrix


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("0->1 id 1 start 1_000 size 65536", "start must be a number"),
        ("0->1 id 1 start 0 size 65_536", "size must be a number"),
        ("0->1 id 1 start 0 size nan", "size must be a number"),
        ("0->1 id 1 start infinity size 1", "start must be a number"),
    ],
)
def test_numbers_no_simulator_writes_are_refused(tmp_path, line, words):
    path = tmp_path / "flows.cm"
    path.write_text(f"Nodes 4\nConnections 1\n{line}\n")
    with pytest.raises(SpecError, match=words) as error:
        read_connection_matrix(path)
    assert "line 3" in str(error.value)
    path.write_text("Nodes 4\nConnections 1\n0->1 id 1 start 12.5 size 6.5e4\n")
    assert read_connection_matrix(path).size.tolist() == [65000.0]
