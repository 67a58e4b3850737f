"""Fault injection for the solver, routing and fabric APIs: boolean options that are not
bools, wrong shapes, errors that name the right field, reserved tier names, subnormal
inputs and the parking-lot work estimate."""

from __future__ import annotations

import numpy as np
import pytest
from reference_solvers import progressive_filling

import fabricflow as ff
from fabricflow.errors import SolverError, SpecError, check_flag

PARKING_LOT = [[0, 1], [0, -1], [1, -1]]

# ------------------------------------------------------------------ boolean options


@pytest.mark.parametrize("value", [True, False, np.bool_(True), np.bool_(False)])
def test_check_flag_accepts_bools(value):
    assert check_flag(value, "x") is bool(value)


@pytest.mark.parametrize("value", ["no", "False", 0, 1, None, np.int64(1), [True]])
def test_check_flag_refuses_non_bools(value):
    with pytest.raises(SpecError, match="^x: must be True or False"):
        check_flag(value, "x")


@pytest.mark.parametrize("option", ["throw", "merge"])
def test_max_min_rates_refuses_truthy_strings(option):
    for solve in (ff.max_min_rates, ff.max_min_solution):
        with pytest.raises(SpecError) as info:
            solve(PARKING_LOT, [1.0, 1.0], **{option: "no"})
        assert info.value.field == option


@pytest.mark.parametrize("option", ["throw", "merge"])
def test_max_min_completion_refuses_truthy_strings(option):
    with pytest.raises(SpecError) as info:
        ff.max_min_completion(PARKING_LOT, [1.0, 1.0], [1.0, 1.0, 1.0], **{option: "no"})
    assert info.value.field == option


def test_route_refuses_a_string_pxn():
    fabric = ff.load_fabric("dgx-h100-superpod")
    with pytest.raises(SpecError) as info:
        ff.route(fabric, [0], [9], pxn="no")
    assert info.value.field == "pxn"
    ff.route(fabric, [0], [9], pxn=np.bool_(True))  # numpy bools are fine


def test_collective_refuses_a_string_rail_aware():
    fabric = ff.load_fabric("dgx-h100-superpod")
    with pytest.raises(SpecError) as info:
        ff.collective_time(fabric, "all_reduce", np.arange(16), 2**20, rail_aware="no")
    assert info.value.field == "rail_aware"


# ------------------------------------------------------------------ shapes and field names


def test_max_min_completion_refuses_a_2d_size():
    with pytest.raises(SpecError) as info:
        ff.max_min_completion([[0], [0]], [1.0], np.ones((2, 2)))
    assert info.value.field == "size"


def test_max_min_completion_refuses_a_2d_start():
    with pytest.raises(SpecError) as info:
        ff.max_min_completion([[0], [0]], [1.0], [1.0, 1.0], start=np.zeros((3, 2)))
    assert info.value.field == "start"


def test_batch_mismatch_blames_the_disagreeing_input():
    with pytest.raises(SpecError) as info:
        ff.max_min_rates(PARKING_LOT, np.ones((4, 2)), weight=np.ones((1, 3)))
    assert info.value.field == "weight"
    with pytest.raises(SpecError) as info:
        ff.max_min_rates(PARKING_LOT, np.ones((4, 2)), demand=np.ones((2, 3)))
    assert info.value.field == "demand"


def test_max_min_completion_event_bound_names_max_events():
    with pytest.raises(SolverError, match="raise max_events") as info:
        ff.max_min_completion(PARKING_LOT, [1.0, 3.0], [1.0, 2.0, 3.0], max_events=1)
    assert "max_iters" not in str(info.value)


# ------------------------------------------------------------------ subnormal inputs


def test_subnormal_capacity_gives_its_nonzero_rate():
    capacity = np.array([1e-320, 10.0])
    rates = ff.max_min_rates([[0], [1]], capacity)
    np.testing.assert_array_equal(rates, progressive_filling([[0], [1]], capacity))
    assert rates[0] == 1e-320 and rates.dtype == np.float64


def test_subnormal_weight_gives_proportional_rates():
    rates = ff.max_min_rates([[0], [0]], [1.0], weight=[1e-320, 1.0])
    expected = progressive_filling([[0], [0]], np.array([1.0]), weight=np.array([1e-320, 1.0]))
    np.testing.assert_allclose(rates, expected, rtol=1e-12)
    assert rates[0] > 0


def test_subnormal_parking_lot_matches_the_reference():
    capacity = np.array([1.0, 3.0]) * 1e-315
    rates = ff.max_min_rates(PARKING_LOT, capacity)
    np.testing.assert_allclose(rates, progressive_filling(PARKING_LOT, capacity), rtol=1e-6)
    assert np.all(rates > 0)


def test_unsolvable_span_is_a_clear_error():
    with pytest.raises(SpecError, match="float64") as info:
        ff.max_min_rates([[0], [1]], [1e-320, 1e300])
    assert info.value.field == "capacity"


# ------------------------------------------------------------------ Clos tier names


def _clos(tiers, gpus=8):
    return {
        "name": "t",
        "gpus": gpus,
        "gpus_per_node": 1,
        "topology": {"type": "clos", "nic_bandwidth": "100Gbps", "tiers": tiers},
    }


@pytest.mark.parametrize("reserved", ["nic", "nvlink"])
def test_clos_tier_cannot_take_a_builtin_link_kind(reserved):
    from fabricflow.fabric.spec import build_fabric

    with pytest.raises(SpecError, match=reserved) as info:
        build_fabric(_clos([{"radix": 2, "name": reserved}, {"radix": 4}]))
    assert info.value.field.endswith("tiers[0].name")


def test_clos_tier_names_must_differ():
    from fabricflow.fabric.spec import build_fabric

    with pytest.raises(SpecError, match="already used") as info:
        build_fabric(_clos([{"radix": 4, "name": "a"}, {"radix": 4, "name": "a"}]))
    assert info.value.field.endswith("tiers[1].name")
    fabric = build_fabric(_clos([{"radix": 4, "name": "a"}, {"radix": 4, "name": "b"}]))
    assert fabric.num_gpus == 8


@pytest.mark.parametrize("key", ["uplink_bandwidth", "uplink_bundle", "up_ports"])
def test_top_tier_uplink_error_names_the_given_key(key):
    from fabricflow.fabric.spec import build_fabric

    value = "400Gbps" if key == "uplink_bandwidth" else 2
    top = {"down_ports": 4, key: value} if key == "up_ports" else {"radix": 4, key: value}
    with pytest.raises(SpecError, match="no uplinks") as info:
        build_fabric(_clos([{"radix": 4}, top]))
    assert info.value.field.endswith(f"tiers[1].{key}")


# ------------------------------------------------------------------ parking-lot estimate


def test_parking_lot_of_many_hops_is_refused_before_building():
    from fabricflow.dynamics.scenarios import build_scenario
    from fabricflow.errors import MemoryBudgetError

    with pytest.raises(MemoryBudgetError, match="parking_lot"):
        build_scenario("parking_lot", 100_000)


def test_parking_lot_estimate_counts_the_quadratic_paths(monkeypatch):
    from fabricflow.dynamics.scenarios import parking_lot
    from fabricflow.errors import MemoryBudgetError

    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", str(8 * 2**20))
    assert parking_lot(50).routes.links.shape == (51, 52)  # ~170 KB: fits
    with pytest.raises(MemoryBudgetError, match="fewer hops"):
        parking_lot(1000)  # ~64 MB of paths and temporaries


# ------------------------------------------------------------------ DCQCN overrides


@pytest.mark.parametrize("overrides", [[1], "kmax", {1: 2}])
def test_dcqcn_overrides_must_be_a_mapping_of_names(overrides):
    from fabricflow.dynamics.scenarios import dumbbell

    sc = dumbbell(2)
    with pytest.raises(SpecError) as info:
        ff.simulate_dcqcn(sc.fabric, sc.routes, overrides=overrides)
    assert info.value.field == "overrides"


def test_dcqcn_refuses_a_string_throw():
    from fabricflow.dynamics.scenarios import dumbbell

    sc = dumbbell(2)
    with pytest.raises(SpecError) as info:
        ff.simulate_dcqcn(sc.fabric, sc.routes, throw="no")
    assert info.value.field == "throw"
