"""The cluster simulator's books: GPU-seconds, fragmentation, failure counts and the
timeline's logs, kept as the simulation runs, and the cluster summary they give.

Between consecutive events each GPU is busy (held by a job, running, restarting or
checkpointing), down (failed, waiting for repair, or drained after an alarm) or idle
(free or a hot spare), so ``busy + idle + down == GPUs x horizon``
(:attr:`~fabricflow.cluster.records.ClusterRun.cluster` ``gpu_seconds``). Fragmentation
is time-averaged the same way. The logs feed
:func:`~fabricflow.cluster.records.timeline_dataset`: GPU counts at every allocation
change, and the offered load over working capacity of each link kind at every step-time
re-evaluation.
"""

from __future__ import annotations

import numpy as np

from fabricflow.cluster.failures import COMPONENTS
from fabricflow.cluster.records import JobRecord, wait_summary
from fabricflow.cluster.state import ClusterState
from fabricflow.fabric.fabric import Fabric

__all__ = ["Accounting"]


class Accounting:
    """GPU-seconds (``gpu_seconds``: ``busy``, ``down``, ``idle``), time-integrated
    fragmentation, failures per component class, and the timeline's logs of a run on
    ``fabric`` (``counts_log``: ``(t, busy, down, spare)`` GPU counts; ``tier_log``:
    ``(t, ratio per link kind)``)."""

    def __init__(self, fabric: Fabric):
        self.num_gpus = fabric.num_gpus
        self.gpu_seconds = {"busy": 0.0, "down": 0.0, "idle": 0.0}
        self.fragmentation_s = 0.0  # fragmentation integrated over time (seconds)
        self.fragmentation_now = 0.0
        self.counts_log: list = []
        self.tier_log: list = []
        self.failures_by = dict.fromkeys(COMPONENTS, 0)
        # the kind of every link, for the per-tier utilization of the timeline
        self._link_kind = fabric.link_kind_id.astype(np.int64)
        self._num_kinds = len(fabric.link_kinds)
        self._tier_fabric: Fabric | None = None
        self._tier_capacity: np.ndarray = np.zeros(self._num_kinds)

    def account(self, state: ClusterState, dt: float) -> None:
        """Book ``dt`` seconds of ``state``'s busy, down and idle GPUs and fragmentation."""
        if dt > 0:
            self.gpu_seconds["busy"] += state.num_busy * dt
            self.gpu_seconds["down"] += state.num_down * dt
            self.gpu_seconds["idle"] += (self.num_gpus - state.num_busy - state.num_down) * dt
            self.fragmentation_s += self.fragmentation_now * dt

    def snapshot(self, t: float, state: ClusterState) -> None:
        """Log ``state``'s GPU counts at time ``t`` (an allocation changed) and keep its
        fragmentation until the next snapshot."""
        self.counts_log.append((t, state.num_busy, state.num_down, state.num_spare))
        self.fragmentation_now = state.fragmentation()

    def log_tiers(self, t: float, net, fabric: Fabric) -> None:
        """Log the offered load / working capacity of each link kind at time ``t`` (``net``:
        the interference model, ``fabric`` the current one, failed links removed)."""
        if self._num_kinds == 0 or net is None:
            return
        offered = net.kind_load(self._link_kind, self._num_kinds)
        if self._tier_fabric is not fabric:  # per-kind capacity of the current fabric
            self._tier_fabric = fabric
            self._tier_capacity = np.bincount(
                self._link_kind, weights=fabric.capacity, minlength=self._num_kinds
            )
        capacity = self._tier_capacity
        ratio = np.where(capacity > 0, offered / np.maximum(capacity, 1e-300), np.nan)
        self.tier_log.append((t, ratio))

    def summary(self, rows: list[dict], jobs: list[JobRecord], end: float) -> dict:
        """The books' entries of :attr:`ClusterRun.cluster` for a run ending at ``end``
        (seconds): utilization, goodput (useful over held GPU-seconds of the started
        ``rows``), failures, fragmentation, queue waits, preemptions and GPU-seconds."""
        total = self.num_gpus * end
        started = [row for row in rows if row["start_s"] is not None]
        weights = np.array([row["gpus"] * (row["end_s"] - row["start_s"]) for row in started])
        useful = np.array(
            [row["gpus"] * row["steps_done"] * row["standalone_step_s"] for row in started]
        )
        return {
            "utilization": self.gpu_seconds["busy"] / total if total > 0 else 0.0,
            "goodput": float(useful.sum() / weights.sum()) if weights.sum() > 0 else None,
            "failures": int(sum(self.failures_by.values())),
            "failures_by_component": dict(self.failures_by),
            "fragmentation": self.fragmentation_s / end if end > 0 else self.fragmentation_now,
            "queue_wait_s": wait_summary(jobs, end),
            "preemptions": int(sum(job.preemptions for job in jobs)),
            "gpu_seconds": {**self.gpu_seconds, "total": total},
        }
