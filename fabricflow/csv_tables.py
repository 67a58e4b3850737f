"""CSV tables: the one exporter of every table fabricflow writes to a file.

Each cell is written so that reading it back gives the same value:

* integers (Python, numpy, bool as ``0``/``1``) as integers;
* floats that hold a whole number of magnitude below ``2**53`` as integers
  (``1234567.0`` -> ``1234567``: sizes in bytes stay exact and readable), other floats
  in their shortest exact form (``repr``: ``44.800000000000004`` stays that, ``0.1``
  stays ``0.1``), and ``inf``, ``-inf``, ``nan`` as those words;
* ``None`` as an empty cell; text as it is, quoted as RFC 4180 asks where it holds a
  comma, a quote or a line break.

JSON files need no such layer: :func:`json.dumps` already writes floats in ``repr``
form and integers as integers (:func:`fabricflow.files.to_jsonable` turns
numpy values into Python ones first).

Example::

    >>> csv_text({"size_bytes": np.array([1234567.0]), "fct_us": np.array([44.8])})
    'size_bytes,fct_us\\n1234567,44.8\\n'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["csv_text", "format_cell", "format_column"]

_EXACT_INT = 2.0**53  # below this every whole float64 is an exact integer


def format_cell(value) -> str:
    """One value as a CSV cell (module docs)."""
    if value is None:
        return ""
    if isinstance(value, (bool, np.bool_)):
        return "1" if value else "0"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        number = float(value)
        if math.isfinite(number) and number.is_integer() and abs(number) < _EXACT_INT:
            return str(int(number))
        return repr(number)
    return _quote(str(value))


def format_column(values) -> list[str]:
    """Cells of one column (a sequence or a ``[N]`` array), vectorized for numeric
    arrays: whole-number columns through one integer conversion, others through
    ``repr`` of each float."""
    array = np.asarray(values) if not isinstance(values, (list, tuple)) else _plain(values)
    if array.ndim != 1:
        return [format_cell(x) for x in values]
    if array.dtype.kind == "b":
        return np.where(array, "1", "0").tolist()
    if array.dtype.kind in "iu":
        return [str(x) for x in array.tolist()]
    if array.dtype.kind == "f":
        array = array.astype(np.float64)
        whole = np.isfinite(array) & (np.abs(array) < _EXACT_INT) & (array == np.round(array))
        if whole.all():
            return [str(x) for x in array.astype(np.int64).tolist()]
        return [format_cell(x) for x in array.tolist()]
    return [format_cell(x) for x in array.tolist()]


def csv_text(columns: Mapping[str, Sequence]) -> str:
    """CSV text of equal-length named columns (header line first, ``\\n`` line ends).

    Raises:
        ValueError: columns of different lengths (a programming error of the caller).
    """
    names = list(columns)
    cells = [format_column(columns[name]) for name in names]
    lengths = {len(column) for column in cells}
    if len(lengths) > 1:
        raise ValueError(f"csv_text: columns of different lengths {sorted(lengths)}")
    lines = [",".join(_quote(name) for name in names)]
    lines.extend(",".join(row) for row in zip(*cells, strict=True))
    return "\n".join(lines) + "\n"


def _plain(values) -> np.ndarray:
    """A list as a 1-d array: numeric dtype where every item is a number of one kind,
    else object (so ``None``, text and nested items stay as they are)."""
    array = np.empty(len(values), object)
    array[:] = values
    kinds = {type(x) for x in values}
    if kinds and kinds <= {float, np.float64, np.float32}:
        return array.astype(np.float64)
    if kinds and kinds <= {int, np.int64, np.int32}:
        try:
            return array.astype(np.int64)
        except OverflowError:
            return array
    return array


def _quote(text: str) -> str:
    if any(mark in text for mark in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text
