"""Analytic checkpoints of the cluster simulator: a running job alternates ``interval_s``
seconds of compute and ``write_s`` seconds of writing a checkpoint, so its progress and
last committed step at any time follow from the time it has run (no event per checkpoint).

A job's position in its current segment (``JobRecord.pos``, seconds) runs from 0 to
``interval_s + write_s``: compute up to ``interval_s``, writing after. Without checkpoints
(``interval_s`` None) the position is the time computed since the job (re)started.
"""

from __future__ import annotations

import math

from fabricflow.cluster.records import RUNNING, JobRecord

__all__ = ["advance", "wall_for"]


def advance(job: JobRecord, now: float, interval_s: float | None, write_s: float) -> bool:
    """Progress of ``job`` from ``job.t_last`` to ``now`` (seconds): its steps, work and
    segment position move on at its step time ``job.step_s``; a checkpoint written on the way
    commits its steps. Returns whether a checkpoint was committed. A job not running only
    has its clock ``t_last`` moved to ``now``."""
    dt = now - job.t_last
    job.t_last = now
    if job.state != RUNNING or dt <= 0:
        return False
    if interval_s is None:
        work, commits, to_commit = dt, 0, 0.0
        job.pos += dt
    else:
        period = interval_s + write_s
        end = job.pos + dt
        commits = math.floor(end / period)
        new_pos = max(0.0, end - commits * period)
        work = commits * interval_s + min(new_pos, interval_s) - min(job.pos, interval_s)
        to_commit = commits * interval_s - min(job.pos, interval_s)
        job.pos = new_pos
    steps = work / job.step_s
    if commits:
        job.committed = job.steps + to_commit / job.step_s
    job.steps += steps
    job.work_s += work
    job.steps_computed += steps
    return bool(commits)


def wall_for(work: float, pos: float, interval_s: float | None, write_s: float) -> float:
    """Wall seconds to compute ``work`` seconds from segment position ``pos`` (with
    the checkpoint writes on the way; none after the last piece of work)."""
    if interval_s is None or work <= 0.0:
        return max(0.0, work)
    period = interval_s + write_s
    if pos > interval_s:  # writing: the work resumes with the next segment
        lead, begin = period - pos, 0.0
    else:
        lead, begin = 0.0, pos
    total = begin + work  # work position counted from the segment start
    full = max(0, math.ceil(total / interval_s) - 1)  # whole segments (with writes) first
    return lead + full * period + (total - full * interval_s) - begin
