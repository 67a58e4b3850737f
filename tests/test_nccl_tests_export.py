"""``collective --out``: the table as exact CSV and in nccl-tests' output format."""

from __future__ import annotations

import csv
import json

import pytest

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.collective.nccl_tests import format_nccl_tests, read_nccl_tests


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


MEASURED = """# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  41260 on    node01 device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  41261 on    node01 device  1 [0x2a] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    20.51   51.12   51.12      0    20.12   52.12   52.12      0
     2097152        524288     float     sum      -1    28.05   74.76   74.76      0    27.91   75.14   75.14      0
     4194304       1048576     float     sum      -1    41.82  100.29  100.29      0    41.60  100.82  100.82      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 75.7083
#
"""


def test_a_measured_log_reads_back(tmp_path):
    path = tmp_path / "all_reduce.log"
    path.write_text(MEASURED)
    log = read_nccl_tests(path)
    assert log.ranks == 2 and (log.data_type, log.redop) == ("float", "sum")
    assert log.bytes.tolist() == [1048576, 2097152, 4194304]
    assert log.time_us[1].tolist() == [20.12, 27.91, 41.60]  # in-place
    assert log.busbw_GBps[0].tolist() == [51.12, 74.76, 100.29]  # out-of-place
    assert log.avg_busbw_GBps == 75.7083
    # an older log without the root column, and the model's own output
    old = "\n".join(
        " ".join(line.split()[:4] + line.split()[5:]) if line[:1] == " " else line
        for line in MEASURED.splitlines()
    )
    path.write_text(old.replace("redop    root", "redop"))
    assert read_nccl_tests(path).root.tolist() == [-1, -1, -1]
    rows = [{"bytes": 8, "count": 2, "time_us": 5.0, "algbw_GBps": 1.0, "busbw_GBps": 2.0}]
    path.write_text(format_nccl_tests(rows, "all_to_all", gpus=8))
    assert read_nccl_tests(path).busbw_GBps.tolist() == [[2.0], [2.0]]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.split("# Out of bounds")[0], "line 12: the log stops here"),  # truncated
        (lambda t: t.replace("41.82  100.29", "41.82"), "line 12: 12 fields, expected 13"),
        (lambda t: t.replace("    28.05", "    2x.05"), "line 11: time/algbw/busbw '2x.05'"),
        (lambda t: t.replace("2097152        524288", "1048576        524288"), "line 11: size"),
        (
            lambda t: t.replace("float     sum      -1    28", "half     sum      -1    28"),
            "line 11",
        ),
        (lambda t: "#\n", "no data line"),
    ],
)
def test_malformed_logs_name_the_file_and_line(tmp_path, edit, message):
    path = tmp_path / "bad.log"
    path.write_text(edit(MEASURED))
    with pytest.raises(ff.SpecError) as error:
        read_nccl_tests(path)
    assert str(path) in str(error.value) and message in str(error.value), str(error.value)
