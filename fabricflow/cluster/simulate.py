"""The event-driven cluster simulator: :func:`simulate_cluster` -> :class:`~.records.ClusterRun`.

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
advanced lazily (only when their step time changes or they are touched). The simulator
(:class:`_Simulator`: its state and the event loop) holds its other concerns as parts,
one module each: :mod:`.job_lifecycle` (moving jobs between states),
:mod:`.checkpoint_clock` (analytic checkpoints), :mod:`.failure_handling` (failures,
repairs, spare nodes), :mod:`.scheduling_pass` (starting queued jobs; the queue and its
backfill policies are :mod:`.backfill`), :mod:`.accounting` (GPU-seconds and the
timeline's logs) and :mod:`.prediction`.

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
from fabricflow.cluster.accounting import Accounting
from fabricflow.cluster.backfill import JobQueue, check_backfill
from fabricflow.cluster.failure_events import FailureProcesses
from fabricflow.cluster.failure_handling import FailureHandling, refuse_hopeless_jobs
from fabricflow.cluster.failures import (
    CheckpointPolicy,
    FailureModel,
    failure_model,
    job_mtbf,
    young_daly_interval,
)
from fabricflow.cluster.job_lifecycle import JobLifecycle
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
)
from fabricflow.cluster.scheduling_pass import SchedulingPass
from fabricflow.cluster.standalone import standalone_step
from fabricflow.cluster.state import DOWN, FREE, SPARE, ClusterState
from fabricflow.cluster.trace import load_trace
from fabricflow.collective.structure_cache import fabric_fingerprint
from fabricflow.errors import SolverError, SpecError
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
    _check_run_options(seed, interference, timeline_points)
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


def _check_run_options(seed, interference, timeline_points) -> None:
    """:class:`SpecError` naming the first of :func:`simulate_cluster`'s ``seed``,
    ``interference`` and ``timeline_points`` that is not what it must be."""
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
    """One simulation: its state (clock, jobs, queue, cluster state, network model) and
    the event loop (:meth:`run`, a heap of events ordered by time and kind,
    :mod:`.events`). Each other concern is a part it holds, one module each:
    :class:`~.job_lifecycle.JobLifecycle` (moving jobs between states),
    :class:`~.failure_handling.FailureHandling` (failures, repairs, spare nodes),
    :class:`~.scheduling_pass.SchedulingPass` (starting queued jobs),
    :class:`~.accounting.Accounting` (GPU-seconds and the timeline's logs) and, with a
    predictor, :class:`~.prediction.PredictedFailures`."""

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
        self.scheduler = _make_scheduler(scheduler, fabric)
        self.net = (
            _interference.Interference(fabric, routing=routing, seed=seed, calibration=calibration)
            if use_net
            else None
        )
        self.jobs = _job_records(fabric, specs, policy, routing, calibration)
        self.max_events = max(MAX_EVENTS, EVENTS_PER_JOB * len(self.jobs))
        if horizon is None and model is not None:
            refuse_hopeless_jobs(self.jobs, model, policy, self.gpn, NO_PROGRESS_SLOWDOWN)
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
        self.accounting = Accounting(fabric)
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
        self.lifecycle = JobLifecycle(self)
        self.failure_handling = FailureHandling(self)
        self.scheduling = SchedulingPass(self)
        self.predictor = None if predictor is None else PredictedFailures(predictor, self)
        for kind in self.failing.rng:
            if self.predictor is not None and kind in self.predictor.classes:
                self.predictor.start(kind)  # draws its failures ahead of the alarms
            else:
                self.failure_handling.push_next_failure(kind)
        for job in self.jobs:
            self.push(job.spec.arrival_s, ev.ARRIVE, job.key)
            job.log.append((0.0, PENDING, 0, math.nan))

    # ------------------------------------------------------------------ event loop
    def push(self, when: float, kind: int, a, b=0) -> None:
        """Push an event of ``kind`` (:mod:`.events`) at ``when`` (s) with its arguments;
        equal times pop in kind order, then in push order."""
        self.seq += 1
        heapq.heappush(self.heap, (when, kind, self.seq, a, b))

    def run(self) -> None:
        """Handle the events in time order until every job is done (or the horizon), with
        a scheduling pass and, when the job mix changed, new step times after each
        instant; raises :class:`SolverError` when the run stalls or exceeds its events."""
        self.failure_handling.replenish_spares()
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
                self.failure_handling.replenish_spares()
            self.scheduling.run()
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
                self.lifecycle.advance(job)
        self.horizon_s = end

    def _handle(self, kind: int, a, b) -> None:
        """Handle one event of ``kind`` (:mod:`.events`) with its arguments ``a``, ``b``."""
        if kind == ev.ARRIVE:
            job = self.jobs[a]
            self.lifecycle.enqueue(job, "submitted")
            self.lifecycle.log(job)
        elif kind == ev.FINISH:
            job = self.jobs[a]
            if job.version != b or job.state != RUNNING:
                return
            self.lifecycle.advance(job)
            job.steps = float(job.target)
            job.committed = job.steps
            self.lifecycle.stop_running(job)
            job.state = DONE
            job.end_s = self.t
            self.progress_event = self.events
            self.lifecycle.release(job)
            self.done += 1
            self.lifecycle.log(job)
        elif kind == ev.RESTARTED:
            job = self.jobs[a]
            if job.version == b and job.state == RESTARTING:
                self.lifecycle.run(job)
        elif kind == ev.FAIL:
            self.failure_handling.push_next_failure(a)
            self.failure_handling.component_fails(a, b)
        elif kind == ev.REPAIR:
            self.failure_handling.repair(a, b)
        else:
            assert self.predictor is not None, kind
            self.predictor.handle(kind, a, b)

    def _stalled(self) -> bool:
        """No job has committed a checkpoint or finished for :data:`STALL_EVENTS` events,
        with every running job's progress brought up to date."""
        if self.events - self.progress_event <= STALL_EVENTS:
            return False
        for job in self.jobs:
            if job.state == RUNNING:
                self.lifecycle.advance(job)  # commits are counted lazily: bring them up to date
        return self.events - self.progress_event > STALL_EVENTS

    def _account(self, until: float) -> None:
        """Book the GPU-seconds from now to ``until``, then move the clock there."""
        self.accounting.account(self.state, until - self.t)
        self.t = until

    def _snapshot(self) -> None:
        """Log the GPU counts now (the allocation changed)."""
        self.accounting.snapshot(self.t, self.state)

    def allocation_changed(self) -> None:
        """Note that GPUs changed hands: spares, a snapshot and placements are due."""
        self.alloc_changed = True
        self.alloc_version += 1

    # ------------------------------------------------------------------ step times
    def _reevaluate(self) -> None:
        """New step times of the running jobs (one joint solve with the network model,
        else each at its standalone time); a job whose time changed is brought up to date
        and its finish rescheduled."""
        running = [self.jobs[k] for k in sorted(self.holding) if self.jobs[k].state == RUNNING]
        if self.net is not None:
            began = time.perf_counter()
            times = self.net.step_times() if running else {}
            self.stats["reevaluations"] += 1
            self.stats["reevaluate_s"] += time.perf_counter() - began
            self.accounting.log_tiers(self.t, self.net, self.fabric)
        else:
            times = {}
        for job in running:
            new = float(times.get(job.key, job.standalone_s))
            if new != job.step_s:
                if not (math.isfinite(new) and new > 0):
                    raise SolverError(f"step time of job {job.spec.id!r} is {new!r}")
                self.lifecycle.advance(job)
                job.step_s = new
                self.lifecycle.schedule_finish(job)
                self.lifecycle.log(job)

    # ------------------------------------------------------------------ outputs
    def result(self, points: int) -> ClusterRun:
        """The :class:`ClusterRun` of the finished run (a timeline of at most ``points``
        time points)."""
        end = self.horizon_s
        rows = [self._job_row(job) for job in self.jobs]
        cluster = {
            **self.accounting.summary(rows, self.jobs, end),
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
            self.accounting.counts_log,
            self.accounting.tier_log,
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
        """``job``'s result row, with its MTBF and Young-Daly checkpoint interval (s)
        under the failure model."""
        mtbf = None
        best = None
        if self.model is not None:
            mtbf = job_mtbf(job.spec.gpus, self.gpn, self.model)
            if math.isfinite(mtbf) and self.policy.write_s > 0:
                best = young_daly_interval(self.policy.write_s, mtbf)
            if not math.isfinite(mtbf):
                mtbf = None
        return job_row(job, self.horizon_s, mtbf, best)


def _make_scheduler(scheduler, fabric: Fabric):
    """The scheduler named ``scheduler`` for ``fabric``, or ``scheduler`` itself when it
    has the scheduler interface (``place``, ``victims``)."""
    if isinstance(scheduler, str):
        return _schedulers.make_scheduler(scheduler, fabric)
    if hasattr(scheduler, "place") and hasattr(scheduler, "victims"):
        return scheduler
    raise SpecError("scheduler", f"expected one of {list(_schedulers.SCHEDULERS)} or a Scheduler")


def _job_records(fabric: Fabric, specs, policy: CheckpointPolicy, routing, calibration) -> list:
    """A :class:`JobRecord` per spec with its standalone step time; every size is checked
    first, so that a job that can never run is refused before any step model. Raises
    :class:`SpecError` naming the job (``jobs[i] (id ...)``) and its field."""
    usable = _usable_gpus(fabric, policy)
    for key, spec in enumerate(specs):
        if spec.gpus > usable:
            raise SpecError(
                f"jobs[{key}] (id {spec.id!r}).gpus",
                f"{spec.gpus} GPUs is larger than the cluster's {usable} usable GPUs "
                f"({fabric.num_gpus} on {fabric.name}, less {policy.spares} spare nodes)",
            )
    fingerprint = fabric_fingerprint(fabric)
    jobs: list[JobRecord] = []
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
        jobs.append(
            JobRecord(key, spec, result.step_time_s, result, spec.target_steps(result.step_time_s))
        )
    return jobs


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
