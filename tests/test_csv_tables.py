"""The one CSV exporter: every cell reads back to the value written."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from fabricflow.csv_tables import csv_text, format_cell, format_column


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1234567.0, "1234567"),
        (np.float64(1234567.0), "1234567"),
        (np.int64(-3), "-3"),
        (True, "1"),
        (0.1, "0.1"),
        (44.800000000000004, "44.800000000000004"),
        (1e300, "1e+300"),
        (2.0**53, "9007199254740992.0"),
        (float("inf"), "inf"),
        (float("-inf"), "-inf"),
        (float("nan"), "nan"),
        (None, ""),
        ("a,b", '"a,b"'),
        ('say "x"', '"say ""x"""'),
        ("plain", "plain"),
    ],
)
def test_cells(value, text):
    assert format_cell(value) == text


def test_columns_round_trip_exactly():
    rng = np.random.default_rng(0)
    floats = rng.lognormal(0, 5, 1000)
    sizes = rng.integers(1, 10**12, 1000).astype(np.float64)
    labels = np.array(["latency", "pfc_hol"] * 500)
    text = csv_text({"size_bytes": sizes, "fct_us": floats, "dominant": labels})
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [int(r["size_bytes"]) for r in rows] == sizes.astype(np.int64).tolist()
    assert all("e" not in r["size_bytes"] and "." not in r["size_bytes"] for r in rows)
    assert [float(r["fct_us"]) for r in rows] == floats.tolist()
    assert [r["dominant"] for r in rows] == labels.tolist()


def test_mixed_lists_and_refusals():
    assert format_column([1, None, 2.5, "x,y"]) == ["1", "", "2.5", '"x,y"']
    assert format_column([10**30, 1]) == [str(10**30), "1"]
    assert format_column(np.array([True, False])) == ["1", "0"]
    assert csv_text({"a": []}) == "a\n"
    with pytest.raises(ValueError, match="different lengths"):
        csv_text({"a": [1], "b": [1, 2]})
