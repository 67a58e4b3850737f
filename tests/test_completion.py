"""Flow completion: exact and batched modes against the float64 event-by-event reference."""

from __future__ import annotations

import numpy as np
import pytest
from reference_solvers import fluid_completion

import fabricflow as ff
from fabricflow.errors import SpecError

NUM_FLOWS, NUM_LINKS, NUM_HOPS = 40, 8, 3


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


def test_two_flows_by_hand():
    result = ff.complete_flows([[0], [0]], [1.0], [1.0, 2.0])
    np.testing.assert_allclose(result.finish_time, [2.0, 3.0], rtol=1e-6)
    assert int(result.events) == 2
    late = ff.complete_flows([[0], [0]], [1.0], [1.0, 1.0], start=[0.0, 0.5])
    np.testing.assert_allclose(late.finish_time, [1.5, 2.0], rtol=1e-6)


@pytest.mark.parametrize("staggered, weighted", [(False, False), (True, False), (True, True)])
def test_exact_mode_matches_reference(staggered, weighted):
    for seed in range(6):
        kwargs = instance(seed, staggered=staggered, weighted=weighted)
        reference = fluid_completion(**kwargs)
        result = ff.complete_flows(**kwargs)
        start = kwargs.get("start", np.zeros(NUM_FLOWS))
        assert fct_error(result.finish_time, reference, start) <= 1e-4
        assert int(result.events) <= 2 * NUM_FLOWS


@pytest.mark.parametrize("eps", [0.01, 0.1])
def test_batched_mode_within_documented_bound(eps):
    for seed in range(6):
        kwargs = instance(100 + seed, staggered=seed % 2 == 1)
        reference = fluid_completion(**kwargs)
        exact = ff.complete_flows(**kwargs)
        batched = ff.complete_flows(**kwargs, mode="batched", eps=eps)
        start = kwargs.get("start", np.zeros(NUM_FLOWS))
        assert fct_error(batched.finish_time, reference, start) <= 2 * eps
        assert int(batched.events) <= int(exact.events)


def test_identical_flows_merge_and_finish_together():
    links = np.array([[0, 1]] * 6 + [[1, -1]] * 2, np.int32)
    size = np.array([4.0] * 6 + [1.0, 1.0])
    merged = ff.complete_flows(links, [3.0, 2.0], size)
    plain = ff.complete_flows(links, [3.0, 2.0], size, merge=False)
    np.testing.assert_allclose(merged.finish_time, plain.finish_time, rtol=1e-5)
    np.testing.assert_allclose(
        merged.finish_time, fluid_completion(links, [3.0, 2.0], size), rtol=1e-5
    )
    assert int(merged.events) <= int(plain.events)  # ties are grouped either way


def test_flows_through_failed_link_never_finish_and_zero_size_finish_at_start():
    result = ff.complete_flows([[0], [1], [1]], [0.0, 1.0], [1.0, 1.0, 0.0], start=[0, 0, 2.0])
    assert np.isinf(result.finish_time[0])
    assert result.finish_time[1] == pytest.approx(1.0)
    assert result.finish_time[2] == pytest.approx(2.0)


def test_empty():
    assert ff.complete_flows(np.zeros((0, 2), np.int32), [1.0], np.zeros(0)).finish_time.shape == (
        0,
    )


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
        ff.complete_flows(args.pop("links"), args.pop("capacity"), args.pop("size"), **args)
    assert error.value.field == field
