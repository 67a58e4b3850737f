"""The batch-minor kernel (scenarios sharing one route table) against ``vmap`` of the kernel."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from fabricflow.solve.maxmin.batched import batch_bytes, solve_max_min_batch
from fabricflow.solve.maxmin.kernel import solve_max_min
from fabricflow.solve.maxmin.progressive_filling import progressive_filling
from fabricflow.solve.status import Status


def _instance(seed: int, *, with_coef: bool):
    rng = np.random.default_rng(seed)
    num_flows, hops, num_links, batch = 300, 4, 40, 6
    links = rng.integers(-1, num_links, (num_flows, hops)).astype(np.int32)
    capacity = rng.uniform(0.5, 10.0, (batch, num_links)).astype(np.float32)
    capacity[0, 3] = np.inf  # constrains nothing in scenario 0 only
    capacity[1, :5] = 0.0  # failed links: their flows get 0
    weight = rng.uniform(0.5, 2.0, num_flows).astype(np.float32)
    demand = rng.uniform(0.01, 0.5, (batch, num_flows)).astype(np.float32)
    demand[:, ::3] = np.inf
    coef = rng.uniform(0.0, 1.0, (num_flows, hops)).astype(np.float32) if with_coef else None
    return links, capacity, weight, demand, coef


@pytest.mark.parametrize("with_coef", [False, True])
def test_batch_minor_equals_vmap_bit_for_bit(with_coef):
    links, capacity, weight, demand, coef = _instance(1 + with_coef, with_coef=with_coef)
    batched = solve_max_min_batch(links, capacity, weight, demand, coef)
    vmapped = jax.vmap(lambda c, d: solve_max_min(links, c, weight, d, coef))(capacity, demand)
    np.testing.assert_array_equal(np.asarray(batched.rates), np.asarray(vmapped.rates))
    np.testing.assert_array_equal(np.asarray(batched.bottleneck), np.asarray(vmapped.bottleneck))
    np.testing.assert_array_equal(np.asarray(batched.rounds), np.asarray(vmapped.rounds))
    assert np.all(np.asarray(batched.status) == Status.CONVERGED)
    # and the float64 reference, scenario by scenario
    for b in (0, 1, 5):
        reference = progressive_filling(links, capacity[b], weight, demand[b], coef)
        rates = np.asarray(batched.rates[b], np.float64)
        scale = np.maximum(reference, 1e-6)
        finite = np.isfinite(reference)
        assert np.all(np.isinf(rates[~finite]))
        assert np.max(np.abs(rates - reference)[finite] / scale[finite]) <= 1e-5


def test_scenarios_stop_on_their_own():
    """A scenario that settles early keeps its round count and is untouched afterwards."""
    links = np.array([[0, 1], [1, -1], [2, -1]], np.int32)
    capacity = np.array([[1.0, 1.0, 1.0], [1.0, 4.0, 8.0]], np.float32)
    batched = solve_max_min_batch(links, capacity)
    for b in range(2):
        single = solve_max_min(links, capacity[b])
        np.testing.assert_array_equal(np.asarray(batched.rates[b]), np.asarray(single.rates))
        assert int(batched.rounds[b]) == int(single.rounds)


def test_statuses_per_scenario():
    links, capacity, weight, demand, _ = _instance(4, with_coef=False)
    capacity = capacity.copy()
    capacity[2, 0] = np.nan
    capacity[3, 1] = -1.0
    batched = solve_max_min_batch(links, capacity, weight, demand)
    vmapped = jax.vmap(lambda c, d: solve_max_min(links, c, weight, d))(capacity, demand)
    np.testing.assert_array_equal(np.asarray(batched.status), np.asarray(vmapped.status))
    assert list(np.asarray(batched.status)[:4]) == [0, 0, Status.NONFINITE, Status.INFEASIBLE]
    limited = solve_max_min_batch(links, capacity[:2], weight, demand[:2], max_iters=2)
    assert np.all(np.asarray(limited.status) == Status.MAX_ITERS_REACHED)
    assert np.all(np.asarray(limited.rounds) == 2)


def test_memory_estimate_grows_with_the_batch():
    one = batch_bytes(100_000, 6, 70_000, 1)
    many = batch_bytes(100_000, 6, 70_000, 100)
    assert many - one == 99 * (batch_bytes(100_000, 6, 70_000, 2) - one)
    assert one > 100_000 * 6 * 4  # at least the link ids


@pytest.mark.slow
def test_failure_bench_quick():
    """The bench section end to end at its quick size (one chunk of 64 scenarios)."""
    from types import SimpleNamespace

    from fabricflow.bench import failures

    result = failures.run(SimpleNamespace(quick=True, gpu=False))
    assert result["scenarios"] == 64
    assert result["chunking"]["chunks"] * result["chunking"]["chunk_scenarios"] >= 64
    table = result["by_tier_and_fraction"]
    stalled = [table[f"leaf@{f:g}"]["mean_stalled_flows"] for f in failures.FRACTIONS]
    assert stalled == sorted(stalled) and stalled[0] > 0
    assert all(
        row["mean_throughput_Bps"] <= result["intact_throughput_Bps"] * (1 + 1e-6)
        for row in table.values()
    )
