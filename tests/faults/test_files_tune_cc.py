"""``tune_cc`` bounds and bottlenecks from a user (a notebook, a JSON file) are checked:
a bounds entry that is not two numbers, a key naming no tuned parameter and a bottleneck
that is no link are refused naming the field (they raised unpacking errors or were
ignored)."""

from __future__ import annotations

import pytest

from fabricflow.dynamics.scenarios import dumbbell
from fabricflow.dynamics.tuning import TuningProblem
from fabricflow.errors import SpecError

C40 = 40e9 / 8


def _build(**kwargs):
    scenario = kwargs.pop("scenario", dumbbell(2, bandwidth=C40))
    return TuningProblem.build(
        scenario, "dcqcn", parameters=["kmin", "kmax"], duration=1e-4, records=2, **kwargs
    )


@pytest.mark.parametrize(
    ("bounds", "field", "words"),
    [
        ({"kmax": (1e3, 2e5, 3e5)}, "bounds.kmax", "two numbers"),
        ({"kmax": 2e5}, "bounds.kmax", "two numbers"),
        ({"kmax": "1e3,2e5"}, "bounds.kmax", "two numbers"),
        ({"kmax": (float("nan"), 2e5)}, "bounds.kmax[0]", "finite number > 0"),
        ({"kmax": (1e3, float("inf"))}, "bounds.kmax[1]", "finite number > 0"),
        ({"kmax": ("1e3", 2e5)}, "bounds.kmax[0]", "finite number"),
        ({"kmx": (1e3, 2e5)}, "bounds.kmx", "did you mean 'kmax'"),
        ({"pmax": (0.01, 0.5)}, "bounds.pmax", "not tuned; add it to parameters"),
        ([(1e3, 2e5)], "bounds", "mapping"),
    ],
)
def test_bad_bounds_are_refused_naming_the_field(bounds, field, words):
    with pytest.raises(SpecError) as error:
        _build(bounds=bounds)
    assert error.value.field == field and words in str(error.value), str(error.value)


@pytest.mark.parametrize("link", [-1, 10**6, 2.0, "0", True])
def test_a_bottleneck_that_is_no_link_is_refused(link):
    sc = dumbbell(2, bandwidth=C40)
    with pytest.raises(SpecError) as error:
        _build(scenario=(sc.fabric, sc.routes, link))
    assert error.value.field == "bottleneck"
    assert _build(scenario=(sc.fabric, sc.routes, 0)).bottleneck == 0
