"""The completion engine: both backends (numpy, jax), exact and batched modes, against
the float64 event-by-event reference; the time base at late start times; stop_after."""

from __future__ import annotations

import numpy as np
import pytest
from reference_solvers import fluid_completion

import fabricflow as ff
from fabricflow.errors import SpecError

NUM_FLOWS, NUM_LINKS, NUM_HOPS = 40, 8, 3
BACKENDS = ["numpy", "jax"]


def instance(seed, *, staggered=False, weighted=False):
    rng = np.random.default_rng(seed)
    links = rng.integers(-1, NUM_LINKS, (NUM_FLOWS, NUM_HOPS)).astype(np.int32)
    links[:, 0] = rng.integers(0, NUM_LINKS, NUM_FLOWS)  # every flow crosses a link
    kwargs = {
        "links": links,
        "capacity": rng.uniform(1, 5, NUM_LINKS),
        "size": rng.uniform(0.1, 10, NUM_FLOWS),
    }
    if staggered:
        kwargs["start"] = rng.uniform(0, 3, NUM_FLOWS) * (rng.random(NUM_FLOWS) < 0.6)
    if weighted:
        kwargs["weight"] = rng.uniform(0.5, 2, NUM_FLOWS)
    return kwargs


def fct_error(finish, reference, start):
    return float(np.max(np.abs(np.asarray(finish, np.float64) - reference) / (reference - start)))


@pytest.mark.parametrize("method", BACKENDS)
def test_two_flows_by_hand(method):
    result = ff.max_min_completion([[0], [0]], [1.0], [1.0, 2.0], method=method)
    np.testing.assert_allclose(result.finish_time, [2.0, 3.0], rtol=1e-6)
    assert int(result.events) == 2 and result.method == method
    late = ff.max_min_completion([[0], [0]], [1.0], [1.0, 1.0], start=[0.0, 0.5], method=method)
    np.testing.assert_allclose(late.finish_time, [1.5, 2.0], rtol=1e-6)
    np.testing.assert_allclose(late.elapsed, [1.5, 1.5], rtol=1e-12)


@pytest.mark.parametrize("method", BACKENDS)
@pytest.mark.parametrize("staggered, weighted", [(False, False), (True, False), (True, True)])
def test_exact_mode_matches_reference(method, staggered, weighted):
    for seed in range(6):
        kwargs = instance(seed, staggered=staggered, weighted=weighted)
        reference = fluid_completion(**kwargs)
        result = ff.max_min_completion(**kwargs, method=method)
        start = kwargs.get("start", np.zeros(NUM_FLOWS))
        assert fct_error(result.finish_time, reference, start) <= 1e-4
        np.testing.assert_allclose(result.elapsed, reference - start, rtol=1e-4)
        assert int(result.events) <= 2 * NUM_FLOWS


@pytest.mark.parametrize("method", BACKENDS)
@pytest.mark.parametrize("eps", [0.01, 0.1])
def test_batched_mode_within_documented_bound(method, eps):
    for seed in range(6):
        kwargs = instance(100 + seed, staggered=seed % 2 == 1)
        reference = fluid_completion(**kwargs)
        exact = ff.max_min_completion(**kwargs, method=method)
        batched = ff.max_min_completion(**kwargs, mode="batched", eps=eps, method=method)
        start = kwargs.get("start", np.zeros(NUM_FLOWS))
        assert fct_error(batched.finish_time, reference, start) <= 2 * eps
        assert int(batched.events) <= int(exact.events)


def test_identical_flows_merge_and_finish_together():
    links = np.array([[0, 1]] * 6 + [[1, -1]] * 2, np.int32)
    size = np.array([4.0] * 6 + [1.0, 1.0])
    merged = ff.max_min_completion(links, [3.0, 2.0], size)
    plain = ff.max_min_completion(links, [3.0, 2.0], size, merge=False)
    np.testing.assert_allclose(merged.finish_time, plain.finish_time, rtol=1e-5)
    np.testing.assert_allclose(
        merged.finish_time, fluid_completion(links, [3.0, 2.0], size), rtol=1e-5
    )
    assert int(merged.events) <= int(plain.events)  # ties are grouped either way


def test_flows_through_failed_link_never_finish_and_zero_size_finish_at_start():
    result = ff.max_min_completion([[0], [1], [1]], [0.0, 1.0], [1.0, 1.0, 0.0], start=[0, 0, 2.0])
    assert np.isinf(result.finish_time[0])
    assert result.finish_time[1] == pytest.approx(1.0)
    assert result.finish_time[2] == pytest.approx(2.0)


def test_empty():
    assert ff.max_min_completion(
        np.zeros((0, 2), np.int32), [1.0], np.zeros(0)
    ).finish_time.shape == (0,)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"size": [1.0, np.nan]}, "size"),
        ({"size": [1.0, -1.0]}, "size"),
        ({"size": [1.0, np.inf]}, "size"),
        ({"size": [1.0]}, "size"),
        ({"start": [0.0, -1.0]}, "start"),
        ({"mode": "fast"}, "mode"),
        ({"mode": "batched", "eps": 2.0}, "eps"),
        ({"capacity": [np.nan]}, "capacity"),
    ],
)
def test_bad_input_names_the_field(kwargs, field):
    args = {"links": [[0], [0]], "capacity": [1.0], "size": [1.0, 1.0], **kwargs}
    with pytest.raises(SpecError) as error:
        ff.max_min_completion(args.pop("links"), args.pop("capacity"), args.pop("size"), **args)
    assert error.value.field == field


# ------------------------------------------------------------------ the time base
# Two 2 MB flows, each alone on its own 400 Gb/s link (with 12% framing on the wire):
# 2.24 MB / 50 GB/s = 44.8 us each, whatever the start time of the second.
TWO_MB_WIRE, NIC_BPS = 2e6 * 1.12, 400e9 / 8


@pytest.mark.parametrize("method", BACKENDS)
@pytest.mark.parametrize("offset", [0.0, 1.0, 1e3, 1e9])
def test_completion_time_keeps_microseconds_at_any_start(method, offset):
    result = ff.max_min_completion(
        [[0], [1]], [NIC_BPS, NIC_BPS], [TWO_MB_WIRE] * 2, start=[0.0, offset], method=method
    )
    np.testing.assert_allclose(result.elapsed, [44.8e-6, 44.8e-6], rtol=1e-6)
    both_late = ff.max_min_completion(
        [[0], [1]], [NIC_BPS, NIC_BPS], [TWO_MB_WIRE] * 2, start=[offset] * 2, method=method
    )
    np.testing.assert_allclose(both_late.elapsed, [44.8e-6, 44.8e-6], rtol=1e-6)


@pytest.mark.parametrize("offset", [0.0, 1.0, 1e3, 1e9])
def test_flow_completion_times_keeps_microseconds_at_any_start(offset):
    from fabricflow.fabric.spec import load_fat_tree

    fabric = load_fat_tree(4)  # two flows under one leaf, each on its own NIC links
    routes = ff.route(fabric, np.array([0, 2]), np.array([1, 3]))
    alone = ff.flow_completion_times(fabric, routes, 2e6)
    times = ff.flow_completion_times(fabric, routes, 2e6, start=[0.0, offset])
    np.testing.assert_allclose(times.fct, alone.fct, rtol=1e-6)
    np.testing.assert_allclose(times.fct[1], times.fct[0], rtol=1e-6)


@pytest.mark.parametrize("method", BACKENDS)
def test_stop_after_reports_the_bytes_left(method):
    """Flow 0 (1 B) and flow 1 (3 B) share a 1 B/s link: flow 0 finishes at 2 s, flow 1
    has sent 1 B by then and has 2 B left."""
    done = ff.max_min_completion(
        [[0], [0]], [1.0], [1.0, 3.0], stop_after=np.array([True, False]), method=method
    )
    assert done.elapsed[0] == pytest.approx(2.0) and np.isinf(done.elapsed[1])
    assert done.remaining[1] == pytest.approx(2.0) and done.stop_time == pytest.approx(2.0)
    assert int(done.status) == ff.SolverStatus.CONVERGED
