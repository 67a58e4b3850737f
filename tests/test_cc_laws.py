"""The rate laws against their papers' fluid or analytic results.

Each law runs once (one compilation): a vmapped batch of two parameter sets over a
union of scenarios, so that every regression below reads the same run.

* HPCC (SIGCOMM'19): on a 2-to-1 and a 16-to-1 incast the queue stays near zero and the
  utilization sits at ``eta + N W_AI / (C T)``, just above ``eta``.
* TIMELY (CoNEXT'16): the rates it holds depend on where they started (7:3 and 8:2 stay
  apart, each near its own ratio, 5:5 stays equal) and the queue never settles; patched
  TIMELY converges to the fair share and to its unique fixed-point queue.
* Swift (SIGCOMM'20): the fabric delay holds the target delay of the flows' windows.
* The predictive controller holds its target queue at full utilization.
"""

from __future__ import annotations

import numpy as np
import pytest

from fabricflow.dynamics.congestion import simulate_cc
from fabricflow.dynamics.scenarios import dumbbell, incast, union
from fabricflow.solve.cc.fixed_points import (
    hpcc_fixed_point,
    predictive_fixed_point,
    swift_fixed_point,
    timely_patched_fixed_point,
)
from fabricflow.solve.cc.hpcc import HPCCParams
from fabricflow.solve.cc.predictive import PredictiveParams
from fabricflow.solve.cc.swift import SwiftParams
from fabricflow.solve.cc.timely import TimelyParams
from fabricflow.solve.parameters import stack_params

C40 = 40e9 / 8
C10 = 10e9 / 8
INCASTS = (2, 16)


@pytest.fixture(scope="module")
def incasts():
    return union([incast(n, bandwidth=C40) for n in INCASTS])


def _late(res, since):
    return res.time >= since


def _part_stats(res, part, since):
    """Utilization of the part's incast flows at its bottleneck, its queue series."""
    rate = res.mean_rate(since)
    incast_ids = next(ids for role, ids in part.roles.items() if role == "incast")
    queue = res.queue[_late(res, since), part.bottleneck].astype(np.float64)
    return rate[incast_ids].sum() / C40, queue


# ------------------------------------------------------------------------------- HPCC


@pytest.fixture(scope="module")
def hpcc_run(incasts):
    sets = [HPCCParams(), HPCCParams(eta=0.9)]
    res = simulate_cc(
        incasts.fabric,
        incasts.routes,
        cc="hpcc",
        params=stack_params(sets),
        duration=0.004,
        records=200,
    )
    return res, sets


@pytest.mark.parametrize("entry", [0, 1])
@pytest.mark.parametrize("part", [0, 1])
def test_hpcc_near_zero_queue_at_eta(hpcc_run, incasts, part, entry):
    res, sets = hpcc_run
    one = res.batch_item(entry)
    utilization, queue = _part_stats(one, incasts.parts[part], 0.002)
    flows = INCASTS[part]
    expected = hpcc_fixed_point(C40, flows, base_rtt=float(one.delay[0]), params=sets[entry])
    assert utilization == pytest.approx(expected["utilization"], abs=2e-3)
    assert sets[entry].eta <= utilization <= sets[entry].eta + 0.02
    assert np.percentile(queue, 99) < 1e3  # bytes: near-empty
    assert queue.mean() == pytest.approx(expected["queue_bytes"], abs=200)


# ----------------------------------------------------------------------------- TIMELY


STARTS = ((7.0, 3.0), (8.0, 2.0), (5.0, 5.0))  # Gb/s, the CoNEXT'16 experiments


@pytest.fixture(scope="module")
def timely_run():
    pairs = union([dumbbell(2, bandwidth=C10) for _ in STARTS])
    sets = [TimelyParams.preset("paper"), TimelyParams.preset("patched")]
    res = simulate_cc(
        pairs.fabric,
        pairs.routes,
        cc="timely",
        params=stack_params(sets),
        initial_rate=np.ravel(STARTS) * 1e9 / 8,
        duration=0.2,
        dt=2e-6,
        records=400,
    )
    return res, pairs, sets


def _window_rates(res, begin, end):
    """Mean throughput per flow over ``[begin, end]`` s, from the delivered bytes."""
    first, last = np.searchsorted(res.time, [begin, end])
    return (res.delivered[last] - res.delivered[first]) / (res.time[last] - res.time[first])


def test_timely_fixed_point_depends_on_the_initial_rates(timely_run):
    res, pairs, _ = timely_run
    paper = res.batch_item(0)
    rate = _window_rates(paper, 0.005, 0.05)
    ratios = [rate[part.flows][0] / rate[part.flows][1] for part in pairs.parts]
    # Unequal starts stay unequal, each near its own ratio; the equal start stays equal.
    assert 1.8 < ratios[0] < 4.0
    assert ratios[1] > ratios[0] + 0.5
    assert ratios[2] == pytest.approx(1.0, abs=1e-3)
    for part in pairs.parts:
        assert rate[part.flows].sum() > 0.9 * C10
    # No fixed point: the queue keeps oscillating.
    queue = paper.queue[_late(paper, 0.15), pairs.parts[0].bottleneck]
    assert np.ptp(queue) > 10e3


def test_patched_timely_converges_to_its_unique_fixed_point(timely_run):
    res, pairs, sets = timely_run
    patched = res.batch_item(1)
    rate = patched.mean_rate(0.15)
    base_rtt = 2 * 3e-6  # three 1-us hops each way
    expected = timely_patched_fixed_point(C10, 2, base_rtt, sets[1])
    for part in pairs.parts:
        np.testing.assert_allclose(rate[part.flows], C10 / 2, rtol=0.01)
        queue = patched.queue[_late(patched, 0.15), part.bottleneck]
        assert queue.mean() == pytest.approx(expected["queue_bytes"], rel=0.02)
        assert np.ptp(queue) < 1e3


# ------------------------------------------------------------------------------ Swift


@pytest.fixture(scope="module")
def swift_run(incasts):
    sets = [SwiftParams(), SwiftParams(base_target=40e-6)]
    res = simulate_cc(
        incasts.fabric,
        incasts.routes,
        cc="swift",
        params=stack_params(sets),
        duration=0.01,
        records=200,
    )
    return res, sets


@pytest.mark.parametrize("entry", [0, 1])
@pytest.mark.parametrize("part", [0, 1])
def test_swift_holds_its_target_delay(swift_run, incasts, part, entry):
    res, sets = swift_run
    one = res.batch_item(entry)
    utilization, queue = _part_stats(one, incasts.parts[part], 0.005)
    base_rtt = 2 * 4e-6  # four 1-us hops each way
    expected = swift_fixed_point(C40, INCASTS[part], base_rtt, 4, sets[entry])
    assert utilization > 0.99
    assert queue.mean() / C40 == pytest.approx(expected["rtt_s"] - base_rtt, rel=0.02)
    assert expected["rtt_s"] == pytest.approx(expected["target_s"], rel=1e-6)


# ------------------------------------------------------------------------- predictive


@pytest.fixture(scope="module")
def predictive_run(incasts):
    sets = [PredictiveParams(), PredictiveParams(target_delay=5e-6)]
    res = simulate_cc(
        incasts.fabric,
        incasts.routes,
        cc="predictive",
        params=stack_params(sets),
        duration=0.004,
        records=200,
    )
    return res, sets


@pytest.mark.parametrize("entry", [0, 1])
@pytest.mark.parametrize("part", [0, 1])
def test_predictive_holds_its_target_queue_at_full_utilization(
    predictive_run, incasts, part, entry
):
    res, sets = predictive_run
    one = res.batch_item(entry)
    utilization, queue = _part_stats(one, incasts.parts[part], 0.002)
    expected = predictive_fixed_point(C40, INCASTS[part], sets[entry])
    assert utilization > 0.999
    assert queue.mean() == pytest.approx(expected["queue_bytes"], rel=0.03)
    assert np.percentile(queue, 99) < 1.1 * expected["queue_bytes"]
