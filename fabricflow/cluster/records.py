"""What a cluster simulation records per job (:class:`JobRecord`) and returns
(:class:`ClusterRun`): per-job rows, cluster figures, the timeline Dataset.

Job states (timeline ``state`` codes): ``pending`` (not arrived), ``queued``, ``running``,
``restarting``, ``done``, ``checkpointing`` (a proactive checkpoint before a predicted
failure, see :mod:`.prediction`).

Queue waits: a job waits from its arrival to its first start, and again after every
failure or preemption that sends it back to the queue, until it starts again. Every wait
is recorded with its reason (``submitted``, ``failed``, ``preempted``, ``unreachable``:
its GPUs could not reach each other, ``alarm``: it checkpointed before a predicted
failure and found no spare); ``queue_wait_s`` is their sum (an open wait counts up to the
end of the run), ``first_wait_s`` the first alone.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from fabricflow.cluster.jobspec import JobSpec

# Job state codes (timeline ``state``).
PENDING, QUEUED, RUNNING, RESTARTING, DONE, CHECKPOINTING = 0, 1, 2, 3, 4, 5
STATE_NAMES = ("pending", "queued", "running", "restarting", "done", "checkpointing")
SUMMARY_JOBS = 50  # job lines in ClusterRun.summary() (every job is in .jobs)


@dataclasses.dataclass(slots=True)
class JobRecord:
    """One job's state in the simulator (SI units; see the module docs)."""

    key: int
    spec: JobSpec
    standalone_s: float
    standalone: Any  # StepResult alone at GPUs 0..n-1
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
    expected_end_s: float = math.inf  # when it would finish at its current step time
    failures: int = 0
    restarts: int = 0
    preemptions: int = 0
    lost_work_s: float = 0.0
    work_s: float = 0.0  # wall seconds computing (lost work included)
    steps_computed: float = 0.0  # steps computed (lost ones included)
    version: int = 0
    requeued: bool = False
    needs_restart: bool = False
    queued_since: float | None = None  # start of the open wait
    wait_reason: str = "submitted"
    waits: list = dataclasses.field(default_factory=list)  # closed (reason, seconds)
    alarms: int = 0  # predicted-failure alarms that hit it (true and false)
    migrations: int = 0  # proactive checkpoint-and-move after an alarm
    checkpoint_until: float = 0.0  # end of a proactive checkpoint
    log: list = dataclasses.field(default_factory=list)  # (t, state, gpus, step_s)
    traffic: object = None  # interference.JobTraffic, computed on first placement
    blocked_on: tuple = ()  # (fabric, allocation) versions when its GPUs could not reach each other


@dataclasses.dataclass
class ClusterRun:
    """Outcome of :func:`~.simulate.simulate_cluster` (SI units).

    Attributes:
        jobs: one dict per job, trace order: ``id``, ``start_s``, ``end_s`` (None if not
            started / the horizon for unfinished jobs), ``gpus``, ``steps`` (target),
            ``steps_done``, ``standalone_step_s`` and ``standalone_step_interval_s`` (its
            prediction interval, :mod:`fabricflow.workload.intervals`), ``end_interval_s``
            (a finished job: its end with every computed second scaled by the ends of
            that interval; queueing and failures as simulated), ``mean_step_s`` (compute seconds per
            computed step), ``slowdown`` (mean / standalone), ``failures``, ``restarts``,
            ``preemptions``, ``lost_work_s``, ``goodput`` (``steps_done x
            standalone_step_s / (end_s - start_s)``), ``queue_wait_s`` (every wait, summed),
            ``first_wait_s``, ``waits`` (``[{"reason", "wait_s"}]`` after each failure or
            preemption that re-queued it), ``requeue_wait_s`` (their sum), ``alarms`` and
            ``migrations`` (failure prediction), ``state``, ``priority``, ``mtbf_s`` and
            ``best_checkpoint_interval_s`` (Daly, from the job's MTBF and the write time;
            None without failures or checkpoints).
        cluster: ``utilization`` (busy GPU-s / (GPUs x horizon)), ``goodput`` (GPU-
            weighted over started jobs), ``failures`` (total) and ``failures_by_component``,
            ``fragmentation`` (time mean of ``ClusterState.fragmentation()``),
            ``queue_wait_s`` (``p50``, ``p99``, ``mean`` of the jobs' summed waits, over
            every job that arrived), ``preemptions``, ``gpu_seconds`` (``busy``, ``idle``,
            ``down``, ``total``), ``horizon_s``, ``jobs_done``, ``events``, ``prediction``
            (alarms, false alarms, migrations; with a predictor), ``stats`` (counts and
            seconds of scheduling and re-evaluations, memory of the network model).
        timeline: ``xarray.Dataset`` over (``time``, ``job``): ``state`` (codes in the
            ``state_names`` attribute), ``gpus``, ``step_time_s`` and ``slowdown`` (NaN
            when not running); over ``time``: ``gpu_busy``, ``gpu_down``, ``gpu_spare``,
            ``gpu_idle``, ``utilization``; over (``time``, ``tier``): ``tier_utilization``
            (offered load / working capacity of each link kind, with interference).
        settings: scheduler, backfill, interference, failures, prediction, checkpoint,
            seed, fabric.
    """

    jobs: list[dict]
    cluster: dict
    timeline: object
    settings: dict

    def to_json(self) -> dict:
        """``{"jobs": [...], "cluster": {...}, "settings": {...}}`` (JSON-able)."""
        return {"jobs": self.jobs, "cluster": self.cluster, "settings": self.settings}

    def summary(self, max_jobs: int = SUMMARY_JOBS) -> str:
        """A text table: a line per job (the first ``max_jobs``), then the cluster figures."""
        header = (
            f"{'job':>16} {'gpus':>5} {'start_h':>8} {'end_h':>8} {'steps':>8} "
            f"{'slowdown':>8} {'fail':>4} {'restart':>7} {'lost_h':>7} {'wait_h':>7} "
            f"{'goodput':>7}"
        )
        lines = [header]
        for job in self.jobs[:max_jobs]:
            lines.append(
                f"{job['id'][:16]:>16} {job['gpus']:>5} {_hours(job['start_s']):>8} "
                f"{_hours(job['end_s']):>8} {job['steps_done']:>8} "
                f"{_fixed(job['slowdown']):>8} {job['failures']:>4} {job['restarts']:>7} "
                f"{job['lost_work_s'] / 3600:>7.2f} {_hours(job['queue_wait_s']):>7} "
                f"{_fixed(job['goodput']):>7}"
            )
        if len(self.jobs) > max_jobs:
            lines.append(f"... {len(self.jobs) - max_jobs:,} more jobs (all in --json / jobs.csv)")
        c = self.cluster
        wait = c["queue_wait_s"]
        lines.append(
            f"cluster: utilization {c['utilization']:.3f}  goodput "
            f"{_fmt(c['goodput'])}  failures {c['failures']}  fragmentation "
            f"{_fmt(c['fragmentation'])}  queue wait p50 {_fmt(wait['p50'])} s "
            f"p99 {_fmt(wait['p99'])} s  preemptions {c['preemptions']}  jobs done "
            f"{c['jobs_done']}/{len(self.jobs)}"
        )
        return "\n".join(lines)


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3g}"


def _fixed(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def _hours(value) -> str:
    return "-" if value is None else f"{value / 3600:.2f}"


def total_wait(job: JobRecord, end: float) -> float | None:
    """Seconds ``job`` spent queued up to ``end`` (every wait; None if it never arrived)."""
    if job.state == PENDING:
        return None
    closed = sum(seconds for _, seconds in job.waits)
    if job.queued_since is not None:
        closed += max(0.0, end - job.queued_since)
    return closed


def job_row(job: JobRecord, end_of_run: float, mtbf_s, best_interval_s) -> dict:
    """The result row of ``job`` (see :class:`ClusterRun`)."""
    started = job.start_s is not None
    end = job.end_s if job.end_s is not None else (end_of_run if started else None)
    steps_done = job.steps if job.state != DONE else float(job.target)
    elapsed = None if end is None else end - job.start_s  # type: ignore[operator]
    mean_step = job.work_s / job.steps_computed if job.steps_computed > 0 else None
    requeues = [
        {"reason": reason, "wait_s": seconds}
        for reason, seconds in job.waits
        if reason != "submitted"
    ]
    if job.queued_since is not None and job.wait_reason != "submitted":
        requeues.append(
            {"reason": job.wait_reason, "wait_s": max(0.0, end_of_run - job.queued_since)}
        )
    first = job.waits[0][1] if job.waits and job.waits[0][0] == "submitted" else None
    band = getattr(job.standalone, "interval", None)
    intervals = {}
    if band is not None:
        # the step time's interval carried to the running time: every computed step
        # scales with it (queue waits and failures as simulated)
        low, high = band.low / band.point, band.high / band.point
        intervals["standalone_step_interval_s"] = band.to_list()
        if job.start_s is not None and job.state == DONE and end is not None:
            intervals["end_interval_s"] = [
                end + job.work_s * (low - 1.0),
                end + job.work_s * (high - 1.0),
            ]
    return {
        "id": job.spec.id,
        "start_s": job.start_s,
        "end_s": end,
        "gpus": job.spec.gpus,
        "steps": job.target,
        "steps_done": int(math.floor(steps_done + 1e-9)),
        "standalone_step_s": job.standalone_s,
        **intervals,
        "mean_step_s": mean_step,
        "slowdown": None if mean_step is None else mean_step / job.standalone_s,
        "failures": job.failures,
        "restarts": job.restarts,
        "preemptions": job.preemptions,
        "lost_work_s": job.lost_work_s,
        "goodput": (steps_done * job.standalone_s / elapsed if elapsed and elapsed > 0 else None),
        "queue_wait_s": total_wait(job, end_of_run),
        "first_wait_s": first,
        "waits": requeues,
        "requeue_wait_s": float(sum(item["wait_s"] for item in requeues)),
        "alarms": job.alarms,
        "migrations": job.migrations,
        "state": STATE_NAMES[job.state],
        "priority": job.spec.priority,
        "mtbf_s": mtbf_s,
        "best_checkpoint_interval_s": best_interval_s,
    }


def wait_summary(jobs: list[JobRecord], end: float) -> dict:
    """``p50``, ``p99``, ``mean`` of the summed waits of every job that arrived (None
    when none did)."""
    waits = np.array([w for w in (total_wait(job, end) for job in jobs) if w is not None])
    if not waits.size:
        return {"p50": None, "p99": None, "mean": None}
    return {
        "p50": float(np.percentile(waits, 50)),
        "p99": float(np.percentile(waits, 99)),
        "mean": float(waits.mean()),
    }


def timeline_dataset(
    jobs: list[JobRecord],
    counts_log: list,
    tier_log: list,
    tiers: list[str],
    horizon: float,
    num_gpus: int,
    points: int,
    attrs: dict,
):
    """The timeline Dataset (see :class:`ClusterRun`) at every event time, or at
    ``points`` regular times when there are more."""
    import xarray as xr  # deferred: xarray only when a run's outputs are built

    times = np.unique(
        np.concatenate(
            [[0.0, horizon], [row[0] for row in counts_log]]
            + [[entry[0] for entry in job.log] for job in jobs]
        )
    )
    times = times[times <= horizon]
    if times.size > points:
        times = np.linspace(0.0, horizon, points)
    shape = (times.size, len(jobs))
    state = np.zeros(shape, dtype=np.int8)
    gpus = np.zeros(shape, dtype=np.int32)
    step = np.full(shape, np.nan)
    for column, job in enumerate(jobs):
        log = np.array(job.log, dtype=np.float64)
        index = np.searchsorted(log[:, 0], times, side="right") - 1
        # several entries at one time: the last one is the state from then on
        state[:, column] = log[index, 1]
        gpus[:, column] = log[index, 2]
        step[:, column] = log[index, 3]
    standalone = np.array([job.standalone_s for job in jobs])
    counts = np.array(counts_log, dtype=np.float64)
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
        "gpu_idle": ("time", num_gpus - busy - down),
        "utilization": ("time", busy / num_gpus),
    }
    tier = np.full((times.size, len(tiers)), np.nan)
    if tier_log:
        at = np.array([entry[0] for entry in tier_log])
        values = np.stack([entry[1] for entry in tier_log])
        index = np.searchsorted(at, times, side="right") - 1
        tier = np.where(index[:, None] >= 0, values[np.maximum(index, 0)], np.nan)
    data["tier_utilization"] = (("time", "tier"), tier)
    return xr.Dataset(
        data,
        coords={
            "time": times,
            "job": [job.spec.id for job in jobs],
            "tier": tiers,
            "job_gpus": ("job", [job.spec.gpus for job in jobs]),
            "job_priority": ("job", [job.spec.priority for job in jobs]),
            "standalone_step_s": ("job", standalone),
        },
        attrs={"state_names": ",".join(STATE_NAMES), "time_units": "s", **attrs},
    )
