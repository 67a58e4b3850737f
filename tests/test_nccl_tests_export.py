"""``collective --out``: the table as exact CSV and in nccl-tests' output format."""

from __future__ import annotations

import csv
import json

import pytest

from fabricflow.cli import main
from fabricflow.collective.nccl_tests import format_nccl_tests


def test_collective_out_writes_csv_and_nccl_tests_text(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["collective", "--fabric", "dgx-h100-superpod", "--op", "all_reduce", "--gpus", "16"]
    assert main([*argv, "-b", "8MiB", "-e", "32MiB", "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted(p.rsplit("/", 1)[1] for p in report["files"]) == [
        "collective.csv",
        "nccl-tests.txt",
    ]
    rows = list(csv.DictReader((out / "collective.csv").open()))
    assert [int(r["bytes"]) for r in rows] == [row["bytes"] for row in report["rows"]]
    assert [float(r["busbw_GBps"]) for r in rows] == [row["busbw_GBps"] for row in report["rows"]]
    lines = (out / "nccl-tests.txt").read_text().splitlines()
    data = [line.split() for line in lines if line and not line.startswith("#")]
    assert len(data) == 3 and all(len(fields) == 13 for fields in data)
    for fields, row in zip(data, report["rows"], strict=True):
        assert int(fields[0]) == row["bytes"] and int(fields[1]) == row["count"]
        assert fields[2:5] == ["float", "sum", "-1"]
        assert float(fields[7]) == pytest.approx(row["busbw_GBps"], abs=0.005)
        assert fields[5:9] == fields[9:13]  # out-of-place = in-place
    assert any(line.startswith("# Avg bus bandwidth") for line in lines)


def test_time_column_follows_nccl_tests():
    row = {"bytes": 8, "count": 2, "algbw_GBps": 0.0, "busbw_GBps": 0.0}
    for us, text in ((12.345, "12.35"), (123.45, "123.5"), (12345.6, "12346")):
        line = format_nccl_tests([{**row, "time_us": us}], "all_gather", gpus=8).splitlines()[6]
        assert line.split()[5] == text and len(line.split()[5]) <= 7, line
        assert line.split()[3] == "none"
