"""The cluster simulator: standalone times, conservation, checkpoints, preemption,
failures of links and switches, the timeline."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fabricflow as ff
from fabricflow.cluster.failures import CheckpointPolicy, FailureModel
from fabricflow.cluster.simulate import simulate_cluster
from fabricflow.errors import SpecError


def _row(job_id, gpus, steps, arrival=0.0, priority=0, model="llama3-8b"):
    if model == "llama3-8b":
        layout = {"tp": 8, "micro_batch": 1, "seq": 8192}
    else:
        layout = {"tp": 1, "micro_batch": 2, "seq": 2048}
    return {
        "id": job_id,
        "model": model,
        "gpu": "h100-sxm",
        "gpus": gpus,
        "layout": layout,
        "steps": steps,
        "arrival": arrival,
        "priority": priority,
    }


@pytest.fixture(scope="module")
def fabric():
    return ff.load_fabric("dgx-h100-superpod")


TRACE = [
    _row("a", 256, 400),
    _row("b", 64, 900, arrival=30.0),
    _row("c", 2, 500, arrival=40.0, model="megatron-1.7b"),
    _row("d", 1, 700, arrival=40.0, model="megatron-1.7b"),
    _row("e", 512, 300, arrival=100.0),
    _row("f", 512, 300, arrival=120.0),  # waits for GPUs
]


def test_standalone_without_failures_or_sharing(fabric):
    run = simulate_cluster(fabric, TRACE, scheduler="first-fit", interference=False)
    for job in run.jobs:
        assert job["state"] == "done" and job["steps_done"] == job["steps"]
        span = job["end_s"] - job["start_s"]
        assert span == pytest.approx(job["standalone_step_s"] * job["steps"], rel=1e-9)
        assert job["slowdown"] == pytest.approx(1.0, rel=1e-12)
        assert job["goodput"] == pytest.approx(1.0, rel=1e-9)
        assert job["failures"] == job["restarts"] == 0 and job["lost_work_s"] == 0
    f = next(job for job in run.jobs if job["id"] == "f")
    assert f["queue_wait_s"] > 0  # 256 + 64 + 3 + 512 GPUs busy when it arrived
    c = run.cluster
    assert c["jobs_done"] == len(TRACE) and c["failures"] == 0
    assert c["horizon_s"] == pytest.approx(max(job["end_s"] for job in run.jobs))
    busy = sum(job["gpus"] * (job["end_s"] - job["start_s"]) for job in run.jobs)
    assert c["gpu_seconds"]["busy"] == pytest.approx(busy, rel=1e-12)
    assert c["utilization"] == pytest.approx(busy / (fabric.num_gpus * c["horizon_s"]))


def test_one_job_at_a_time_with_interference_is_standalone(fabric):
    trace = [_row("a", 64, 200), _row("b", 128, 100, arrival=10_000.0)]
    run = simulate_cluster(fabric, trace, scheduler="first-fit", interference=True)
    for job in run.jobs:
        assert job["slowdown"] == pytest.approx(1.0, rel=1e-9)


def test_gpu_seconds_are_conserved(fabric):
    failures = FailureModel(
        {"gpu": "2000h", "node": "1000h", "link": "5000h", "switch": "500h"},
        mttr_s={"gpu": "2h", "node": "3h", "link": "1h", "switch": "1h"},
    )
    policy = CheckpointPolicy(interval_s="20m", write_s="30s", restart_s="5m", spares=2)
    trace = [_row(f"j{i}", 2 ** (i % 8), 3000 + 100 * i, arrival=600.0 * i) for i in range(16)]
    for row in trace:
        if row["gpus"] < 8:
            row.update(model="megatron-1.7b", layout={"tp": 1, "micro_batch": 2, "seq": 2048})
    run = simulate_cluster(
        fabric,
        trace,
        scheduler="first-fit",
        interference=False,
        failures=failures,
        checkpoint=policy,
        horizon="12h",
        seed=4,
    )
    seconds = run.cluster["gpu_seconds"]
    assert seconds["total"] == fabric.num_gpus * 12 * 3600
    assert seconds["busy"] + seconds["idle"] + seconds["down"] == pytest.approx(
        seconds["total"], rel=1e-12
    )
    assert seconds["down"] > 0 and run.cluster["failures"] > 0
    timeline = run.timeline
    np.testing.assert_array_equal(
        timeline["gpu_busy"] + timeline["gpu_idle"] + timeline["gpu_down"], fabric.num_gpus
    )
    # a job never holds more GPUs than it asked for, and running jobs hold exactly that
    gpus = timeline["gpus"].values
    running = timeline["state"].values == 2
    np.testing.assert_array_equal(
        gpus[running], np.broadcast_to(timeline["job_gpus"].values, gpus.shape)[running]
    )


def test_checkpoint_writes_add_to_the_run_time(fabric):
    policy = CheckpointPolicy(interval_s=100.0, write_s=7.0)
    run = simulate_cluster(
        fabric,
        [_row("a", 64, 1000)],
        scheduler="first-fit",
        interference=False,
        checkpoint=policy,
    )
    (job,) = run.jobs
    work = job["standalone_step_s"] * 1000
    writes = math.ceil(work / 100.0) - 1  # no write after the last segment
    assert job["end_s"] == pytest.approx(work + 7.0 * writes, rel=1e-12)
    assert job["goodput"] == pytest.approx(work / (work + 7.0 * writes))


def test_priority_preemption(fabric):
    policy = CheckpointPolicy(interval_s=60.0, write_s=5.0, restart_s=30.0)
    trace = [_row("low", 1024, 2000), _row("high", 512, 200, arrival=500.0, priority=1)]
    run = simulate_cluster(
        fabric, trace, scheduler="first-fit", interference=False, checkpoint=policy
    )
    low, high = run.jobs
    assert high["start_s"] == pytest.approx(500.0)  # it did not wait for "low"
    assert low["preemptions"] == 1 and low["restarts"] == 1 and low["failures"] == 0
    # "low" lost the work since its last checkpoint: under one segment
    assert 0 < low["lost_work_s"] < 65.0
    assert low["start_s"] == 0 and low["end_s"] > high["end_s"]
    assert low["steps_done"] == 2000 and low["goodput"] < 1.0


def test_link_failures_reroute_without_restarts(fabric):
    failures = FailureModel({"link": "200h"}, mttr_s={"link": "1h"})
    run = simulate_cluster(
        fabric,
        [_row("a", 256, 20_000)],
        scheduler="first-fit",
        interference=False,
        failures=failures,
        seed=1,
    )
    (job,) = run.jobs
    assert run.cluster["failures_by_component"]["link"] > 0
    assert job["failures"] == 0 and job["restarts"] == 0
    assert job["slowdown"] == pytest.approx(1.0)  # no network model: no slowdown either
    assert run.cluster["gpu_seconds"]["down"] == 0


def test_leaf_failure_cuts_off_gpus_and_restarts_jobs(fabric):
    # dgx-h100-superpod is rail-optimized with one NIC per GPU: a failed leaf disconnects
    # the GPUs of its rail, which are then down and their jobs restart
    failures = FailureModel({"switch": "20h"}, mttr_s={"switch": "1h"})
    policy = CheckpointPolicy(interval_s=300.0, write_s=10.0, restart_s=60.0)
    run = simulate_cluster(
        fabric,
        [_row("a", 1024, 20_000)],
        scheduler="first-fit",
        interference=False,
        failures=failures,
        checkpoint=policy,
        seed=0,
    )
    (job,) = run.jobs
    assert run.cluster["failures_by_component"]["switch"] > 0
    assert job["failures"] > 0 and job["restarts"] == job["failures"]
    assert run.cluster["gpu_seconds"]["down"] > 0


def test_horizon_cuts_unfinished_jobs(fabric):
    run = simulate_cluster(
        fabric,
        [_row("a", 64, 10**6), _row("b", 64, 10, arrival="2h")],
        scheduler="first-fit",
        interference=False,
        horizon="1h",
    )
    a, b = run.jobs
    assert a["state"] == "running" and a["end_s"] == 3600.0
    assert 0 < a["steps_done"] < a["steps"]
    assert a["goodput"] == pytest.approx(1.0, rel=1e-6)
    assert b["state"] == "pending" and b["start_s"] is None and b["goodput"] is None
    assert run.cluster["horizon_s"] == 3600.0


def test_timeline_dataset(fabric):
    run = simulate_cluster(fabric, TRACE, scheduler="first-fit", interference=False)
    data = run.timeline
    assert data["state"].dims == ("time", "job") and list(data["job"].values) == list("abcdef")
    assert np.all(data["state"].isel(time=-1).values == 4)  # all done at the end
    assert float(data["time"][0]) == 0.0 and float(data["time"][-1]) == run.cluster["horizon_s"]
    util = data["utilization"].values
    assert np.all((util >= 0) & (util <= 1))
    # time-mean of the utilization timeline = the reported utilization
    times = data["time"].values
    mean = np.sum(util[:-1] * np.diff(times)) / times[-1]
    assert mean == pytest.approx(run.cluster["utilization"], rel=1e-9)
    text = run.summary()
    assert "cluster: utilization" in text and text.count("\n") == len(TRACE) + 1
    assert set(run.to_json()) == {"jobs", "cluster", "settings"}


def test_bad_options(fabric):
    with pytest.raises(SpecError, match="first-fit"):
        simulate_cluster(fabric, TRACE, scheduler="random", interference=False)
    with pytest.raises(SpecError, match="failures"):
        simulate_cluster(fabric, TRACE, failures=42, interference=False)
    with pytest.raises(SpecError, match="usable GPUs") as info:
        simulate_cluster(
            fabric,
            [_row("big", 1024, 10)],
            interference=False,
            checkpoint=CheckpointPolicy(spares=1),
        )
    assert info.value.field == "jobs[0] (id 'big').gpus"
    with pytest.raises(SpecError, match="horizon"):
        simulate_cluster(fabric, TRACE, horizon="-1h", interference=False)


def test_failed_fabric_matches_fabric_without(fabric):
    from fabricflow.cluster.failure_events import FailureProcesses

    failing = FailureProcesses(fabric, None, 8, 0)
    cable = 7
    failing.link_down[[failing.cables[cable], failing.cable_reverse[cable]]] = 1
    expected = fabric.without(links=[failing.cables[cable]])
    np.testing.assert_array_equal(failing.failed_fabric().capacity, expected.capacity)
    switch = failing.switches[3]
    touching = (fabric.link_src == switch) | (fabric.link_dst == switch)
    failing.link_down[:] = touching
    expected = fabric.without(switches=[switch])
    got = failing.failed_fabric()
    np.testing.assert_array_equal(got.capacity, expected.capacity)
    np.testing.assert_array_equal(got.link_up, expected.link_up)


def test_link_failures_with_the_network_model_reroute(fabric):
    failures = FailureModel({"link": "100h"}, mttr_s={"link": "1h"})
    run = simulate_cluster(
        fabric,
        [_row("a", 256, 20_000)],
        scheduler="first-fit",
        interference=True,
        failures=failures,
        seed=1,
    )
    (job,) = run.jobs
    assert run.cluster["stats"]["fabric_updates"] >= 2  # failed and repaired
    assert job["failures"] == 0 and job["state"] == "done"
    assert job["slowdown"] >= 1.0 - 1e-9


@settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 10_000),
    gpu_mtbf_h=st.floats(50.0, 5000.0),
    node_mtbf_h=st.floats(50.0, 5000.0),
    spares=st.integers(0, 3),
    interval_s=st.one_of(st.none(), st.floats(60.0, 3600.0)),
    restart_s=st.floats(0.0, 900.0),
)
def test_invariants_under_random_failures(
    fabric, seed, gpu_mtbf_h, node_mtbf_h, spares, interval_s, restart_s
):
    rng = np.random.default_rng(seed)
    trace = []
    for i in range(10):
        size = int(2 ** rng.integers(0, 9))
        row = _row(f"j{i}", size, int(rng.integers(500, 5000)), arrival=float(rng.uniform(0, 7200)))
        row["priority"] = int(rng.integers(0, 2))
        if size < 8:
            row.update(model="megatron-1.7b", layout={"tp": 1, "micro_batch": 2, "seq": 2048})
        trace.append(row)
    failures = FailureModel(
        {"gpu": gpu_mtbf_h * 3600, "node": node_mtbf_h * 3600, "switch": "2000h"}
    )
    policy = CheckpointPolicy(
        interval_s=interval_s,
        write_s=30.0 if interval_s else 0.0,
        restart_s=restart_s,
        spares=spares,
    )
    run = simulate_cluster(
        fabric,
        trace,
        scheduler="first-fit",
        interference=False,
        failures=failures,
        checkpoint=policy,
        horizon="8h",
        seed=seed,
    )
    seconds = run.cluster["gpu_seconds"]
    assert seconds["busy"] + seconds["idle"] + seconds["down"] == pytest.approx(
        seconds["total"], rel=1e-12
    )
    for job in run.jobs:
        assert 0 <= job["steps_done"] <= job["steps"] and job["lost_work_s"] >= 0
        if job["goodput"] is not None:
            assert 0 <= job["goodput"] <= 1 + 1e-9
        if job["state"] == "done":
            assert job["end_s"] - job["start_s"] >= job["standalone_step_s"] * job["steps"] * (
                1 - 1e-9
            )
        if job["slowdown"] is not None:
            assert job["slowdown"] == pytest.approx(1.0)
        assert job["restarts"] <= job["failures"] + job["preemptions"]


def test_job_whose_gpus_cannot_reach_each_other_waits_instead_of_failing():
    """Three leaves; leaf 0 lost its uplink to spine 1 and leaf 2 its uplink to spine 0,
    so GPUs of leaf 0 cannot reach GPUs of leaf 2 (no up/down path survives) though every
    GPU keeps an uplink. First-fit then offers the 32-GPU job leaves 0 and 2: it cannot
    start there, waits (no crash, no lost steps), and runs once leaf 1 frees up."""
    from fabricflow.study.collective_effects import small_clos

    fabric = small_clos(attachment="tor", gpus=48, leaf_down=16, leaf_up=2, spine_radix=3)
    up = np.flatnonzero((fabric.link_kind == "leaf") & (fabric.node_tier[fabric.link_src] == 1))
    leaf_of, spine_of = fabric.link_src[up], fabric.link_dst[up]
    leaves, spines = np.unique(leaf_of), np.unique(spine_of)
    cut = up[
        ((leaf_of == leaves[0]) & (spine_of == spines[1]))
        | ((leaf_of == leaves[2]) & (spine_of == spines[0]))
    ]
    broken = fabric.without(links=cut)
    trace = [_row("a", 16, 20), _row("b", 16, 400), _row("span", 32, 20, arrival=1.0)]
    run = simulate_cluster(broken, trace, scheduler="first-fit")
    jobs = {job["id"]: job for job in run.jobs}
    assert run.cluster["stats"]["unreachable_starts"] >= 1
    assert all(job["steps_done"] == spec["steps"] for job, spec in zip(run.jobs, trace))
    assert jobs["span"]["end_s"] > jobs["b"]["end_s"]  # it ran only after leaf 1 freed up
