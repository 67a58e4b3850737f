"""The simulator's analytic checkpoints (:mod:`fabricflow.cluster.checkpoint_clock`):
advancing a running job by the wall time that :func:`wall_for` gives for some work
computes exactly that work, and the committed steps never pass the computed ones."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from fabricflow.cluster.checkpoint_clock import advance, wall_for
from fabricflow.cluster.records import PENDING, RUNNING, JobRecord


def _running(pos: float, step_s: float) -> JobRecord:
    return JobRecord(0, None, step_s, None, 10**9, state=RUNNING, pos=pos, step_s=step_s)


def test_without_checkpoints_wall_time_is_the_work():
    assert wall_for(12.5, 3.0, None, 0.0) == 12.5
    assert wall_for(-1.0, 0.0, None, 0.0) == 0.0
    job = _running(0.0, 2.0)
    assert not advance(job, 10.0, None, 0.0)
    assert job.steps == 5.0 and job.committed == 0.0 and job.pos == 10.0


def test_a_job_not_running_only_moves_its_clock():
    job = _running(0.0, 1.0)
    job.state = PENDING
    assert not advance(job, 7.0, 5.0, 1.0)
    assert job.t_last == 7.0 and job.steps == 0.0


@given(
    interval=st.floats(1.0, 1e4),
    write=st.floats(0.0, 1e3),
    position=st.floats(0.0, 1.0, exclude_max=True),
    work=st.floats(1e-3, 1e5),
)
def test_wall_for_then_advance_computes_the_work(interval, write, position, work):
    period = interval + write
    job = _running(position * period, 1.0)
    wall = wall_for(work, job.pos, interval, write)
    # the clock works in seconds of the period: rounding is relative to the period, not work
    assert wall >= work - 1e-12 * (period + work)
    committed = advance(job, wall, interval, write)
    assert math.isclose(job.work_s, work, rel_tol=1e-9, abs_tol=1e-6)
    assert math.isclose(job.steps, work, rel_tol=1e-9, abs_tol=1e-6)  # 1 s per step
    assert 0.0 <= job.committed <= job.steps + 1e-9
    if not committed:  # no write completed on the way: nothing new is committed
        assert job.committed == 0.0


def test_a_write_completed_commits_the_steps_before_it():
    # 1.5 s into a segment of 1 s compute + 1 s write: the write ends after 0.5 s and
    # commits the 0 steps before it; the next 0.5 s compute is not committed
    job = _running(1.5, 1.0)
    assert wall_for(0.5, job.pos, 1.0, 1.0) == 1.0
    assert advance(job, 1.0, 1.0, 1.0)
    assert (job.steps, job.committed, job.pos) == (0.5, 0.0, 0.5)
    # a whole segment later the next write has committed those steps and the ones after
    assert advance(job, 3.0, 1.0, 1.0)
    assert (job.steps, job.committed) == (1.5, 1.0)
