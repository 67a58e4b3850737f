"""PFC: congestion spreading to a victim flow, pause accounting, deadlock cycles."""

from __future__ import annotations

import numpy as np
import pytest
from reference_solvers import progressive_filling

from fabricflow.dynamics.congestion import simulate_cc
from fabricflow.dynamics.scenarios import incast, ring
from fabricflow.solve.pfc.deadlock import deadlock_cycles
from fabricflow.solve.pfc.params import PFCParams
from fabricflow.solve.pfc.victims import victim_flows
from fabricflow.solve.status import SolverStatus

C40 = 40e9 / 8
# Every incast run here has these shapes and this timing, so a PFC mode compiles once.
INCAST_FLOWS = 8
TIMING = dict(duration=0.02, records=400)


@pytest.fixture(scope="module")
def incast_runs():
    sc = incast(INCAST_FLOWS, bandwidth=C40)
    runs = {
        mode: simulate_cc(sc.fabric, sc.routes, cc="dcqcn", pfc=mode, **TIMING)
        for mode in ("off", "static", "dynamic")
    }
    return sc, runs, progressive_filling(sc.routes.links, sc.fabric.capacity)


def test_incast_with_pfc_creates_a_victim_and_not_without(incast_runs):
    sc, runs, ideal = incast_runs
    victim = sc.roles["victim"][0]
    assert ideal[victim] == pytest.approx(C40)  # nothing on its path saturates
    off, on = runs["off"], runs["static"]
    # PFC off: no pauses, the victim runs at its max-min rate, nobody is a victim.
    assert np.all(off.pause_time == 0)
    assert off.mean_rate()[victim] == pytest.approx(ideal[victim], rel=0.02)
    assert not victim_flows(off, ideal).any()
    # PFC on: pauses spread from the incast port back to the shared uplink and the
    # victim's throughput drops although its own path never saturates.
    assert on.flow_pause_time[victim] > 0
    assert on.mean_rate()[victim] < 0.5 * off.mean_rate()[victim]
    assert np.flatnonzero(victim_flows(on, ideal)).tolist() == [victim]
    # The incast flows themselves still get their fair share in the long run.
    np.testing.assert_allclose(
        on.mean_rate()[sc.roles["incast"]], ideal[sc.roles["incast"]], rtol=0.02
    )


def test_pfc_bounds_ingress_queues_and_counts_pause_time(incast_runs):
    sc, runs, _ = incast_runs
    off, on = runs["off"], runs["static"]
    # Without PFC the incast burst piles up megabytes at the bottleneck; with PFC the
    # backlog is held back hop by hop and no egress queue grows past a few XOFF.
    assert off.queue[:, sc.bottleneck].max() > 1e6
    assert on.queue.max() < 10 * PFCParams().xoff
    fraction = on.pause_time / on.duration
    assert np.all((fraction >= 0) & (fraction <= 1))
    # Recorded pause states agree with the exact per-step pause time (within sampling).
    sampled = on.paused.mean(axis=0)
    assert np.abs(sampled - fraction).max() < 0.05
    # Only ingress ports of switches can be paused.
    tiers = sc.fabric.node_tier
    assert np.all(tiers[sc.fabric.link_dst[on.pause_time > 0]] != 0)


def test_dynamic_threshold_pauses_less_than_a_static_low_threshold(incast_runs):
    sc, runs, _ = incast_runs
    dynamic = runs["dynamic"]
    assert dynamic.status == SolverStatus.CONVERGED
    # 12 MB shared buffer / 8: XOFF ~1.5 MB, far above the 100 KB static one.
    assert dynamic.pause_time.sum() < runs["static"].pause_time.sum()


def test_deadlock_cycle_found_in_ring_with_low_xoff_and_not_with_default():
    sc = ring(4, bandwidth=C40)
    ring_links = sorted(sc.routes.links[::2, 1].tolist())  # switch i -> i+1 of each host
    low = simulate_cc(
        sc.fabric,
        sc.routes,
        cc="dcqcn",
        pfc="on",
        duration=0.005,
        records=100,
        pfc_params=PFCParams(xoff=20e3, hysteresis=2e3),
    )
    cycles = deadlock_cycles(low.paused[-1], low.links, low.prev_links)
    assert cycles == [ring_links]
    # Deadlocked: nothing moves at the end.
    assert np.all(low.delivered[-1] == low.delivered[-20])
    default = simulate_cc(sc.fabric, sc.routes, cc="dcqcn", pfc="on", duration=0.005, records=100)
    assert not any(deadlock_cycles(p, default.links, default.prev_links) for p in default.paused)
    ideal = progressive_filling(sc.routes.links, sc.fabric.capacity)  # C/4: 4 flows a link
    np.testing.assert_allclose(default.mean_rate(), ideal, rtol=0.02)


def test_deadlock_cycles_on_synthetic_dependencies():
    links = np.array([[0, 1, 2], [2, 3, 0], [4, 5, -1]])
    prev = np.array([[-1, 0, 1], [-1, 2, 3], [-1, 4, -1]])
    paused = np.zeros(6, bool)
    assert deadlock_cycles(paused, links, prev) == []
    paused[[0, 1, 2, 3]] = True
    assert deadlock_cycles(paused, links, prev) == [[0, 1, 2, 3]]
    paused[1] = False  # the cycle 0 -> 1 -> 2 -> 3 -> 0 is broken
    assert deadlock_cycles(paused, links, prev) == []
    paused[[4, 5]] = True  # a paused chain is not a cycle
    assert deadlock_cycles(paused, links, prev) == []


def test_vmap_over_pfc_thresholds_matches_single_runs(incast_runs):
    from fabricflow.solve.parameters import stack_params

    sc = incast_runs[0]  # the single run below reuses the fixture's static-PFC compilation
    sweep = stack_params([PFCParams(xoff=x) for x in (30e3, 100e3, 300e3)])
    batch = simulate_cc(sc.fabric, sc.routes, cc="dcqcn", pfc="on", pfc_params=sweep, **TIMING)
    assert batch.pause_time.shape == (3, sc.fabric.num_links)
    single = simulate_cc(
        sc.fabric, sc.routes, cc="dcqcn", pfc="on", pfc_params=PFCParams(xoff=30e3), **TIMING
    )
    np.testing.assert_allclose(batch.pause_time[0], single.pause_time, atol=2e-6)
    np.testing.assert_allclose(batch.queue[0], single.queue, rtol=1e-4, atol=1.0)
    # A higher XOFF pauses the shared uplink for less time.
    total = batch.pause_time.sum(axis=1)
    assert total[0] > total[1] > total[2]
