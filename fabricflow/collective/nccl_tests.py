"""The text format of nccl-tests' performance tables (``all_reduce_perf`` and friends).

nccl-tests (github.com/NVIDIA/nccl-tests, ``src/common.cu``) prints one line per message
size: size in bytes, element count, data type, reduction, root, then for the out-of-place
and the in-place run the time (us), algorithm bandwidth and bus bandwidth (GB/s) and the
number of wrong elements, and at the end the average bus bandwidth. Tools that read
nccl-tests logs (dashboards, acceptance scripts, fabricflow's own calibration) read this
layout, so ``fabricflow collective --out`` writes it beside its CSV.

The model has no in-place/out-of-place difference and checks no data: both halves carry
the same figures and ``#wrong`` is ``N/A`` (what nccl-tests prints with ``-c 0``).

:func:`read_nccl_tests` reads such a log back (a measured one or this module's), with
errors that name the file and line.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.files import MAX_FILE_BYTES, decode_text
from fabricflow.schema import DECIMAL, at_line

# The largest log read: a run prints about 100 bytes per message size.
MAX_LOG_BYTES = MAX_FILE_BYTES

__all__ = ["NCCL_TESTS_OPS", "NcclTestsLog", "format_nccl_tests", "read_nccl_tests"]

# fabricflow op -> (nccl-tests binary, redop, root) as nccl-tests prints them
NCCL_TESTS_OPS = {
    "all_reduce": ("all_reduce_perf", "sum", -1),
    "reduce_scatter": ("reduce_scatter_perf", "sum", -1),
    "all_gather": ("all_gather_perf", "none", -1),
    "all_to_all": ("alltoall_perf", "none", -1),
    "broadcast": ("broadcast_perf", "none", 0),
    "sendrecv": ("sendrecv_perf", "none", -1),
}


def _time(us: float) -> str:
    """nccl-tests' time column: fewer decimals as the time grows (``%7.0f`` from 10 ms)."""
    if us >= 10000.0:
        return f"{us:7.0f}"
    if us >= 100.0:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


def format_nccl_tests(rows: list[dict], op: str, *, gpus: int, title: str = "") -> str:
    """nccl-tests text of ``rows`` (:func:`fabricflow.collective.size_sweep.table_rows`: keys
    ``bytes``, ``count``, ``time_us``, ``algbw_GBps``, ``busbw_GBps``) for ``op``, run on
    ``gpus`` GPUs. ``title``: a comment line on top (what was modeled).

    Raises:
        KeyError: an ``op`` nccl-tests has no binary for (see :data:`NCCL_TESTS_OPS`).
    """
    binary, redop, root = NCCL_TESTS_OPS[op]
    sizes = [row["bytes"] for row in rows]
    lines = [
        f"# {binary}: modeled by fabricflow{': ' + title if title else ''}",
        f"# nThread 1 nGpus {gpus} minBytes {min(sizes, default=0)} maxBytes "
        f"{max(sizes, default=0)} step: 2(factor) warmup iters: 0 iters: 1 agg iters: 1 "
        "validation: 0 graph: 0",
        "#",
        f"#{'':>64}out-of-place{'':>23}in-place",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
        "            (us)  (GB/s)  (GB/s)",
    ]
    for row in rows:
        half = f"  {_time(row['time_us'])}  {row['algbw_GBps']:6.2f}  {row['busbw_GBps']:6.2f}  {'N/A':>5}"
        lines.append(
            f"{row['bytes']:12d}  {row['count']:12d}  {'float':>8}  {redop:>6}  {root:6d}"
            + half
            + half
        )
    average = sum(row["busbw_GBps"] for row in rows) / max(len(rows), 1)
    lines += [
        "# Out of bounds values : 0 OK",
        f"# Avg bus bandwidth    : {average:g} ",
        "#",
    ]
    return "\n".join(lines) + "\n"


@dataclasses.dataclass(frozen=True)
class NcclTestsLog:
    """The table of one nccl-tests log.

    Attributes:
        source: the file's path. ranks: GPUs listed in the ``#  Rank ...`` lines (0 when
            the log has none). data_type, redop: of the rows (nccl-tests runs one of each).
        bytes, count: int64 ``[S]``; root: int64 ``[S]`` (-1 where the log has no root
            column).
        time_us, algbw_GBps, busbw_GBps: float64 ``[2, S]``: out-of-place (row 0) and
            in-place (row 1).
        wrong: the ``#wrong`` cells ``[2][S]`` as written (``0``, ``N/A``, ...).
        avg_busbw_GBps: the ``# Avg bus bandwidth`` line.
    """

    source: str
    ranks: int
    data_type: str
    redop: str
    bytes: np.ndarray
    count: np.ndarray
    root: np.ndarray
    time_us: np.ndarray
    algbw_GBps: np.ndarray
    busbw_GBps: np.ndarray
    wrong: tuple
    avg_busbw_GBps: float


_RANK = re.compile(r"^#\s+Rank\s+\d+")


def read_nccl_tests(path: str | os.PathLike) -> NcclTestsLog:
    """Parse the output of ``all_reduce_perf``, ``all_gather_perf``, ``alltoall_perf``
    (any nccl-tests binary): one data line per size with 13 fields (size, count, type,
    redop, root, then time, algbw, busbw, #wrong out-of-place and in-place) or 12 (older
    versions without ``root``); comment lines (``#``) are skipped except the rank list and
    the average.

    Raises:
        SpecError: ``nccl-tests``, naming the file and line: a file over
            :data:`MAX_LOG_BYTES` or not UTF-8 text, a data line with another
            number of fields, a field that is not a decimal number (``1_000``, ``nan``), a
            negative size or count, a root below -1 or beyond the ranks listed, sizes not
            increasing, rows
            of two data types or reductions, no data line, or a log that stops before its
            ``# Avg bus bandwidth`` line (a truncated run).
    """
    name = os.fspath(path)
    try:
        size = os.path.getsize(name)
        if size > MAX_LOG_BYTES:
            raise SpecError(
                "nccl-tests",
                f"{name} is {size:,} bytes, over the limit of {MAX_LOG_BYTES:,} bytes for "
                "a nccl-tests log (a run prints a few KB)",
            )
        with open(name, "rb") as handle:
            data = handle.read(MAX_LOG_BYTES + 1)
    except OSError as error:
        raise SpecError("nccl-tests", f"cannot read {name!r}: {error}") from error
    if len(data) > MAX_LOG_BYTES:  # grew while read, or a special file
        raise SpecError("nccl-tests", f"{name} is over the limit of {MAX_LOG_BYTES:,} bytes")
    lines = decode_text(data, "nccl-tests", name).splitlines()
    rows: list[tuple] = []
    ranks, average = 0, None
    has_root = None  # from the column header line, where the log has one
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            ranks += bool(_RANK.match(line))
            words = line.lstrip("#").split()
            if words[:3] == ["size", "count", "type"]:
                has_root = "root" in words
            if line.startswith("# Avg bus bandwidth"):
                average = _number(line.rsplit(":", 1)[-1], name, number, "average bus bandwidth")
            continue
        if average is not None:
            raise SpecError("nccl-tests", f"{name}, line {number}: a data line after the average")
        rows.append((number, *_data_line(line, name, number, has_root)))
    if not rows:
        raise SpecError("nccl-tests", f"{name}: no data line (size count type ... busbw)")
    if average is None:
        raise SpecError(
            "nccl-tests",
            f"{name}, line {rows[-1][0]}: the log stops here, before its '# Avg bus bandwidth' "
            "line (a truncated or failed run)",
        )
    for line_number, *row in rows:
        if ranks and row[4] >= ranks:
            raise SpecError(
                "nccl-tests",
                f"{at_line(name, line_number)}: root {row[4]} is not one of the log's "
                f"{ranks} ranks (0..{ranks - 1}, or -1 for none)",
            )
    for (_, *a), (n1, *b) in zip(rows, rows[1:], strict=False):
        if b[0] <= a[0]:
            raise SpecError("nccl-tests", f"{name}, line {n1}: size {b[0]} after {a[0]}")
        if (b[2], b[3]) != (a[2], a[3]):
            raise SpecError(
                "nccl-tests",
                f"{name}, line {n1}: type/redop {b[2]}/{b[3]} after {a[2]}/{a[3]} (one run per log)",
            )
    columns = list(zip(*[r[1:] for r in rows], strict=True))
    return NcclTestsLog(
        name,
        ranks,
        columns[2][0],
        columns[3][0],
        np.asarray(columns[0], np.int64),
        np.asarray(columns[1], np.int64),
        np.asarray(columns[4], np.int64),
        np.asarray([columns[5], columns[9]], np.float64),
        np.asarray([columns[6], columns[10]], np.float64),
        np.asarray([columns[7], columns[11]], np.float64),
        (columns[8], columns[12]),
        float(average),
    )


def _data_line(line: str, name: str, number: int, has_root) -> tuple:
    fields = line.split()
    expected = {None: (12, 13), True: (13,), False: (12,)}[has_root]
    if len(fields) not in expected:
        raise SpecError(
            "nccl-tests",
            f"{name}, line {number}: {len(fields)} fields, expected "
            f"{' or '.join(map(str, expected))} (size count type redop [root], then time "
            "algbw busbw #wrong out-of-place and in-place)",
        )
    if len(fields) == 12:  # no root column (older nccl-tests)
        fields.insert(4, "-1")
    size, count, root = (
        _integer(fields[i], name, number, what, minimum)
        for i, what, minimum in ((0, "size", 0), (1, "count", 0), (4, "root", -1))
    )
    values = [_number(fields[i], name, number, "time/algbw/busbw") for i in (5, 6, 7, 9, 10, 11)]
    return (
        size,
        count,
        fields[2],
        fields[3],
        root,
        *values[:3],
        fields[8],
        *values[3:],
        fields[12],
    )


def _integer(text: str, name: str, number: int, what: str, minimum: int) -> int:
    """A decimal integer field ``>= minimum`` (sizes and counts >= 0; root >= -1, where -1
    is nccl-tests' "no root")."""
    body = text.removeprefix("-")
    where = at_line(name, number)
    if not (body.isascii() and body.isdigit()) or int(body) >= 2**63:
        raise SpecError("nccl-tests", f"{where}: {what} {text!r} is not an integer")
    value = int(text)
    if value < minimum:
        allowed = ">= 0" if minimum == 0 else f">= {minimum} (-1: no root)"
        raise SpecError("nccl-tests", f"{where}: {what} {text!r} must be {allowed}")
    return value


def _number(text: str, name: str, number: int, what: str) -> float:
    """A finite decimal number ``>= 0`` (times, bandwidths)."""
    text = text.strip()
    where = at_line(name, number)
    if not DECIMAL.fullmatch(text):  # nccl-tests prints %7.2f and %g
        raise SpecError("nccl-tests", f"{where}: {what} {text!r} is not a decimal number")
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise SpecError("nccl-tests", f"{where}: {what} {text!r} must be finite and >= 0")
    return value
