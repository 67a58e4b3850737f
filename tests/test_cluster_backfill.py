"""Queue policies (fabricflow.cluster.backfill): greedy starts whatever fits and starves a
large job; EASY backfill starts it at its reservation and backfills only what does not
delay it; first come, first served starts nothing past a blocked job. Queue waits count
every wait, the ones after preemptions included."""

from __future__ import annotations

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.cluster.backfill import JobQueue, SizesLeft, reservation
from fabricflow.cluster.failures import CheckpointPolicy
from fabricflow.cluster.schedulers import Request, make_scheduler
from fabricflow.cluster.simulate import simulate_cluster
from fabricflow.cluster.state import ClusterState
from fabricflow.errors import SpecError


def _row(job_id, gpus, duration, arrival=0.0, priority=0):
    return {
        "id": job_id,
        "model": "llama3-8b",
        "gpu": "h100-sxm",
        "gpus": gpus,
        "layout": {"tp": 8, "micro_batch": 1, "seq": 8192},
        "duration": duration,
        "arrival": arrival,
        "priority": priority,
    }


@pytest.fixture(scope="module")
def fabric():
    return ff.load_fabric("dgx-h100-superpod")


def _stream():
    """Two 512-GPU jobs hold the 1,024 GPUs; a 1,024-GPU job arrives at 10 s; then a
    stream of 512-GPU jobs of 1,500 s arrives every 20 s, and one short 256-GPU job."""
    trace = [_row("a", 512, 1000.0), _row("b", 512, 2000.0), _row("big", 1024, 500.0, 10.0)]
    trace += [_row(f"s{i}", 512, 1500.0, 20.0 + 20.0 * i) for i in range(12)]
    trace.append(_row("short", 256, 50.0, 1000.5))
    return trace


def test_greedy_starves_a_large_job_and_easy_starts_it_at_its_reservation(fabric):
    runs = {
        policy: {
            job["id"]: job
            for job in simulate_cluster(
                fabric, _stream(), scheduler="packed", backfill=policy, interference=False
            ).jobs
        }
        for policy in ("greedy", "easy")
    }
    greedy, easy = runs["greedy"], runs["easy"]
    # greedy: every time 512 GPUs free up, a queued 512-GPU job takes them
    assert greedy["big"]["start_s"] > max(greedy[f"s{i}"]["start_s"] for i in range(12))
    # EASY: the reservation made at 10 s is the end of "b", when both running jobs are done
    assert easy["big"]["start_s"] == pytest.approx(easy["b"]["end_s"], abs=1e-9)
    assert easy["big"]["start_s"] < 2100.0 < greedy["big"]["start_s"]
    # the short job fits before the shadow time: backfilled into the GPUs "a" freed
    assert easy["short"]["start_s"] < easy["big"]["start_s"]
    assert easy["short"]["end_s"] <= easy["big"]["start_s"] + 1e-9
    # the 512-GPU jobs would run past the shadow time: none started before "big"
    assert all(easy[f"s{i}"]["start_s"] >= easy["big"]["end_s"] - 1e-9 for i in range(12))
    for run in runs.values():
        assert all(job["state"] == "done" for job in run.values())


def test_first_come_first_served_starts_nothing_past_a_blocked_job(fabric):
    jobs = {
        job["id"]: job
        for job in simulate_cluster(
            fabric, _stream(), scheduler="packed", backfill="none", interference=False
        ).jobs
    }
    assert jobs["big"]["start_s"] == pytest.approx(jobs["b"]["end_s"], abs=1e-9)
    assert jobs["short"]["start_s"] >= jobs["big"]["start_s"]  # no backfill at all


def test_queue_wait_counts_the_wait_after_a_preemption(fabric):
    policy = CheckpointPolicy(interval_s=60.0, write_s=5.0, restart_s=30.0)
    trace = [
        _row("low", 1024, 20_000.0),
        _row("high", 512, 3000.0, arrival=500.0, priority=1),
        _row("high2", 512, 3000.0, arrival=600.0, priority=1),
    ]
    run = simulate_cluster(fabric, trace, scheduler="packed", interference=False, checkpoint=policy)
    low, high, high2 = run.jobs
    assert low["preemptions"] == 1 and low["first_wait_s"] == 0.0
    (wait,) = low["waits"]
    assert wait["reason"] == "preempted"
    # preempted when "high" arrived, it waits until both high-priority jobs are done
    assert wait["wait_s"] == pytest.approx(max(high["end_s"], high2["end_s"]) - 500.0, abs=1e-6)
    assert low["queue_wait_s"] == pytest.approx(wait["wait_s"]) and low["requeue_wait_s"] > 3000
    waits = sorted(job["queue_wait_s"] for job in run.jobs)
    assert run.cluster["queue_wait_s"]["p50"] == pytest.approx(waits[1])
    assert run.cluster["queue_wait_s"]["mean"] == pytest.approx(sum(waits) / 3)
    assert run.cluster["queue_wait_s"]["p99"] > 3000 and run.cluster["preemptions"] == 1
    assert "preemptions 1" in run.summary()


def test_reservation_is_the_earliest_release_that_fits(fabric):
    state = ClusterState(fabric)
    scheduler = make_scheduler("packed", fabric)
    for key in range(4):
        state.allocate(key, np.arange(key * 256, (key + 1) * 256))
    releases = [
        (400.0, "job", 3, 256),
        (100.0, "job", 0, 256),
        (300.0, "job", 2, 256),
        (200.0, "job", 1, 256),
    ]
    request = Request(9, 512, 0, None)
    shadow, gpus = reservation(scheduler, state, request, releases)
    assert shadow == 200.0 and gpus.size == 512  # jobs 0 and 1 free 512 GPUs by then
    assert set(gpus.tolist()) == set(range(512))
    assert reservation(scheduler, state, Request(9, 2048, 0, None), releases) is None
    assert state.num_free == 0  # the state itself is untouched


def test_the_queue_keeps_scheduling_order_and_sizes():
    queue = JobQueue()
    queue.add(3, (0, True, 5.0), 8)
    queue.add(1, (-1, True, 9.0), 64)  # higher priority first
    queue.add(2, (0, False, 7.0), 8)  # re-queued before new arrivals
    assert list(queue) == [1, 2, 3] and queue.sizes == {8: 2, 64: 1}
    queue.remove(2)
    assert list(queue) == [1, 3] and queue.sizes == {8: 1, 64: 1} and 2 not in queue
    left = SizesLeft(queue.sizes)
    left.passed(8)
    assert left.smallest == 64
    with pytest.raises(SpecError, match="backfill"):
        simulate_cluster(
            ff.load_fabric("dgx-h100-superpod"),
            [_row("a", 8, 10.0)],
            backfill="conservative",
            interference=False,
        )
