"""Helpers for reading YAML/dict specs with errors that name the field.

A :class:`Section` wraps one mapping of a spec with its dotted path; reading a key marks
it used, and :meth:`Section.finish` rejects keys nobody read (typos such as ``raddix``)
with the list of allowed keys.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import SpecError
from ..units import parse_bandwidth, parse_size, parse_time

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
