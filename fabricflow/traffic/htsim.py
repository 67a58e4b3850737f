"""htsim connection matrices: read and write the traffic files packet simulators share.

The format (htsim's ``connection_matrix``)::

    Nodes 1024
    Connections 2
    0->17 id 1 start 0 size 2000000
    5->3 id 2 start 12.5 size 65536

``start`` is in microseconds, ``size`` in bytes. Blank lines and lines starting with
``#`` are skipped. Fields this model has no use for (htsim's ``trigger``,
``send_done_trigger``, ``priority``, ...) are refused with the line that has them rather
than ignored, since dropping a dependency between flows would change their times.

The file is read line by line (bounded memory), and a matrix of more than ``max_flows``
flows (default :data:`MAX_FLOWS`) is refused from its ``Connections`` line, before any
flow is parsed: parsing takes about 0.4 GB and 10-20 s of CPU per million lines, and a
completion-time solve of that many flows far more.
"""

from __future__ import annotations

import dataclasses
import os
import re

import numpy as np

from fabricflow.atomic import write_text
from fabricflow.errors import SpecError
from fabricflow.schema import DECIMAL

_FLOW = re.compile(r"^(\S+)->(\S+)((?:\s+\S+\s+\S+)*)\s*$")
_KNOWN = ("id", "start", "size")
MAX_FLOWS = 1_000_000  # flows a matrix may hold unless the caller allows more
MAX_NODES = 2**31 - 1  # hosts are int32 GPU indices downstream
_INT64 = 2**63


@dataclasses.dataclass(frozen=True)
class ConnectionMatrix:
    """Flows of a connection matrix.

    Attributes:
        num_nodes: the ``Nodes`` header (hosts are ``0..num_nodes-1``).
        src, dst: int64 ``[F]`` host ids. flow_id: int64 ``[F]`` the ``id`` fields.
        start: float64 ``[F]`` seconds. size: float64 ``[F]`` bytes.
    """

    num_nodes: int
    src: np.ndarray
    dst: np.ndarray
    flow_id: np.ndarray
    start: np.ndarray
    size: np.ndarray


def read_connection_matrix(
    path: str | os.PathLike, *, max_flows: int = MAX_FLOWS
) -> ConnectionMatrix:
    """Parse an htsim connection matrix (module docs).

    Raises:
        SpecError: naming the file and line: a missing or bad header, ``Nodes`` above
            :data:`MAX_NODES`, ``Connections`` above ``max_flows`` (with what parsing it
            would need), a malformed flow line, hosts outside ``0..Nodes-1`` or equal, a
            size that is not a number > 0, a start that is not a number >= 0, an ``id``
            outside int64, repeated or missing, an unsupported field, or a flow count
            that differs from ``Connections``.
    """
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as handle:
            return _parse(handle, name, max_flows)
    except (OSError, UnicodeDecodeError) as error:
        raise SpecError("traffic", f"cannot read {name!r}: {error}") from error


def _header_line(words, line, number, header, fail, max_flows) -> None:
    """Record a ``Nodes N`` / ``Connections M`` line in ``header`` (or refuse it)."""
    if len(words) != 2 or not (words[1].isascii() and words[1].isdigit()):
        raise fail(number, f"expected '{words[0]} <count>', got {line!r}")
    if words[0] in header:
        raise fail(number, f"'{words[0]}' given twice")
    count = int(words[1])
    if words[0] == "Nodes" and count > MAX_NODES:
        raise fail(number, f"'Nodes {count}' is more than the {MAX_NODES:,} hosts allowed")
    if words[0] == "Connections" and count > max_flows:
        raise fail(
            number,
            f"'Connections {count:,}' is more than the {max_flows:,} flows allowed: parsing "
            f"would need about {count * 400 / 1e6:,.1f} GB and {count * 1.5e-5:,.0f} s or "
            "more of CPU, and the completion-time solve far more; split the matrix, or "
            "pass max_flows to read_connection_matrix to allow it",
        )
    header[words[0]] = count


def _parse(lines, name: str, max_flows: int) -> ConnectionMatrix:
    """The body of :func:`read_connection_matrix` over an iterable of lines."""
    header: dict[str, int] = {}
    src: list[int] = []
    dst: list[int] = []
    ids: list[int] = []
    start: list[float] = []
    size: list[float] = []

    def fail(number: int, message: str) -> SpecError:
        return SpecError("traffic", f"{name}, line {number}: {message}")

    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        words = line.split()
        if words[0] in ("Nodes", "Connections"):
            if src:
                raise fail(number, f"'{words[0]}' must come before the flows")
            _header_line(words, line, number, header, fail, max_flows)
            continue
        if "Nodes" not in header or "Connections" not in header:
            raise fail(number, "expected the 'Nodes N' and 'Connections M' header first")
        if len(src) == header["Connections"]:
            raise fail(number, f"more flow lines than 'Connections {header['Connections']}'")
        match = _FLOW.match(line)
        if match is None:
            raise fail(number, f"expected 'SRC->DST id I start T_us size BYTES', got {line!r}")
        fields = match.group(3).split()
        values = dict(zip(fields[::2], fields[1::2], strict=True))
        unknown = [key for key in fields[::2] if key not in _KNOWN]
        if unknown:
            raise fail(number, f"unsupported field {unknown[0]!r}; supported: {list(_KNOWN)}")
        if len(values) != len(fields) // 2:
            raise fail(number, "a field is given twice")
        missing = [key for key in _KNOWN if key not in values]
        if missing:
            raise fail(number, f"missing field {missing[0]!r} (need id, start, size)")
        nodes = header["Nodes"]
        pair = []
        for text in match.group(1), match.group(2):
            if not (text.isascii() and text.isdigit()) or int(text) >= nodes:
                raise fail(number, f"host {text!r} is not in 0..{nodes - 1} (Nodes {nodes})")
            pair.append(int(text))
        if pair[0] == pair[1]:
            raise fail(number, f"a flow from host {pair[0]} to itself")
        digits = values["id"].removeprefix("-")
        if not (digits.isascii() and digits.isdigit()) or int(digits) >= _INT64:
            raise fail(number, f"id must be an integer in int64's range, got {values['id']!r}")
        begin = _number(values["start"])
        if begin is None or begin < 0:
            raise fail(
                number, f"start must be a number of microseconds >= 0, got {values['start']!r}"
            )
        amount = _number(values["size"])
        if amount is None or amount <= 0:
            raise fail(number, f"size must be a number of bytes > 0, got {values['size']!r}")
        src.append(pair[0])
        dst.append(pair[1])
        ids.append(int(values["id"]))
        start.append(begin * 1e-6)
        size.append(amount)
    if "Nodes" not in header or "Connections" not in header:
        raise SpecError("traffic", f"{name}: missing the 'Nodes N' / 'Connections M' header")
    if len(src) != header["Connections"]:
        raise SpecError(
            "traffic",
            f"{name}: 'Connections {header['Connections']}' but {len(src)} flow line(s)",
        )
    flow_id = np.asarray(ids, np.int64)
    if np.unique(flow_id).size != flow_id.size:
        unique_ids, counts = np.unique(flow_id, return_counts=True)
        repeated = int(unique_ids[counts > 1][0])
        raise SpecError("traffic", f"{name}: flow id {repeated} appears more than once")
    return ConnectionMatrix(
        header["Nodes"],
        np.asarray(src, np.int64),
        np.asarray(dst, np.int64),
        flow_id,
        np.asarray(start, np.float64),
        np.asarray(size, np.float64),
    )


def write_connection_matrix(
    path: str | os.PathLike, num_nodes: int, src, dst, size, start=None
) -> None:
    """Write flows as an htsim connection matrix (ids from 1, ``start`` in seconds)."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    size = np.broadcast_to(np.asarray(size, np.float64), src.shape)
    start = np.zeros(src.shape) if start is None else np.asarray(start, np.float64)
    rows = [f"Nodes {num_nodes}", f"Connections {src.size}"]
    rows += [
        f"{a}->{b} id {i + 1} start {t * 1e6:.9g} size {int(s) if s == int(s) else s}"
        for i, (a, b, t, s) in enumerate(zip(src.tolist(), dst.tolist(), start, size, strict=True))
    ]
    write_text(path, "\n".join(rows) + "\n")


def _number(text: str) -> float | None:
    """The finite number a decimal text writes, else None (``1_000``, ``nan`` and ``inf``,
    which Python's float() reads, are not numbers here)."""
    if not DECIMAL.fullmatch(text):
        return None
    value = float(text)
    return value if np.isfinite(value) else None
