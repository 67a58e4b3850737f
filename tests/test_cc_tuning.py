"""``ff.tune_cc``: gradients through the fluid model against central finite differences,
and a tuning that improves the objective within its box."""

from __future__ import annotations

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.errors import SpecError
from fabricflow.optimize.cc_tuning import TuningProblem, tune_cc
from fabricflow.study.cc_scenarios import dumbbell

C40 = 40e9 / 8
NAMES = ("kmin", "kmax", "pmax", "rate_ai")


@pytest.fixture(scope="module")
def problem():
    # DCQCN on a 2-flow dumbbell, 10 ms at 5 us steps: settled over the averaging window.
    return TuningProblem.build(
        dumbbell(2, bandwidth=C40),
        "dcqcn",
        "throughput-delay",
        NAMES,
        duration=0.01,
        dt=5e-6,
        records=20,
    )


def test_gradient_matches_central_finite_differences(problem):
    base = {name: float(getattr(problem.base, name)) for name in NAMES}
    gradient = problem.gradient(base)
    for name in NAMES:
        step = base[name] * 1e-4
        up, down = dict(base), dict(base)
        up[name] += step
        down[name] -= step
        central = (problem.value(up) - problem.value(down)) / (2 * step)
        assert gradient[name] == pytest.approx(central, rel=1e-4), name
        assert gradient[name] != 0.0


def test_tuning_improves_the_objective_within_the_box(problem):
    tuned = tune_cc(problem, steps=6, learning_rate=0.1)
    assert tuned.objective <= tuned.default_objective
    assert tuned.objective < tuned.default_objective - 1e-3  # a real improvement
    for name in NAMES:
        low, high = tuned.bounds[name]
        assert low <= getattr(tuned.params, name) <= high
    summary = tuned.summary()
    assert summary["default"]["kmax"] == pytest.approx(200e3)
    assert set(summary["metrics"]) >= {"utilization", "queue_delay_s"}
    assert ff.tune_cc is tune_cc


def test_bad_tuning_requests_name_the_field():
    sc = dumbbell(2, bandwidth=C40)
    with pytest.raises(SpecError, match="not a DCQCN parameter") as error:
        TuningProblem.build(sc, "dcqcn", params=["eta"], duration=1e-4, records=2)
    assert error.value.field == "params"
    with pytest.raises(SpecError) as error:
        TuningProblem.build(
            sc, "dcqcn", params=["kmax"], bounds={"kmax": (1e3, 2e3)}, duration=1e-4, records=2
        )
    assert error.value.field == "bounds.kmax"
    with pytest.raises(SpecError, match="objective"):
        TuningProblem.build(sc, "hpcc", objective="fast", duration=1e-4, records=2)
    with pytest.raises(SpecError, match="scenario"):
        TuningProblem.build(object(), "hpcc")
    assert np.isfinite(TuningProblem.build(sc, "hpcc", duration=2e-4, records=2).high).all()
