"""Interference between co-located jobs: every running job's step time with the traffic of
the jobs that share its links, from the fabric model.

Per job (:meth:`Interference.add`), at its actual GPUs:

1. its step at that placement, alone on the fabric: the step model's own composition
   (:func:`fabricflow.step_time`'s: collectives priced by the collective model, overlap
   windows coupled by :mod:`fabricflow.collective.coupling`): ``alone_s``. A job alone at
   GPUs ``0..n-1`` in its rank order gets its standalone step time.
2. its *traffic*: for each of its group sets (``tp``, ``cp``, ``ep``, ``pp``, ``dp``,
   ``edp``), the bound phase (:class:`~fabricflow.collective.coupling.Bound`: the phase
   that bounds the collective alone, flows with their routes ``[F, H]`` and link
   coefficients) of the set's longest collective, the one the coupling takes as the
   dimension's representative. These flows are kept padded per job.

Jobs whose flows share a link form a connected component (a sparse job x link incidence,
:func:`scipy.sparse.csgraph.connected_components`). A job alone in its component keeps
``alone_s``. For every other component, the flows of all its jobs are solved in ONE
max-min (the collective model's float64 numpy solver over the concatenated rows): every
running job's bulk traffic in flight together, which is what the snapshot (held-rate)
model of the step coupling assumes inside a job. Each collective of a job is then
re-priced by the NCCL cost model: its bound phase at the joint rates of its flows (the
representative itself), or, for the job's other collectives of the same group set, its
bound phase slowed by the representative's phase slowdown; each collective takes the
larger of that and its time coupled within the job, and the step is recomposed (compute,
bubble, exposure behind compute, DP overlap: the step model's :func:`~fabricflow.workload.step.compose_step`). So a
job never runs faster for sharing, and only exposed communication slows its step.

Re-evaluation happens only for components whose membership changed since the last solve
(or whose jobs were re-routed after :meth:`Interference.set_fabric`); others keep their
answer. :attr:`Interference.stats` counts the solves and their seconds.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, NamedTuple

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from ..errors import SpecError
from ..fabric.fabric import Fabric
from ..workload.placement import Placement, parse_order

DIMENSION_NAMES = ("tp", "cp", "ep", "pp", "dp", "edp")


class JobTraffic(NamedTuple):
    """A job's traffic shape for the schedulers (no fabric solve needed).

    Attributes:
        gpus: GPUs of the job.
        bytes_per_step: bytes each GPU sends per step on each dimension
            (:func:`fabricflow.workload.comm_volume.dimension_bytes`).
        network_bytes_per_step: the part of dimensions whose groups span more than one
            server under whole-server placement in the job's rank order.
        step_s: standalone step time (s), or ``None`` when not known.
    """

    gpus: int
    bytes_per_step: dict
    network_bytes_per_step: float
    step_s: float | None

    @property
    def network_Bps(self) -> float:
        """Average bytes/s per GPU over the network (bytes per step without a step time)."""
        if self.step_s is None or self.step_s <= 0:
            return float(self.network_bytes_per_step)
        return float(self.network_bytes_per_step / self.step_s)


def job_traffic_shape(job: Any, standalone: Any = None, *, gpus_per_node: int = 8) -> JobTraffic:
    """:class:`JobTraffic` of ``job`` (a JobSpec: ``model``, ``layout``, ``order``,
    ``gpus``) with ``standalone`` (its :class:`~fabricflow.workload.step.StepResult`, or
    ``None``) on servers of ``gpus_per_node`` GPUs."""
    from ..workload.comm_volume import dimension_bytes

    layout = job.layout
    per_dim = dimension_bytes(job.model, layout)
    order = parse_order(job.order)
    dense = {"tp": layout.tp, "cp": layout.cp, "dp": layout.dp, "pp": layout.pp, "ep": 1}
    expert = {"tp": layout.tp, "ep": layout.ep, "dp": layout.expert_dp, "pp": layout.pp, "cp": 1}

    def extent(dim: str, sizes: dict) -> int:
        """Consecutive ranks one group of ``dim`` spans (its stride x its size)."""
        span = 1
        for other in order:
            span *= sizes[other]
            if other == dim:
                return span
        return span

    network = 0.0
    for dim, volume in per_dim.items():
        if volume <= 0:
            continue
        sizes = expert if dim == "ep" else dense
        span = extent(dim, sizes)
        if dim == "dp" and layout.cp > 1:  # the gradient group is dp x cp
            span = max(span, extent("cp", dense))
        if span > gpus_per_node:
            network += volume
    step_s = None if standalone is None else float(standalone.step_time_s)
    return JobTraffic(int(job.gpus), per_dim, network, step_s)


@dataclasses.dataclass(eq=False)
class _Job:
    """One running job's prepared state (see the module docs).

    Its flows (``F``: every flow of every representative's bound phase) are kept as sets
    of identical flows (``U`` rows: same links, coefficients and group set), each row as
    its used entries in row-major order (``E``), coefficients scaled by the set's size:
    on every link a row carries what its flows carry together, and max-min gives
    identical flows identical rates, so solving rows is exact."""

    key: int
    spec: Any
    gpus: np.ndarray
    model: Any
    rank_gpus: tuple
    layout: Any
    cache: Any
    view: Any
    alone_s: float
    reps: dict  # group set name -> (name, op, size)
    bounds: dict  # group set name -> Bound
    names: tuple  # group set names with flows, in `owner` order
    owner: np.ndarray  # int64 [F]: index into `names` of each flow's group set
    inverse: np.ndarray  # int64 [F]: row of every flow
    row_entries: np.ndarray  # int64 [U]: used entries of each row
    entry_link: np.ndarray  # int64 [E]
    entry_coef: np.ndarray  # float64 [E]: coefficient x flows in the row
    alone_rate: np.ndarray  # float64 [U]: each row's rate in its representative alone
    link_ids: np.ndarray  # int64 sorted unique links of the flows


class _SharedTimes:
    """Stands in for a CollectiveCache in the step composition: each collective's seconds
    with the component's joint rates (see the module docs)."""

    backend = "fabric"

    def __init__(self, job: _Job, joint_rate: np.ndarray):
        self.job = job
        self.joint_rate = joint_rate  # [F] rates of the job's flows in the joint solve
        self.factor: dict[str, float] = {}
        self.priced: dict[str, float] = {}
        for index, name in enumerate(job.names):
            bound = job.bounds[name]
            rate = joint_rate[job.owner == index].reshape(bound.sp.rate.shape)
            sp = dataclasses.replace(bound.sp, rate=rate)
            phase = bound.prepared.phase_times(sp, bound.protocol, [bound.size])[0]
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(bound.phase_s > 0, phase / bound.phase_s, 1.0)
            self.factor[name] = max(1.0, float(np.max(ratio)))
            self.priced[name] = float((bound.total_s - bound.phase_s + phase).max())

    def slowest(self, name: str, op: str, size_bytes: float) -> float:
        from ..collective.coupling import bound_phase

        base = self.job.view.slowest(name, op, size_bytes)
        if name not in self.factor:
            return base
        if self.job.reps[name] == (name, op, float(size_bytes)):
            return max(base, self.priced[name])
        bound = bound_phase(self.job.cache, name, op, float(size_bytes))
        if bound is None:
            return base
        factor = self.factor[name]
        cross = float((bound.total_s - bound.phase_s + factor * bound.phase_s).max())
        return max(base, cross)


class Interference:
    """Step times of co-located jobs on ``fabric`` (see the module docs).

    Args:
        fabric: the (possibly partly failed) fabric.
        routing: the collective model's routing (as :func:`fabricflow.step_time`).
        seed: ECMP hash seed of the routes.

    Example::

        inter = Interference(fabric)
        inter.add(0, job_a, standalone_a, gpus_a)
        inter.add(1, job_b, standalone_b, gpus_b)
        inter.step_times()  # {0: seconds, 1: seconds}
        inter.set_fabric(fabric.without(links=[...]))  # -> keys of jobs cut off
    """

    def __init__(self, fabric: Fabric, *, routing: str = "auto", seed: int = 0):
        from ..collective.model import ROUTINGS

        if not isinstance(fabric, Fabric):
            raise SpecError("fabric", f"expected a Fabric, got {type(fabric).__name__}")
        if routing not in ROUTINGS:
            raise SpecError("routing", f"unknown routing {routing!r}; one of {list(ROUTINGS)}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise SpecError("seed", f"must be an integer >= 0, got {seed!r}")
        self.fabric = fabric
        self.routing = routing
        self.seed = int(seed)
        self._jobs: dict[int, _Job] = {}
        self._times: dict[int, float] = {}
        self._load: dict[int, np.ndarray] = {}  # per job: its links' bytes/s (sparse form)
        self._solved: dict[frozenset, dict[int, tuple[float, np.ndarray]]] = {}
        self._dirty = False
        self._link_load: np.ndarray | None = None  # cached until the next evaluation
        self._fingerprint: str | None = None  # structure-cache digest of self.fabric
        self.stats: dict = {
            "evaluations": 0,
            "seconds": 0.0,
            "solves": 0,
            "solve_seconds": 0.0,
            "flows_last": 0,
            "components_last": 0,
            "jobs_last": 0,
            "prepared": 0,
            "prepare_seconds": 0.0,
        }

    # ------------------------------------------------------------------ job mix
    def add(self, key: int, job: Any, standalone: Any, gpus: np.ndarray) -> None:
        """Start job ``key`` (a JobSpec) on ``gpus`` (int ``[job.gpus]``, rank order);
        ``standalone``: its StepResult alone at GPUs ``0..n-1`` (kept for reference)."""
        if key in self._jobs:
            raise SpecError("key", f"job {key} is already running; remove it first")
        gpus = np.asarray(gpus)
        if gpus.ndim != 1 or (gpus.size and not np.issubdtype(gpus.dtype, np.integer)):
            raise SpecError("gpus", "must be a 1-D array of integer GPU ids")
        if gpus.size != job.layout.num_gpus:
            raise SpecError(
                "gpus", f"job {key} has a layout of {job.layout.num_gpus} GPUs, got {gpus.size}"
            )
        self._jobs[int(key)] = self._prepare(int(key), job, gpus.astype(np.int64))
        self._forget(int(key))

    def _forget(self, key: int) -> None:
        """Drop the solved components holding ``key`` (a key re-added elsewhere, e.g. a
        restart, must not find its old component's answer)."""
        self._solved = {name: v for name, v in self._solved.items() if key not in name}
        self._dirty = True

    def remove(self, key: int) -> None:
        """Stop job ``key`` (no-op when it is not running)."""
        if self._jobs.pop(int(key), None) is not None:
            self._times.pop(int(key), None)
            self._load.pop(int(key), None)
            self._forget(int(key))

    def set_fabric(self, fabric: Fabric) -> list[int]:
        """Links failed or repaired: re-route the running jobs whose flows meet a switch at
        either end of a changed link (ECMP choices there change); the others keep their
        routes, whose links did not change.

        Returns the keys of the jobs whose GPUs can no longer reach each other on
        ``fabric`` (a :class:`~fabricflow.errors.RoutingError` when routing them): they are
        removed here, and the caller treats them as failed (restart or wait)."""
        from ..errors import RoutingError

        if not isinstance(fabric, Fabric):
            raise SpecError("fabric", f"expected a Fabric, got {type(fabric).__name__}")
        if fabric.num_links != self.fabric.num_links:
            raise SpecError("fabric", "must be the same fabric with links failed or repaired")
        changed = np.flatnonzero(
            (fabric.capacity != self.fabric.capacity) | (fabric.link_up != self.fabric.link_up)
        )
        self.fabric = fabric
        self._fingerprint = None
        if not changed.size:
            return []
        nodes = np.zeros(fabric.num_nodes, dtype=bool)
        nodes[fabric.link_src[changed]] = True
        nodes[fabric.link_dst[changed]] = True
        touched = nodes[fabric.link_src] | nodes[fabric.link_dst]
        cut = []
        for key, job in list(self._jobs.items()):
            if touched[job.link_ids].any():
                try:
                    self._jobs[key] = self._prepare(key, job.spec, job.gpus)
                except RoutingError:
                    cut.append(key)
                    self.remove(key)
        self._solved.clear()  # capacities differ: every joint answer is stale
        self._dirty = True
        return cut

    # ------------------------------------------------------------------ answers
    def step_times(self) -> dict[int, float]:
        """Seconds per step of every running job with its component's traffic."""
        if self._dirty:
            self._evaluate()
        return {key: self._times[key] for key in self._jobs}

    def link_load(self) -> np.ndarray:
        """float64 ``[L]`` bytes/s on every link offered by the running jobs' representative
        collectives at their current (joint) rates."""
        if self._dirty:
            self._evaluate()
        if self._link_load is None:
            jobs = list(self._jobs.values())
            if not jobs:
                return np.zeros(self.fabric.num_links)
            rate = np.concatenate([np.repeat(self._load[j.key], j.row_entries) for j in jobs])
            self._link_load = np.bincount(
                np.concatenate([j.entry_link for j in jobs]),
                weights=np.concatenate([j.entry_coef for j in jobs]) * rate,
                minlength=self.fabric.num_links,
            )
        return self._link_load.copy()

    def alone_s(self, key: int) -> float:
        """Step time (s) of running job ``key`` alone at its placement."""
        return self._jobs[int(key)].alone_s

    # ------------------------------------------------------------------ internals
    def _prepare(self, key: int, spec: Any, gpus: np.ndarray) -> _Job:
        from ..collective import structure_cache
        from ..collective.comm import CollectiveCache
        from ..collective.coupling import bound_phase, plan_windows
        from ..workload.hetero import job_gpus, split_for_gpus
        from ..workload.step import compose_step, issue_rates, register_groups

        started = time.perf_counter()
        model, given = spec.model, spec.layout
        given.validate(model)
        rank_gpus = job_gpus(spec.gpu, given)
        layout = split_for_gpus(model, given, rank_gpus).validate(model)
        where = Placement(layout=given, order=parse_order(spec.order), gpu_of_rank=gpus)
        cache = CollectiveCache(self.fabric, "fabric", routing=self.routing, seed=self.seed)
        # every job shares one fabric: hash it once (~0.2 s on clos-100k), not per job
        if self._fingerprint is None:
            self._fingerprint = structure_cache.fabric_fingerprint(self.fabric)
        cache._fabric_fingerprint = self._fingerprint
        cache = register_groups(cache, where, model, layout)
        # step_time's own composition (step._coupled_step), keeping the coupled view
        _, slow, _ = compose_step(model, rank_gpus, layout, cache)
        view = plan_windows(cache, layout, issue_rates(model, layout, slow))
        alone_s = float(sum(compose_step(model, rank_gpus, layout, view)[2].values()))
        asked = cache.asked()
        reps, bounds = {}, {}
        for name in DIMENSION_NAMES:
            items = [k for k in asked if k[0] == name and asked[k] > 0]
            if not items:
                continue
            rep = max(items, key=lambda k: (asked[k], k))
            bound = bound_phase(cache, *rep)
            if bound is not None and bound.sp.links.size:
                reps[name], bounds[name] = rep, bound
        names = tuple(bounds)
        links = [bounds[n].sp.links for n in names]
        coefs = [bounds[n].sp.coef for n in names]
        owner = np.repeat(np.arange(len(names)), [x.shape[0] for x in links]).astype(np.int64)
        alone = [bounds[n].sp.rate.reshape(-1) for n in names]
        first, inverse, count, group = _identical_rows(links, coefs)
        # rows as used entries (row-major), coefficients x identical flows
        row_links = [links[g][f] for g, f in zip(group, first, strict=True)]
        row_coef = [coefs[g][f] for g, f in zip(group, first, strict=True)]
        entry_link, entry_coef, row_entries = _entries(row_links, row_coef, count)
        alone_rate = np.array([alone[g][f] for g, f in zip(group, first, strict=True)])
        self.stats["prepared"] += 1
        self.stats["prepare_seconds"] += time.perf_counter() - started
        return _Job(
            key=key,
            spec=spec,
            gpus=gpus,
            model=model,
            rank_gpus=rank_gpus,
            layout=layout,
            cache=cache,
            view=view,
            alone_s=alone_s,
            reps=reps,
            bounds=bounds,
            names=names,
            owner=owner,
            inverse=inverse,
            row_entries=row_entries,
            entry_link=entry_link,
            entry_coef=entry_coef,
            alone_rate=alone_rate,
            link_ids=np.unique(entry_link),
        )

    def _components(self) -> list[list[int]]:
        """Keys of the running jobs grouped by shared links (connected components)."""
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import connected_components

        keys = sorted(self._jobs)
        if not keys:
            return []
        sizes = [self._jobs[k].link_ids.size for k in keys]
        rows = np.repeat(np.arange(len(keys)), sizes)
        cols = np.concatenate([self._jobs[k].link_ids for k in keys])
        incidence = csr_matrix(
            (np.ones(rows.size, dtype=np.int32), (rows, cols)),
            shape=(len(keys), self.fabric.num_links),
        )
        shared = incidence @ incidence.T
        count, label = connected_components(shared, directed=False)
        order = np.argsort(label, kind="stable")
        bounds = np.searchsorted(label[order], np.arange(count + 1))
        return [[keys[i] for i in order[bounds[c] : bounds[c + 1]]] for c in range(count)]

    def _evaluate(self) -> None:
        started = time.perf_counter()
        components = self._components()
        solved: dict[frozenset, dict[int, tuple[float, np.ndarray]]] = {}
        flows = 0
        for members in components:
            name = frozenset(members)
            if name in self._solved:
                solved[name] = self._solved[name]
                continue
            if len(members) == 1:
                job = self._jobs[members[0]]
                solved[name] = {job.key: (job.alone_s, job.alone_rate)}
                continue
            solved[name], joined = self._solve(members)
            flows += joined
        self._solved = solved
        self._link_load = None
        for answer in solved.values():
            for key, (seconds, rate) in answer.items():
                self._times[key] = seconds
                self._load[key] = rate
        self._dirty = False
        self.stats["evaluations"] += 1
        self.stats["seconds"] += time.perf_counter() - started
        self.stats["flows_last"] = flows
        self.stats["components_last"] = len(components)
        self.stats["jobs_last"] = len(self._jobs)

    def _solve(self, members: list[int]) -> tuple[dict[int, tuple[float, np.ndarray]], int]:
        """One max-min over the rows of every job of a component, then each job's step
        recomposed with its collectives re-priced (see the module docs). Returns
        ``{key: (seconds, row rates [U])}`` and the number of rows solved."""
        from ..collective.flow_rates import effective_capacity
        from ..solve.maxmin.engine import max_min
        from ..solve.maxmin.entries import FlowEntries
        from ..workload.step import compose_step

        started = time.perf_counter()
        jobs = [self._jobs[k] for k in members]
        row_entries = np.concatenate([j.row_entries for j in jobs])
        entry_link = np.concatenate([j.entry_link for j in jobs])
        entry_coef = np.concatenate([j.entry_coef for j in jobs])
        row_job = np.repeat(np.arange(len(jobs)), [j.row_entries.size for j in jobs])
        # Only rows linked to another job's rows through chains of shared links can change:
        # the others keep their rates alone.
        joined = _joined_rows(row_entries, entry_link, row_job, self.fabric.num_links)
        rate = np.concatenate([j.alone_rate for j in jobs])
        if joined.any():
            cost = next(iter(jobs[0].bounds.values())).prepared.cost
            capacity = effective_capacity(self.fabric, cost)
            keep = np.repeat(joined, row_entries)
            counts = row_entries[joined]
            start = np.concatenate([[0], np.cumsum(counts)])
            entries = FlowEntries(start, entry_link[keep], entry_coef[keep], capacity.size)
            rate[joined] = max_min(entries, capacity, dtype=np.float64).rates
        out = {}
        starts = np.cumsum([0, *(j.row_entries.size for j in jobs)])
        for index, job in enumerate(jobs):
            mine = rate[starts[index] : starts[index + 1]]
            shared = _SharedTimes(job, mine[job.inverse])
            seconds = float(
                sum(compose_step(job.model, job.rank_gpus, job.layout, shared)[2].values())
            )
            out[job.key] = (max(seconds, job.alone_s), mine)
        self.stats["solves"] += 1
        self.stats["solve_seconds"] += time.perf_counter() - started
        return out, int(np.count_nonzero(joined))


def _identical_rows(
    links: list[np.ndarray], coefs: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sets of identical flows (same links and coefficients, same group set) of the group
    sets' padded ``links``/``coefs`` ``[F_i, H_i]``: for each set its first flow (index
    in its group set) and group set ``[U]``; every flow's set ``[F]`` (concatenated order);
    each set's size (float64 ``[U]``). Sets are numbered group set by group set."""
    firsts, inverses, counts, groups = [], [], [], []
    offset = 0
    for index, (lk, cf) in enumerate(zip(links, coefs, strict=True)):
        key = np.ascontiguousarray(np.concatenate([lk, cf.view(np.int64)], axis=1))
        row = key.view(np.dtype((np.void, key.dtype.itemsize * key.shape[1]))).reshape(-1)
        _, first, inverse, count = np.unique(
            row, return_index=True, return_inverse=True, return_counts=True
        )
        firsts.append(first)
        inverses.append(inverse.reshape(-1) + offset)
        counts.append(count)
        groups.append(np.full(first.size, index))
        offset += first.size
    if not firsts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0), empty
    return (
        np.concatenate(firsts).astype(np.int64),
        np.concatenate(inverses).astype(np.int64),
        np.concatenate(counts).astype(np.float64),
        np.concatenate(groups).astype(np.int64),
    )


def _entries(
    row_links: list[np.ndarray], row_coef: list[np.ndarray], count: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Used entries (link >= 0, coef > 0) of each row, row-major: links ``[E]``,
    coefficients x ``count`` ``[E]`` and entries per row ``[U]``."""
    if not row_links:
        return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=np.int64)
    width = max(r.size for r in row_links)
    links = np.full((len(row_links), width), -1, dtype=np.int64)
    coef = np.zeros(links.shape)
    for i, (lk, cf) in enumerate(zip(row_links, row_coef, strict=True)):
        links[i, : lk.size] = lk
        coef[i, : cf.size] = cf
    used = (links >= 0) & (coef > 0)
    coef = coef * count[:, None]
    return links[used], coef[used], np.count_nonzero(used, axis=1).astype(np.int64)


def _joined_rows(
    row_entries: np.ndarray, entry_link: np.ndarray, row_job: np.ndarray, num_links: int
) -> np.ndarray:
    """bool ``[U]``: rows connected, through chains of shared links, to a link that rows
    of two or more jobs use."""
    entry_row = np.repeat(np.arange(row_entries.size), row_entries)
    jobs = int(row_job.max()) + 1 if row_job.size else 1
    pairs = np.unique(entry_link * jobs + row_job[entry_row])
    users = np.bincount(pairs // jobs, minlength=num_links)
    # Rows and links as one bipartite graph (a row joins the links it uses): a row is
    # joined when its connected component holds a link that two or more jobs use. One
    # linear-time component labelling instead of growing the set chain link by chain link.
    rows = row_entries.size
    graph = coo_matrix(
        (np.ones(entry_link.size, dtype=np.int8), (entry_row, rows + entry_link)),
        shape=(rows + num_links, rows + num_links),
    )
    _, label = connected_components(graph, directed=False)
    shared = np.zeros(int(label.max()) + 1 if label.size else 1, dtype=bool)
    shared[label[rows + np.flatnonzero(users >= 2)]] = True
    return shared[label[:rows]]
