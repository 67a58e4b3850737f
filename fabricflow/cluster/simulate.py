"""The event-driven cluster simulator: :func:`simulate_cluster` -> :class:`ClusterRun`.

Events (a heap ordered by time): job arrivals, job completions, restarts done, component
failures and repairs. Between two events every running job progresses at its current step
time; when the job mix or the fabric changes, the step times are re-evaluated (with
``interference=True`` by one joint max-min solve over every running job's flows, else
each job at its standalone step time). Checkpoints are analytic: a running job alternates
``interval_s`` of compute and ``write_s`` of writing, so its progress and last committed
step at any time follow from the time it has run (no event per checkpoint).

Per event the simulator does O(running jobs) Python work plus O(GPUs) numpy counts; jobs
are advanced lazily (only when their step time changes or they are touched).

GPU-second accounting: between consecutive events each GPU is busy (held by a job,
running or restarting), down (failed, waiting for repair) or idle (free or a hot spare),
so ``busy + idle + down == GPUs x horizon`` (:attr:`ClusterRun.cluster` ``gpu_seconds``).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import time
from collections.abc import Sequence

import numpy as np

from ..errors import RoutingError, SolverError, SpecError
from ..fabric.fabric import Fabric
from ..memory import check_memory
from ..workload.structure_cache import fabric_fingerprint
from . import interference as _interference
from . import schedulers as _schedulers
from . import state as _state
from .failures import (
    COMPONENTS,
    CheckpointPolicy,
    FailureModel,
    failure_model,
    job_mtbf,
    young_daly_interval,
)
from .jobspec import JobSpec, parse_duration
from .standalone import standalone_step
from .trace import load_trace

# Job state codes (timeline ``state``).
PENDING, QUEUED, RUNNING, RESTARTING, DONE = 0, 1, 2, 3, 4
STATE_NAMES = ("pending", "queued", "running", "restarting", "done")
# Event kinds, in the order they are handled at equal times.
_REPAIR, _FINISH, _RESTARTED, _FAIL, _ARRIVE = 0, 1, 2, 3, 4
MAX_EVENTS = 5_000_000
EVENTS_PER_JOB = 50  # the event bound grows with the trace: MAX_EVENTS or this per job
TIMELINE_POINTS = 2000
# At most this many (time, job) cells in the timeline: a trace of many jobs gets fewer time
# points (21 bytes a cell, twice over while the Dataset is built).
TIMELINE_CELLS = 10_000_000
# Measured bytes of simulator state per job (its record, event log and result row).
STATE_BYTES_PER_JOB = 6_000


@dataclasses.dataclass
class _Job:
    key: int
    spec: JobSpec
    standalone_s: float
    standalone: object
    target: int
    state: int = PENDING
    gpus: np.ndarray | None = None
    steps: float = 0.0  # progress (steps), including work not yet checkpointed
    committed: float = 0.0  # steps at the last completed checkpoint write
    pos: float = 0.0  # wall seconds into the current compute+write segment
    t_last: float = 0.0
    step_s: float = math.nan
    start_s: float | None = None
    end_s: float | None = None
    failures: int = 0
    restarts: int = 0
    preemptions: int = 0
    lost_work_s: float = 0.0
    work_s: float = 0.0  # wall seconds computing (lost work included)
    steps_computed: float = 0.0  # steps computed (lost ones included)
    version: int = 0
    requeued: bool = False
    needs_restart: bool = False
    log: list = dataclasses.field(default_factory=list)  # (t, state, gpus, step_s)
    traffic: object = None  # interference.JobTraffic, computed on first placement
    blocked_on: tuple = ()  # (fabric, allocation) versions when its GPUs could not reach each other


@dataclasses.dataclass
class ClusterRun:
    """Outcome of :func:`simulate_cluster` (SI units).

    Attributes:
        jobs: one dict per job, trace order: ``id``, ``start_s``, ``end_s`` (None if not
            started / the horizon for unfinished jobs), ``gpus``, ``steps`` (target),
            ``steps_done``, ``standalone_step_s``, ``mean_step_s`` (compute seconds per
            computed step), ``slowdown`` (mean / standalone), ``failures``, ``restarts``,
            ``preemptions``, ``lost_work_s``, ``goodput`` (``steps_done x
            standalone_step_s / (end_s - start_s)``), ``queue_wait_s``, ``state``,
            ``priority``, ``mtbf_s`` and ``best_checkpoint_interval_s`` (Daly, from the
            job's MTBF and the write time; None without failures or checkpoints).
        cluster: ``utilization`` (busy GPU-s / (GPUs x horizon)), ``goodput`` (GPU-
            weighted over started jobs), ``failures`` (total) and ``failures_by_component``,
            ``fragmentation`` (time mean of ``ClusterState.fragmentation()``),
            ``queue_wait_s`` (``p50``, ``p99`` over started jobs and, with their wait so far,
            jobs still queued at the end), ``gpu_seconds``
            (``busy``, ``idle``, ``down``, ``total``), ``horizon_s``, ``jobs_done``,
            ``events``, ``stats`` (counts and seconds of scheduling and re-evaluations).
        timeline: ``xarray.Dataset`` over (``time``, ``job``): ``state`` (codes in the
            ``state_names`` attribute), ``gpus``, ``step_time_s`` and ``slowdown`` (NaN
            when not running); over ``time``: ``gpu_busy``, ``gpu_down``, ``gpu_spare``,
            ``gpu_idle``, ``utilization``; over (``time``, ``tier``): ``tier_utilization``
            (offered load / working capacity of each link kind, with interference).
        settings: scheduler, interference, failures, checkpoint, seed, fabric.
    """

    jobs: list[dict]
    cluster: dict
    timeline: object
    settings: dict

    def to_json(self) -> dict:
        """``{"jobs": [...], "cluster": {...}, "settings": {...}}`` (JSON-able)."""
        return {"jobs": self.jobs, "cluster": self.cluster, "settings": self.settings}

    def summary(self) -> str:
        """A text table: one line per job, then the cluster figures."""
        header = (
            f"{'job':>16} {'gpus':>5} {'start_h':>8} {'end_h':>8} {'steps':>8} "
            f"{'slowdown':>8} {'fail':>4} {'restart':>7} {'lost_h':>7} {'goodput':>7}"
        )
        lines = [header]

        def hours(value):
            return "-" if value is None else f"{value / 3600:.2f}"

        for job in self.jobs:
            slowdown = "-" if job["slowdown"] is None else f"{job['slowdown']:.3f}"
            goodput = "-" if job["goodput"] is None else f"{job['goodput']:.3f}"
            lines.append(
                f"{job['id'][:16]:>16} {job['gpus']:>5} {hours(job['start_s']):>8} "
                f"{hours(job['end_s']):>8} {job['steps_done']:>8} {slowdown:>8} "
                f"{job['failures']:>4} {job['restarts']:>7} "
                f"{job['lost_work_s'] / 3600:>7.2f} {goodput:>7}"
            )
        c = self.cluster
        wait = c["queue_wait_s"]
        lines.append(
            f"cluster: utilization {c['utilization']:.3f}  goodput "
            f"{_fmt(c['goodput'])}  failures {c['failures']}  fragmentation "
            f"{_fmt(c['fragmentation'])}  queue wait p50 {_fmt(wait['p50'])} s "
            f"p99 {_fmt(wait['p99'])} s  jobs done {c['jobs_done']}/{len(self.jobs)}"
        )
        return "\n".join(lines)


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3g}"


def simulate_cluster(
    fabric: Fabric,
    trace,
    *,
    scheduler="topology",
    failures=None,
    checkpoint: CheckpointPolicy | None = None,
    horizon: float | str | None = None,
    seed: int = 0,
    interference: bool = True,
    routing: str = "auto",
    timeline_points: int = TIMELINE_POINTS,
    progress=None,
) -> ClusterRun:
    """Simulate a trace of training jobs on ``fabric``.

    Args:
        fabric: the cluster's network (:func:`fabricflow.load_fabric`).
        trace: a trace path (YAML/CSV), a list of rows or of :class:`JobSpec`
            (:func:`load_trace`, :func:`synthetic_trace`).
        scheduler: ``first-fit``, ``packed``, ``topology`` or ``block``, or an object
            with the scheduler interface (``place``, ``victims``).
        failures: None (no failures), ``"default"`` (the published MTBFs of
            docs/cluster.md), ``{component: MTBF}`` or a :class:`FailureModel`.
        checkpoint: the :class:`CheckpointPolicy` (default: no checkpoints, instant
            restart, no spares).
        horizon: stop time (seconds or ``"30d"``); None runs until every job is done.
        seed: seed of the failure processes (and the interference model's routes).
        interference: True: step times from one joint max-min solve over the running
            jobs' flows (``fabricflow.cluster.interference``); False: every job at its
            standalone step time (no contention model).
        routing: routing of the flows of the step-time models.
        timeline_points: at most this many time points in the timeline Dataset (all
            event times when fewer, else a regular grid).
        progress: optional callable ``progress(t_s, jobs_done, jobs_total)``, called after
            every event (it may raise to stop the run).

    Returns:
        :class:`ClusterRun`.

    Raises:
        SpecError: a bad trace (row and field named), a bad option, or a job that can
            never fit (larger than the GPUs left after the spares).
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
    if horizon is not None:
        horizon = parse_duration(horizon, "horizon", allow_zero=False)
    usable = _usable_gpus(fabric, policy)
    specs = trace if _all_jobspecs(trace) else load_trace(trace, fabric=fabric, usable_gpus=usable)
    if not specs:
        raise SpecError("trace", "holds no jobs")
    check_memory(
        estimated_run_bytes(len(specs), int(timeline_points)),
        f"simulating a trace of {len(specs):,} jobs",
        hint="simulate fewer jobs (or a shorter horizon of the trace)",
    )
    sim = _Simulator(
        fabric, specs, scheduler, model, policy, horizon, int(seed), bool(interference), routing
    )
    sim.progress = progress
    sim.run()
    return sim.result(timeline_points_for(len(specs), int(timeline_points)))


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
    def __init__(self, fabric, specs, scheduler, model, policy, horizon, seed, use_net, routing):
        self.fabric = fabric
        self.base = fabric
        self.model: FailureModel | None = model
        self.policy: CheckpointPolicy = policy
        self.horizon = horizon
        self.seed = seed
        self.use_net = use_net
        self.num_gpus = fabric.num_gpus
        self.gpn = max(1, int(fabric.gpus_per_node))
        self.state = _state.ClusterState(fabric)
        self.codes = (_state.FREE, _state.DOWN, _state.SPARE)
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
            _interference.Interference(fabric, routing=routing, seed=seed) if use_net else None
        )
        # links grouped by kind once, for the per-tier utilization of the timeline
        kinds = fabric.link_kind_id.astype(np.int64)
        self._kind_order = np.argsort(kinds, kind="stable")
        present, self._kind_starts = np.unique(kinds[self._kind_order], return_index=True)
        self._kind_present = present
        self._tier_fabric: Fabric | None = None
        self._tier_capacity = np.zeros(present.size)
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
        self.jobs: list[_Job] = []
        for key, spec in enumerate(specs):
            try:
                result = standalone_step(fabric, spec, fingerprint=fingerprint, routing=routing)
            except SpecError as error:
                raise SpecError(
                    f"jobs[{key}] (id {spec.id!r}).{error.field or 'layout'}",
                    str(error).split(": ", 1)[-1],
                ) from None
            self.jobs.append(
                _Job(key, spec, result.step_time_s, result, spec.target_steps(result.step_time_s))
            )
        self.max_events = max(MAX_EVENTS, EVENTS_PER_JOB * len(self.jobs))
        self.tau = policy.interval_s
        self.delta = policy.write_s if self.tau is not None else 0.0
        self.heap: list = []
        self.seq = 0
        self.t = 0.0
        self.queue: list[int] = []
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
            "reevaluations": 0,
            "reevaluate_s": 0.0,
            "fabric_updates": 0,
            "fabric_update_s": 0.0,
            "unreachable_starts": 0,
        }
        self.fabric_version = 0  # counts link failures and repairs
        self.progress = None
        self._setup_failures()
        for job in self.jobs:
            self._push(job.spec.arrival_s, _ARRIVE, job.key)
            job.log.append((0.0, PENDING, 0, math.nan))

    # ------------------------------------------------------------------ failures
    def _setup_failures(self) -> None:
        fabric = self.base
        self.gpu_down = np.zeros(self.num_gpus, dtype=np.int32)
        self.link_down = np.zeros(fabric.num_links, dtype=np.int32)
        self.down_mask = np.zeros(self.num_gpus, dtype=bool)
        tier = fabric.node_tier
        src_tier, dst_tier = tier[fabric.link_src], tier[fabric.link_dst]
        switch_links = (src_tier >= 1) & (dst_tier >= 1)
        self.cables = np.flatnonzero(switch_links & (fabric.link_src < fabric.link_dst))
        self.switches = np.flatnonzero(tier >= 1)
        # each GPU's scale-out uplinks (GPU node -> a tier >= 1 switch)
        gpu_of_node = np.full(fabric.num_nodes, -1, dtype=np.int64)
        gpu_of_node[fabric.gpu_node] = np.arange(self.num_gpus)
        uplink = (gpu_of_node[fabric.link_src] >= 0) & (dst_tier >= 1)
        self.uplinks = np.flatnonzero(uplink)
        self.uplink_gpu = gpu_of_node[fabric.link_src[self.uplinks]]
        self.has_uplink = np.bincount(self.uplink_gpu, minlength=self.num_gpus) > 0
        # reverse direction of every cable (same endpoints)
        key = fabric.link_src.astype(np.int64) * fabric.num_nodes + fabric.link_dst
        order = np.argsort(key, kind="stable")
        rev_key = (
            fabric.link_dst[self.cables].astype(np.int64) * fabric.num_nodes
            + (fabric.link_src[self.cables])
        )
        where = np.searchsorted(key[order], rev_key)
        where = np.minimum(where, key.size - 1)
        found = key[order][where] == rev_key
        self.cable_reverse = np.where(found, order[where], -1)
        counts = {
            "gpu": self.num_gpus,
            "nic": self.num_gpus,
            "node": self.num_gpus // self.gpn,
            "link": int(self.cables.size),
            "switch": int(self.switches.size),
        }
        self.active = {kind: np.zeros(n, dtype=bool) for kind, n in counts.items()}
        self.records: dict = {}
        self.fail_rng = {}
        self.fail_count = counts
        if self.model is None:
            return
        streams = np.random.SeedSequence(self.seed).spawn(len(COMPONENTS))
        for kind, stream in zip(COMPONENTS, streams, strict=True):
            if kind in self.model.mtbf_s and counts[kind] > 0:
                self.fail_rng[kind] = np.random.default_rng(stream)
                self._next_failure(kind, 0.0)

    def _next_failure(self, kind: str, now: float) -> None:
        rng = self.fail_rng[kind]
        rate = self.fail_count[kind] / self.model.mtbf_s[kind]  # type: ignore[union-attr]
        self._push(
            now + rng.exponential(1.0 / rate), _FAIL, kind, int(rng.integers(self.fail_count[kind]))
        )

    def _fail(self, kind: str, index: int) -> None:
        self._next_failure(kind, self.t)
        if self.active[kind][index]:
            return  # already down: a failed component does not fail again (thinning)
        self.active[kind][index] = True
        self.failures_by[kind] += 1
        gpus = np.empty(0, dtype=np.int64)
        links = np.empty(0, dtype=np.int64)
        if kind in ("gpu", "nic"):
            gpus = np.array([index], dtype=np.int64)
        elif kind == "node":
            gpus = np.arange(index * self.gpn, (index + 1) * self.gpn, dtype=np.int64)
        elif kind == "link":
            cable = self.cables[index]
            links = np.array([cable, self.cable_reverse[index]], dtype=np.int64)
            links = links[links >= 0]
        else:
            node = self.switches[index]
            links = np.flatnonzero(
                (self.base.link_src == node) | (self.base.link_dst == node)
            ).astype(np.int64)
        self.records[(kind, index)] = (gpus, links)
        np.add.at(self.gpu_down, gpus, 1)
        np.add.at(self.link_down, links, 1)
        self._apply_health(links.size > 0)
        self._push(self.t + self.model.mttr_s[kind], _REPAIR, kind, index)  # type: ignore[union-attr]

    def _repair(self, kind: str, index: int) -> None:
        gpus, links = self.records.pop((kind, index))
        self.active[kind][index] = False
        np.subtract.at(self.gpu_down, gpus, 1)
        np.subtract.at(self.link_down, links, 1)
        self._apply_health(links.size > 0)

    def _apply_health(self, links_changed: bool) -> None:
        """Bring the state, the jobs and the fabric in line with the down counters."""
        down = self.gpu_down > 0
        if links_changed:
            up = self.link_down[self.uplinks] == 0
            reach = np.bincount(self.uplink_gpu[up], minlength=self.num_gpus) > 0
            down |= self.has_uplink & ~reach  # cut off from the scale-out network
        newly_down = np.flatnonzero(down & ~self.down_mask)
        newly_up = np.flatnonzero(~down & self.down_mask)
        self.down_mask = down
        if newly_down.size:
            hit = self.state.set_down(newly_down)
            for key in sorted(int(k) for k in np.atleast_1d(hit)):
                self._interrupt(self.jobs[key], failure=True)
            self.alloc_changed = True
            self.alloc_version += 1
        if newly_up.size:
            self.state.set_up(newly_up)
            self.alloc_changed = True
            self.alloc_version += 1
        if links_changed and self.net is not None:  # without a network model: nothing to do
            began = time.perf_counter()
            self.fabric = self._failed_fabric(self.link_down > 0)
            self.fabric_version += 1
            cut_off = self.net.set_fabric(self.fabric)
            for key in sorted(int(k) for k in cut_off):  # GPUs that can no longer reach each other
                self._interrupt(self.jobs[key], failure=True)
            self.mix_changed = True
            self.stats["fabric_updates"] += 1
            self.stats["fabric_update_s"] += time.perf_counter() - began

    def _failed_fabric(self, down: np.ndarray) -> Fabric:
        """The base fabric with the links ``down`` failed (as ``Fabric.without`` would:
        both directions are in ``down`` already, cables and switch links alike), without
        its search for reverse links over every link."""
        if not down.any():
            return self.base
        base = self.base
        return dataclasses.replace(
            base,
            capacity=np.where(down, 0.0, base.capacity),
            link_up=base.link_up & ~down,
            meta={**base.meta, "failed_links": int(down.sum())},
        )

    def _traffic(self, job: _Job):
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

    def _log(self, job: _Job) -> None:
        count = 0 if job.gpus is None else int(job.gpus.size)
        step = job.step_s if job.state == RUNNING else math.nan
        job.log.append((self.t, job.state, count, step))

    def _advance(self, job: _Job) -> None:
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
        job.steps += steps
        job.work_s += work
        job.steps_computed += steps

    def _finish_in(self, job: _Job) -> float:
        """Wall seconds from now until ``job`` reaches its target at its step time."""
        need = max(0.0, (job.target - job.steps) * job.step_s)
        if self.tau is None or need <= 0.0:
            return need
        period = self.tau + self.delta
        if job.pos > self.tau:  # writing: the work resumes with the next segment
            lead, begin = period - job.pos, 0.0
        else:
            lead, begin = 0.0, job.pos
        total = begin + need  # work position counted from the segment start
        full = max(0, math.ceil(total / self.tau) - 1)  # whole segments (with writes) first
        return lead + full * period + (total - full * self.tau) - begin

    def _schedule_finish(self, job: _Job) -> None:
        job.version += 1
        self._push(self.t + self._finish_in(job), _FINISH, job.key, job.version)

    def _start(self, job: _Job, gpus: np.ndarray) -> None:
        self.state.allocate(job.key, gpus)
        self.holding.add(job.key)
        job.gpus = np.asarray(gpus, dtype=np.int64)
        job.requeued = False
        self.alloc_changed = True
        self.alloc_version += 1
        if job.start_s is None:
            job.start_s = self.t
        if job.needs_restart:
            job.needs_restart = False
            self._restart(job)
        else:
            self._run(job)

    def _restart(self, job: _Job) -> None:
        job.restarts += 1
        if self.policy.restart_s > 0:
            job.state = RESTARTING
            job.t_last = self.t
            job.version += 1
            self._push(self.t + self.policy.restart_s, _RESTARTED, job.key, job.version)
            self._log(job)
        else:
            self._run(job)

    def _run(self, job: _Job) -> None:
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

    def _unreachable(self, job: _Job) -> None:
        """The job's GPUs cannot all reach each other over the surviving links (up/down
        routing has no detour around these failures), so it cannot run there: it goes
        back to the queue, keeps its progress, and is not placed again until the fabric or
        the allocation changes (a repair, a failure, a job starting or ending), since the
        same state would give the same placement."""
        self.state.release(job.key)
        self.holding.discard(job.key)
        job.gpus = None
        job.state = QUEUED
        job.requeued = True
        job.needs_restart = job.restarts > 0 or job.failures > 0 or job.preemptions > 0
        self.queue.append(job.key)
        self.alloc_changed = True
        self.alloc_version += 1
        job.blocked_on = (self.fabric_version, self.alloc_version)
        self.stats["unreachable_starts"] += 1
        self._log(job)

    def _stop_running(self, job: _Job) -> None:
        if job.state == RUNNING and self.net is not None:
            self.net.remove(job.key)
            self.mix_changed = True

    def _interrupt(self, job: _Job, *, failure: bool) -> None:
        """A failure hit ``job`` (or it was preempted): back to its last checkpoint."""
        if job.state not in (RUNNING, RESTARTING):
            return
        self._advance(job)
        job.lost_work_s += job.pos if job.state == RUNNING else 0.0
        job.steps = job.committed
        job.pos = 0.0
        job.version += 1  # cancels its FINISH / RESTARTED event
        self._stop_running(job)
        if failure:
            job.failures += 1
        else:
            job.preemptions += 1
        if failure and self._swap_to_spares(job):
            self._restart(job)
            return
        self.state.release(job.key)
        self.holding.discard(job.key)
        job.gpus = None
        job.state = QUEUED
        job.requeued = True
        job.needs_restart = True
        self.queue.append(job.key)
        self.alloc_changed = True
        self.alloc_version += 1
        self._log(job)

    def _swap_to_spares(self, job: _Job) -> bool:
        """Replace the job's nodes that lost GPUs by hot spare nodes; False if it cannot."""
        if self.policy.spares == 0 or job.gpus is None or job.gpus.size < self.gpn:
            return False
        held = self.state.gpus_of(job.key)
        lost = job.gpus[~np.isin(job.gpus, held)]
        if lost.size == 0:
            return False
        node = job.gpus // self.gpn
        replace = np.isin(node, np.unique(lost // self.gpn))
        spare = self.state.take_spare(int(replace.sum()))
        if spare is None:
            return False
        spare = np.asarray(spare, dtype=np.int64)
        gpus = job.gpus.copy()
        gpus[replace] = spare[: int(replace.sum())]
        self.state.release(job.key)
        self.state.allocate(job.key, gpus)
        job.gpus = gpus
        self.alloc_changed = True
        self.alloc_version += 1
        return True

    def _replenish_spares(self) -> None:
        want = self.policy.spares
        if want == 0:
            return
        free, _, spare_code = self.codes
        owner = self.state.owner
        have = int(np.count_nonzero(owner == spare_code)) // self.gpn
        if have >= want:
            return
        nodes = self.num_gpus // self.gpn
        whole = np.flatnonzero(
            (owner[: nodes * self.gpn].reshape(nodes, self.gpn) == free).all(axis=1)
        )
        take = whole[::-1][: want - have]  # the highest node ids: low ones stay for jobs
        if take.size:
            gpus = (take[:, None] * self.gpn + np.arange(self.gpn)).ravel()
            self.state.reserve_spares(np.sort(gpus))
            self.alloc_changed = True
            self.alloc_version += 1

    # ------------------------------------------------------------------ scheduling
    def _schedule(self) -> None:
        if not self.queue:
            return
        began = time.perf_counter()
        self.stats["schedule_passes"] += 1
        jobs = self.jobs
        pending = sorted(
            self.queue,
            key=lambda k: (-jobs[k].spec.priority, not jobs[k].requeued, jobs[k].spec.arrival_s, k),
        )
        self.queue = []  # victims preempted during this pass land here
        free_code = self.codes[0]
        free = int(np.count_nonzero(self.state.owner == free_code))
        lowest = self._lowest_running()
        smallest_failed = math.inf
        load = None
        waiting = []
        for key in pending:
            job = jobs[key]
            size = job.spec.gpus
            preempt = job.spec.priority > lowest
            if job.blocked_on == (self.fabric_version, self.alloc_version):  # nothing changed
                waiting.append(key)
                continue
            if size >= smallest_failed and not preempt:
                waiting.append(key)
                continue
            request = self.Request(key, size, job.spec.priority, self._traffic(job))
            gpus = None
            if size <= free:
                if load is None and self.net is not None:
                    load = self.net.link_load()
                self.stats["place_calls"] += 1
                gpus = self.scheduler.place(self.state, request, load)
            if gpus is None and preempt:
                running = {
                    k: jobs[k].spec.priority
                    for k in self.holding
                    if jobs[k].spec.priority < job.spec.priority
                }
                victims = self.scheduler.victims(self.state, request, running)
                for victim in victims:
                    self._interrupt(jobs[int(victim)], failure=False)
                if victims:
                    free = int(np.count_nonzero(self.state.owner == free_code))
                    load = None if self.net is None else self.net.link_load()
                    self.stats["place_calls"] += 1
                    gpus = self.scheduler.place(self.state, request, load)
                    lowest = self._lowest_running()
            if gpus is None:
                smallest_failed = min(smallest_failed, size)
                waiting.append(key)
                continue
            self._start(job, np.asarray(gpus, dtype=np.int64))
            free -= size
            load = None
        self.queue = waiting + self.queue
        self.stats["schedule_s"] += time.perf_counter() - began

    def _lowest_running(self) -> float:
        """The lowest priority among jobs holding GPUs (inf when none): only a job above
        it may preempt."""
        return min(
            (self.jobs[k].spec.priority for k in self.holding),
            default=math.inf,
        )

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
        if self._kind_starts.size == 0:  # a fabric without links
            return
        load = np.asarray(self.net.link_load(), dtype=np.float64)  # type: ignore[union-attr]
        if self._tier_fabric is not self.fabric:  # per-kind capacity of the current fabric
            self._tier_fabric = self.fabric
            self._tier_capacity = np.add.reduceat(
                self.fabric.capacity[self._kind_order], self._kind_starts
            )
        offered = np.add.reduceat(load[self._kind_order], self._kind_starts)
        ratio = np.full(len(self.base.link_kinds), np.nan)
        capacity = self._tier_capacity
        ratio[self._kind_present] = np.where(
            capacity > 0, offered / np.maximum(capacity, 1e-300), np.nan
        )
        self.tier_log.append((self.t, ratio))

    # ------------------------------------------------------------------ main loop
    def _account(self, until: float) -> None:
        dt = until - self.t
        if dt > 0:
            owner = self.state.owner
            busy = int(np.count_nonzero(owner >= 0))
            down = int(np.count_nonzero(owner == self.codes[1]))
            self.acc["busy"] += busy * dt
            self.acc["down"] += down * dt
            self.acc["idle"] += (self.num_gpus - busy - down) * dt
            self.frag_acc += self.frag_now * dt
        self.t = until

    def _snapshot(self) -> None:
        owner = self.state.owner
        free, down, spare = self.codes
        self.counts_log.append(
            (
                self.t,
                int(np.count_nonzero(owner >= 0)),
                int(np.count_nonzero(owner == down)),
                int(np.count_nonzero(owner == spare)),
            )
        )
        self.frag_now = float(self.state.fragmentation())

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
        if kind == _ARRIVE:
            job = self.jobs[a]
            job.state = QUEUED
            self.queue.append(job.key)
            self._log(job)
        elif kind == _FINISH:
            job = self.jobs[a]
            if job.version != b or job.state != RUNNING:
                return
            self._advance(job)
            job.steps = float(job.target)
            job.committed = job.steps
            self._stop_running(job)
            job.state = DONE
            job.end_s = self.t
            self.state.release(job.key)
            self.holding.discard(job.key)
            job.gpus = None
            self.done += 1
            self.alloc_changed = True
            self.alloc_version += 1
            self._log(job)
        elif kind == _RESTARTED:
            job = self.jobs[a]
            if job.version == b and job.state == RESTARTING:
                self._run(job)
        elif kind == _FAIL:
            self._fail(a, b)
        elif kind == _REPAIR:
            self._repair(a, b)

    # ------------------------------------------------------------------ outputs
    def result(self, points: int) -> ClusterRun:
        jobs = [self._job_row(job) for job in self.jobs]
        horizon = self.horizon_s
        total = self.num_gpus * horizon
        started = [row for row in jobs if row["start_s"] is not None]
        # jobs still queued at the end count with their wait so far (a lower bound)
        waits = np.array(
            [row["queue_wait_s"] for row in started]
            + [
                horizon - job.spec.arrival_s
                for job in self.jobs
                if job.start_s is None and job.state == QUEUED
            ],
            dtype=np.float64,
        )
        weights = np.array([row["gpus"] * (row["end_s"] - row["start_s"]) for row in started])
        useful = np.array(
            [row["gpus"] * row["steps_done"] * row["standalone_step_s"] for row in started]
        )
        cluster = {
            "utilization": self.acc["busy"] / total if total > 0 else 0.0,
            "goodput": float(useful.sum() / weights.sum()) if weights.sum() > 0 else None,
            "failures": int(sum(self.failures_by.values())),
            "failures_by_component": dict(self.failures_by),
            "fragmentation": self.frag_acc / horizon if horizon > 0 else self.frag_now,
            "queue_wait_s": {
                "p50": float(np.percentile(waits, 50)) if waits.size else None,
                "p99": float(np.percentile(waits, 99)) if waits.size else None,
            },
            "gpu_seconds": {**self.acc, "total": total},
            "horizon_s": horizon,
            "gpus": self.num_gpus,
            "jobs": len(jobs),
            "jobs_done": self.done,
            "events": self.events,
            "stats": dict(self.stats),
        }
        if self.net is not None and isinstance(getattr(self.net, "stats", None), dict):
            cluster["stats"]["interference"] = dict(self.net.stats)
        settings = {
            "fabric": self.base.name,
            "scheduler": getattr(self.scheduler, "name", type(self.scheduler).__name__),
            "interference": self.use_net,
            "failures": None
            if self.model is None
            else {"mtbf_s": dict(self.model.mtbf_s), "mttr_s": dict(self.model.mttr_s)},
            "checkpoint": dataclasses.asdict(self.policy),
            "horizon_s": self.horizon,
            "seed": self.seed,
        }
        return ClusterRun(jobs, cluster, self._timeline(points), settings)

    def _job_row(self, job: _Job) -> dict:
        started = job.start_s is not None
        end = job.end_s if job.end_s is not None else (self.horizon_s if started else None)
        steps_done = job.steps if job.state != DONE else float(job.target)
        elapsed = None if end is None else end - job.start_s  # type: ignore[operator]
        mean_step = job.work_s / job.steps_computed if job.steps_computed > 0 else None
        mtbf = None
        best = None
        if self.model is not None:
            mtbf = job_mtbf(job.spec.gpus, self.gpn, self.model)
            if math.isfinite(mtbf) and self.policy.write_s > 0:
                best = young_daly_interval(self.policy.write_s, mtbf)
            if not math.isfinite(mtbf):
                mtbf = None
        return {
            "id": job.spec.id,
            "start_s": job.start_s,
            "end_s": end,
            "gpus": job.spec.gpus,
            "steps": job.target,
            "steps_done": int(math.floor(steps_done + 1e-9)),
            "standalone_step_s": job.standalone_s,
            "mean_step_s": mean_step,
            "slowdown": None if mean_step is None else mean_step / job.standalone_s,
            "failures": job.failures,
            "restarts": job.restarts,
            "preemptions": job.preemptions,
            "lost_work_s": job.lost_work_s,
            "goodput": (
                steps_done * job.standalone_s / elapsed if elapsed and elapsed > 0 else None
            ),
            "queue_wait_s": None if job.start_s is None else job.start_s - job.spec.arrival_s,
            "state": STATE_NAMES[job.state],
            "priority": job.spec.priority,
            "mtbf_s": mtbf,
            "best_checkpoint_interval_s": best,
        }

    def _timeline(self, points: int):
        import xarray as xr

        horizon = self.horizon_s
        times = np.unique(
            np.concatenate(
                [[0.0, horizon], [row[0] for row in self.counts_log]]
                + [[entry[0] for entry in job.log] for job in self.jobs]
            )
        )
        times = times[times <= horizon]
        if times.size > points:
            times = np.linspace(0.0, horizon, points)
        shape = (times.size, len(self.jobs))
        state = np.zeros(shape, dtype=np.int8)
        gpus = np.zeros(shape, dtype=np.int32)
        step = np.full(shape, np.nan)
        for column, job in enumerate(self.jobs):
            log = np.array(job.log, dtype=np.float64)
            index = np.searchsorted(log[:, 0], times, side="right") - 1
            # several entries at one time: the last one is the state from then on
            state[:, column] = log[index, 1]
            gpus[:, column] = log[index, 2]
            step[:, column] = log[index, 3]
        standalone = np.array([job.standalone_s for job in self.jobs])
        counts = np.array(self.counts_log, dtype=np.float64)
        index = np.searchsorted(counts[:, 0], times, side="right") - 1
        busy, down, spare = counts[index, 1], counts[index, 2], counts[index, 3]
        data = {
            "state": (("time", "job"), state),
            "gpus": (("time", "job"), gpus),
            "step_time_s": (("time", "job"), step),
            "slowdown": (("time", "job"), step / standalone),
            "gpu_busy": ("time", busy),
            "gpu_down": ("time", down),
            "gpu_spare": ("time", spare),
            "gpu_idle": ("time", self.num_gpus - busy - down),
            "utilization": ("time", busy / self.num_gpus),
        }
        tiers = list(self.base.link_kinds)
        tier = np.full((times.size, len(tiers)), np.nan)
        if self.tier_log:
            at = np.array([entry[0] for entry in self.tier_log])
            values = np.stack([entry[1] for entry in self.tier_log])
            index = np.searchsorted(at, times, side="right") - 1
            tier = np.where(index[:, None] >= 0, values[np.maximum(index, 0)], np.nan)
        data["tier_utilization"] = (("time", "tier"), tier)
        return xr.Dataset(
            data,
            coords={
                "time": times,
                "job": [job.spec.id for job in self.jobs],
                "tier": tiers,
                "job_gpus": ("job", [job.spec.gpus for job in self.jobs]),
                "job_priority": ("job", [job.spec.priority for job in self.jobs]),
                "standalone_step_s": ("job", standalone),
            },
            attrs={
                "state_names": ",".join(STATE_NAMES),
                "time_units": "s",
                "gpus_total": self.num_gpus,
                "fabric": self.base.name,
                "scheduler": getattr(self.scheduler, "name", ""),
            },
        )
