"""nccl-tests logs with values nccl-tests never prints are refused, naming the line."""

from __future__ import annotations

import pytest

from fabricflow.collective.nccl_tests import read_nccl_tests
from fabricflow.errors import SpecError

LOG = """# nThread 1 nGpus 1 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#  Rank  0 Group  0 Pid  41260 on    node01 device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  41261 on    node01 device  1 [0x2a] NVIDIA H100 80GB HBM3
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
     1048576        262144     float    none       0    20.51   51.12   51.12      0    20.12   52.12   52.12      0
     2097152        524288     float    none       0    28.05   74.76   74.76      0    27.91   75.14   75.14      0
# Avg bus bandwidth    : 63.28
"""


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ("     1048576        262144", "    -1048576        262144", "line 5: size '-1048576'"),
        ("     1048576        262144", "           0       -262144", "line 5: count '-262144'"),
        ("none       0    28.05", "none      -5    28.05", "line 6: root '-5' must be >= -1"),
        ("none       0    28.05", "none       2    28.05", "line 6: root 2 is not one of"),
        ("    28.05   74.76", "    2_8.05   74.76", "line 6: time/algbw/busbw '2_8.05'"),
        ("    28.05   74.76", "      nan   74.76", "line 6: time/algbw/busbw 'nan'"),
        ("    28.05   74.76", " infinity   74.76", "line 6: time/algbw/busbw 'infinity'"),
        (": 63.28", ": 6_3.28", "line 7: average bus bandwidth '6_3.28'"),
    ],
)
def test_values_nccl_tests_never_prints_are_refused(tmp_path, old, new, words):
    path = tmp_path / "broadcast.log"
    assert old in LOG
    path.write_text(LOG.replace(old, new, 1))
    with pytest.raises(SpecError) as error:
        read_nccl_tests(path)
    assert f"{path}, {words}" in str(error.value), str(error.value)


def test_a_valid_log_with_a_root_reads(tmp_path):
    path = tmp_path / "broadcast.log"
    path.write_text(LOG)
    log = read_nccl_tests(path)
    assert log.root.tolist() == [0, 0] and log.ranks == 2
    assert log.time_us[0].tolist() == [20.51, 28.05]


def test_a_log_that_is_not_text_or_too_large_is_refused(tmp_path, monkeypatch):
    from fabricflow.collective import nccl_tests

    path = tmp_path / "all_reduce.log"
    path.write_bytes(LOG.encode().replace(b"float", b"fl\xffat", 1))
    with pytest.raises(SpecError, match=r"is not UTF-8 text: byte 0xff at line 5"):
        read_nccl_tests(path)  # the byte was replaced and the type read as 'fl?at'
    path.write_text(LOG)
    monkeypatch.setattr(nccl_tests, "MAX_LOG_BYTES", 100)
    with pytest.raises(SpecError, match=r"is \d+ bytes, over the limit of 100 bytes"):
        read_nccl_tests(path)
