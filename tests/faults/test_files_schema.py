"""The shared value checks of :mod:`fabricflow.schema` that every file reader uses."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fabricflow import schema
from fabricflow.errors import SpecError


@pytest.mark.parametrize("value", [True, 2.5, 2.0, "2", None, [2], {"a": 1}, float("nan")])
def test_integer_refuses_what_is_not_an_integer(value):
    with pytest.raises(SpecError, match=r"^layout\.tp: must be an integer >= 1, got "):
        schema.integer(value, "layout.tp", minimum=1)


def test_integer_ranges_and_numpy():
    assert schema.integer(np.int64(8), "f", minimum=1) == 8
    assert type(schema.integer(np.int64(8), "f")) is int
    with pytest.raises(SpecError, match=r"in \[0, 3\], got 5"):
        schema.integer(5, "zero", minimum=0, maximum=3)
    with pytest.raises(SpecError, match="an integer of 400 bits"):
        schema.integer(2**399, "count", maximum=10)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 10**400, "1", True, None, [1.0]])
def test_number_refuses_non_finite_and_non_numbers(value):
    with pytest.raises(SpecError, match=r"^price: must be a finite number >= 0, got "):
        schema.number(value, "price", minimum=0)


def test_number_bounds():
    assert schema.number(3, "f", above=0) == 3.0
    with pytest.raises(SpecError, match=r"> 0"):
        schema.number(0, "f", above=0)
    with pytest.raises(SpecError, match=r"in \[0, 1\], got 2.0"):
        schema.number(2.0, "offload", minimum=0, maximum=1)


def test_choice_suggests_the_closest_and_sections_refuse_unknown_keys():
    with pytest.raises(SpecError, match=r"got 'rwo'.*did you mean 'row'\?"):
        schema.choice("rack", "row", "hall")("rwo", "cost.reach.leaf")
    with pytest.raises(SpecError, match=r"unknown key\(s\) \['prcie'\].*did you mean 'price'"):
        schema.Section({"prcie": 1}, "cost.gpus.h100", ("price", "power_W"))


def test_finite_result_and_sizes_and_lines():
    assert schema.finite_result(2.0, "f", "capex") == 2.0
    with pytest.raises(SpecError, match="capex is not a finite number"):
        schema.finite_result(1e308 * 10, "cost", "capex")
    assert schema.at_line("log.txt", 12, "size") == "log.txt, line 12, size"
    with pytest.raises(SpecError, match=r"^trace: the trace holds 1,000,000 jobs, over"):
        schema.check_size(10**6, 200_000, "trace", "the trace", "jobs")
    with pytest.raises(SpecError, match=r"holds about 1,000,000 rows, over the limit of 10"):
        schema.check_size(10**6, 10, "trace", "the file", "rows", estimate=True)
    schema.check_size(10, 200_000, "trace", "a trace", "jobs")
