"""The max-min engine: every backend over the same cases, against the float64 reference
(textbook progressive filling) and the max-min certificate.

Cases: the oracles of docs/references.md §1, random instances (weights, demands,
coefficients, failed links, unbounded links), wide and ragged rows given as flat
entries, batches of scenarios, 1 flow and 10^6 flows; then the options (merge, dtype,
max_iters, throw), degenerate and bad input, and the JAX backend's bucketed shapes.
"""

from __future__ import annotations

import numpy as np
import pytest
from reference_solvers import progressive_filling

import fabricflow as ff
from fabricflow.errors import MemoryBudgetError, SolverError, SpecError
from fabricflow.link_loads import link_load
from fabricflow.solve.maxmin.engine import METHODS, max_min, resolve_method
from fabricflow.solve.maxmin.entries import FlowEntries, block_diagonal, bucket_size
from fabricflow.solve.maxmin.identical_flows import merge_identical_flows

BACKENDS = [m for m in METHODS if m != "auto"]


def random_instance(
    rng, *, flows=256, links=32, hops=5, weights=False, demands=False, coef=False, failed=False
):
    """A random instance whose values are exact in float32 (so float32 and float64 agree
    on the inputs and any difference is the solver's); random ``-1`` padding varies the
    path lengths (0..hops) and the links actually used."""

    def f32(a):
        return np.asarray(a, np.float32).astype(np.float64)

    instance = {
        "links": rng.integers(-1, links, (flows, hops)).astype(np.int32),
        "capacity": f32(rng.uniform(1, 100, links)),
    }
    if failed:
        instance["capacity"][rng.random(links) < 0.1] = 0.0
        instance["capacity"][rng.random(links) < 0.1] = np.inf
    if weights:
        instance["weight"] = f32(rng.uniform(0.2, 4, flows))
    if demands:
        instance["demand"] = np.where(
            rng.random(flows) < 0.3, f32(rng.uniform(0.01, 5, flows)), np.inf
        )
    if coef:
        instance["coef"] = rng.choice([0.0, 0.25, 0.5, 1.0], (flows, hops))
    return instance


def relative_error(rates, reference):
    rates = np.asarray(rates, np.float64)
    finite = np.isfinite(reference) & (reference > 0)
    assert np.array_equal(np.isfinite(rates), np.isfinite(reference))
    assert np.all(rates[reference == 0] == 0)
    return float(np.max(np.abs(rates[finite] - reference[finite]) / reference[finite], initial=0))


def certified(instance, rates, rtol=1e-9) -> bool:
    args = {k: v for k, v in instance.items() if k not in ("links", "capacity")}
    return bool(
        ff.certify_max_min(instance["links"], instance["capacity"], rates, rtol=rtol, **args)
    )


# ------------------------------------------------------------------ oracles (docs/references.md §1)
@pytest.mark.parametrize("method", BACKENDS)
@pytest.mark.parametrize("num_links", [1, 2, 5, 20])
def test_parking_lot_every_flow_gets_half(method, num_links):
    long_flow = [list(range(num_links))]
    short = [[link] + [-1] * (num_links - 1) for link in range(num_links)]
    rates = ff.max_min_rates(long_flow + short, np.ones(num_links), method=method)
    np.testing.assert_allclose(rates, 0.5, rtol=1e-6)


@pytest.mark.parametrize("method", BACKENDS)
def test_single_link_demand_oracles(method):
    rates = ff.max_min_rates([[0]] * 4, [10.0], demand=[2, 2.6, 4, 5], method=method)
    np.testing.assert_allclose(rates, [2, 2.6, 2.7, 2.7], rtol=1e-6)
    rates = ff.max_min_rates([[0]] * 3, [100.0], demand=[50, 20, 55], method=method)
    np.testing.assert_allclose(rates, [40, 20, 40], rtol=1e-6)


@pytest.mark.parametrize("method", BACKENDS)
def test_weights_failed_links_coefficients_and_unconstrained_flows(method):
    rates = ff.max_min_rates([[0], [0], [0]], [12.0], weight=[1, 2, 3], method=method)
    np.testing.assert_allclose(rates, [2, 4, 6], rtol=1e-6)
    rates = ff.max_min_rates(
        [[0, -1], [0, -1], [0, 1]], [12.0, 3.0], weight=[1, 2, 3], method=method
    )
    np.testing.assert_allclose(rates, [3, 6, 3], rtol=1e-6)
    rates = ff.max_min_rates([[0, 1], [1, -1], [2, -1]], [0.0, 4.0, 1.0], method=method)
    np.testing.assert_allclose(rates, [0, 4, 1])
    rates = ff.max_min_rates(
        [[0, 1], [0, -1]], [3.0, 10.0], coef=[[0.5, 0.5], [1.0, 0.0]], method=method
    )
    np.testing.assert_allclose(rates, [2, 2], rtol=1e-6)
    rates = ff.max_min_rates([[-1, -1], [0, -1], [1, -1]], [1.0, np.inf], method=method)
    assert np.isinf(rates[0]) and rates[1] == pytest.approx(1.0) and np.isinf(rates[2])
    assert ff.max_min_rates([[-1]], [1.0], demand=[3.0], method=method)[0] == pytest.approx(3.0)


# ------------------------------------------------------------------ random instances
OPTIONS = [
    {},
    {"weights": True},
    {"demands": True},
    {"coef": True},
    {"failed": True},
    {"weights": True, "demands": True, "coef": True, "failed": True},
]


@pytest.mark.parametrize("method", BACKENDS)
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "+".join(o) or "plain")
def test_random_instances_match_the_reference_and_the_certificate(method, options):
    rng = np.random.default_rng(sum(map(ord, str(options))))
    for trial in range(12):
        instance = random_instance(rng, flows=200 + 7 * trial, links=24 + trial, **options)
        reference = progressive_filling(**instance)
        solution = max_min(**instance, method=method, dtype=np.float64)
        assert solution.method == method and solution.rates.dtype == np.float64
        assert relative_error(solution.rates, reference) <= 1e-10
        assert certified(instance, solution.rates)
        single = max_min(**instance, method=method)  # float32 rates by default
        assert single.rates.dtype == np.float32
        assert relative_error(single.rates, reference) <= 2e-5


@pytest.mark.parametrize("method", BACKENDS)
def test_wide_and_ragged_rows_as_flat_entries(method):
    """Rows of 1 to 600 entries in one problem: given flat, nothing is padded."""
    rng = np.random.default_rng(4)
    counts = np.concatenate([rng.integers(1, 4, 300), rng.integers(200, 600, 6)])
    rng.shuffle(counts)
    num_links = 900
    link = np.concatenate([rng.choice(num_links, n, replace=False) for n in counts])
    coef = rng.choice([0.5, 1.0, 2.0], link.size)
    start = np.concatenate([[0], np.cumsum(counts)])
    entries = FlowEntries(start, link, coef, num_links)
    capacity = rng.uniform(1, 50, num_links)
    links, padded_coef = entries.to_padded()
    instance = {"links": links, "capacity": capacity, "coef": padded_coef}
    reference = progressive_filling(**instance)
    flat = max_min(entries, capacity, method=method, dtype=np.float64)
    padded = max_min(**instance, method=method, dtype=np.float64)
    assert relative_error(flat.rates, reference) <= 1e-10
    np.testing.assert_allclose(flat.rates, padded.rates, rtol=1e-12)
    assert certified(instance, flat.rates)


@pytest.mark.parametrize("method", BACKENDS)
def test_one_flow_and_no_flows(method):
    assert max_min([[0, 1]], [3.0, 2.0], method=method).rates.tolist() == [2.0]
    assert max_min(np.zeros((0, 3), np.int32), [1.0], method=method).rates.shape == (0,)
    assert np.isinf(max_min(np.full((2, 0), -1, np.int32), np.zeros(0), method=method).rates).all()
    rates = max_min([[0], [0]], [5.0], demand=[0.0, np.inf], method=method).rates
    np.testing.assert_allclose(rates, [0, 5])


@pytest.mark.parametrize("method", BACKENDS)
def test_a_million_flows(method):
    """10^6 flows, merge off so that every one is solved: 1,000 random 2-hop rows over
    200 links, each taken by 1,000 flows in shuffled order. The reference solves the
    1,000 rows weighted by their flow counts (identical flows get equal rates)."""
    rng = np.random.default_rng(0)
    rows = rng.integers(0, 200, (1000, 2)).astype(np.int32)
    capacity = rng.uniform(50.0, 500.0, 200)
    which = rng.permutation(np.repeat(np.arange(1000), 1000))
    links = rows[which]
    solution = max_min(links, capacity, method=method, merge=False, dtype=np.float64)
    per_row = progressive_filling(rows, capacity, weight=np.full(1000, 1000.0)) / 1000.0
    assert relative_error(solution.rates, per_row[which]) <= 1e-10
    assert certified({"links": links, "capacity": capacity}, solution.rates)


# ------------------------------------------------------------------ batches
@pytest.mark.parametrize("method", BACKENDS)
def test_a_batch_of_scenarios_equals_one_solve_each(method):
    rng = np.random.default_rng(5)
    instance = random_instance(rng, flows=60, links=12, hops=3)
    links, num_flows = instance["links"], instance["links"].shape[0]
    capacities = rng.uniform(1, 10, (6, 12))
    capacities[2, 3] = 0.0  # a failed link in one scenario
    capacities[4, 5] = np.inf  # an unbounded one in another
    solution = max_min(links, capacities, method=method, dtype=np.float64)
    assert solution.rates.shape == (6, num_flows) and solution.status.shape == (6,)
    for b in range(6):
        reference = progressive_filling(links, capacities[b])
        assert relative_error(solution.rates[b], reference) <= 1e-10
    weights = rng.uniform(0.5, 2, (4, num_flows))
    demands = rng.uniform(0.1, 3, (4, num_flows))
    solution = max_min(
        links, instance["capacity"], weight=weights, demand=demands, method=method, dtype=np.float64
    )
    for b in range(4):
        reference = progressive_filling(links, instance["capacity"], weights[b], demands[b])
        assert relative_error(solution.rates[b], reference) <= 1e-10


@pytest.mark.parametrize("method", BACKENDS)
def test_independent_problems_stacked_block_diagonally(method):
    rng = np.random.default_rng(8)
    problems, capacities, references = [], [], []
    for size in (20, 45, 7):
        instance = random_instance(rng, flows=size * 3, links=size, hops=4, coef=True)
        problems.append(FlowEntries.from_padded(instance["links"], instance["coef"], size))
        capacities.append(instance["capacity"])
        references.append(progressive_filling(**instance))
    stacked, link_offset, flow_offset = block_diagonal(problems)
    assert link_offset.tolist() == [0, 20, 65, 72] and flow_offset[-1] == 216
    rates = max_min(stacked, np.concatenate(capacities), method=method, dtype=np.float64).rates
    for i, reference in enumerate(references):
        mine = rates[flow_offset[i] : flow_offset[i + 1]]
        assert relative_error(mine, reference) <= 1e-10


# ------------------------------------------------------------------ options
@pytest.mark.parametrize("method", BACKENDS)
def test_merge_is_exact(method):
    rng = np.random.default_rng(3)
    rows = rng.integers(-1, 6, (4, 3))
    links = rows[rng.integers(0, 4, 200)].astype(np.int32)
    weight = rng.choice([0.5, 1.0, 2.0], 200)
    demand = np.where(rng.random(200) < 0.3, rng.choice([0.5, 1.0], 200), np.inf)
    assert merge_identical_flows(links, weight=weight).num_unique <= 4
    capacity = np.array([3.0, 1.0, 2.0, 5.0, 4.0, 1.5])
    for kwargs in (
        {},
        {"weight": weight},
        {"demand": demand},
        {"weight": weight, "demand": demand},
    ):
        merged = max_min(links, capacity, method=method, dtype=np.float64, **kwargs).rates
        plain = max_min(links, capacity, method=method, dtype=np.float64, merge=False, **kwargs)
        np.testing.assert_allclose(merged, plain.rates, rtol=1e-12)
        np.testing.assert_allclose(
            merged, progressive_filling(links, capacity, **kwargs), rtol=1e-10
        )


def test_merge_keeps_different_demand_levels_apart():
    links = np.zeros((3, 1), np.int32)
    assert merge_identical_flows(links, demand=np.array([1.0, 2.0, 1.0])).num_unique == 2
    merged = merge_identical_flows(
        links, weight=np.array([1.0, 2.0, 1.0]), demand=np.array([1.0, 2.0, 1.0])
    )
    assert merged.num_unique == 1  # same demand level d/w = 1


@pytest.mark.parametrize("method", BACKENDS)
def test_bottleneck_rounds_and_status(method):
    solution = max_min(
        [[0, 1], [0, -1], [1, -1]], [1.0, 4.0], demand=[np.inf, 0.2, 9], method=method
    )
    assert solution.bottleneck.tolist() == [0, -1, 1]
    assert int(solution.status) == ff.SolverStatus.CONVERGED and int(solution.rounds) >= 1


@pytest.mark.parametrize("method", BACKENDS)
def test_few_flows_on_a_large_fabric(method):
    """A solve that uses a few of many links (solved on the used links, renumbered): the
    rates are the reference's and each bottleneck is a saturated fabric link id."""
    rng = np.random.default_rng(7)
    instance = random_instance(rng, flows=64, links=5000, hops=4, weights=True, demands=True)
    instance["links"] = np.where(instance["links"] >= 0, instance["links"], 4999 - 7)
    solution = max_min(**instance, method=method, dtype=np.float64)
    reference = progressive_filling(**instance)
    assert relative_error(solution.rates, reference) <= 1e-9
    assert certified(instance, solution.rates)
    on = solution.bottleneck[solution.bottleneck >= 0]
    assert on.size and np.all(np.isin(on, instance["links"]))
    load = link_load(instance["links"], solution.rates, 5000)
    np.testing.assert_allclose(load[on], instance["capacity"][on], rtol=1e-9)


@pytest.mark.parametrize("method", BACKENDS)
def test_max_iters_reached_raises_or_reports(method):
    links, capacity, demand = [[0]] * 4, [10.0], [2, 2.6, 4, 5]  # needs 3 rounds
    with pytest.raises(SolverError, match="MAX_ITERS_REACHED"):
        max_min(links, capacity, demand=demand, max_iters=1, method=method)
    rates = max_min(links, capacity, demand=demand, max_iters=1, throw=False, method=method)
    assert int(rates.status) == ff.SolverStatus.MAX_ITERS_REACHED
    # the flow frozen in round 1 keeps its (final) rate; the unsettled ones are NaN
    assert rates.rates[0] == pytest.approx(2.0) and np.isnan(rates.rates[1:]).all()
    full = max_min(links, capacity, demand=demand, max_iters=3, method=method).rates
    assert full[3] == pytest.approx(2.7)


def test_auto_says_which_backend_it_picked():
    from fabricflow.solve.maxmin.engine import accelerator_present

    small = max_min([[0, 1], [1, -1]], [1.0, 2.0])
    expected = "jax" if accelerator_present() else "numpy"  # numpy on a CPU
    assert small.method == expected == resolve_method("auto", 10) == resolve_method("auto", 10**7)
    assert resolve_method("auto", 10, shard="flows") == "jax"
    with pytest.raises(SpecError) as error:
        max_min([[0]], [1.0], method="fast")
    assert error.value.field == "method"


def test_jax_backend_compiles_one_program_per_bucket():
    """Problems of different sizes within one bucket share a compiled program, and new
    capacities never recompile."""
    from fabricflow.solve.maxmin.flat import solve_flat

    rng = np.random.default_rng(9)
    first = random_instance(rng, flows=100, links=20, hops=4)
    max_min(**first, method="jax")
    before = solve_flat._cache_size()
    for flows, links in ((90, 18), (120, 25), (100, 20)):
        instance = random_instance(rng, flows=flows, links=links, hops=3)
        max_min(**instance, method="jax")
        max_min(instance["links"], instance["capacity"] * 2.0, method="jax", max_iters=500)
    assert solve_flat._cache_size() == before
    assert bucket_size(1) == bucket_size(256) == 256 and bucket_size(257) == 512


# ------------------------------------------------------------------ bad input
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
        ({"dtype": np.int32}, "dtype"),
    ],
)
def test_bad_input_names_the_field(kwargs, field):
    args = {"links": [[0, 1], [1, -1]], "capacity": [1.0, 1.0], **kwargs}
    with pytest.raises(SpecError) as error:
        max_min(args.pop("links"), args.pop("capacity"), **args)
    assert error.value.field == field


def test_bad_flat_entries_name_the_field():
    good = FlowEntries(np.array([0, 1, 2]), np.array([0, 1]), None, 2)
    assert max_min(good, [1.0, 1.0]).rates.tolist() == [1.0, 1.0]
    for entries, field in (
        (FlowEntries(np.array([0, 2, 1]), np.array([0, 1]), None, 2), "links.start"),
        (FlowEntries(np.array([0, 1, 3]), np.array([0, 1]), None, 2), "links.start"),
        (FlowEntries(np.array([0, 1, 2]), np.array([0, 5]), None, 2), "links.link"),
        (
            FlowEntries(np.array([0, 1, 2]), np.array([0, 1]), np.array([1.0, np.nan]), 2),
            "links.coef",
        ),
    ):
        with pytest.raises(SpecError) as error:
            max_min(entries, [1.0, 1.0])
        assert error.value.field == field


def test_memory_budget_refuses_before_allocating(monkeypatch):
    # The shared policy: $FABRICFLOW_MEMORY_BUDGET caps every large allocation.
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "1MiB")
    with pytest.raises(MemoryBudgetError, match=r"GiB.*FABRICFLOW_MEMORY_BUDGET") as error:
        ff.max_min_rates(np.zeros((10_000, 4), np.int32), [1.0], merge=False)
    assert "10000 flows x 4 hops" in str(error.value)
    with pytest.raises(MemoryBudgetError, match="10000 flows x 4 hops"):
        ff.max_min_completion(np.zeros((10_000, 4), np.int32), [1.0], np.ones(10_000))


@pytest.mark.parametrize("method, layout", [("numpy", "block"), ("jax", "block"), ("jax", "vmap")])
def test_max_min_batch_solves_independent_problems(method, layout):
    from fabricflow.solve.maxmin.batch import max_min_batch

    rng = np.random.default_rng(12)
    problems, capacities, demands, references = [], [], [], []
    for size in (15, 40, 9, 33):
        instance = random_instance(rng, flows=size * 4, links=size, hops=3, coef=True, demands=True)
        problems.append(FlowEntries.from_padded(instance["links"], instance["coef"], size))
        capacities.append(instance["capacity"])
        demands.append(instance["demand"])
        references.append(progressive_filling(**instance))
    solutions = max_min_batch(
        problems, capacities, demands=demands, method=method, layout=layout, dtype=np.float64
    )
    for solution, reference in zip(solutions, references, strict=True):
        assert solution.method == method
        assert relative_error(solution.rates, reference) <= 1e-10


def test_the_environment_overrides_auto(monkeypatch):
    from fabricflow.solve.maxmin.engine import METHOD_ENV

    monkeypatch.setenv(METHOD_ENV, "jax")
    assert resolve_method("auto") == "jax" and max_min([[0]], [1.0]).method == "jax"
    assert resolve_method("numpy") == "numpy"  # an explicit method wins
    monkeypatch.setenv(METHOD_ENV, "numpy")
    assert max_min([[0]], [1.0]).method == "numpy"
    monkeypatch.setenv(METHOD_ENV, "fast")
    with pytest.raises(SpecError) as error:
        max_min([[0]], [1.0])
    assert error.value.field == METHOD_ENV
