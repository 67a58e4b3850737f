"""Fault injection for the solvers: magnitudes float32 cannot hold, invalid tolerances and
bounds, PFC/DCQCN parameter messages, the shared memory budget, work limits and progress
of long DCQCN runs, and the fast PFC deadlock scan against the plain one."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.errors import MemoryBudgetError, SpecError
from fabricflow.solve.dcqcn.params import DCQCNParams, PFCParams
from fabricflow.solve.maxmin.progressive_filling import progressive_filling

# ------------------------------------------------------------------ magnitudes (float32)

PARKING_LOT = [[0, 1], [0, -1], [1, -1]]


@pytest.mark.parametrize("magnitude", [1e39, 1e300, 1e-40, 1e-46, 1e-300])
def test_rates_of_any_magnitude_match_the_float64_reference(magnitude):
    capacity = np.array([1.0, 3.0]) * magnitude
    rates = ff.max_min_rates(PARKING_LOT, capacity)
    expected = progressive_filling(PARKING_LOT, capacity)
    assert np.all(np.isfinite(rates)) and np.all(rates > 0)
    np.testing.assert_allclose(rates, expected, rtol=1e-6)


def test_overflowing_rates_come_back_in_float64_not_inf():
    rates = ff.max_min_rates([[0], [0]], [1e39])
    assert rates.dtype == np.float64
    np.testing.assert_allclose(rates, [5e38, 5e38], rtol=1e-6)


def test_ordinary_rates_stay_float32():
    assert ff.max_min_rates(PARKING_LOT, [1e9, 2e9]).dtype == np.float32


def test_range_wider_than_float32_is_solved_in_float64():
    capacity = [1e-40, 1e39]
    demand = [1e-42, np.inf, 1e30]
    links = [[0, -1], [1, -1], [1, -1]]
    rates = ff.max_min_rates(links, capacity, demand=demand)
    np.testing.assert_allclose(rates, progressive_filling(links, capacity, demand=demand),
                               rtol=1e-9)


def test_extreme_weights_and_demands_match_the_reference():
    links = [[0, 1], [0, -1], [1, -1], [1, -1]]
    capacity = [1e20, 3e20]
    weight = [1e-30, 1e30, 1.0, 1e10]
    demand = [np.inf, 1e15, np.inf, 1e19]
    rates = ff.max_min_rates(links, capacity, weight=weight, demand=demand)
    expected = progressive_filling(links, capacity, weight=weight, demand=demand)
    np.testing.assert_allclose(rates, expected, rtol=1e-6)
    assert ff.certify_max_min(links, capacity, rates, weight=weight, demand=demand)


def test_batched_scenarios_of_huge_capacities():
    capacity = np.array([[1.0, 2.0], [4.0, 1.0]]) * 1e38
    rates = ff.max_min_rates(PARKING_LOT, capacity)
    for b in range(2):
        np.testing.assert_allclose(rates[b], progressive_filling(PARKING_LOT, capacity[b]),
                                   rtol=1e-6)


def test_zero_and_infinite_capacities_keep_their_meaning_when_scaled():
    rates = ff.max_min_rates([[0], [1], [-1]], [0.0, 1e-40])
    assert rates[0] == 0 and rates[1] > 0 and np.isinf(rates[2])


# ------------------------------------------------------------ tolerances and loop bounds

def test_large_rtol_is_refused_instead_of_wrong_rates():
    with pytest.raises(SpecError, match=r"\[0, 0.001\]") as error:
        ff.max_min_rates(PARKING_LOT, [1.0, 3.0], rtol=10)
    assert error.value.field == "rtol"
    np.testing.assert_allclose(ff.max_min_rates(PARKING_LOT, [1.0, 3.0], rtol=1e-3),
                               [0.5, 0.5, 2.5])


@pytest.mark.parametrize("rtol", [-1, float("nan"), float("inf"), "1e-6", True])
def test_invalid_rtol_names_rtol_not_max_iters(rtol):
    with pytest.raises(SpecError) as error:
        ff.max_min_solution(PARKING_LOT, [1.0, 1.0], rtol=rtol)
    assert error.value.field == "rtol" and "max_iters" not in str(error.value)


@pytest.mark.parametrize("max_iters", [0, -3, 2.5, 2**31, True])
def test_invalid_max_iters_is_refused(max_iters):
    with pytest.raises(SpecError) as error:
        ff.max_min_rates(PARKING_LOT, [1.0, 1.0], max_iters=max_iters)
    assert error.value.field == "max_iters"


@pytest.mark.parametrize(("options", "field"), [
    ({"max_events": 0}, "max_events"), ({"max_events": -1}, "max_events"),
    ({"max_events": 1.5}, "max_events"),
    ({"mode": "batched", "eps": float("nan")}, "eps"),
    ({"mode": "batched", "eps": -0.1}, "eps"), ({"mode": "batched", "eps": 1.0}, "eps"),
])
def test_completion_checks_its_bounds(options, field):
    with pytest.raises(SpecError) as error:
        ff.complete_flows([[0], [0]], [1.0], [1.0, 2.0], **options)
    assert error.value.field == field


# ----------------------------------------------------------------- PFC / DCQCN messages

def test_pfc_xoff_zero_blames_xoff():
    with pytest.raises(SpecError, match="> 0 bytes") as error:
        PFCParams().replace(xoff="0")
    assert error.value.field == "pfc.xoff"


@pytest.mark.parametrize(("field", "value"), [
    ("xoff", -1.0), ("xoff", 0.0), ("xoff", np.nan), ("hysteresis", -1.0),
    ("hysteresis", 2e5), ("dynamic_alpha", 0.0), ("dynamic_alpha", -1.0),
    ("shared_buffer", 0.0), ("shared_buffer", np.inf),
])
def test_every_pfc_field_names_itself(field, value):
    with pytest.raises(SpecError) as error:
        dataclasses.replace(PFCParams(), **{field: value}).validate()
    assert error.value.field == f"pfc.{field}"


BAD_DCQCN = [(f.name, v) for f in dataclasses.fields(DCQCNParams) for v in (-1.0, np.nan)] + [
    ("g", 2.0), ("pmax", 2.0), ("initial_alpha", 2.0), ("initial_rate_fraction", 2.0),
    ("kmax", 0.0), ("tau", 0.0), ("g", 0.0)]


@pytest.mark.parametrize(("field", "value"), BAD_DCQCN)
def test_every_dcqcn_field_names_itself(field, value):
    with pytest.raises(SpecError) as error:
        dataclasses.replace(DCQCNParams(), **{field: value}).validate()
    assert error.value.field == f"params.{field}"


def test_kmin_above_kmax_names_both():
    with pytest.raises(SpecError, match="kmin < kmax") as error:
        DCQCNParams().replace(kmax="4KB")
    assert "kmax=4000" in str(error.value)


def test_cli_pfc_xoff_zero(capsys):
    from fabricflow.cli import main

    code = main(["cc", "--scenario", "dumbbell", "--set", "pfc.xoff=0", "--duration", "1ms"])
    assert code != 0
    err = capsys.readouterr().err
    assert "pfc.xoff" in err and "hysteresis" not in err


# ------------------------------------------------------------------ one memory policy

def test_shared_memory_budget_refuses_a_moderate_maxmin_solve(monkeypatch):
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "1MiB")
    with pytest.raises(MemoryBudgetError, match=r"max_min_rates.*GiB.*FABRICFLOW_MEMORY_BUDGET"):
        ff.max_min_rates(np.zeros((20_000, 4), np.int32), [1.0])


def test_shared_memory_budget_refuses_a_dcqcn_run(monkeypatch):
    from fabricflow.solve.dcqcn.simulate import prepare_dcqcn

    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "1MiB")
    links = np.zeros((2_000, 1), np.int32)
    with pytest.raises(MemoryBudgetError, match=r"DCQCN run.*2000 flows.*GiB"):
        prepare_dcqcn(links, [5e9], np.zeros(2_000), records=500)
    # An explicit budget still overrides the policy.
    prepare_dcqcn(links, [5e9], np.zeros(2_000), records=500, memory_budget=2**30)
