"""The cluster simulator's response to failures: components failing and being repaired,
the GPUs that go down with them (or are cut off the scale-out network, or drained after
an alarm), the jobs they interrupt, the fabric without the failed links, and the hot
spare nodes that replace a job's lost nodes.

:class:`FailureHandling` acts on the simulator it is given (:mod:`.simulate`), as
:class:`~.prediction.PredictedFailures` does; the failure processes themselves (draws,
which GPUs and links a component takes down) are :mod:`.failure_events`.
"""

from __future__ import annotations

import math
import time

import numpy as np

from fabricflow.cluster import events as ev
from fabricflow.cluster.failures import (
    CheckpointPolicy,
    FailureModel,
    job_mtbf,
    log_failure_slowdown,
)
from fabricflow.cluster.records import JobRecord
from fabricflow.errors import SpecError

__all__ = ["FailureHandling", "refuse_hopeless_jobs"]


class FailureHandling:
    """Failures, repairs and spare nodes of one simulation ``sim``. Keeps ``down_mask``
    (bool per GPU: out of service now), ``cut`` (bool per GPU: cut off the scale-out
    network) and ``repair_at`` (``(class, component) -> repair time``, seconds)."""

    def __init__(self, sim):
        self.sim = sim
        self.down_mask = np.zeros(sim.num_gpus, dtype=bool)
        self.cut = np.zeros(sim.num_gpus, dtype=bool)  # GPUs cut off the scale-out network
        self.repair_at: dict[tuple[str, int], float] = {}

    def push_next_failure(self, kind: str) -> None:
        """Draw the next failure of component class ``kind`` and push its event."""
        sim = self.sim
        when, index = sim.failing.draw(kind, sim.t)
        sim.push(when, ev.FAIL, kind, index)

    def component_fails(self, kind: str, index: int) -> None:
        """Component ``index`` of class ``kind`` fails now; its repair is pushed."""
        sim = self.sim
        if sim.failing.active[kind][index]:
            return  # already down: a failed component does not fail again (thinning)
        sim.accounting.failures_by[kind] += 1
        gpus, links = sim.failing.take_down(kind, index)
        self.apply_health(links.size > 0)
        assert sim.model is not None
        self.repair_at[(kind, index)] = sim.t + sim.model.mttr_s[kind]
        sim.push(sim.t + sim.model.mttr_s[kind], ev.REPAIR, kind, index)

    def repair(self, kind: str, index: int) -> None:
        """Component ``index`` of class ``kind`` is back in service."""
        self.repair_at.pop((kind, index), None)
        _, links = self.sim.failing.bring_up(kind, index)
        self.apply_health(links.size > 0)

    def apply_health(self, links_changed: bool) -> None:
        """Bring the state, the jobs and the fabric in line with the down counters."""
        sim = self.sim
        if links_changed:
            self.cut = sim.failing.cut_off()  # GPUs left without a working uplink
        down = (sim.failing.gpu_down > 0) | self.cut
        if sim.predictor is not None:  # drained after an alarm, unless a job still writes there
            down |= (sim.failing.gpu_drain > 0) & ~sim.predictor.protected
        newly_down = np.flatnonzero(down & ~self.down_mask)
        newly_up = np.flatnonzero(~down & self.down_mask)
        self.down_mask = down
        if newly_down.size:
            hit = sim.state.set_down(newly_down)
            for key in sorted(int(k) for k in np.atleast_1d(hit)):
                sim.lifecycle.interrupt(sim.jobs[key], reason="failed")
            sim.allocation_changed()
        if newly_up.size:
            sim.state.set_up(newly_up)
            sim.allocation_changed()
        if links_changed and sim.net is not None:  # without a network model: nothing to do
            began = time.perf_counter()
            sim.fabric = sim.failing.failed_fabric()
            sim.fabric_version += 1
            cut_off = sim.net.set_fabric(sim.fabric)
            for key in sorted(int(k) for k in cut_off):  # GPUs that can no longer reach each other
                sim.lifecycle.interrupt(sim.jobs[key], reason="failed")
            sim.mix_changed = True
            sim.stats["fabric_updates"] += 1
            sim.stats["fabric_update_s"] += time.perf_counter() - began

    def swap_to_spares(self, job: JobRecord) -> bool:
        """Replace the job's nodes that lost GPUs (now DOWN) by hot spare nodes; False if
        it cannot (no spares, a job smaller than a node, nothing lost)."""
        if job.gpus is None or self.sim.policy.spares == 0:
            return False
        return self.swap_nodes(job, job.gpus[self.out_of_service(job)])

    def out_of_service(self, job: JobRecord) -> np.ndarray:
        """bool over ``job.gpus``: GPUs it lost (DOWN) or that an alarm drained."""
        assert job.gpus is not None
        sim = self.sim
        out = ~np.isin(job.gpus, sim.state.gpus_of(job.key))
        return out | (sim.failing.gpu_drain[job.gpus] > 0)

    def swap_nodes(self, job: JobRecord, lost: np.ndarray, *, idle_too: bool = False) -> bool:
        """Replace every node of ``job`` holding one of the GPUs ``lost`` by a hot spare
        node (and, with ``idle_too``, by a wholly free node when no spare is left); the
        job keeps its other GPUs and rank order. False if it cannot."""
        sim = self.sim
        gpn = sim.gpn
        if job.gpus is None or job.gpus.size < gpn or lost.size == 0:
            return False
        node = job.gpus // gpn
        replace = np.isin(node, np.unique(lost // gpn))
        count = int(replace.sum())
        spare = sim.state.take_spare(count) if sim.policy.spares else None
        if spare is None and idle_too:
            spare = self._idle_nodes(count)
        if spare is None:
            return False
        gpus = job.gpus.copy()
        gpus[replace] = np.asarray(spare, dtype=np.int64)[:count]
        sim.state.release(job.key)
        sim.state.allocate(job.key, gpus)
        job.gpus = gpus
        sim.allocation_changed()
        return True

    def _idle_nodes(self, count: int) -> np.ndarray | None:
        """``count`` GPUs of wholly free nodes (the highest ids first), or None."""
        gpn = self.sim.gpn
        whole = np.flatnonzero(self.sim.state.whole_free_servers())[::-1]
        need = -(-count // gpn)
        if whole.size < need:
            return None
        return (whole[:need, None] * gpn + np.arange(gpn)).ravel()[:count]

    def replenish_spares(self) -> None:
        """Reserve wholly free nodes (the highest ids) as hot spares up to the policy's
        count."""
        sim = self.sim
        want = sim.policy.spares
        if want == 0:
            return
        have = sim.state.num_spare // sim.gpn
        if have >= want:
            return
        whole = np.flatnonzero(sim.state.whole_free_servers())
        take = whole[::-1][: want - have]  # the highest node ids: low ones stay for jobs
        if take.size:
            gpus = (take[:, None] * sim.gpn + np.arange(sim.gpn)).ravel()
            sim.state.reserve_spares(np.sort(gpus))
            sim.allocation_changed()


def refuse_hopeless_jobs(
    jobs: list[JobRecord],
    model: FailureModel,
    policy: CheckpointPolicy,
    gpus_per_node: int,
    max_slowdown: float,
) -> None:
    """Refuse a job whose failures come faster than it can restart and reach a
    checkpoint (expected slowdown over ``max_slowdown`` times its failure-free time):
    without a horizon the simulation would fail and restart it for ever."""
    for job in jobs:
        mtbf = job_mtbf(job.spec.gpus, gpus_per_node, model)
        work = job.target * job.standalone_s  # co-located slowdowns only make it worse
        log_slowdown = log_failure_slowdown(work, mtbf, policy)
        if log_slowdown > math.log(max_slowdown):
            piece = (
                f"checkpoints every {policy.interval_s:g} s (+ {policy.write_s:g} s to write)"
                if policy.interval_s is not None
                else f"no checkpoints: all {work:.3g} s of its work in one piece"
            )
            raise SpecError(
                f"jobs[{job.key}] (id {job.spec.id!r})",
                f"makes practically no progress: its MTBF is {mtbf:.3g} s ({job.spec.gpus} "
                f"GPUs) against a restart of {policy.restart_s:g} s and {piece}, "
                f"so it would take about 10^{log_slowdown / math.log(10):.0f} times its "
                "failure-free time; checkpoint more often (--checkpoint-interval), "
                "raise the MTBFs (--mtbf) or give a --horizon",
            )
