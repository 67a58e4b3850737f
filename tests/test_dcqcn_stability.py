"""Feedback delay and stability: the linear analysis predicts which runs oscillate.

Documented case (40 Gb/s, paper defaults, N = 2 flows over one switch link):
* feedback delay 4 us (1 us hops + 1 us extra, as the dumbbell has 3 hops of 1 us):
  spectral radius < 1 -> the queue settles near the 20 KB fixed point;
* feedback delay 200 us: spectral radius > 1 (growth ~900 /s, ~600 Hz) -> a sustained
  oscillation: the queue swings from empty to tens of KB for as long as the run lasts.
"""

from __future__ import annotations

import numpy as np
import pytest

from fabricflow.dynamics.congestion import simulate_cc
from fabricflow.dynamics.scenarios import dumbbell
from fabricflow.solve.cc.dcqcn_analysis import linear_stability

C40 = 40e9 / 8


@pytest.mark.parametrize("extra_delay, expect_stable", [(1e-6, True), (197e-6, False)])
def test_oscillation_where_the_linear_analysis_predicts_it(extra_delay, expect_stable):
    sc = dumbbell(2, bandwidth=C40)
    res = simulate_cc(
        sc.fabric, sc.routes, cc="dcqcn", duration=0.06, extra_delay=extra_delay, records=3000
    )
    delay = float(res.delay[0])
    analysis = linear_stability(C40, 2, delay, dt=res.dt)
    assert analysis["stable"] is expect_stable
    late = res.time >= 0.03
    queue = res.queue[late, sc.bottleneck]
    rate = res.rate[late, 0]
    if expect_stable:
        assert queue.max() - queue.min() < 5e3
        assert rate.std() < 1e-3 * C40
    else:
        assert queue.max() - queue.min() > 30e3  # swings over tens of KB ...
        assert queue.min() < 1e3  # ... down to an empty queue
        assert rate.std() > 3e-3 * C40
        # Sustained: the swing in the last 10 ms is as large as in the 10 ms before.
        last = res.time >= 0.05
        previous = (res.time >= 0.04) & ~last
        swing_last = np.ptp(res.queue[last, sc.bottleneck])
        swing_prev = np.ptp(res.queue[previous, sc.bottleneck])
        assert swing_last > 0.5 * swing_prev
        assert 100 < analysis["oscillation_hz"] < 2000


def test_stability_boundary_moves_with_delay_and_flows():
    # CoNEXT'16: a few us of delay is stable for every N; at 85 us some N oscillate.
    for flows in (2, 4, 10):
        assert linear_stability(C40, flows, 5e-6)["stable"]
    at_85 = [linear_stability(C40, flows, 85e-6)["stable"] for flows in (2, 4, 10)]
    assert not all(at_85)
    # Smaller R_AI restores stability at 85 us.
    from fabricflow.solve.cc.dcqcn import DCQCNParams

    slow = DCQCNParams.preset("paper", rate_ai="10Mbps")
    assert all(linear_stability(C40, flows, 85e-6, slow)["stable"] for flows in (2, 4, 10))
