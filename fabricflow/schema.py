"""The one set of checks for values read from a file or a mapping, with errors that name
the field.

Every reader of a file the project takes (fabric specs, cost tables, layouts in result
files, nccl-tests logs, cluster traces, tuning bounds) parses the file into plain data
(:mod:`fabricflow.files` for YAML and JSON: duplicate keys, depth, size, int64 range) and
then checks it here:

- :class:`Section` wraps one mapping with its dotted path; keys outside its allowed set
  (typos such as ``raddix``) are refused with the allowed keys and the closest one;
- :func:`decimal` reads a number written as text (not ``1_000``, ``nan`` or ``inf``);
  :func:`integer`, :func:`number` check a value's kind (a bool is not a number, a string
  is not one either, ``2.5`` is not an integer) and its range, and refuse NaN and
  infinities; :func:`choice` a word from a finite set (with did-you-mean);
  :func:`finite_result` a total computed from checked values (``1e308 * 2`` overflows);
- :func:`at_line` names a row of a text file (``FILE, line 12``) for the field of a value
  read from it, and :func:`check_size` refuses an input whose estimated size is over a
  limit before anything of that size is built.

Every error is a :class:`~fabricflow.errors.SpecError`.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Iterable
from typing import Any

from fabricflow.errors import SpecError
from fabricflow.units import parse_bandwidth, parse_size, parse_time

_REQUIRED = object()
# Node and link ids are int32, so no count in a spec can be larger; this also keeps
# products of counts far from int64 overflow in the generators' arithmetic.
MAX_COUNT = 2**31 - 1


class Section:
    """A mapping in a spec, read key by key with field-naming errors."""

    def __init__(self, data: Any, path: str, allowed: Iterable[str]):
        if not isinstance(data, dict):
            raise SpecError(path, f"expected a mapping, got {type(data).__name__}: {data!r}")
        self.data = data
        self.path = path
        self.allowed = tuple(allowed)
        unknown = sorted(set(map(str, data)) - set(self.allowed))
        if unknown:
            raise SpecError(
                path,
                f"unknown key(s) {unknown}; allowed keys: {sorted(self.allowed)}",
                value=unknown[0],
                allowed=self.allowed,
            )

    def field(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.data and self.data[key] is not None

    def raw(self, key: str, default: Any = _REQUIRED) -> Any:
        if key not in self.allowed:  # programming error: keep allowed lists complete
            raise KeyError(f"{key!r} is not an allowed key of {self.path}")
        if not self.has(key):
            if default is _REQUIRED:
                raise SpecError(self.field(key), "is required")
            return default
        return self.data[key]

    def get(self, key: str, parse: Callable[[Any, str], Any], default: Any = _REQUIRED) -> Any:
        if not self.has(key) and default is not _REQUIRED:
            return default
        return parse(self.raw(key), self.field(key))

    def section(self, key: str, allowed: Iterable[str], default: Any = _REQUIRED) -> Section | None:
        value = self.raw(key, default)
        if value is None:
            return None
        return Section(value, self.field(key), allowed)

    def sections(self, key: str, allowed: Iterable[str]) -> list[Section]:
        value = self.raw(key)
        if not isinstance(value, list) or not value:
            raise SpecError(self.field(key), f"expected a non-empty list, got {value!r}")
        return [Section(item, f"{self.field(key)}[{i}]", allowed) for i, item in enumerate(value)]


def positive_int(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SpecError(field, f"must be a positive integer, got {_short(value)}")
    return _at_most_max_count(value, field)


def nonnegative_int(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(field, f"must be an integer >= 0, got {_short(value)}")
    return _at_most_max_count(value, field)


def _at_most_max_count(value: int, field: str) -> int:
    if value > MAX_COUNT:
        raise SpecError(
            field,
            f"must be at most {MAX_COUNT:,} (node and link ids are 32-bit), got {_short(value)}",
        )
    return int(value)


def _short(value: Any) -> str:
    """repr of ``value``, or its size for a huge integer (repr of > 4300 digits fails)."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    return repr(value)


def ratio_at_least_one(value: Any, field: str) -> float:
    """Oversubscription ``3`` or ``'3:1'`` (down:up) -> down/up ratio >= 1."""
    if isinstance(value, str) and ":" in value:
        left, _, right = value.partition(":")
        try:
            a, b = float(left), float(right)
        except ValueError:
            raise SpecError(
                field, f"cannot read ratio {value!r}; write e.g. 3, '3:1' or '1:1'"
            ) from None
        if a < b:
            raise SpecError(
                field,
                f"write oversubscription as down:up with down >= up (e.g. '3:1'), got {value!r}",
            )
        number = a / b if b > 0 else math.inf
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        raise SpecError(field, f"expected a ratio such as 1, 3 or '7:1', got {value!r}")
    if not math.isfinite(number) or number < 1:
        raise SpecError(field, f"oversubscription must be >= 1 (down:up), got {value!r}")
    return number


def text(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError(field, f"must be a non-empty string, got {value!r}")
    return value


def text_list(value: Any, field: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(field, f"must be a string or a list of strings, got {value!r}")
    return list(value)


def choice(*allowed: str) -> Callable[[Any, str], str]:
    def parse(value: Any, field: str) -> str:
        if value not in allowed:
            raise SpecError(
                field,
                f"must be one of {list(allowed)}, got {value!r}",
                value=value,
                allowed=allowed,
            )
        return value

    return parse


def boolean(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(field, f"must be true or false, got {value!r}")
    return value


def bandwidth(value: Any, field: str) -> float:
    """A part's bandwidth (bytes/s): every bandwidth of a fabric spec is one."""
    return parse_bandwidth(value, field, part=True)


def time(value: Any, field: str) -> float:
    """A part's latency (s): every time of a fabric spec is one."""
    return parse_time(value, field, part=True)


size = parse_size


# A decimal number as text: digits, one optional point, an optional exponent. Python's
# float() also reads "1_000", "nan", "inf" and "infinity", which no tool writes for a
# measured value: a file holding them is refused rather than read as a number.
DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def decimal(text: str, field: str) -> float:
    """The finite number a decimal text (:data:`DECIMAL`, spaces around allowed) writes,
    else a SpecError naming ``field`` (``1e400`` overflows to an infinity: refused too)."""
    stripped = str(text).strip()
    if not DECIMAL.fullmatch(stripped):
        raise SpecError(
            field, f"expected a number in decimal digits (12, 1.5e3), got {_short(text)}"
        )
    value = float(stripped)
    if not math.isfinite(value):
        raise SpecError(field, f"{stripped!r} is beyond the float range (about 1.8e308)")
    return value


def integer(
    value: Any, field: str, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """An integer (not a bool, not ``2.0`` or ``2.5``, not a string) in
    ``[minimum, maximum]`` (either bound optional). numpy integers are accepted."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        kind = _range_words("an integer", minimum, maximum)
        raise SpecError(field, f"must be {kind}, got {_short(value)}")
    number = int(value)
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        raise SpecError(
            field, f"must be {_range_words('an integer', minimum, maximum)}, got {_short(number)}"
        )
    return number


def number(
    value: Any,
    field: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
) -> float:
    """A finite real number (not a bool, not a string, not NaN or an infinity) that is
    ``>= minimum``, ``<= maximum`` and ``> above`` (each optional), as a float."""
    kind = _range_words("a finite number", minimum, maximum, above)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise SpecError(field, f"must be {kind}, got {_short(value)}")
    try:
        result = float(value)
    except OverflowError:  # an int beyond the float range (about 1.8e308)
        raise SpecError(field, f"must be {kind}, got {_short(value)}") from None
    if (
        not math.isfinite(result)
        or (minimum is not None and result < minimum)
        or (maximum is not None and result > maximum)
        or (above is not None and result <= above)
    ):
        raise SpecError(field, f"must be {kind}, got {_short(value)}")
    return result


def _range_words(
    kind: str,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
) -> str:
    parts = []
    if above is not None:
        parts.append(f"> {above:g}")
    if minimum is not None and maximum is not None:
        parts.append(f"in [{minimum:g}, {maximum:g}]")
    elif minimum is not None:
        parts.append(f">= {minimum:g}")
    elif maximum is not None:
        parts.append(f"<= {maximum:g}")
    return " ".join([kind, *parts])


def finite_result(value: float, field: str, what: str) -> float:
    """``value``, a total computed from checked inputs, if it is finite; else a SpecError
    saying that ``what`` overflows (inputs near 1e308 multiply to an infinity)."""
    if not math.isfinite(value):
        raise SpecError(
            field,
            f"{what} is not a finite number ({value!r}): an input is too large for it to be "
            "computed (about 1.8e308 is the largest float)",
        )
    return value


def at_line(source: str, line: int, column: str | None = None) -> str:
    """The field of a value read from a text file: ``"FILE, line 12"`` or, with a column,
    ``"FILE, line 12, end_time"``."""
    where = f"{source}, line {line}"
    return f"{where}, {column}" if column else where


def check_size(
    count: float,
    limit: int,
    field: str,
    what: str,
    unit: str,
    hint: str = "",
    *,
    estimate: bool = False,
) -> None:
    """Refuse an input whose size ``count`` (in ``unit``: rows, points, jobs; ``estimate``:
    an upper bound, said as "about") is over ``limit`` before anything of that size is
    read or built; the message names both (``"the trace holds 1,000,000 jobs, over the
    limit of 20,000"``)."""
    if count > limit:
        shown = f"{count:,.0f}" if count < 1e15 else f"{count:.3g}"
        about = "about " if estimate else ""
        message = f"{what} holds {about}{shown} {unit}, over the limit of {limit:,}"
        raise SpecError(field, message + (f"; {hint}" if hint else ""))
