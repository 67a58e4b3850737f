"""Failures and checkpointing: published defaults, Young/Daly, renewal-theory goodput."""

from __future__ import annotations

import math

import numpy as np
import pytest
from cluster_jobs import solo_run

from fabricflow.cluster.failures import (
    DEFAULT_MTBF_S,
    CheckpointPolicy,
    FailureModel,
    best_checkpoint_interval,
    expected_goodput,
    job_mtbf,
    log_failure_slowdown,
    young_daly_interval,
)
from fabricflow.errors import SpecError

HOUR = 3600.0


def test_published_defaults_arithmetic():
    # Llama 3: 268 GPU-class interruptions over 16,384 GPUs x 54 days
    assert DEFAULT_MTBF_S["gpu"] / HOUR == pytest.approx(16384 * 54 * 24 / 268)
    assert DEFAULT_MTBF_S["node"] / HOUR == pytest.approx(2048 * 54 * 24 / 46)
    assert DEFAULT_MTBF_S["nic"] / HOUR == pytest.approx(16384 * 54 * 24 / 7)
    # a 16,384-GPU job is restarted by its GPUs, NICs and nodes: 268 + 7 + 46 = 321 of
    # Llama 3's 419 unexpected interruptions (the rest: network, which reroutes here, and
    # software), every 4.0 h
    mtbf = job_mtbf(16384, 8, FailureModel.published())
    assert mtbf / HOUR == pytest.approx(54 * 24 / 321)


def test_expected_goodput_limits():
    # no failures -> work / (work + write); small write -> close to 1
    assert expected_goodput(1000.0, 10.0, 0.0, 1e12) == pytest.approx(1000 / 1010, rel=1e-6)
    # more frequent failures lower goodput; a longer restart too
    assert expected_goodput(600, 60, 0, 3600) > expected_goodput(600, 60, 0, 1800)
    assert expected_goodput(600, 60, 0, 3600) > expected_goodput(600, 60, 600, 3600)
    # huge interval vs MTBF: tiny but finite and positive
    tiny = expected_goodput(1e7, 60, 0, 100.0)
    assert 0.0 <= tiny < 1e-300 or 0 < tiny < 1e-10


def test_best_interval_agrees_with_young_daly_to_first_order():
    for write, mtbf in ((60.0, 4 * HOUR), (300.0, 12 * HOUR), (10.0, 1 * HOUR)):
        best, value = best_checkpoint_interval(write, 0.0, mtbf)
        young = young_daly_interval(write, mtbf, method="young")
        daly = young_daly_interval(write, mtbf)
        eps = math.sqrt(write / (2 * mtbf))
        # Young is right to first order in sqrt(delta/M); Daly's higher order estimate
        # is much closer still
        assert abs(best / young - 1) < 2 * eps
        assert abs(best / daly - 1) < 0.2 * eps
        assert value == pytest.approx(expected_goodput(best, write, 0.0, mtbf))
        assert value >= expected_goodput(young, write, 0.0, mtbf) - 1e-12


def test_bad_failure_inputs():
    with pytest.raises(SpecError, match="gpu, nic|allowed"):
        FailureModel({"psu": "1000h"})
    with pytest.raises(SpecError, match="mtbf.gpu"):
        FailureModel({"gpu": "-5h"})
    with pytest.raises(SpecError, match="spares"):
        CheckpointPolicy(spares=-1)
    with pytest.raises(SpecError, match="interval_s"):
        CheckpointPolicy(interval_s=0)
    with pytest.raises(SpecError, match="method"):
        young_daly_interval(60, 3600, method="guess")


def test_simulated_goodput_matches_renewal_theory():
    interval, write, restart, mtbf = 400.0, 40.0, 120.0, 2000.0
    run = solo_run(interval, write, restart, mtbf, steps=2_000_000, seed=11)
    (job,) = run.jobs
    assert job["failures"] > 500  # hundreds of failures
    assert job["restarts"] == job["failures"]  # each continues on a spare
    assert job["steps_done"] == 2_000_000 and job["state"] == "done"
    expected = expected_goodput(interval, write, restart, mtbf)
    assert job["goodput"] == pytest.approx(expected, rel=0.03)
    # lost work is at most one segment per failure
    assert 0 < job["lost_work_s"] < job["failures"] * (interval + write)
    assert job["mtbf_s"] == pytest.approx(mtbf)
    assert job["best_checkpoint_interval_s"] == pytest.approx(young_daly_interval(write, mtbf))


def test_simulated_optimum_is_near_young_daly():
    write, mtbf = 40.0, 2000.0
    daly = young_daly_interval(write, mtbf)  # ~370 s
    goodput = {
        factor: solo_run(daly * factor, write, 0.0, mtbf, 600_000, seed=5).jobs[0]["goodput"]
        for factor in (0.2, 1.0, 5.0)
    }
    # the Daly interval beats intervals 5x shorter and 5x longer in simulation too
    assert goodput[1.0] > goodput[0.2] and goodput[1.0] > goodput[5.0]
    for factor, value in goodput.items():
        assert value == pytest.approx(expected_goodput(daly * factor, write, 0, mtbf), rel=0.05)


def test_no_checkpoint_loses_everything_since_start():
    # without checkpoints a failure sends the job back to step 0
    run = solo_run(None, 0.0, 0.0, 2000.0, steps=8000, seed=3)
    (job,) = run.jobs
    assert job["state"] == "done" and job["failures"] >= 1
    standalone = job["standalone_step_s"] * job["steps"]
    assert job["end_s"] - job["start_s"] == pytest.approx(standalone + job["lost_work_s"])
    assert np.isclose(job["goodput"], standalone / (job["end_s"] - job["start_s"]))


def test_failure_slowdown_is_renewal_theory_in_logs():
    """Four checkpointed pieces: the expected wall time is the work over Daly's goodput
    (less the last write, which is not taken); without failures no slowdown; a 1-s MTBF
    against a 10-minute restart is astronomically slow but finite in logs."""
    interval, write, restart, mtbf = 400.0, 40.0, 120.0, 2000.0
    policy = CheckpointPolicy(interval_s=interval, write_s=write, restart_s=restart)
    slowdown = math.exp(log_failure_slowdown(4 * interval, mtbf, policy))
    wall = 4 * interval / expected_goodput(interval, write, restart, mtbf)
    assert slowdown == pytest.approx(wall / (4 * interval + 3 * write), rel=1e-9)
    assert log_failure_slowdown(4 * interval, math.inf, policy) == 0.0
    hopeless = log_failure_slowdown(1e6, 1.0, CheckpointPolicy(restart_s=600.0))
    assert math.isfinite(hopeless) and hopeless > 1e5


def test_a_job_whose_failures_outpace_its_restarts_is_refused_before_the_run():
    """GPU MTBF 1 s per job against a 10-minute restart: it would fail and restart for
    ever; refused up front naming the job, its MTBF and what to change."""
    with pytest.raises(SpecError, match=r"jobs\[0\] \(id 'solo'\): makes practically no progress"):
        solo_run(400.0, 40.0, 600.0, 1.0, steps=1000, seed=0)


def test_a_run_that_stops_progressing_is_stopped_as_stalled(monkeypatch):
    """The run-time detector behind the up-front check: with the check lifted, no job
    commits a checkpoint for STALL_EVENTS events and the run stops with a clear error."""
    from fabricflow.cluster import simulate
    from fabricflow.errors import SolverError

    monkeypatch.setattr(simulate, "NO_PROGRESS_SLOWDOWN", math.inf)
    monkeypatch.setattr(simulate, "STALL_EVENTS", 300)
    with pytest.raises(SolverError, match="no progress: in the last 300 events"):
        solo_run(400.0, 40.0, 600.0, 1.0, steps=1000, seed=0)
