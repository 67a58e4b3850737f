"""Max-min fair rates: oracles, float64 reference agreement, options, shapes and errors."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import fabricflow as ff
from fabricflow.errors import MemoryBudgetError, SolverError, SpecError
from fabricflow.solve.maxmin import kernel as maxmin
from fabricflow.solve.maxmin.identical_flows import merge_identical_flows
from fabricflow.solve.maxmin.progressive_filling import progressive_filling


def random_instance(
    rng, *, flows=(256, 257), links=(32, 33), hops=(5, 6), weights=False, demands=False, coef=False
):
    """A random instance whose values are exact in float32 (so float32 and float64 agree
    on the inputs and any difference is the solver's). Fixed sizes by default so that a
    test compiles once; random ``-1`` padding still varies the path lengths (0..5 hops)
    and the number of links actually used."""
    num_flows = int(rng.integers(*flows))
    num_links = int(rng.integers(*links))
    num_hops = int(rng.integers(*hops))

    def f32(a):
        return np.asarray(a, np.float32).astype(np.float64)

    instance = {
        "links": rng.integers(-1, num_links, (num_flows, num_hops)).astype(np.int32),
        "capacity": f32(rng.uniform(1, 100, num_links)),
    }
    if weights:
        instance["weight"] = f32(rng.uniform(0.2, 4, num_flows))
    if demands:
        instance["demand"] = np.where(
            rng.random(num_flows) < 0.3, f32(rng.uniform(0.01, 5, num_flows)), np.inf
        )
    if coef:
        instance["coef"] = rng.choice([0.0, 0.25, 0.5, 1.0], (num_flows, num_hops))
    return instance


def relative_error(rates, reference):
    rates = np.asarray(rates, np.float64)
    finite = np.isfinite(reference) & (reference > 0)
    assert np.array_equal(np.isfinite(rates), np.isfinite(reference))
    assert np.all(rates[reference == 0] == 0)
    return float(np.max(np.abs(rates[finite] - reference[finite]) / reference[finite], initial=0))


# ------------------------------------------------------------------ oracles (docs/references.md §1)
@pytest.mark.parametrize("num_links", [1, 2, 5, 20])
def test_parking_lot_every_flow_gets_half(num_links):
    long_flow = [list(range(num_links))]
    short = [[link] + [-1] * (num_links - 1) for link in range(num_links)]
    rates = ff.max_min_rates(long_flow + short, np.ones(num_links))
    np.testing.assert_allclose(rates, 0.5, rtol=1e-6)


def test_keshav_single_link_demands():
    rates = ff.max_min_rates([[0]] * 4, [10.0], demand=[2, 2.6, 4, 5])
    np.testing.assert_allclose(rates, [2, 2.6, 2.7, 2.7], rtol=1e-6)


def test_single_link_demands_c100():
    rates = ff.max_min_rates([[0]] * 3, [100.0], demand=[50, 20, 55])
    np.testing.assert_allclose(rates, [40, 20, 40], rtol=1e-6)


def test_weighted_shares_are_proportional():
    rates = ff.max_min_rates([[0], [0], [0, 1][:1]], [12.0], weight=[1, 2, 3])
    np.testing.assert_allclose(rates, [2, 4, 6], rtol=1e-6)
    # The weight-3 flow is also capped by a second link: the others share the rest.
    rates = ff.max_min_rates([[0, -1], [0, -1], [0, 1]], [12.0, 3.0], weight=[1, 2, 3])
    np.testing.assert_allclose(rates, [3, 6, 3], rtol=1e-6)


def test_failed_link_gives_rate_zero():
    rates = ff.max_min_rates([[0, 1], [1, -1], [2, -1]], [0.0, 4.0, 1.0])
    np.testing.assert_allclose(rates, [0, 4, 1])


def test_multipath_coef_splits_load():
    # Flow 0 split half/half over links 0 and 1; flow 1 only on link 0 (capacity 3).
    # Link 0: 0.5 r0 + r1 <= 3, link 1: 0.5 r0 <= 10 -> r0 = r1 = 2.
    rates = ff.max_min_rates([[0, 1], [0, -1]], [3.0, 10.0], coef=[[0.5, 0.5], [1.0, 0.0]])
    np.testing.assert_allclose(rates, [2, 2], rtol=1e-6)


def test_unconstrained_flow_is_infinite():
    rates = ff.max_min_rates([[-1, -1], [0, -1]], [1.0])
    assert np.isinf(rates[0]) and rates[1] == pytest.approx(1.0)
    assert ff.max_min_rates([[-1]], [1.0], demand=[3.0])[0] == pytest.approx(3.0)


# ------------------------------------------------------------------ agreement with float64
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"weights": True},
        {"demands": True},
        {"coef": True},
        {"weights": True, "demands": True, "coef": True},
    ],
)
def test_float32_agrees_with_float64_reference(options):
    rng = np.random.default_rng(sum(map(ord, str(options))))
    worst = 0.0
    for _ in range(25):
        instance = random_instance(rng, **options)
        reference = progressive_filling(**instance)
        rates = ff.max_min_rates(
            **{k: v for k, v in instance.items() if k != "links"}, links=instance["links"]
        )
        assert rates.dtype == np.float32
        worst = max(worst, relative_error(rates, reference))
    assert worst <= 1e-5


def test_float64_mode_matches_reference_tightly():
    rng = np.random.default_rng(7)
    with jax.enable_x64(True):
        for _ in range(10):
            instance = random_instance(rng, weights=True, demands=True, coef=True)
            rates = ff.max_min_rates(**instance)
            assert rates.dtype == np.float64
            assert relative_error(rates, progressive_filling(**instance)) <= 1e-10


def test_larger_instance_agrees():
    rng = np.random.default_rng(11)
    instance = random_instance(rng, flows=(3000, 3001), links=(200, 201), hops=(6, 7), weights=True)
    assert relative_error(ff.max_min_rates(**instance), progressive_filling(**instance)) <= 1e-5


# ------------------------------------------------------------------ merging
def test_merge_groups_identical_rows_and_is_exact():
    rng = np.random.default_rng(3)
    rows = rng.integers(-1, 6, (4, 3))
    links = rows[rng.integers(0, 4, 200)].astype(np.int32)
    weight = rng.choice([0.5, 1.0, 2.0], 200)
    demand = np.where(rng.random(200) < 0.3, rng.choice([0.5, 1.0], 200), np.inf)
    merged = merge_identical_flows(links, weight=weight)
    assert merged.num_unique <= 4
    capacity = np.array([3.0, 1.0, 2.0, 5.0, 4.0, 1.5])
    for kwargs in (
        {},
        {"weight": weight},
        {"demand": demand},
        {"weight": weight, "demand": demand},
    ):
        merged_rates = ff.max_min_rates(links, capacity, **kwargs)
        plain = ff.max_min_rates(links, capacity, merge=False, **kwargs)
        np.testing.assert_allclose(merged_rates, plain, rtol=1e-5)
        np.testing.assert_allclose(
            merged_rates, progressive_filling(links, capacity, **kwargs), rtol=1e-5
        )


def test_merge_keeps_different_demand_levels_apart():
    links = np.zeros((3, 1), np.int32)
    merged = merge_identical_flows(links, demand=np.array([1.0, 2.0, 1.0]))
    assert merged.num_unique == 2
    merged = merge_identical_flows(
        links, weight=np.array([1.0, 2.0, 1.0]), demand=np.array([1.0, 2.0, 1.0])
    )
    assert merged.num_unique == 1  # same demand level d/w = 1


# ------------------------------------------------------------------ jit / vmap / shapes
def test_vmap_over_capacity_weight_and_demand_batches():
    rng = np.random.default_rng(5)
    instance = random_instance(rng, flows=(60, 61), links=(12, 13), hops=(3, 4))
    links, num_flows = instance["links"], instance["links"].shape[0]
    capacities = rng.uniform(1, 10, (8, 12))
    rates = ff.max_min_rates(links, capacities)
    assert rates.shape == (8, num_flows)
    for b in range(8):
        np.testing.assert_allclose(rates[b], progressive_filling(links, capacities[b]), rtol=1e-5)
    weights = rng.uniform(0.5, 2, (4, num_flows))
    demands = rng.uniform(0.1, 3, (4, num_flows))
    solution = ff.max_min_solution(links, instance["capacity"], weight=weights, demand=demands)
    assert solution.rates.shape == (4, num_flows) and solution.status.shape == (4,)
    for b in range(4):
        np.testing.assert_allclose(
            solution.rates[b],
            progressive_filling(links, instance["capacity"], weights[b], demands[b]),
            rtol=1e-5,
        )


def test_kernel_vmaps_directly():
    links = np.array([[0, 1], [0, -1], [1, -1]])
    capacities = np.array([[1.0, 1.0], [2.0, 1.0], [1.0, 0.0]], np.float32)
    solution = jax.vmap(maxmin.solve_max_min, in_axes=(None, 0))(links, capacities)
    assert solution.rates.shape == (3, 3) and solution.rounds.shape == (3,)
    np.testing.assert_allclose(solution.rates[1], [0.5, 1.5, 0.5], rtol=1e-6)
    np.testing.assert_allclose(solution.rates[2], [0.0, 1.0, 0.0], atol=1e-7)


def test_second_call_with_new_capacities_does_not_recompile():
    rng = np.random.default_rng(9)
    instance = random_instance(rng, flows=(100, 101), links=(20, 21), hops=(4, 5))
    ff.max_min_rates(instance["links"], instance["capacity"])
    before = maxmin._solve._cache_size()
    for scale in (2.0, 0.5, 3.0):
        ff.max_min_rates(
            instance["links"], instance["capacity"] * scale, demand=None, max_iters=500
        )
    assert maxmin._solve._cache_size() == before


def test_bottleneck_and_status():
    solution = ff.max_min_solution([[0, 1], [0, -1], [1, -1]], [1.0, 4.0], demand=[np.inf, 0.2, 9])
    assert solution.bottleneck.tolist() == [0, -1, 1]
    assert int(solution.status) == ff.SolverStatus.CONVERGED


def test_max_iters_reached_raises_or_reports():
    links, capacity, demand = [[0]] * 4, [10.0], [2, 2.6, 4, 5]  # needs 3 rounds
    with pytest.raises(SolverError, match="MAX_ITERS_REACHED"):
        ff.max_min_rates(links, capacity, demand=demand, max_iters=1)
    rates = ff.max_min_rates(links, capacity, demand=demand, max_iters=1, throw=False)
    assert np.isnan(rates).all()
    assert ff.max_min_rates(links, capacity, demand=demand, max_iters=3)[3] == pytest.approx(2.7)


# ------------------------------------------------------------------ degenerate and bad input
def test_empty_and_degenerate_inputs():
    assert ff.max_min_rates(np.zeros((0, 3), np.int32), [1.0]).shape == (0,)
    assert ff.max_min_rates(np.zeros((0, 0), np.int32), np.zeros(0)).shape == (0,)
    assert np.isinf(ff.max_min_rates(np.full((2, 0), -1, np.int32), np.zeros(0))).all()
    assert ff.max_min_rates([[0]], [5.0]).tolist() == [5.0]
    np.testing.assert_allclose(ff.max_min_rates([[0], [0]], [5.0], demand=[0.0, np.inf]), [0, 5])


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"capacity": [1.0, np.nan]}, "capacity"),
        ({"capacity": [1.0, -1.0]}, "capacity"),
        ({"links": [[0, 2], [1, -1]]}, "links"),
        ({"links": [[0, -2], [1, -1]]}, "links"),
        ({"links": [0, 1]}, "links"),
        ({"links": [[0.5, 1.0], [1.0, -1.0]]}, "links"),
        ({"weight": [1.0]}, "weight"),
        ({"weight": [1.0, 0.0]}, "weight"),
        ({"demand": [1.0, np.nan]}, "demand"),
        ({"demand": [-1.0, 1.0]}, "demand"),
        ({"coef": [[1.0, 1.0]]}, "coef"),
        ({"capacity": [[1.0, 1.0], [1.0, 1.0]], "weight": np.ones((3, 2))}, "weight"),
    ],
)
def test_bad_input_names_the_field(kwargs, field):
    args = {"links": [[0, 1], [1, -1]], "capacity": [1.0, 1.0], **kwargs}
    with pytest.raises(SpecError) as error:
        ff.max_min_rates(args.pop("links"), args.pop("capacity"), **args)
    assert error.value.field == field


def test_memory_budget_refuses_before_allocating(monkeypatch):
    # The shared policy: $FABRICFLOW_MEMORY_BUDGET caps every large allocation.
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "1MiB")
    with pytest.raises(MemoryBudgetError, match=r"GiB.*FABRICFLOW_MEMORY_BUDGET") as error:
        ff.max_min_rates(np.zeros((10_000, 4), np.int32), [1.0])
    assert "10000 flows x 4 hops" in str(error.value)
    with pytest.raises(MemoryBudgetError, match="10000 flows x 4 hops"):
        ff.complete_flows(np.zeros((10_000, 4), np.int32), [1.0], np.ones(10_000))


def test_kernel_reports_bad_input_as_status():
    solution = maxmin.solve_max_min(np.array([[0]]), np.array([np.nan], np.float32))
    assert int(solution.status) == ff.SolverStatus.NONFINITE
    solution = maxmin.solve_max_min(np.array([[0]]), np.array([-1.0], np.float32))
    assert int(solution.status) == ff.SolverStatus.INFEASIBLE
    solution = maxmin.solve_max_min(np.array([[3]]), np.array([1.0], np.float32))
    assert int(solution.status) == ff.SolverStatus.INFEASIBLE
