"""Bad and extreme inputs to the solvers (``max_min_rates``, ``certify_max_min``,
``max_min_completion``) and the flag check they share: a named error that names the field, or
the answer of the float64 reference (subnormal, huge and mixed magnitudes)."""

from __future__ import annotations

import numpy as np
import pytest
from fault_helpers import raises_named as _raises_named
from reference_solvers import fluid_completion, progressive_filling

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


# ------------------------------------------------ max_min_completion: range and tolerances


@pytest.mark.parametrize(
    ("capacity_scale", "size_scale"),
    [(1e39, 1e39), (1e-40, 1e-40), (1e39, 1.0), (1.0, 1e39), (1e-40, 1.0), (1.0, 1e-40)],
)
def test_completion_of_any_magnitude_matches_the_float64_reference(capacity_scale, size_scale):
    capacity = np.array([1.0, 3.0]) * capacity_scale
    size = np.array([1.0, 2.0, 5.0]) * size_scale
    start = np.array([0.0, 0.5, 0.1]) * size_scale / capacity_scale
    result = ff.max_min_completion(PARKING_LOT, capacity, size, start=start)
    expected = fluid_completion(PARKING_LOT, capacity, size, start)
    assert np.all(np.isfinite(result.finish_time)) and np.all(result.finish_time > 0)
    np.testing.assert_allclose(result.finish_time, expected, rtol=1e-6)


def test_completion_keeps_float32_for_ordinary_inputs_and_huge_starts_in_float64():
    assert ff.max_min_completion(PARKING_LOT, [1e9, 2e9], [1e6] * 3).finish_time.dtype == np.float32
    late = ff.max_min_completion([[0]], [1.0], [1.0], start=[1e39]).finish_time
    assert late.dtype == np.float64 and np.isfinite(late[0])
    np.testing.assert_allclose(late, [1e39], rtol=1e-12)


@pytest.mark.parametrize("rtol", [1.0, -1e-9, float("nan"), True, "1e-6"])
def test_completion_rtol_is_checked_like_max_min_rates(rtol):
    expected = _raises_named(lambda: ff.max_min_rates([[0]], [1.0], rtol=rtol), "rtol")
    got = _raises_named(lambda: ff.max_min_completion([[0]], [1.0], [1.0], rtol=rtol), "rtol")
    assert str(got) == str(expected)


@pytest.mark.parametrize("bound", [0, -1, 2**31, 1.5, True, "10"])
def test_completion_max_events_is_checked_like_max_iters(bound):
    error = _raises_named(lambda: ff.max_min_completion([[0]], [1.0], [1.0], max_events=bound), "")
    assert error.field == "max_events" and "1..2147483647" in str(error)


def test_completion_rtol_is_used():
    loose = ff.max_min_completion(PARKING_LOT, [1.0, 1.0], [1.0, 1.0, 1.0], rtol=1e-4)
    np.testing.assert_allclose(loose.finish_time, [2.0, 2.0, 2.0], rtol=1e-5)


# ------------------------------------------------------------------- solver API

BAD_SOLVER_INPUTS = [
    ("ragged links", dict(links=[[0, 1], [0]], capacity=[1.0, 1.0]), "links"),
    ("float links", dict(links=[[0.0]], capacity=[1.0]), "links"),
    ("1-d links", dict(links=[0, 1], capacity=[1.0, 1.0]), "links"),
    ("link id too large", dict(links=[[2**40]], capacity=[1.0]), "links"),
    ("complex capacity", dict(links=PARKING_LOT, capacity=[1 + 1j, 1.0]), "capacity"),
    ("string capacity", dict(links=PARKING_LOT, capacity=["1", "2"]), "capacity"),
    ("object capacity", dict(links=PARKING_LOT, capacity=[None, 1.0]), "capacity"),
    ("NaN capacity", dict(links=PARKING_LOT, capacity=[np.nan, 1.0]), "capacity"),
    ("negative capacity", dict(links=PARKING_LOT, capacity=[-1.0, 1.0]), "capacity"),
    ("scalar capacity", dict(links=PARKING_LOT, capacity=1.0), "capacity"),
    ("3-d capacity", dict(links=PARKING_LOT, capacity=np.ones((1, 1, 2))), "capacity"),
    ("ragged capacity", dict(links=PARKING_LOT, capacity=[[1.0], [1.0, 2.0]]), "capacity"),
    ("zero weight", dict(links=PARKING_LOT, capacity=[1, 1], weight=[0, 1, 1]), "weight"),
    ("inf weight", dict(links=PARKING_LOT, capacity=[1, 1], weight=[np.inf, 1, 1]), "weight"),
    ("short weight", dict(links=PARKING_LOT, capacity=[1, 1], weight=[1, 1]), "weight"),
    ("NaN demand", dict(links=PARKING_LOT, capacity=[1, 1], demand=[np.nan, 1, 1]), "demand"),
    ("NaN coef", dict(links=PARKING_LOT, capacity=[1, 1], coef=np.full((3, 2), np.nan)), "coef"),
    ("coef shape", dict(links=PARKING_LOT, capacity=[1, 1], coef=np.ones((3, 3))), "coef"),
    ("batches", dict(links=PARKING_LOT, capacity=np.ones((2, 2)), weight=np.ones((3, 3))), "batch"),
    ("max_iters 0", dict(links=PARKING_LOT, capacity=[1, 1], max_iters=0), "max_iters"),
    ("max_iters text", dict(links=PARKING_LOT, capacity=[1, 1], max_iters="5"), "max_iters"),
    ("rtol NaN", dict(links=PARKING_LOT, capacity=[1, 1], rtol=float("nan")), "rtol"),
]


@pytest.mark.parametrize(("kwargs", "field"), [c[1:] for c in BAD_SOLVER_INPUTS],
                         ids=[c[0] for c in BAD_SOLVER_INPUTS])  # fmt: skip
def test_max_min_rates_bad_inputs(kwargs, field):
    _raises_named(lambda: ff.max_min_rates(**kwargs), field, SpecError)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (dict(rates=[0.5, 0.5]), "rates"),
        (dict(rates=["a", "b", "c"]), "rates"),
        (dict(rates=[[0.5], [0.5, 0.5]]), "rates"),
        (dict(rates=[0.5, 0.5, 0.5], rtol=-1), "rtol"),
        (dict(rates=[0.5, 0.5, 0.5], rtol="x"), "rtol"),
        (dict(rates=[0.5, 0.5, 0.5], rtol=float("nan")), "rtol"),
        (dict(rates=[0.1, 0.1, 0.1], rtol=10.0), "rtol"),  # would certify anything
        (dict(rates=[0.5, 0.5, 0.5], capacity=np.ones((2, 2))), "capacity"),
    ],
)
def test_certify_max_min_bad_inputs(kwargs, field):
    kwargs = {"capacity": [1.0, 1.0], **kwargs}
    _raises_named(lambda: ff.certify_max_min(PARKING_LOT, **kwargs), field, SpecError)


def test_certify_max_min_judges_bad_rates_instead_of_crashing():
    assert not ff.certify_max_min(PARKING_LOT, [1.0, 1.0], [np.nan, 0.5, 0.5])
    assert not ff.certify_max_min(PARKING_LOT, [1.0, 1.0], [-0.5, 0.5, 0.5])
    assert ff.certify_max_min(PARKING_LOT, [1e39, 1e39], [5e38, 5e38, 5e38])


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (dict(size=[np.nan, 1, 1]), "size"),
        (dict(size=[np.inf, 1, 1]), "size"),
        (dict(size=[-1, 1, 1]), "size"),
        (dict(size=[1, 1]), "size"),
        (dict(size=["1", "1", "1"]), "size"),
        (dict(size=[1, 1, 1], start=[np.nan, 0, 0]), "start"),
        (dict(size=[1, 1, 1], start=[-1, 0, 0]), "start"),
        (dict(size=[1, 1, 1], start=[np.inf, 0, 0]), "start"),
        (dict(size=[1, 1, 1], mode="fast"), "mode"),
        (dict(size=[1, 1, 1], mode="batched", eps=1.0), "eps"),
        (dict(size=[1, 1, 1], mode="batched", eps=float("nan")), "eps"),
        (dict(size=[1, 1, 1], capacity=np.ones((2, 2))), "capacity"),
        (dict(size=[1, 1, 1], weight=[0, 1, 1]), "weight"),
    ],
)
def test_max_min_completion_bad_inputs(kwargs, field):
    kwargs = {"capacity": [1.0, 1.0], **kwargs}
    capacity = kwargs.pop("capacity")
    _raises_named(lambda: ff.max_min_completion(PARKING_LOT, capacity, **kwargs), field, SpecError)


def test_solver_edge_inputs_give_the_reference_answer():
    empty = ff.max_min_rates(np.zeros((0, 1), int), [1.0])
    assert empty.shape == (0,)
    np.testing.assert_array_equal(ff.max_min_rates(PARKING_LOT, [np.inf, np.inf]), [np.inf] * 3)
    uint_links = np.array(PARKING_LOT)
    uint_links[uint_links < 0] = 0
    uint_links = uint_links.astype(np.uint64)
    np.testing.assert_allclose(
        ff.max_min_rates(uint_links, [1.0, 3.0]),
        progressive_filling(uint_links.astype(np.int64), [1.0, 3.0]),
        rtol=1e-6,
    )
    zero = ff.max_min_completion(PARKING_LOT, [1.0, 1.0], [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(zero.finish_time, [0.0, 0.0, 0.0])
    blocked = ff.max_min_completion(PARKING_LOT, [0.0, 1.0], [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(blocked.finish_time, [np.inf, np.inf, 1.0])


def test_ragged_links_say_how_to_pad():
    # [[0], [0, 1]] (paths of different lengths) said only "must be a rectangular array".
    with pytest.raises(SpecError, match="pad shorter paths with -1"):
        ff.max_min_rates([[0], [0, 1], [1]], [10.0, 10.0], shard="flows")


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
    np.testing.assert_allclose(
        rates, progressive_filling(links, capacity, demand=demand), rtol=1e-9
    )


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
        np.testing.assert_allclose(
            rates[b], progressive_filling(PARKING_LOT, capacity[b]), rtol=1e-6
        )


def test_zero_and_infinite_capacities_keep_their_meaning_when_scaled():
    rates = ff.max_min_rates([[0], [1], [-1]], [0.0, 1e-40])
    assert rates[0] == 0 and rates[1] > 0 and np.isinf(rates[2])


# ------------------------------------------------------------ tolerances and loop bounds


def test_large_rtol_is_refused_instead_of_wrong_rates():
    with pytest.raises(SpecError, match=r"\[0, 0.001\]") as error:
        ff.max_min_rates(PARKING_LOT, [1.0, 3.0], rtol=10)
    assert error.value.field == "rtol"
    np.testing.assert_allclose(
        ff.max_min_rates(PARKING_LOT, [1.0, 3.0], rtol=1e-3), [0.5, 0.5, 2.5]
    )


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


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"max_events": 0}, "max_events"),
        ({"max_events": -1}, "max_events"),
        ({"max_events": 1.5}, "max_events"),
        ({"mode": "batched", "eps": float("nan")}, "eps"),
        ({"mode": "batched", "eps": -0.1}, "eps"),
        ({"mode": "batched", "eps": 1.0}, "eps"),
    ],
)
def test_completion_checks_its_bounds(options, field):
    with pytest.raises(SpecError) as error:
        ff.max_min_completion([[0], [0]], [1.0], [1.0, 2.0], **options)
    assert error.value.field == field
