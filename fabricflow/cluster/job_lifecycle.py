"""The life of a job in the cluster simulator: queued, started on its GPUs, restarting,
running, interrupted (a failure or a preemption: back to its last checkpoint, then onto
spare nodes or into the queue), unreachable (its GPUs cut apart by failed links) and
done; each change is logged (``JobRecord.log``) for the timeline.

:class:`JobLifecycle` acts on the simulator it is given (:mod:`.simulate`), as
:class:`~.prediction.PredictedFailures` does; a job's progress between events is
analytic (:mod:`.checkpoint_clock`).
"""

from __future__ import annotations

import math

import numpy as np

from fabricflow.cluster import checkpoint_clock
from fabricflow.cluster import events as ev
from fabricflow.cluster.records import (
    CHECKPOINTING,
    QUEUED,
    RESTARTING,
    RUNNING,
    JobRecord,
)
from fabricflow.errors import RoutingError

__all__ = ["JobLifecycle"]


class JobLifecycle:
    """Moves the jobs of the simulation ``sim`` between states (``QUEUED``, ``RESTARTING``,
    ``RUNNING``, ``CHECKPOINTING``, ``DONE``, :mod:`.records`): the queue, the GPUs they
    hold, their events on the heap and their logs."""

    def __init__(self, sim):
        self.sim = sim

    def log(self, job: JobRecord) -> None:
        """Log ``job``'s state now: GPUs held and, running, its step time (s)."""
        sim = self.sim
        count = 0 if job.gpus is None else int(job.gpus.size)
        step = job.step_s if job.state == RUNNING else math.nan
        job.log.append((sim.t, job.state, count, step))

    def advance(self, job: JobRecord) -> None:
        """Progress of a running job from ``job.t_last`` to now (analytic checkpoints)."""
        sim = self.sim
        if checkpoint_clock.advance(job, sim.t, sim.tau, sim.delta):
            sim.progress_event = sim.events

    def schedule_finish(self, job: JobRecord) -> None:
        """Push the event of ``job`` reaching its target at its current step time
        (with the checkpoint writes on the way); cancels the one pushed before."""
        sim = self.sim
        job.version += 1
        # wall seconds from now until the job reaches its target at its step time
        need = max(0.0, (job.target - job.steps) * job.step_s)
        job.expected_end_s = sim.t + checkpoint_clock.wall_for(need, job.pos, sim.tau, sim.delta)
        sim.push(job.expected_end_s, ev.FINISH, job.key, job.version)

    def enqueue(self, job: JobRecord, reason: str) -> None:
        """``job`` waits in the queue from now, for ``reason`` (see :mod:`.records`)."""
        sim = self.sim
        job.state = QUEUED
        job.queued_since = sim.t
        job.wait_reason = reason
        job.expected_end_s = math.inf
        order = (-job.spec.priority, not job.requeued, job.spec.arrival_s)
        sim.queue.add(job.key, order, job.spec.gpus)

    def start(self, job: JobRecord, gpus: np.ndarray) -> None:
        """Start ``job`` from the queue on ``gpus``: a restart first if it ran before."""
        sim = self.sim
        sim.queue.remove(job.key)
        sim.state.allocate(job.key, gpus)
        sim.holding.add(job.key)
        job.gpus = np.asarray(gpus, dtype=np.int64)
        job.requeued = False
        if job.queued_since is not None:
            job.waits.append((job.wait_reason, sim.t - job.queued_since))
            job.queued_since = None
        sim.allocation_changed()
        if job.start_s is None:
            job.start_s = sim.t
        if job.needs_restart:
            job.needs_restart = False
            self.restart(job)
        else:
            self.run(job)

    def restart(self, job: JobRecord) -> None:
        """``job`` restarts on the GPUs it holds (``restart_s`` of the checkpoint policy;
        at once when that is 0)."""
        sim = self.sim
        job.restarts += 1
        if sim.policy.restart_s > 0:
            job.state = RESTARTING
            job.t_last = sim.t
            job.version += 1
            restart_end = sim.t + sim.policy.restart_s
            job.expected_end_s = restart_end + checkpoint_clock.wall_for(
                (job.target - job.steps) * job.standalone_s, 0.0, sim.tau, sim.delta
            )
            sim.push(restart_end, ev.RESTARTED, job.key, job.version)
            self.log(job)
        else:
            self.run(job)

    def run(self, job: JobRecord) -> None:
        """``job`` runs from now at its standalone step time (its flows join the network
        model; unreachable GPUs send it back to the queue)."""
        sim = self.sim
        job.state = RUNNING
        job.t_last = sim.t
        job.pos = 0.0
        job.step_s = job.standalone_s
        if sim.net is not None:
            assert job.gpus is not None  # placed by start or kept through a restart
            try:
                sim.net.add(job.key, job.spec, job.standalone, job.gpus)
            except RoutingError:
                self.unreachable(job)
                return
        sim.mix_changed = True
        self.schedule_finish(job)
        self.log(job)

    def release(self, job: JobRecord) -> None:
        """``job`` gives its GPUs back (it is done or goes back to the queue)."""
        sim = self.sim
        sim.state.release(job.key)
        sim.holding.discard(job.key)
        job.gpus = None
        sim.allocation_changed()

    def unreachable(self, job: JobRecord) -> None:
        """The job's GPUs cannot all reach each other over the surviving links (up/down
        routing has no detour around these failures), so it cannot run there: it goes
        back to the queue, keeps its progress, and is not placed again until the fabric or
        the allocation changes (a repair, a failure, a job starting or ending), since the
        same state would give the same placement."""
        sim = self.sim
        self.release(job)
        job.requeued = True
        job.needs_restart = job.restarts > 0 or job.failures > 0 or job.preemptions > 0
        self.enqueue(job, "unreachable")
        job.blocked_on = (sim.fabric_version, sim.alloc_version)
        sim.stats["unreachable_starts"] += 1
        self.log(job)

    def stop_running(self, job: JobRecord) -> None:
        """``job``'s flows leave the network model (it stops running or writing)."""
        sim = self.sim
        if job.state in (RUNNING, CHECKPOINTING) and sim.net is not None:
            sim.net.remove(job.key)
            sim.mix_changed = True

    def interrupt(self, job: JobRecord, *, reason: str) -> None:
        """A failure hit ``job`` (``reason`` ``failed``) or it was ``preempted``: back to
        its last checkpoint, then to spare nodes (a failure) or to the queue."""
        sim = self.sim
        if job.state not in (RUNNING, RESTARTING, CHECKPOINTING):
            return
        if sim.predictor is not None and job.gpus is not None:
            sim.predictor.protected[job.gpus] = False
        self.advance(job)
        if job.state == RUNNING:
            job.lost_work_s += job.pos
        elif job.state == CHECKPOINTING:  # the proactive write is lost with the work before it
            job.lost_work_s += job.pos + (sim.t - job.t_last)
        job.steps = job.committed
        job.pos = 0.0
        job.version += 1  # cancels its FINISH / RESTARTED / CHECKPOINTED event
        self.stop_running(job)
        if reason == "failed":
            job.failures += 1
        else:
            job.preemptions += 1
        if reason == "failed" and sim.failure_handling.swap_to_spares(job):
            self.restart(job)
            return
        self.requeue(job, reason)

    def requeue(self, job: JobRecord, reason: str) -> None:
        """``job`` gives its GPUs back and waits in the queue to restart from its last
        checkpoint (``reason``: why, see :mod:`.records`)."""
        self.release(job)
        job.requeued = True
        job.needs_restart = True
        self.enqueue(job, reason)
        self.log(job)
