"""The event-driven cluster simulator: :func:`simulate_cluster` -> :class:`~.run.ClusterRun`.

Events (a heap ordered by time): job arrivals, job completions, restarts done, component
failures and repairs, and with a failure predictor (:mod:`.prediction`) alarms and the
ends of proactive checkpoints. Between two events every running job progresses at its
current step time; when the job mix or the fabric changes, the step times are
re-evaluated (with ``interference=True`` by one joint max-min solve over the running jobs'
flows, else each job at its standalone step time). Checkpoints are analytic: a running job
alternates ``interval_s`` of compute and ``write_s`` of writing, so its progress and last
committed step at any time follow from the time it has run (no event per checkpoint).

Per event the simulator does O(running jobs) Python work; the cluster's GPU counts and
fragmentation are kept by :class:`~.state.ClusterState` as it changes, and jobs are
advanced lazily (only when their step time changes or they are touched). The queue and
its backfill policies are :mod:`.backfill`.

GPU-second accounting: between consecutive events each GPU is busy (held by a job,
running, restarting or checkpointing), down (failed, waiting for repair, or drained
after an alarm) or idle (free or a hot spare), so ``busy + idle + down == GPUs x
horizon`` (:attr:`ClusterRun.cluster` ``gpu_seconds``).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import time
from collections.abc import Sequence

import numpy as np

from fabricflow.cluster import events as ev
from fabricflow.cluster import interference as _interference
from fabricflow.cluster import schedulers as _schedulers
from fabricflow.cluster.backfill import (
    JobQueue,
    SizesLeft,
    check_backfill,
    place_without,
    reservation,
)
from fabricflow.cluster.failure_events import FailureProcesses
from fabricflow.cluster.failures import (
    COMPONENTS,
    CheckpointPolicy,
    FailureModel,
    failure_model,
    job_mtbf,
    log_failure_slowdown,
    young_daly_interval,
)
from fabricflow.cluster.jobspec import JobSpec, parse_duration
from fabricflow.cluster.prediction import PredictedFailures, check_predictor
from fabricflow.cluster.records import (
    CHECKPOINTING,
    DONE,
    PENDING,
    QUEUED,
    RESTARTING,
    RUNNING,
    STATE_NAMES,
    ClusterRun,
    JobRecord,
    job_row,
    timeline_dataset,
    wait_summary,
)
from fabricflow.cluster.standalone import standalone_step
from fabricflow.cluster.state import DOWN, FREE, SPARE, ClusterState
from fabricflow.cluster.trace import load_trace
from fabricflow.collective.structure_cache import fabric_fingerprint
from fabricflow.errors import RoutingError, SolverError, SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.memory_budget import check_memory
from fabricflow.schema import check_size
from fabricflow.workload.calibration import as_calibration

MAX_EVENTS = 5_000_000
# A job expected to take more than this many times its failure-free time (its failures
# come faster than it can restart and reach a checkpoint) makes practically no progress:
# refused before the run instead of simulating failure after failure.
NO_PROGRESS_SLOWDOWN = 1e3
# Events with no job committing a checkpoint or finishing, after which a run without a
# horizon stops as stalled (every running job is brought up to date first).
STALL_EVENTS = 1_000_000
EVENTS_PER_JOB = 50  # the event bound grows with the trace: MAX_EVENTS or this per job
TIMELINE_POINTS = 2000
# At most this many (time, job) cells in the timeline: a trace of many jobs gets fewer time
# points (21 bytes a cell, twice over while the Dataset is built).
TIMELINE_CELLS = 10_000_000
# Measured bytes of simulator state per job (its record, event log and result row).
STATE_BYTES_PER_JOB = 6_000
# CPU seconds the simulator spends per job, measured: synthetic traces on
# dgx-h100-superpod with interference, 2,000 jobs in 7.6 s and 20,000 in 77 s of CPU
# (user + sys, start-up included) on the 2-core development machine at load 5-8. A trace
# of more jobs than MAX_SIMULATED_JOBS (about 75 s at that rate) is refused before the run,
# so that a run ends within two minutes instead of running for hours.
SECONDS_PER_JOB = 3.7e-3
MAX_SIMULATED_JOBS = 20_000

__all__ = [
    "MAX_SIMULATED_JOBS",
    "STATE_NAMES",
    "ClusterRun",
    "check_simulated_jobs",
    "estimated_run_bytes",
    "simulate_cluster",
    "timeline_points_for",
]


def simulate_cluster(
    fabric: Fabric,
    trace,
    *,
    scheduler="topology",
    backfill: str = "easy",
    failures=None,
    checkpoint: CheckpointPolicy | None = None,
    prediction=None,
    horizon: float | str | None = None,
    seed: int = 0,
    interference: bool = True,
    routing: str = "auto",
    timeline_points: int = TIMELINE_POINTS,
    progress=None,
    calibration=None,
) -> ClusterRun:
    """Simulate a trace of training jobs on ``fabric``.

    Args:
        fabric: the cluster's network (:func:`fabricflow.load_fabric`).
        trace: a trace path (YAML/CSV/public trace), a list of rows or of :class:`JobSpec`
            (:func:`load_trace`, :func:`synthetic_trace`).
        scheduler: ``first-fit``, ``packed``, ``topology`` or ``block``, or an object
            with the scheduler interface (``place``, ``victims``).
        backfill: the queue policy (:data:`~.backfill.BACKFILL`): ``easy`` (EASY
            backfill: the first job that cannot start gets a reservation that later jobs
            may not delay), ``greedy`` (every job that fits starts), ``none`` (first come,
            first served).
        failures: None (no failures), ``"default"`` (the published MTBFs of
            docs/cluster.md), ``{component: MTBF}`` or a :class:`FailureModel`.
        checkpoint: the :class:`CheckpointPolicy` (default: no checkpoints, instant
            restart, no spares).
        prediction: None, or a :class:`~.prediction.Predictor` (recall, precision, lead
            time): alarms before failures, a proactive checkpoint and a move to spares.
        horizon: stop time (seconds or ``"30d"``); None runs until every job is done.
        seed: seed of the failure processes (and the interference model's routes).
        interference: True: step times from one joint max-min solve over the running
            jobs' flows (``fabricflow.cluster.interference``); False: every job at its
            standalone step time (no contention model).
        routing: routing of the flows of the step-time models.
        timeline_points: at most this many time points in the timeline Dataset (all
            event times when fewer, else a regular grid; fewer for a trace of many jobs,
            see :func:`timeline_points_for`).
        progress: optional callable ``progress(t_s, jobs_done, jobs_total)``, called after
            every event (it may raise to stop the run).
        calibration: a :class:`~fabricflow.workload.calibration.Calibration` (or its
            file) every step-time model of the run uses (standalone and with
            interference); each job row then has its calibrated intervals.

    Returns:
        :class:`ClusterRun`.

    Raises:
        SpecError: a bad trace (row and field named), a bad option, or a job that can
            never fit (larger than the GPUs left after the spares).
        MemoryBudgetError: the run would not fit in memory (checked before it starts).
    """
    if not isinstance(fabric, Fabric):
        raise SpecError("fabric", f"expected a Fabric, got {type(fabric).__name__}")
    model = failure_model(failures)
    policy = checkpoint if checkpoint is not None else CheckpointPolicy()
    if not isinstance(policy, CheckpointPolicy):
        raise SpecError("checkpoint", f"expected a CheckpointPolicy, got {policy!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise SpecError("seed", f"must be an integer >= 0, got {seed!r}")
    if not isinstance(interference, bool):  # "no" is truthy: it would turn the model on
        raise SpecError("interference", f"expected True or False, got {interference!r}")
    if (
        isinstance(timeline_points, bool)
        or not isinstance(timeline_points, (int, np.integer))
        or timeline_points < 2
    ):
        raise SpecError("timeline_points", f"must be an integer >= 2, got {timeline_points!r}")
    backfill = check_backfill(backfill)
    predictor = check_predictor(prediction, model)
    calibration = as_calibration(calibration)
    if horizon is not None:
        horizon = parse_duration(horizon, "horizon", allow_zero=False)
    usable = _usable_gpus(fabric, policy)
    specs = trace if _all_jobspecs(trace) else load_trace(trace, fabric=fabric, usable_gpus=usable)
    if not specs:
        raise SpecError("trace", "holds no jobs")
    check_simulated_jobs(len(specs), "trace")
    check_memory(
        estimated_run_bytes(len(specs), int(timeline_points)),
        f"simulating a trace of {len(specs):,} jobs",
        hint="simulate fewer jobs (or a shorter horizon of the trace)",
    )
    sim = _Simulator(
        fabric,
        specs,
        scheduler,
        model,
        policy,
        horizon,
        int(seed),
        bool(interference),
        routing,
        backfill=backfill,
        predictor=predictor,
        calibration=calibration,
    )
    sim.progress = progress
    sim.run()
    return sim.result(timeline_points_for(len(specs), int(timeline_points)))


def check_simulated_jobs(num_jobs: int, field: str) -> None:
    """Refuse, before the run, a trace of more than :data:`MAX_SIMULATED_JOBS` jobs: the
    simulator spends a few ms of CPU per job (:data:`SECONDS_PER_JOB`), so a larger trace
    would run for minutes to hours (10**6 jobs: about an hour) with no answer."""
    seconds = num_jobs * SECONDS_PER_JOB
    check_size(
        num_jobs,
        MAX_SIMULATED_JOBS,
        field,
        "the trace",
        "jobs",
        f"simulating them would take about {seconds / 60:,.0f} min of CPU "
        f"({SECONDS_PER_JOB * 1e3:g} ms per job); simulate a window of the trace (the jobs "
        "of one period) or fewer synthetic jobs",
    )


def estimated_run_bytes(num_jobs: int, timeline_points: int = TIMELINE_POINTS) -> int:
    """Bytes a simulation of ``num_jobs`` jobs holds besides the fabric and the network
    model: per-job state and the timeline (capped at :data:`TIMELINE_CELLS` cells)."""
    cells = num_jobs * timeline_points_for(num_jobs, timeline_points)
    return int(num_jobs * STATE_BYTES_PER_JOB + 2 * 21 * cells)


def timeline_points_for(num_jobs: int, timeline_points: int = TIMELINE_POINTS) -> int:
    """Time points of the timeline of a run of ``num_jobs`` jobs: ``timeline_points``, or
    fewer (at least 2) so that ``points x jobs <= TIMELINE_CELLS``."""
    return max(2, min(int(timeline_points), TIMELINE_CELLS // max(1, num_jobs)))


def _usable_gpus(fabric: Fabric, policy: CheckpointPolicy) -> int:
    """GPUs jobs may use: the fabric's less the hot spare nodes (SpecError if none)."""
    per_node = max(1, int(fabric.gpus_per_node))
    usable = fabric.num_gpus - policy.spares * per_node
    if usable <= 0:
        raise SpecError(
            "checkpoint.spares",
            f"{policy.spares} spare nodes of {per_node} GPUs leave none of the "
            f"{fabric.num_gpus} GPUs for jobs",
        )
    return usable


def _all_jobspecs(trace) -> bool:
    return (
        isinstance(trace, Sequence)
        and not isinstance(trace, str)
        and bool(trace)
        and all(isinstance(job, JobSpec) for job in trace)
    )


class _Simulator:
    def __init__(
        self,
        fabric,
        specs,
        scheduler,
        model,
        policy,
        horizon,
        seed,
        use_net,
        routing,
        *,
        backfill="easy",
        predictor=None,
        calibration=None,
    ):
        self.fabric = fabric
        self.base = fabric
        self.model: FailureModel | None = model
        self.policy: CheckpointPolicy = policy
        self.backfill = backfill
        self.horizon = horizon
        self.seed = seed
        self.use_net = use_net
        self.num_gpus = fabric.num_gpus
        self.gpn = max(1, int(fabric.gpus_per_node))
        self.state = ClusterState(fabric)
        self.Request = _schedulers.Request
        if isinstance(scheduler, str):
            self.scheduler = _schedulers.make_scheduler(scheduler, fabric)
        elif hasattr(scheduler, "place") and hasattr(scheduler, "victims"):
            self.scheduler = scheduler
        else:
            raise SpecError(
                "scheduler", f"expected one of {list(_schedulers.SCHEDULERS)} or a Scheduler"
            )
        self.net = (
            _interference.Interference(fabric, routing=routing, seed=seed, calibration=calibration)
            if use_net
            else None
        )
        # the kind of every link, for the per-tier utilization of the timeline
        self._link_kind = fabric.link_kind_id.astype(np.int64)
        self._tier_fabric: Fabric | None = None
        self._tier_capacity: np.ndarray = np.zeros(len(fabric.link_kinds))
        usable = _usable_gpus(fabric, policy)
        # every size first: a job that can never run is refused before any step model
        for key, spec in enumerate(specs):
            if spec.gpus > usable:
                raise SpecError(
                    f"jobs[{key}] (id {spec.id!r}).gpus",
                    f"{spec.gpus} GPUs is larger than the cluster's {usable} usable GPUs "
                    f"({self.num_gpus} on {fabric.name}, less {policy.spares} spare nodes)",
                )
        fingerprint = fabric_fingerprint(fabric)
        self.jobs: list[JobRecord] = []
        for key, spec in enumerate(specs):
            try:
                result = standalone_step(
                    fabric, spec, fingerprint=fingerprint, routing=routing, calibration=calibration
                )
            except SpecError as error:
                raise SpecError(
                    f"jobs[{key}] (id {spec.id!r}).{error.field or 'layout'}",
                    str(error).split(": ", 1)[-1],
                ) from None
            self.jobs.append(
                JobRecord(
                    key, spec, result.step_time_s, result, spec.target_steps(result.step_time_s)
                )
            )
        self.max_events = max(MAX_EVENTS, EVENTS_PER_JOB * len(self.jobs))
        if horizon is None and model is not None:
            self._refuse_hopeless_jobs()
        self.progress_event = 0  # the event count when a job last committed or finished
        self.tau = policy.interval_s
        self.delta = policy.write_s if self.tau is not None else 0.0
        self.heap: list = []
        self.seq = 0
        self.t = 0.0
        self.queue = JobQueue()
        self.holding: set[int] = set()  # keys of jobs holding GPUs (running or restarting)
        self.mix_changed = False
        self.alloc_changed = True
        self.alloc_version = 0  # counts allocation changes
        self.done = 0
        self.events = 0
        self.acc = {"busy": 0.0, "down": 0.0, "idle": 0.0}
        self.frag_acc = 0.0
        self.frag_now = 0.0
        self.counts_log: list = []
        self.tier_log: list = []
        self.failures_by = dict.fromkeys(COMPONENTS, 0)
        self.stats = {
            "schedule_passes": 0,
            "place_calls": 0,
            "schedule_s": 0.0,
            "reservations": 0,
            "backfilled": 0,
            "reevaluations": 0,
            "reevaluate_s": 0.0,
            "fabric_updates": 0,
            "fabric_update_s": 0.0,
            "unreachable_starts": 0,
        }
        self.fabric_version = 0  # counts link failures and repairs
        self.progress = None
        self.failing = FailureProcesses(fabric, model, self.gpn, seed)
        self.down_mask = np.zeros(self.num_gpus, dtype=bool)
        self.cut = np.zeros(self.num_gpus, dtype=bool)  # GPUs cut off the scale-out network
        self.repair_at: dict[tuple[str, int], float] = {}
        self.predictor = None if predictor is None else PredictedFailures(predictor, self)
        for kind in self.failing.rng:
            if self.predictor is not None and kind in self.predictor.classes:
                self.predictor.start(kind)  # draws its failures ahead of the alarms
            else:
                self._push_next_failure(kind)
        for job in self.jobs:
            self._push(job.spec.arrival_s, ev.ARRIVE, job.key)
            job.log.append((0.0, PENDING, 0, math.nan))

    # ------------------------------------------------------------------ failures
    def _push_next_failure(self, kind: str) -> None:
        when, index = self.failing.draw(kind, self.t)
        self._push(when, ev.FAIL, kind, index)

    def _component_fails(self, kind: str, index: int) -> None:
        if self.failing.active[kind][index]:
            return  # already down: a failed component does not fail again (thinning)
        self.failures_by[kind] += 1
        gpus, links = self.failing.take_down(kind, index)
        self._apply_health(links.size > 0)
        assert self.model is not None
        self.repair_at[(kind, index)] = self.t + self.model.mttr_s[kind]
        self._push(self.t + self.model.mttr_s[kind], ev.REPAIR, kind, index)

    def _repair(self, kind: str, index: int) -> None:
        self.repair_at.pop((kind, index), None)
        _, links = self.failing.bring_up(kind, index)
        self._apply_health(links.size > 0)

    def _apply_health(self, links_changed: bool) -> None:
        """Bring the state, the jobs and the fabric in line with the down counters."""
        if links_changed:
            self.cut = self.failing.cut_off()  # GPUs left without a working uplink
        down = (self.failing.gpu_down > 0) | self.cut
        if self.predictor is not None:  # drained after an alarm, unless a job still writes there
            down |= (self.failing.gpu_drain > 0) & ~self.predictor.protected
        newly_down = np.flatnonzero(down & ~self.down_mask)
        newly_up = np.flatnonzero(~down & self.down_mask)
        self.down_mask = down
        if newly_down.size:
            hit = self.state.set_down(newly_down)
            for key in sorted(int(k) for k in np.atleast_1d(hit)):
                self._interrupt(self.jobs[key], reason="failed")
            self._allocation_changed()
        if newly_up.size:
            self.state.set_up(newly_up)
            self._allocation_changed()
        if links_changed and self.net is not None:  # without a network model: nothing to do
            began = time.perf_counter()
            self.fabric = self.failing.failed_fabric()
            self.fabric_version += 1
            cut_off = self.net.set_fabric(self.fabric)
            for key in sorted(int(k) for k in cut_off):  # GPUs that can no longer reach each other
                self._interrupt(self.jobs[key], reason="failed")
            self.mix_changed = True
            self.stats["fabric_updates"] += 1
            self.stats["fabric_update_s"] += time.perf_counter() - began

    def _traffic(self, job: JobRecord):
        """The job's traffic shape for the scheduler (network bytes per second, by
        dimension), computed once per job; ``None`` without a network model."""
        if self.net is None:
            return None
        if job.traffic is None:
            job.traffic = _interference.job_traffic_shape(
                job.spec, job.standalone, gpus_per_node=self.gpn
            )
        return job.traffic

    # ------------------------------------------------------------------ jobs
    def _push(self, when: float, kind: int, a, b=0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (when, kind, self.seq, a, b))

    def _log(self, job: JobRecord) -> None:
        count = 0 if job.gpus is None else int(job.gpus.size)
        step = job.step_s if job.state == RUNNING else math.nan
        job.log.append((self.t, job.state, count, step))

    def _allocation_changed(self) -> None:
        self.alloc_changed = True
        self.alloc_version += 1

    def _advance(self, job: JobRecord) -> None:
        """Progress of a running job from ``job.t_last`` to now (analytic checkpoints)."""
        dt = self.t - job.t_last
        job.t_last = self.t
        if job.state != RUNNING or dt <= 0:
            return
        if self.tau is None:
            work, commits, to_commit = dt, 0, 0.0
            job.pos += dt
        else:
            period = self.tau + self.delta
            end = job.pos + dt
            commits = math.floor(end / period)
            new_pos = max(0.0, end - commits * period)
            work = commits * self.tau + min(new_pos, self.tau) - min(job.pos, self.tau)
            to_commit = commits * self.tau - min(job.pos, self.tau)
            job.pos = new_pos
        steps = work / job.step_s
        if commits:
            job.committed = job.steps + to_commit / job.step_s
            self.progress_event = self.events
        job.steps += steps
        job.work_s += work
        job.steps_computed += steps

    def _finish_in(self, job: JobRecord) -> float:
        """Wall seconds from now until ``job`` reaches its target at its step time."""
        need = max(0.0, (job.target - job.steps) * job.step_s)
        return self._wall_for(need, job.pos)

    def _wall_for(self, work: float, pos: float) -> float:
        """Wall seconds to compute ``work`` seconds from segment position ``pos`` (with
        the checkpoint writes on the way; none after the last piece of work)."""
        if self.tau is None or work <= 0.0:
            return max(0.0, work)
        period = self.tau + self.delta
        if pos > self.tau:  # writing: the work resumes with the next segment
            lead, begin = period - pos, 0.0
        else:
            lead, begin = 0.0, pos
        total = begin + work  # work position counted from the segment start
        full = max(0, math.ceil(total / self.tau) - 1)  # whole segments (with writes) first
        return lead + full * period + (total - full * self.tau) - begin

    def _schedule_finish(self, job: JobRecord) -> None:
        job.version += 1
        job.expected_end_s = self.t + self._finish_in(job)
        self._push(job.expected_end_s, ev.FINISH, job.key, job.version)

    def _enqueue(self, job: JobRecord, reason: str) -> None:
        """``job`` waits in the queue from now, for ``reason`` (see :mod:`.run`)."""
        job.state = QUEUED
        job.queued_since = self.t
        job.wait_reason = reason
        job.expected_end_s = math.inf
        order = (-job.spec.priority, not job.requeued, job.spec.arrival_s)
        self.queue.add(job.key, order, job.spec.gpus)

    def _start(self, job: JobRecord, gpus: np.ndarray) -> None:
        self.queue.remove(job.key)
        self.state.allocate(job.key, gpus)
        self.holding.add(job.key)
        job.gpus = np.asarray(gpus, dtype=np.int64)
        job.requeued = False
        if job.queued_since is not None:
            job.waits.append((job.wait_reason, self.t - job.queued_since))
            job.queued_since = None
        self._allocation_changed()
        if job.start_s is None:
            job.start_s = self.t
        if job.needs_restart:
            job.needs_restart = False
            self._restart(job)
        else:
            self._run(job)

    def _restart(self, job: JobRecord) -> None:
        job.restarts += 1
        if self.policy.restart_s > 0:
            job.state = RESTARTING
            job.t_last = self.t
            job.version += 1
            restart_end = self.t + self.policy.restart_s
            job.expected_end_s = restart_end + self._wall_for(
                (job.target - job.steps) * job.standalone_s, 0.0
            )
            self._push(restart_end, ev.RESTARTED, job.key, job.version)
            self._log(job)
        else:
            self._run(job)

    def _run(self, job: JobRecord) -> None:
        job.state = RUNNING
        job.t_last = self.t
        job.pos = 0.0
        job.step_s = job.standalone_s
        if self.net is not None:
            assert job.gpus is not None  # placed by _start or kept through a restart
            try:
                self.net.add(job.key, job.spec, job.standalone, job.gpus)
            except RoutingError:
                self._unreachable(job)
                return
        self.mix_changed = True
        self._schedule_finish(job)
        self._log(job)

    def _release(self, job: JobRecord) -> None:
        """``job`` gives its GPUs back (it is done or goes back to the queue)."""
        self.state.release(job.key)
        self.holding.discard(job.key)
        job.gpus = None
        self._allocation_changed()

    def _unreachable(self, job: JobRecord) -> None:
        """The job's GPUs cannot all reach each other over the surviving links (up/down
        routing has no detour around these failures), so it cannot run there: it goes
        back to the queue, keeps its progress, and is not placed again until the fabric or
        the allocation changes (a repair, a failure, a job starting or ending), since the
        same state would give the same placement."""
        self._release(job)
        job.requeued = True
        job.needs_restart = job.restarts > 0 or job.failures > 0 or job.preemptions > 0
        self._enqueue(job, "unreachable")
        job.blocked_on = (self.fabric_version, self.alloc_version)
        self.stats["unreachable_starts"] += 1
        self._log(job)

    def _stop_running(self, job: JobRecord) -> None:
        if job.state in (RUNNING, CHECKPOINTING) and self.net is not None:
            self.net.remove(job.key)
            self.mix_changed = True

    def _interrupt(self, job: JobRecord, *, reason: str) -> None:
        """A failure hit ``job`` (``reason`` ``failed``) or it was ``preempted``: back to
        its last checkpoint, then to spare nodes (a failure) or to the queue."""
        if job.state not in (RUNNING, RESTARTING, CHECKPOINTING):
            return
        if self.predictor is not None and job.gpus is not None:
            self.predictor.protected[job.gpus] = False
        self._advance(job)
        if job.state == RUNNING:
            job.lost_work_s += job.pos
        elif job.state == CHECKPOINTING:  # the proactive write is lost with the work before it
            job.lost_work_s += job.pos + (self.t - job.t_last)
        job.steps = job.committed
        job.pos = 0.0
        job.version += 1  # cancels its FINISH / RESTARTED / CHECKPOINTED event
        self._stop_running(job)
        if reason == "failed":
            job.failures += 1
        else:
            job.preemptions += 1
        if reason == "failed" and self._swap_to_spares(job):
            self._restart(job)
            return
        self._requeue(job, reason)

    def _requeue(self, job: JobRecord, reason: str) -> None:
        """``job`` gives its GPUs back and waits in the queue to restart from its last
        checkpoint (``reason``: why, see :mod:`.run`)."""
        self._release(job)
        job.requeued = True
        job.needs_restart = True
        self._enqueue(job, reason)
        self._log(job)

    def _swap_to_spares(self, job: JobRecord) -> bool:
        """Replace the job's nodes that lost GPUs (now DOWN) by hot spare nodes; False if
        it cannot (no spares, a job smaller than a node, nothing lost)."""
        if job.gpus is None or self.policy.spares == 0:
            return False
        return self._swap_nodes(job, job.gpus[self._out_of_service(job)])

    def _out_of_service(self, job: JobRecord) -> np.ndarray:
        """bool over ``job.gpus``: GPUs it lost (DOWN) or that an alarm drained."""
        assert job.gpus is not None
        out = ~np.isin(job.gpus, self.state.gpus_of(job.key))
        return out | (self.failing.gpu_drain[job.gpus] > 0)

    def _swap_nodes(self, job: JobRecord, lost: np.ndarray, *, idle_too: bool = False) -> bool:
        """Replace every node of ``job`` holding one of the GPUs ``lost`` by a hot spare
        node (and, with ``idle_too``, by a wholly free node when no spare is left); the
        job keeps its other GPUs and rank order. False if it cannot."""
        if job.gpus is None or job.gpus.size < self.gpn or lost.size == 0:
            return False
        node = job.gpus // self.gpn
        replace = np.isin(node, np.unique(lost // self.gpn))
        count = int(replace.sum())
        spare = self.state.take_spare(count) if self.policy.spares else None
        if spare is None and idle_too:
            spare = self._idle_nodes(count)
        if spare is None:
            return False
        gpus = job.gpus.copy()
        gpus[replace] = np.asarray(spare, dtype=np.int64)[:count]
        self.state.release(job.key)
        self.state.allocate(job.key, gpus)
        job.gpus = gpus
        self._allocation_changed()
        return True

    def _idle_nodes(self, count: int) -> np.ndarray | None:
        """``count`` GPUs of wholly free nodes (the highest ids first), or None."""
        whole = np.flatnonzero(self.state.whole_free_servers())[::-1]
        need = -(-count // self.gpn)
        if whole.size < need:
            return None
        return (whole[:need, None] * self.gpn + np.arange(self.gpn)).ravel()[:count]

    def _replenish_spares(self) -> None:
        want = self.policy.spares
        if want == 0:
            return
        have = self.state.num_spare // self.gpn
        if have >= want:
            return
        whole = np.flatnonzero(self.state.whole_free_servers())
        take = whole[::-1][: want - have]  # the highest node ids: low ones stay for jobs
        if take.size:
            gpus = (take[:, None] * self.gpn + np.arange(self.gpn)).ravel()
            self.state.reserve_spares(np.sort(gpus))
            self._allocation_changed()

    # ------------------------------------------------------------------ scheduling
    def _schedule(self) -> None:
        if not len(self.queue):
            return
        began = time.perf_counter()
        self.stats["schedule_passes"] += 1
        jobs = self.jobs
        free = self.state.num_free
        lowest = self._lowest_running()
        smallest_failed = math.inf
        sizes_left = SizesLeft(self.queue.sizes)
        load = None
        reserved: tuple[float, np.ndarray] | None = None  # (shadow time, GPUs)
        blocked = False  # a job that cannot start stands in the way (backfill "none")
        for key in self.queue:  # a snapshot: starts and preemptions change the queue
            job = jobs[key]
            size = job.spec.gpus
            sizes_left.passed(size)
            preempt = job.spec.priority > lowest
            if not preempt and (blocked or free == 0):
                break  # priority order: no job behind this one can preempt either
            if job.blocked_on == (self.fabric_version, self.alloc_version):  # nothing changed
                continue
            if not preempt and size >= smallest_failed:
                if sizes_left.smallest >= smallest_failed:
                    break  # every job left is at least as large as one that did not fit
                continue
            request = self.Request(key, size, job.spec.priority, self._traffic(job))
            gpus = None
            if size <= free:
                if load is None and self.net is not None:
                    load = self.net.link_load(fresh=False)
                gpus = self._place(job, request, load, reserved)
            if gpus is None and preempt:
                gpus = self._preempt_for(job, request)
                if gpus is not None:
                    lowest = self._lowest_running()
            if gpus is None:
                smallest_failed = min(smallest_failed, size)
                if self.backfill == "none":
                    blocked = True
                elif self.backfill == "easy" and reserved is None:
                    reserved = self._reserve(request)
                continue
            self._start(job, np.asarray(gpus, dtype=np.int64))
            free = self.state.num_free
            load = None
        self.stats["schedule_s"] += time.perf_counter() - began

    def _place(self, job: JobRecord, request, load, reserved) -> np.ndarray | None:
        """A placement for ``job`` now that does not delay the reservation ``reserved``:
        anywhere if it is expected to end by the shadow time, else off the reserved GPUs."""
        self.stats["place_calls"] += 1
        if reserved is None or self.t + self._expected_run_s(job) <= reserved[0]:
            gpus = self.scheduler.place(self.state, request, load)
        else:
            gpus = place_without(self.scheduler, self.state, request, load, reserved[1])
        if gpus is not None and reserved is not None:
            self.stats["backfilled"] += 1
        return gpus

    def _preempt_for(self, job: JobRecord, request) -> np.ndarray | None:
        """Preempt lower-priority jobs so that ``job`` can start (the scheduler's
        ``victims``), and place it; None when no set of victims makes room."""
        running = {
            k: self.jobs[k].spec.priority
            for k in self.holding
            if self.jobs[k].spec.priority < job.spec.priority
        }
        victims = self.scheduler.victims(self.state, request, running)
        for victim in victims:
            self._interrupt(self.jobs[int(victim)], reason="preempted")
        if not victims:
            return None
        load = None if self.net is None else self.net.link_load(fresh=False)
        self.stats["place_calls"] += 1
        return self.scheduler.place(self.state, request, load)

    def _expected_run_s(self, job: JobRecord) -> float:
        """Wall seconds ``job`` is expected to hold GPUs if it starts now: its remaining
        steps at its standalone step time, with checkpoint writes and a restart if due."""
        work = (job.target - job.steps) * job.standalone_s
        return self._wall_for(work, 0.0) + (self.policy.restart_s if job.needs_restart else 0.0)

    def _reserve(self, request) -> tuple[float, np.ndarray] | None:
        """The head job's reservation (shadow time, GPUs) from the expected ends of the
        jobs holding GPUs and the repairs of failed GPUs (:func:`~.backfill.reservation`)."""
        jobs = self.jobs
        releases: list[tuple[float, str, object, int]] = [
            (jobs[k].expected_end_s, "job", k, jobs[k].spec.gpus)
            for k in self.holding
            if math.isfinite(jobs[k].expected_end_s)
        ]
        owner = self.state.owner
        for record, when in self.repair_at.items():
            gpus = self.failing.records[record][0]
            if gpus.size:
                releases.append((when, "gpus", gpus, int(np.count_nonzero(owner[gpus] == DOWN))))
        self.stats["reservations"] += 1
        return reservation(self.scheduler, self.state, request, releases)

    def _lowest_running(self) -> float:
        """The lowest priority among jobs holding GPUs (inf when none): only a job above
        it may preempt."""
        return min((self.jobs[k].spec.priority for k in self.holding), default=math.inf)

    # ------------------------------------------------------------------ step times
    def _reevaluate(self) -> None:
        running = [self.jobs[k] for k in sorted(self.holding) if self.jobs[k].state == RUNNING]
        if self.net is not None:
            began = time.perf_counter()
            times = self.net.step_times() if running else {}
            self.stats["reevaluations"] += 1
            self.stats["reevaluate_s"] += time.perf_counter() - began
            self._log_tiers()
        else:
            times = {}
        for job in running:
            new = float(times.get(job.key, job.standalone_s))
            if new != job.step_s:
                if not (math.isfinite(new) and new > 0):
                    raise SolverError(f"step time of job {job.spec.id!r} is {new!r}")
                self._advance(job)
                job.step_s = new
                self._schedule_finish(job)
                self._log(job)

    def _log_tiers(self) -> None:
        """Offered load / working capacity of each link kind, now (for the timeline)."""
        kinds = len(self.base.link_kinds)
        if kinds == 0 or self.net is None:
            return
        offered = self.net.kind_load(self._link_kind, kinds)
        if self._tier_fabric is not self.fabric:  # per-kind capacity of the current fabric
            self._tier_fabric = self.fabric
            self._tier_capacity = np.bincount(
                self._link_kind, weights=self.fabric.capacity, minlength=kinds
            )
        capacity = self._tier_capacity
        ratio = np.where(capacity > 0, offered / np.maximum(capacity, 1e-300), np.nan)
        self.tier_log.append((self.t, ratio))

    # ------------------------------------------------------------------ main loop
    def _account(self, until: float) -> None:
        dt = until - self.t
        if dt > 0:
            state = self.state
            self.acc["busy"] += state.num_busy * dt
            self.acc["down"] += state.num_down * dt
            self.acc["idle"] += (self.num_gpus - state.num_busy - state.num_down) * dt
            self.frag_acc += self.frag_now * dt
        self.t = until

    def _snapshot(self) -> None:
        state = self.state
        self.counts_log.append((self.t, state.num_busy, state.num_down, state.num_spare))
        self.frag_now = state.fragmentation()

    def _refuse_hopeless_jobs(self) -> None:
        """Refuse a job whose failures come faster than it can restart and reach a
        checkpoint (expected slowdown over :data:`NO_PROGRESS_SLOWDOWN`): without a
        horizon the simulation would fail and restart it for ever."""
        assert self.model is not None
        for job in self.jobs:
            mtbf = job_mtbf(job.spec.gpus, self.gpn, self.model)
            work = job.target * job.standalone_s  # co-located slowdowns only make it worse
            log_slowdown = log_failure_slowdown(work, mtbf, self.policy)
            if log_slowdown > math.log(NO_PROGRESS_SLOWDOWN):
                piece = (
                    f"checkpoints every {self.policy.interval_s:g} s (+ {self.policy.write_s:g} s "
                    "to write)"
                    if self.policy.interval_s is not None
                    else f"no checkpoints: all {work:.3g} s of its work in one piece"
                )
                raise SpecError(
                    f"jobs[{job.key}] (id {job.spec.id!r})",
                    f"makes practically no progress: its MTBF is {mtbf:.3g} s ({job.spec.gpus} "
                    f"GPUs) against a restart of {self.policy.restart_s:g} s and {piece}, "
                    f"so it would take about 10^{log_slowdown / math.log(10):.0f} times its "
                    "failure-free time; checkpoint more often (--checkpoint-interval), "
                    "raise the MTBFs (--mtbf) or give a --horizon",
                )

    def _stalled(self) -> bool:
        """No job has committed a checkpoint or finished for :data:`STALL_EVENTS` events,
        with every running job's progress brought up to date."""
        if self.events - self.progress_event <= STALL_EVENTS:
            return False
        for job in self.jobs:
            if job.state == RUNNING:
                self._advance(job)  # commits are counted lazily: bring them up to date
        return self.events - self.progress_event > STALL_EVENTS

    def run(self) -> None:
        self._replenish_spares()
        self._snapshot()
        total = len(self.jobs)
        # with a horizon, failures and repairs go on after the last job (GPU-seconds down)
        while self.heap and (self.done < total or self.horizon is not None):
            when = self.heap[0][0]
            if self.horizon is not None and when > self.horizon:
                break
            self._account(when)
            while self.heap and self.heap[0][0] == when:
                _, kind, _, a, b = heapq.heappop(self.heap)
                self.events += 1
                self._handle(kind, a, b)
            if self.alloc_changed:
                self._replenish_spares()
            self._schedule()
            if self.mix_changed:
                self.mix_changed = False
                self._reevaluate()
            if self.alloc_changed:
                self.alloc_changed = False
                self._snapshot()
            if self.horizon is None and self.done < total and self._stalled():
                raise SolverError(
                    f"no progress: in the last {STALL_EVENTS:,} events (to t = {self.t:.3g} s) "
                    f"no job committed a checkpoint or finished, {total - self.done} jobs "
                    "unfinished; their failures come faster than they can restart and "
                    "checkpoint (raise the MTBFs or checkpoint more often) or give a horizon"
                )
            if self.events > self.max_events:
                raise SolverError(
                    f"more than {self.max_events:,} events at t = {self.t:.3g} s with "
                    f"{total - self.done} jobs unfinished; give a horizon"
                )
            if self.progress is not None:
                self.progress(self.t, self.done, total)
        if self.done < total and self.horizon is None and not self.heap:
            raise SolverError("the simulation stalled: jobs wait but nothing can free GPUs")
        end = self.horizon if self.horizon is not None else self.t
        self._account(end)
        for job in self.jobs:
            if job.state == RUNNING:
                self._advance(job)
        self.horizon_s = end

    def _handle(self, kind: int, a, b) -> None:
        if kind == ev.ARRIVE:
            job = self.jobs[a]
            self._enqueue(job, "submitted")
            self._log(job)
        elif kind == ev.FINISH:
            job = self.jobs[a]
            if job.version != b or job.state != RUNNING:
                return
            self._advance(job)
            job.steps = float(job.target)
            job.committed = job.steps
            self._stop_running(job)
            job.state = DONE
            job.end_s = self.t
            self.progress_event = self.events
            self._release(job)
            self.done += 1
            self._log(job)
        elif kind == ev.RESTARTED:
            job = self.jobs[a]
            if job.version == b and job.state == RESTARTING:
                self._run(job)
        elif kind == ev.FAIL:
            self._push_next_failure(a)
            self._component_fails(a, b)
        elif kind == ev.REPAIR:
            self._repair(a, b)
        else:
            assert self.predictor is not None, kind
            self.predictor.handle(kind, a, b)

    # ------------------------------------------------------------------ outputs
    def result(self, points: int) -> ClusterRun:
        end = self.horizon_s
        rows = [self._job_row(job) for job in self.jobs]
        total = self.num_gpus * end
        started = [row for row in rows if row["start_s"] is not None]
        weights = np.array([row["gpus"] * (row["end_s"] - row["start_s"]) for row in started])
        useful = np.array(
            [row["gpus"] * row["steps_done"] * row["standalone_step_s"] for row in started]
        )
        cluster = {
            "utilization": self.acc["busy"] / total if total > 0 else 0.0,
            "goodput": float(useful.sum() / weights.sum()) if weights.sum() > 0 else None,
            "failures": int(sum(self.failures_by.values())),
            "failures_by_component": dict(self.failures_by),
            "fragmentation": self.frag_acc / end if end > 0 else self.frag_now,
            "queue_wait_s": wait_summary(self.jobs, end),
            "preemptions": int(sum(job.preemptions for job in self.jobs)),
            "gpu_seconds": {**self.acc, "total": total},
            "horizon_s": end,
            "gpus": self.num_gpus,
            "jobs": len(rows),
            "jobs_done": self.done,
            "events": self.events,
            "stats": dict(self.stats),
        }
        if self.predictor is not None:
            cluster["prediction"] = self.predictor.report()
        if self.net is not None and isinstance(getattr(self.net, "stats", None), dict):
            cluster["stats"]["interference"] = dict(self.net.stats)
        settings = {
            "fabric": self.base.name,
            "scheduler": getattr(self.scheduler, "name", type(self.scheduler).__name__),
            "backfill": self.backfill,
            "interference": self.use_net,
            "failures": None
            if self.model is None
            else {"mtbf_s": dict(self.model.mtbf_s), "mttr_s": dict(self.model.mttr_s)},
            "prediction": None if self.predictor is None else self.predictor.settings(),
            "checkpoint": dataclasses.asdict(self.policy),
            "horizon_s": self.horizon,
            "seed": self.seed,
        }
        timeline = timeline_dataset(
            self.jobs,
            self.counts_log,
            self.tier_log,
            list(self.base.link_kinds),
            end,
            self.num_gpus,
            points,
            {
                "gpus_total": self.num_gpus,
                "fabric": self.base.name,
                "scheduler": getattr(self.scheduler, "name", ""),
            },
        )
        return ClusterRun(rows, cluster, timeline, settings)

    def _job_row(self, job: JobRecord) -> dict:
        mtbf = None
        best = None
        if self.model is not None:
            mtbf = job_mtbf(job.spec.gpus, self.gpn, self.model)
            if math.isfinite(mtbf) and self.policy.write_s > 0:
                best = young_daly_interval(self.policy.write_s, mtbf)
            if not math.isfinite(mtbf):
                mtbf = None
        return job_row(job, self.horizon_s, mtbf, best)


# state codes re-exported for readers of the timeline (``fabricflow.cluster.simulate``)
__all__ += [
    "CHECKPOINTING",
    "DONE",
    "DOWN",
    "FREE",
    "PENDING",
    "QUEUED",
    "RESTARTING",
    "RUNNING",
    "SPARE",
]
