"""Each rate law against its paper: the runs behind the figures of docs/cc.md.

The same runs as the regression tests (``tests/test_cc_laws.py``), with the time series
kept for the figures (:mod:`fabricflow.study.cc_laws_plots`):

* :func:`hpcc_incasts`: HPCC on a 2-to-1 and a 16-to-1 incast (40 Gb/s): queues near
  zero, utilization near ``eta``;
* :func:`timely_starts`: TIMELY and patched TIMELY on 10 Gb/s dumbbells started at 7:3,
  8:2 and 5:5 Gb/s: the rates TIMELY holds depend on the start, patched TIMELY converges;
* :func:`swift_incasts`: Swift's fabric delay against its target on the incasts;
* :func:`predictive_incasts`: the predictive controller's queue against its fixed point.

Each returns ``(result, scenario, expected)`` with ``expected`` the law's analytic
steady state per part (:mod:`fabricflow.solve.cc.fixed_points`).
"""

from __future__ import annotations

import numpy as np

from fabricflow.dynamics.congestion import simulate_cc
from fabricflow.dynamics.scenarios import dumbbell, incast, union
from fabricflow.solve.cc.fixed_points import (
    hpcc_fixed_point,
    predictive_fixed_point,
    swift_fixed_point,
    timely_patched_fixed_point,
)
from fabricflow.solve.cc.timely import TimelyParams
from fabricflow.solve.parameters import stack_params

C40 = 40e9 / 8
C10 = 10e9 / 8
INCASTS = (2, 16)
STARTS = ((7.0, 3.0), (8.0, 2.0), (5.0, 5.0))  # Gb/s, the CoNEXT'16 experiments


def _incasts():
    return union([incast(n, bandwidth=C40) for n in INCASTS])


def hpcc_incasts(duration: float = 0.004):
    scenario = _incasts()
    result = simulate_cc(
        scenario.fabric, scenario.routes, cc="hpcc", duration=duration, records=400
    )
    delay = float(result.delay[0])
    expected = [hpcc_fixed_point(C40, n, base_rtt=delay) for n in INCASTS]
    return result, scenario, expected


def timely_starts(duration: float = 0.2):
    scenario = union([dumbbell(2, bandwidth=C10) for _ in STARTS])
    sets = [TimelyParams.preset("paper"), TimelyParams.preset("patched")]
    result = simulate_cc(
        scenario.fabric,
        scenario.routes,
        cc="timely",
        params=stack_params(sets),
        initial_rate=np.ravel(STARTS) * 1e9 / 8,
        duration=duration,
        dt=2e-6,
        records=400,
    )
    expected = [timely_patched_fixed_point(C10, 2, 2 * 3e-6, sets[1])] * len(STARTS)
    return result, scenario, expected


def swift_incasts(duration: float = 0.01):
    scenario = _incasts()
    result = simulate_cc(
        scenario.fabric, scenario.routes, cc="swift", duration=duration, records=400
    )
    expected = [swift_fixed_point(C40, n, 2 * 4e-6, 4) for n in INCASTS]
    return result, scenario, expected


def predictive_incasts(duration: float = 0.004):
    scenario = _incasts()
    result = simulate_cc(
        scenario.fabric, scenario.routes, cc="predictive", duration=duration, records=400
    )
    expected = [predictive_fixed_point(C40, n) for n in INCASTS]
    return result, scenario, expected


__all__ = ["hpcc_incasts", "predictive_incasts", "swift_incasts", "timely_starts"]
