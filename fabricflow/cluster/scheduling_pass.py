"""The cluster simulator's scheduling pass: after the events of an instant, the queued
jobs are tried in priority order; each starts where the scheduler
(:mod:`.schedulers`) places it, preempts lower-priority jobs when it outranks them, or
waits, under the queue's backfill policy (:mod:`.backfill`: with ``easy`` the first job
that cannot start gets a reservation that later jobs may not delay).

:class:`SchedulingPass` acts on the simulator it is given (:mod:`.simulate`), as
:class:`~.prediction.PredictedFailures` does.
"""

from __future__ import annotations

import math
import time

import numpy as np

from fabricflow.cluster import interference as _interference
from fabricflow.cluster.backfill import SizesLeft, place_without, reservation
from fabricflow.cluster.checkpoint_clock import wall_for
from fabricflow.cluster.records import JobRecord
from fabricflow.cluster.schedulers import Request
from fabricflow.cluster.state import DOWN

__all__ = ["SchedulingPass"]


class SchedulingPass:
    """Starts queued jobs of the simulation ``sim``: :meth:`run` is one pass over its
    queue; counts land in ``sim.stats`` (``schedule_passes``, ``place_calls``,
    ``schedule_s``, ``reservations``, ``backfilled``)."""

    def __init__(self, sim):
        self.sim = sim

    def run(self) -> None:
        """One pass over the queue (a snapshot: starts and preemptions change it)."""
        sim = self.sim
        if not len(sim.queue):
            return
        began = time.perf_counter()
        sim.stats["schedule_passes"] += 1
        jobs = sim.jobs
        free = sim.state.num_free
        lowest = self._lowest_running()
        smallest_failed = math.inf
        sizes_left = SizesLeft(sim.queue.sizes)
        load = None
        reserved: tuple[float, np.ndarray] | None = None  # (shadow time, GPUs)
        blocked = False  # a job that cannot start stands in the way (backfill "none")
        for key in sim.queue:  # a snapshot: starts and preemptions change the queue
            job = jobs[key]
            size = job.spec.gpus
            sizes_left.passed(size)
            preempt = job.spec.priority > lowest
            if not preempt and (blocked or free == 0):
                break  # priority order: no job behind this one can preempt either
            if job.blocked_on == (sim.fabric_version, sim.alloc_version):  # nothing changed
                continue
            if not preempt and size >= smallest_failed:
                if sizes_left.smallest >= smallest_failed:
                    break  # every job left is at least as large as one that did not fit
                continue
            request = Request(key, size, job.spec.priority, self._traffic(job))
            gpus = None
            if size <= free:
                if load is None and sim.net is not None:
                    load = sim.net.link_load(fresh=False)
                gpus = self._place(job, request, load, reserved)
            if gpus is None and preempt:
                gpus = self._preempt_for(job, request)
                if gpus is not None:
                    lowest = self._lowest_running()
            if gpus is None:
                smallest_failed = min(smallest_failed, size)
                if sim.backfill == "none":
                    blocked = True
                elif sim.backfill == "easy" and reserved is None:
                    reserved = self._reserve(request)
                continue
            sim.lifecycle.start(job, np.asarray(gpus, dtype=np.int64))
            free = sim.state.num_free
            load = None
        sim.stats["schedule_s"] += time.perf_counter() - began

    def _traffic(self, job: JobRecord):
        """The job's traffic shape for the scheduler (network bytes per second, by
        dimension), computed once per job; ``None`` without a network model."""
        if self.sim.net is None:
            return None
        if job.traffic is None:
            job.traffic = _interference.job_traffic_shape(
                job.spec, job.standalone, gpus_per_node=self.sim.gpn
            )
        return job.traffic

    def _place(self, job: JobRecord, request, load, reserved) -> np.ndarray | None:
        """A placement for ``job`` now that does not delay the reservation ``reserved``:
        anywhere if it is expected to end by the shadow time, else off the reserved GPUs."""
        sim = self.sim
        sim.stats["place_calls"] += 1
        if reserved is None or sim.t + self._expected_run_s(job) <= reserved[0]:
            gpus = sim.scheduler.place(sim.state, request, load)
        else:
            gpus = place_without(sim.scheduler, sim.state, request, load, reserved[1])
        if gpus is not None and reserved is not None:
            sim.stats["backfilled"] += 1
        return gpus

    def _preempt_for(self, job: JobRecord, request) -> np.ndarray | None:
        """Preempt lower-priority jobs so that ``job`` can start (the scheduler's
        ``victims``), and place it; None when no set of victims makes room."""
        sim = self.sim
        running = {
            k: sim.jobs[k].spec.priority
            for k in sim.holding
            if sim.jobs[k].spec.priority < job.spec.priority
        }
        victims = sim.scheduler.victims(sim.state, request, running)
        for victim in victims:
            sim.lifecycle.interrupt(sim.jobs[int(victim)], reason="preempted")
        if not victims:
            return None
        load = None if sim.net is None else sim.net.link_load(fresh=False)
        sim.stats["place_calls"] += 1
        return sim.scheduler.place(sim.state, request, load)

    def _expected_run_s(self, job: JobRecord) -> float:
        """Wall seconds ``job`` is expected to hold GPUs if it starts now: its remaining
        steps at its standalone step time, with checkpoint writes and a restart if due."""
        policy = self.sim.policy
        work = (job.target - job.steps) * job.standalone_s
        wall = wall_for(work, 0.0, self.sim.tau, self.sim.delta)
        return wall + (policy.restart_s if job.needs_restart else 0.0)

    def _reserve(self, request) -> tuple[float, np.ndarray] | None:
        """The head job's reservation (shadow time, GPUs) from the expected ends of the
        jobs holding GPUs and the repairs of failed GPUs (:func:`~.backfill.reservation`)."""
        sim = self.sim
        jobs = sim.jobs
        releases: list[tuple[float, str, object, int]] = [
            (jobs[k].expected_end_s, "job", k, jobs[k].spec.gpus)
            for k in sim.holding
            if math.isfinite(jobs[k].expected_end_s)
        ]
        owner = sim.state.owner
        for record, when in sim.failure_handling.repair_at.items():
            gpus = sim.failing.records[record][0]
            if gpus.size:
                releases.append((when, "gpus", gpus, int(np.count_nonzero(owner[gpus] == DOWN))))
        sim.stats["reservations"] += 1
        return reservation(sim.scheduler, sim.state, request, releases)

    def _lowest_running(self) -> float:
        """The lowest priority among jobs holding GPUs (inf when none): only a job above
        it may preempt."""
        sim = self.sim
        return min((sim.jobs[k].spec.priority for k in sim.holding), default=math.inf)
