"""The PFC queue engine after its speed-ups gives the results it gave before them.

The speed-ups (one segment sum per vector instead of stacked rows, a scalar for "a pause
is pending" instead of a reduction over the pause history, and the last-ACK passes on
the tokens in flight only, in chunks) change no arithmetic: the reference figures below
were printed by the engine before them, on the same cases.
"""

from __future__ import annotations

import numpy as np
import pytest

from fabricflow.dynamics.flow_completion import flow_completion_times
from fabricflow.fabric.spec import load_fat_tree
from fabricflow.routing.route import route
from fabricflow.solve.packet import pfc_queues
from fabricflow.solve.pfc.params import PFCParams
from fabricflow.traffic.patterns import permutation_flows

#: case -> (steps, FCT p50/p90/p99/max s, sum of FCTs s, sum of last-ACK queueing s),
#: from the engine before the speed-ups.
BEFORE = {
    "permutation": (
        1210,
        [0.00011352768000000079, 0.00017401939999999838, 0.0002296543999999947,
         0.00022966263016782317],
        0.015454720284805781,
        0.0005221928137690379,
    ),
    "incast_late_starts": (
        708,
        [0.00010941256000000084, 0.0001295405600000009, 0.0001315037120000009,
         0.00013172184000000088],
        0.000493254400000003,
        0.0,
    ),
}  # fmt: skip


def _case(name: str):
    fabric = load_fat_tree(8)
    if name == "permutation":  # 128 hosts, 2 MB each, FIFO egress
        src, dst = permutation_flows(fabric.num_gpus, seed=0)
        routes = route(fabric, src, dst, seed=0)
        return flow_completion_times(fabric, routes, 2e6, fidelity="packet")
    # an incast with a victim, then two flows long after it (the idle clock jump)
    src, dst = np.array([1, 2, 3, 1, 0, 5]), np.array([0, 0, 0, 4, 5, 6])
    routes = route(fabric, src, dst, seed=0)
    return flow_completion_times(
        fabric,
        routes,
        np.array([2e6, 2e6, 2e6, 2e6, 1e5, 3e4]),
        start=np.array([0.0, 0.0, 5e-6, 0.0, 1e-3, 2e-3]),
        fidelity="packet",
        pfc_params=PFCParams().replace(xoff="150KB"),
    )


@pytest.fixture(scope="module")
def results():
    return {name: _case(name) for name in BEFORE}


@pytest.mark.parametrize("name", list(BEFORE))
def test_results_equal_the_engine_before_its_speedups(results, name):
    steps, percentiles, total, ack_total = BEFORE[name]
    times = results[name]
    assert times.events == steps
    np.testing.assert_allclose(np.percentile(times.fct, [50, 90, 99, 100]), percentiles, rtol=1e-9)
    assert times.fct.sum() == pytest.approx(total, rel=1e-9)
    assert times.components["ack_queueing"].sum() == pytest.approx(ack_total, rel=1e-9, abs=1e-15)


def test_ack_tokens_in_small_chunks_give_the_same_times(results, monkeypatch):
    monkeypatch.setattr(pfc_queues, "ack_chunk", lambda num_flows: 3)  # many chunks a step
    chunked = _case("permutation")
    whole = results["permutation"]
    assert pfc_queues.ack_chunk(128) == 3
    np.testing.assert_array_equal(chunked.fct, whole.fct)
    np.testing.assert_array_equal(
        chunked.components["ack_queueing"], whole.components["ack_queueing"]
    )


# --------------------------------------------------------------- PFC deadlock scan


def _deadlocks_over_time_plain(result) -> list[dict]:
    """The former implementation (row-wise np.unique over every record), kept as the oracle."""
    from fabricflow.solve.pfc.deadlock import deadlock_cycles, dependency_edges

    edges = dependency_edges(result.links, result.prev_links)
    paused = np.asarray(result.paused, bool)
    if edges.size == 0 or not paused.any():
        return []
    patterns, pattern_of_instant = np.unique(paused, axis=0, return_inverse=True)
    cycles_of_pattern = [
        deadlock_cycles(p, result.links, result.prev_links, edges=edges) if p.any() else []
        for p in patterns
    ]
    found: dict[tuple, dict] = {}
    for index, time in enumerate(result.time):
        for cycle in cycles_of_pattern[int(pattern_of_instant.ravel()[index])]:
            entry = found.setdefault(
                tuple(cycle), {"links": list(cycle), "first_seen_s": float(time)}
            )
            entry["last_seen_s"] = float(time)
    return list(found.values())


@pytest.mark.parametrize("seed", range(12))
def test_fast_deadlock_scan_equals_the_plain_one(seed):
    from types import SimpleNamespace

    from fabricflow.solve.pfc.deadlock import deadlocks_over_time

    rng = np.random.default_rng(seed)
    num_links, num_flows, hops, records = 12, 30, 4, 60
    links = rng.integers(0, num_links, (num_flows, hops))
    lengths = rng.integers(1, hops + 1, num_flows)
    links[np.arange(hops)[None, :] >= lengths[:, None]] = -1
    prev_links = np.full_like(links, -1)
    prev_links[:, 1:] = np.where(links[:, 1:] >= 0, links[:, :-1], -1)
    # Pause patterns that persist over runs of records and recur later (the common case).
    palette = rng.random((5, num_links)) < rng.uniform(0.2, 0.9)
    paused = palette[rng.integers(0, 5, records)]
    paused[rng.random(records) < 0.3] = rng.random(num_links) < 0.7
    paused = np.repeat(paused, rng.integers(1, 4, records), axis=0)[:records]
    result = SimpleNamespace(
        links=links, prev_links=prev_links, paused=paused, time=np.arange(1, records + 1) * 1e-5
    )
    expected = _deadlocks_over_time_plain(result)
    assert deadlocks_over_time(result) == expected
    if seed == 0:
        assert expected  # the instances do contain deadlocks
