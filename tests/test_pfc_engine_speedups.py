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
