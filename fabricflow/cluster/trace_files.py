"""Reading trace files: bytes with named errors, CSV rows one at a time, YAML within a size.

- :func:`read_trace_text`: the text of a trace file (UTF-8, or UTF-16/32 with a BOM);
  a missing file, a folder or unreadable bytes are :class:`~fabricflow.errors.SpecError`
  naming the file.
- :func:`csv_records`: the header and an iterator over the rows of a CSV text as
  ``{column: cell}`` mappings, one at a time (a CSV of a million rows is never held as a
  million dictionaries). A header that names a column twice or leaves a column unnamed
  is refused (a reader would silently keep one of the two cells), and so is a row with
  more cells than the header.
- :func:`yaml_trace_rows`: the ``jobs:`` list of a YAML trace. YAML is parsed whole, at
  about 22 bytes of memory per byte of text and 3 us per byte on the 2-core machine, so
  a YAML trace is limited to :data:`MAX_YAML_BYTES` (about 45,000 jobs); a larger one is
  refused before parsing with the size it would need, and CSV (read row by row) is the
  format for larger traces.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterator, Mapping

from fabricflow.errors import SpecError
from fabricflow.files import MAX_FILE_BYTES, decode_text, parse_structured
from fabricflow.memory_budget import check_memory
from fabricflow.schema import check_size

MAX_YAML_BYTES = MAX_FILE_BYTES
# Rows of a CSV trace read at most: reading and checking a row takes 14-25 us of CPU
# (a public Helios-like table: 10**5 rows in 1.4 s; this project's format with layouts:
# 20,000 rows in 0.5 s, on the 2-core development machine), so 2,000,000 rows take under
# a minute; a larger file is refused before reading, with its row count.
MAX_TRACE_ROWS = 2_000_000
# Measured on a synthetic trace dumped as YAML (356 bytes per job): peak memory per byte
# of text while PyYAML composes the document, and seconds per byte.
YAML_BYTES_PER_BYTE = 22
YAML_SECONDS_PER_BYTE = 3.4e-6
YAML_BYTES_PER_JOB = 356


def read_trace_text(path: str, what: str = "trace") -> tuple[str, int]:
    """``(text, size in bytes)`` of the trace file ``path``; SpecError naming it otherwise."""
    if not os.path.exists(path):
        raise SpecError(what, f"no such file {path!r}")
    if os.path.isdir(path):
        raise SpecError(what, f"{path} is a folder, not a trace file")
    # Read bytes and decode with the spec-file rules, so an unreadable file or non-UTF-8
    # text is a SpecError naming the file, not a raw OSError or UnicodeDecodeError.
    try:
        size = os.path.getsize(path)
        check_memory(3 * size, f"reading the trace {path} ({size / 1e6:,.0f} MB)")
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as error:
        raise SpecError(what, f"cannot read {path}: {error.strerror or error}") from None
    return decode_text(raw, what, path), len(raw)


def csv_records(text: str, source: str) -> tuple[list[str], Iterator[tuple[int, dict]]]:
    """The header of the CSV ``text`` and an iterator of ``(row index, {column: cell})``
    (cells stripped, empty cells left out; the index counts data rows from 0).

    Raises:
        SpecError: an empty file, a header naming a column twice or leaving one unnamed,
            malformed CSV, or a row with more cells than the header (named by row).
    """
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
    except csv.Error as error:
        raise SpecError("trace", f"{source}: not valid CSV ({error})") from None
    if not header:
        raise SpecError("trace", f"{source}: empty CSV (no header row)")
    names = [cell.strip() for cell in header]
    seen: dict[str, int] = {}
    for position, name in enumerate(names):
        if not name:
            raise SpecError("trace", f"{source}: column {position + 1} of the header has no name")
        if name in seen:
            raise SpecError(
                f"trace.{name}",
                f"{source}: the header names column {name!r} twice (columns "
                f"{seen[name] + 1} and {position + 1}); a reader would keep only one",
            )
        seen[name] = position
    return names, _records(reader, names, source)


def _records(reader, names: list[str], source: str) -> Iterator[tuple[int, dict]]:
    width = len(names)
    index = -1
    try:
        for cells in reader:
            if not cells or all(not cell.strip() for cell in cells):
                continue  # a blank line
            index += 1
            if len(cells) > width:
                raise SpecError(
                    f"jobs[{index}]",
                    f"{len(cells)} cells but the header has {width} columns",
                )
            row = {}
            for name, cell in zip(names, cells, strict=False):
                cell = cell.strip()
                if cell:
                    row[name] = cell
            yield index, row
    except csv.Error as error:
        raise SpecError(f"jobs[{index + 1}]", f"{source}: not valid CSV ({error})") from None


def yaml_trace_rows(text: str, size: int, path: str) -> list:
    """The rows of the YAML trace ``text`` (``size`` bytes): ``jobs:`` then a list.

    Raises:
        SpecError: over :data:`MAX_YAML_BYTES` (with the memory and time it would need),
            not YAML, unknown top-level keys, no list of jobs.
        MemoryBudgetError: parsing it would exceed the memory budget.
    """
    if size > MAX_YAML_BYTES:
        jobs = size // YAML_BYTES_PER_JOB
        raise SpecError(
            "trace",
            f"{path} is {size / 1e6:,.0f} MB of YAML (about {jobs:,} jobs); parsing it "
            f"would need about {YAML_BYTES_PER_BYTE * size / 2**30:,.1f} GiB and "
            f"{YAML_SECONDS_PER_BYTE * size / 60:,.0f} min. YAML traces are limited to "
            f"{MAX_YAML_BYTES // 2**20} MiB (about {MAX_YAML_BYTES // YAML_BYTES_PER_JOB:,} "
            "jobs): write it as CSV (the same columns, the layout flattened), which is "
            "read row by row",
        )
    check_memory(YAML_BYTES_PER_BYTE * size, f"parsing the YAML trace {path}")
    # The spec-file parser refuses duplicate keys (a repeated `gpus:` would otherwise
    # silently win), alias bombs and non-decimal YAML 1.1 numbers.
    data = parse_structured(text, what="trace", source=path)
    if isinstance(data, Mapping):
        unknown = sorted(set(data) - {"jobs"})
        if unknown:
            raise SpecError(f"trace.{unknown[0]}", "unknown key; a trace holds 'jobs'")
        data = data.get("jobs")
    if not isinstance(data, list):
        raise SpecError("trace", f"{path}: expected 'jobs:' with a list of jobs")
    return data


def check_trace_rows(total: int, path: str) -> None:
    """Refuse a trace of more than :data:`MAX_TRACE_ROWS` rows before reading any (the
    count from :func:`count_csv_rows`)."""
    check_size(
        total,
        MAX_TRACE_ROWS,
        "trace",
        f"{path}",
        "rows",
        "cut it to a window of the trace (rows of one period) before simulating",
        estimate=True,
    )


def count_csv_rows(text: str) -> int:
    """Data rows of a CSV text, counted by line ends (an upper bound when cells hold
    line breaks): enough for a memory estimate before reading."""
    lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    return max(0, lines - 1)
