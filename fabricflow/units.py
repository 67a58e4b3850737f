"""Parsing of quantities with units, as written in YAML specs and CLI flags.

Everything inside fabricflow is SI: bytes, seconds, bytes per second. Specs may say
``400Gbps``, ``900GB/s``, ``1.5us``, ``2GiB``; these helpers turn such strings (or plain
numbers, taken as SI already) into floats, and raise :class:`SpecError` naming the field
otherwise.

Bandwidth: bit rates (``bps``, ``Kbps``, ``Mbps``, ``Gbps``, ``Tbps``; also ``Gb/s``) are
divided by 8; byte rates (``B/s``, ``KB/s``, ``MB/s``, ``GB/s``, ``TB/s``, ``GiB/s``, ``Bps``,
``GBps``) are taken as is. Decimal prefixes are powers of 1000, binary ones (``Ki``, ``Mi``,
``Gi``, ``Ti``) powers of 1024, as network and NCCL practice writes them.

Size: bytes only (``B``, ``KB``, ``MB``, ``GiB``, ...); a bit suffix (``8Mb``, ``1kb``) is
refused with a hint, not divided by 8. Digits and spaces must be ASCII (``'８MiB'`` and
Arabic-Indic digits are refused, though Python's ``float`` would read them).

Values must be finite, >= 0 (> 0 where zero means nothing) and at most a ceiling far
beyond any real hardware, so that sums and products of many of them stay finite:

- bandwidth <= :data:`MAX_BANDWIDTH` = 1e15 bytes/s (8 Pb/s; a 1.6 Tb/s port is 2e11 B/s,
  a GPU's NVLink-5 bundle 1.8e12 B/s, an NVL72 domain 1.3e14 B/s in total);
- time <= :data:`MAX_TIME` = 1e9 s (about 32 years);
- size <= :data:`MAX_SIZE` = 2**80 bytes (1 YiB).

A hardware part's bandwidth or latency (``part=True``: every fabric spec field, the
``--nic-bandwidth`` of an import) is also held to the range of real parts
(:data:`PART_BANDWIDTH`, :data:`PART_LATENCY`), since a plain number is SI and a unit left
out gives a NIC of ``400`` bytes/s or a cable of ``600`` s. A plain number outside the
range is refused where no part comes near (below 8 Mb/s, or 1 s and more) and warned
about otherwise (:class:`~fabricflow.errors.UnitWarning`); a value written with its unit
outside the range is warned about. Both name the field and suggest the unit.
"""

from __future__ import annotations

import math
import numbers
import re
import warnings

from fabricflow.errors import SpecError, UnitWarning

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
_TIME = {
    "s": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "µs": 1e-6,
    "\u03bcs": 1e-6,
    "ns": 1e-9,
    "ps": 1e-12,
    "min": 60.0,
}

# The spellings suggested for a mistyped unit (every prefix is accepted, see above).
BANDWIDTH_UNITS: tuple[str, ...] = ("bps", "Kbps", "Mbps", "Gbps", "Tbps", "Gb/s", "Tb/s")
BANDWIDTH_UNITS += ("B/s", "KB/s", "MB/s", "GB/s", "TB/s", "GiB/s", "GBps", "TBps")
SIZE_UNITS = ("B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB")

MAX_BANDWIDTH = 1e15
MAX_TIME = 1e9
MAX_SIZE = 2.0**80
# The range of real network and scale-up parts, per direction: from 1 GbE (1.25e8 B/s,
# here 1e8) up, with no upper bound below MAX_BANDWIDTH (an imported tree's logical link
# aggregates the cables of thousands of NICs); latencies from a switch hop's ~100 ns down
# to 1 ns, up to 10 ms (a link between data centres ~2,000 km apart; docs/references.md
# §18). Plain numbers below ABSURD_PLAIN_BANDWIDTH
# (8 Mb/s) or at ABSURD_PLAIN_LATENCY (1 s) and above are refused: no part comes near
# them, a unit was left out.
PART_BANDWIDTH = (1e8, MAX_BANDWIDTH)
PART_LATENCY = (1e-9, 1e-2)
ABSURD_PLAIN_BANDWIDTH = 1e6
ABSURD_PLAIN_LATENCY = 1.0
_CEILING = {
    "bandwidth": (MAX_BANDWIDTH, "bytes/s (8 Pb/s)"),
    "time": (MAX_TIME, "s"),
    "size": (MAX_SIZE, "bytes (1 YiB)"),
}

# ASCII digits and spaces only: a Unicode ``\d`` or ``\s`` would also take full-width ('８') and
# Arabic-Indic ('١٢٣') digits, which float() then reads silently.
_NUMBER = r"([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)"
_QUANTITY = re.compile(r"^\s*" + _NUMBER + r"\s*([A-Za-zµ\u03bc/]*)\s*$", re.ASCII)


def _split(value: object, field: str, kind: str) -> tuple[float, str]:
    # numpy's booleans too (the type is named bool_ before numpy 2, bool from 2 on)
    if (
        isinstance(value, bool)
        or type(value).__module__ == "numpy"
        and type(value).__name__ in ("bool_", "bool")
    ):
        raise SpecError(field, f"expected a {kind}, got a boolean {value!r}")
    if isinstance(value, numbers.Real):  # numpy scalars (int64, float32) included
        try:
            return float(value), ""
        except OverflowError:  # a Python int beyond float range
            bits = int(value).bit_length()  # type: ignore[call-overload]  # only ints overflow
            raise SpecError(
                field,
                f"{kind}: an integer of {bits} bits is beyond "
                f"the ceiling of {_CEILING[kind][0]:.0e} {_CEILING[kind][1]}",
            ) from None
    if not isinstance(value, str):
        raise SpecError(field, f"expected a {kind} such as {_EXAMPLES[kind]}, got {value!r}")
    match = _QUANTITY.match(value)
    if not match:
        raise SpecError(field, f"cannot read {value!r} as a {kind} (e.g. {_EXAMPLES[kind]})")
    return float(match.group(1)), match.group(2)


_EXAMPLES = {
    "bandwidth": "'400Gbps', '900GB/s', '50e9' (bytes/s)",
    "time": "'1.5us', '0.2ms', '3e-7' (seconds)",
    "size": "'2GiB', '512KiB', '1e6' (bytes)",
}


def _prefix_scale(prefix: str) -> float | None:
    if prefix in _BINARY:
        return _BINARY[prefix]
    if prefix in _DECIMAL:
        return _DECIMAL[prefix]
    return None


def _check(number: float, field: str, kind: str, allow_zero: bool, value: object) -> float:
    """``number`` (SI) if finite, >= 0 (> 0 unless ``allow_zero``) and under the ceiling;
    errors quote ``value`` as written."""
    if math.isnan(number):
        raise SpecError(field, f"{kind} must be a number, got {value!r}")
    if number < 0 or (number == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise SpecError(field, f"{kind} must be {bound}, got {value!r}")
    ceiling, unit = _CEILING[kind]
    if number > ceiling:  # inf included: '1e400Gbps' overflows to inf
        raise SpecError(
            field,
            f"{kind} {value!r} is beyond the ceiling of {ceiling:.0e} {unit} "
            "(see fabricflow.units); check the unit and the exponent",
        )
    return number


def _part_range(number: float, unit: str, field: str, kind: str, value: object) -> None:
    """Refuse or warn about a part's bandwidth or latency far from any real part (module
    docs); ``number`` in SI, ``unit`` as written ('' for a plain number)."""
    if number == 0:  # "no latency" (an ideal link) and an explicit 0 are the caller's
        return
    low, high = PART_BANDWIDTH if kind == "bandwidth" else PART_LATENCY
    if low <= number <= high:
        return
    if kind == "bandwidth":
        shown = f"{number:.4g} bytes/s ({format_bandwidth(number)})"
        hint = f"write the unit, e.g. '{value}Gbps' or '{value}GB/s'"
        absurd = not unit and number < ABSURD_PLAIN_BANDWIDTH
        span = f"{format_bandwidth(low)} and more"
    else:
        shown = format_time(number)
        hint = f"write the unit, e.g. '{value}ns' or '{value}us'"
        absurd = not unit and number >= ABSURD_PLAIN_LATENCY
        span = f"{format_time(low)} to {format_time(high)}"
    if unit:
        message = f"{value!r} is {shown}, far from any real part ({span}); check the unit"
    else:
        message = f"the plain number {value!r} reads as {shown} (plain numbers are SI), "
        message += f"far from any real part ({span}); {hint}"
    if absurd:
        raise SpecError(field, message)
    warnings.warn(f"{field}: {message}", UnitWarning, stacklevel=4)


def parse_bandwidth(
    value: object, field: str = "bandwidth", *, allow_zero: bool = False, part: bool = False
) -> float:
    """Bandwidth in bytes/s from ``'400Gbps'``, ``'900GB/s'``, ``'46GBps'`` or a number (B/s).

    ``part``: the bandwidth of a hardware part, held to :data:`PART_BANDWIDTH` (module
    docs: refused or :class:`~fabricflow.errors.UnitWarning`)."""
    number, unit = _split(value, field, "bandwidth")
    if unit:
        scale = _bandwidth_unit_scale(unit)
        if scale is None:
            raise SpecError(
                field,
                f"unknown bandwidth unit {unit!r} in {value!r}; use bits per second "
                "(bps, Mbps, Gbps, Tbps, Gb/s) or bytes per second (B/s, GB/s, GiB/s, GBps)",
                value=unit,
                allowed=BANDWIDTH_UNITS,
            )
        number *= scale
    number = _check(number, field, "bandwidth", allow_zero, value)
    if part:
        _part_range(number, unit, field, "bandwidth", value)
    return number


def _bandwidth_unit_scale(unit: str) -> float | None:
    for suffix, per_byte in (("bps", 0.125), ("b/s", 0.125), ("Bps", 1.0), ("B/s", 1.0)):
        if unit.endswith(suffix):
            prefix = unit[: -len(suffix)]
            scale = _prefix_scale(prefix)
            return None if scale is None else scale * per_byte
    return None


def parse_time(
    value: object, field: str = "time", *, allow_zero: bool = True, part: bool = False
) -> float:
    """Duration in seconds from ``'1.5us'``, ``'0.2ms'``, ``'50ns'`` or a number (s).

    ``part``: the latency of a hardware part, held to :data:`PART_LATENCY` (module docs:
    refused or :class:`~fabricflow.errors.UnitWarning`)."""
    number, unit = _split(value, field, "time")
    if unit:
        if unit not in _TIME:
            raise SpecError(
                field,
                f"unknown time unit {unit!r}; use one of {sorted(_TIME)}",
                value=unit,
                allowed=_TIME,
            )
        number *= _TIME[unit]
    number = _check(number, field, "time", allow_zero, value)
    if part:
        _part_range(number, unit, field, "time", value)
    return number


def parse_size(value: object, field: str = "size", *, allow_zero: bool = True) -> float:
    """Size in bytes from ``'2GiB'``, ``'512KiB'``, ``'8MB'`` or a number (B).

    Sizes are bytes: a lowercase ``b`` (bits, as in ``'8Mb'``) is refused, not divided by 8,
    since a buffer or message written in bits is almost always a typo for bytes.
    """
    number, unit = _split(value, field, "size")
    if unit:
        if unit.endswith("b"):
            raise SpecError(
                field,
                f"{value!r} is in bits ('b'); sizes are in bytes: write e.g. 8MB or 8MiB",
            )
        scale = _prefix_scale(unit[:-1]) if unit.endswith("B") else None
        if scale is None:
            raise SpecError(
                field,
                f"unknown size unit {unit!r}; use B, KB, MB, GB, KiB, MiB, GiB, TiB",
                value=unit,
                allowed=SIZE_UNITS,
            )
        number *= scale
    return _check(number, field, "size", allow_zero, value)


_BIT_RATES = (
    ("Eb/s", 1e18),
    ("Pb/s", 1e15),
    ("Tb/s", 1e12),
    ("Gb/s", 1e9),
    ("Mb/s", 1e6),
    ("Kb/s", 1e3),
)


def format_bandwidth(bytes_per_s: float) -> str:
    """Human-readable bandwidth, in Gb/s as network engineers quote it (e.g. ``'400 Gb/s'``)."""
    bits = bytes_per_s * 8
    for unit, scale in _BIT_RATES[1:]:
        if bits >= scale:
            return f"{bits / scale:.4g} {unit}"
    return f"{bits:.4g} b/s"


def bit_rate_unit(bytes_per_s: float) -> tuple[str, float]:
    """``(unit, bytes/s per unit)`` of the bit-rate unit in which ``bytes_per_s`` (an
    axis's largest value) reads as 1 to 1,000, from Gb/s up (``('Pb/s', 1.25e14)`` for
    4e14 bytes/s): an axis in it needs no offset or exponent."""
    bits = bytes_per_s * 8
    for unit, scale in _BIT_RATES[:4]:
        if bits >= scale:
            return unit, scale / 8
    return "Gb/s", 1e9 / 8


def format_size(num_bytes: float) -> str:
    """Human-readable size with binary prefixes (``'2 GiB'``)."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:.4g} {unit}"
    return f"{num_bytes:.4g} B"


def format_time(seconds: float) -> str:
    """Human-readable duration (``'12.3 ms'``)."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.4g} {unit}"
    return f"{seconds / 1e-9:.4g} ns"
