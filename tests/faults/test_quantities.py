"""Quantities (sizes, bandwidths, times) given as text or numbers: bits refused for sizes,
non-ASCII digits, non-finite, negative and overflowing values refused naming the field."""

from __future__ import annotations

import numpy as np
import pytest
from fault_helpers import raises_named as _raises_named

from fabricflow.errors import SpecError
from fabricflow.units import parse_bandwidth, parse_size, parse_time


@pytest.mark.parametrize("text", ["1b", "1kb", "8Mb", "400kb", "1Gb", "1kib", "2 Tb"])
def test_sizes_in_bits_are_refused_with_a_bytes_hint(text):
    with pytest.raises(SpecError, match=r"x: .*sizes are in bytes: write e\.g\. 8MB or 8MiB"):
        parse_size(text, "x")


def test_bandwidths_still_take_bits():
    assert parse_bandwidth("400Gbps") == 50e9
    assert parse_bandwidth("8Mb/s") == 1e6


@pytest.mark.parametrize("text", ["８MiB", "١٢٣", "1٢", "８", "1\u00a0MB", "１e3"])
def test_non_ascii_digits_and_spaces_are_refused(text):
    with pytest.raises(SpecError, match="cannot read"):
        parse_size(text, "x")
    with pytest.raises(SpecError, match="cannot read"):
        parse_time(text, "x")


# ------------------------------------------------------------- parse_* (units)


@pytest.mark.parametrize(
    ("parse", "value", "field"),
    [
        (parse_bandwidth, "nan", "bandwidth"),
        (parse_bandwidth, "1e400Gbps", "bandwidth"),
        (parse_bandwidth, "-1Gbps", "bandwidth"),
        (parse_bandwidth, "400gbps", "bandwidth"),
        (parse_bandwidth, True, "bandwidth"),
        (parse_bandwidth, None, "bandwidth"),
        (parse_bandwidth, 10**400, "bandwidth"),
        (parse_time, "1 fortnight", "time"),
        (parse_time, np.float32("inf"), "time"),
        (parse_time, "-1us", "time"),
        (parse_size, "1e30B", "size"),
        (parse_size, [1], "size"),
        (parse_size, np.bool_(True), "size"),
        (parse_size, "", "size"),
    ],
)
def test_bad_quantities_name_the_field(parse, value, field):
    assert _raises_named(lambda: parse(value), field, SpecError).field == field


def test_numpy_scalars_are_quantities():
    assert parse_size(np.int64(5)) == 5.0
    assert parse_time(np.float32(0.5)) == 0.5
    assert parse_bandwidth(np.float64(1e9)) == 1e9


@pytest.mark.parametrize(
    "parse, value, message",
    [
        (parse_bandwidth, "1e400Gbps", "ceiling"),
        (parse_bandwidth, "nanGB/s", "cannot read"),
        (parse_bandwidth, float("nan"), "must be a number"),
        (parse_bandwidth, 10**400, "ceiling"),
        (parse_time, "-5us", "'-5us'"),
        (parse_time, "1e308min", "ceiling"),
        (parse_size, float("inf"), "ceiling"),
        (parse_size, 2**90, "ceiling"),
    ],
)
def test_unit_parsing_refuses_non_finite_negative_and_overflowing(parse, value, message):
    with pytest.raises(SpecError, match=message) as info:
        parse(value, "x")
    assert info.value.field == "x"
