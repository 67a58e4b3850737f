import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fabricflow.errors import SpecError
from fabricflow.units import MAX_BANDWIDTH, parse_bandwidth, parse_size, parse_time


@pytest.mark.parametrize(
    "text, expected",
    [
        ("400Gbps", 50e9),
        ("400 Gb/s", 50e9),
        ("900GB/s", 900e9),
        ("46GBps", 46e9),
        ("1Tbps", 125e9),
        ("1GiB/s", 2**30),
        ("25e9", 25e9),
        (12.5e9, 12.5e9),
    ],
)
def test_bandwidth_units(text, expected):
    assert parse_bandwidth(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    "text, expected",
    [("1.5us", 1.5e-6), ("0.2ms", 2e-4), ("50ns", 5e-8), ("3", 3.0), ("1e-6s", 1e-6)],
)
def test_time_units(text, expected):
    assert parse_time(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    "text, expected",
    [("2GiB", 2 * 2**30), ("512KiB", 512 * 1024), ("8MB", 8e6), (100, 100.0)],
)
def test_size_units(text, expected):
    assert parse_size(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    "bad", ["-1Gbps", "0Gbps", "fastGbps", "10 parsecs", "nan", "inf", True, None, [1]]
)
def test_bandwidth_rejects_bad_values_naming_the_field(bad):
    with pytest.raises(SpecError, match="topology.nic_bandwidth"):
        parse_bandwidth(bad, "topology.nic_bandwidth")


def test_unknown_unit_lists_alternatives():
    with pytest.raises(SpecError, match="Gbps"):
        parse_bandwidth("10 furlongs", "x")
    with pytest.raises(SpecError, match="us"):
        parse_time("10 weeks", "x")


prefixes = st.sampled_from(
    [
        ("", 1.0),
        ("K", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("Ki", 2**10),
        ("Mi", 2**20),
        ("Gi", 2**30),
    ]
)


@given(
    st.floats(min_value=1e-3, max_value=1e6, allow_nan=False),
    prefixes,
    st.sampled_from([("bps", 0.125), ("b/s", 0.125), ("B/s", 1.0), ("Bps", 1.0)]),
    st.sampled_from(["", " "]),
)
def test_bandwidth_parser_property(number, prefix, unit, space):
    text = f"{number!r}{space}{prefix[0]}{unit[0]}"
    expected = number * prefix[1] * unit[1]
    if expected > MAX_BANDWIDTH:  # beyond any hardware: refused, naming the ceiling
        with pytest.raises(SpecError, match="ceiling"):
            parse_bandwidth(text)
        return
    assert math.isclose(parse_bandwidth(text), expected, rel_tol=1e-12)


@given(
    st.floats(min_value=0, max_value=1e9, allow_nan=False),
    st.sampled_from([("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)]),
)
def test_time_parser_property(number, unit):
    assert math.isclose(
        parse_time(f"{number!r}{unit[0]}"), number * unit[1], rel_tol=1e-12, abs_tol=1e-300
    )


@given(st.text(alphabet="abcxyz!?#", min_size=1, max_size=8))
def test_garbage_never_parses(garbage):
    with pytest.raises(SpecError):
        parse_size(garbage, "size")


def test_numpy_booleans_are_named_as_booleans():
    # numpy 2 renamed numpy.bool_ to numpy.bool; both must read as "a boolean", not a size
    import numpy as np

    for value in (np.False_, np.True_):
        with pytest.raises(SpecError, match="boolean"):
            parse_size(value)
