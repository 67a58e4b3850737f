"""``ff.tune_cc``: gradients through the fluid model against central finite differences,
and a tuning that improves the objective within its box.

Differentiating the whole fluid compiles its reverse pass (tens of seconds on a loaded
2-core machine), so those two tests are ``slow``; the fast ones check the pieces whose
gradients the fluid needs finite (the NaN-safe ECN and DCQCN forms) and the inputs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fabricflow as ff
from fabricflow.dynamics.scenarios import dumbbell
from fabricflow.dynamics.tuning import TuningProblem, tune_cc
from fabricflow.errors import SpecError
from fabricflow.solve.cc.dcqcn import x_over_expm1
from fabricflow.solve.cc.ecn import MAX_NEG_LOG, log_no_mark

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


def test_nan_safe_forms_have_finite_exact_gradients():
    with jax.enable_x64(True):
        # x / (exp(x) - 1): the naive form's gradient is inf/inf = NaN once exp overflows.
        x = jnp.array([0.0, 5e-4, 0.5, 3.0, 40.0, 800.0])
        grad = np.asarray(jax.jit(jax.vmap(jax.grad(x_over_expm1)))(x))
        assert np.all(np.isfinite(grad))
        assert grad[0] == pytest.approx(-0.5)
        h = 1e-6 * x[2:5]
        central = (x_over_expm1(x[2:5] + h) - x_over_expm1(x[2:5] - h)) / (2 * h)
        np.testing.assert_allclose(grad[2:5], np.asarray(central), rtol=1e-6)
        assert float(x_over_expm1(x)[-1]) == 0.0
        # log(1 - p), clipped: finite with a finite gradient at and beyond p = 1.
        p = jnp.array([0.0, 0.3, 0.9, 1.0, 1.5])
        grad = np.asarray(jax.jit(jax.vmap(jax.grad(log_no_mark)))(p))
        np.testing.assert_allclose(grad, [-1.0, -1 / 0.7, -1 / 0.1, 0.0, 0.0], rtol=1e-9)
        assert float(log_no_mark(p)[3]) == -MAX_NEG_LOG


@pytest.mark.slow  # compiles the reverse pass of the whole fluid
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


@pytest.mark.slow  # compiles the reverse pass of the whole fluid
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
        TuningProblem.build(sc, "dcqcn", parameters=["eta"], duration=1e-4, records=2)
    assert error.value.field == "parameters"
    with pytest.raises(SpecError) as error:
        TuningProblem.build(
            sc, "dcqcn", parameters=["kmax"], bounds={"kmax": (1e3, 2e3)}, duration=1e-4, records=2
        )
    assert error.value.field == "bounds.kmax"
    with pytest.raises(SpecError, match="objective"):
        TuningProblem.build(sc, "hpcc", objective="fast", duration=1e-4, records=2)
    with pytest.raises(SpecError, match="scenario"):
        TuningProblem.build(object(), "hpcc")
    assert np.isfinite(TuningProblem.build(sc, "hpcc", duration=2e-4, records=2).high).all()
