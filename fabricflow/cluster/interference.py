"""Interference between co-located jobs: every running job's step time with the traffic of
the jobs that share its links, from the fabric model.

Per job shape, once (:mod:`.job_model`): the step model's own composition at the
reference placement (GPUs ``0..n-1`` in the job's rank order, alone on the healthy
fabric), kept as a table of collective seconds and, per group set (``tp``, ``cp``,
``ep``, ``pp``, ``dp``, ``edp``), the bound phase of the set's representative collective
(the longest, as the step coupling picks it). A job alone at the reference placement gets
its standalone step exactly.

Per job start (:meth:`Interference.add`), at its actual GPUs: its representative phases
routed and solved alone there (or the reference solve, at the reference placement), so
that a job scattered by a scheduler pays for its spread before any sharing. The job is
held as these flows only, merged into rows of identical flows (same links, coefficients
and group set; a row's coefficients multiplied by their count), as used entries (link,
coefficient), not padded, plus its shape's model: not its prepared collectives.

Jobs whose flows share a link form a connected component (each job's links stamped over
one scratch array of the fabric's links, jobs meeting a stamp joined by union-find: the
cost is in the links the jobs use, not in the fabric's). A job alone in its component keeps
its time alone at its placement, and so does every job of a component whose rows at
their own rates (below) fit together on every link (:func:`alone_rates_fit`: those are
then the joint max-min rates). For every other component, the rows of all its jobs that
are chained to another job's through shared links are solved in ONE max-min (the shared
engine in float64 over the concatenated rows; rows not chained keep their own rates, as
max-min rates depend only on flows connected through links): every
running job's bulk traffic in flight together, which is what the snapshot (held-rate)
model of the step coupling assumes inside a job. What the neighbours do is each row's
joint rate against its *own* rate (its job's rows alone, all sets in flight together:
:meth:`Interference._own_rate`), a ratio applied to its alone rate: the contention of a
job's own sets is in its coupled alone times already. Each job's step is then recomposed
with its representative phases at those rates (:meth:`~.job_model.JobModel.step_seconds`):
each collective takes the larger of its coupled alone time and its bound phase priced at
those rates, or, for a set's other collectives, slowed by the representative phase's
slowdown. So a job never runs faster for sharing, and only exposed communication slows
its step.

Re-evaluation happens only for components whose membership changed since the last solve
(or whose jobs were re-routed after :meth:`Interference.set_fabric`, which re-routes only
the jobs whose flows meet a switch at either end of a changed link); others keep their
answer. :attr:`Interference.stats` counts the solves, placements and job models, their
seconds, and the bytes held per running job.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, NamedTuple

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from fabricflow.cluster.job_model import GpuLinks, JobModel, prepare_job_model
from fabricflow.collective import structure_cache
from fabricflow.collective.flow_rates import effective_capacity
from fabricflow.collective.timing import ROUTINGS
from fabricflow.errors import RoutingError, SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.solve.maxmin.engine import max_min
from fabricflow.solve.maxmin.entries import FlowEntries
from fabricflow.workload.calibration import calibration_key
from fabricflow.workload.comm_volume import dimension_bytes
from fabricflow.workload.placement import parse_order


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
class PlacedJob:
    """One running job at its placement (see the module docs): its representative flows
    (``F``: every transfer of every set's bound phase, in set order) as rows of identical
    flows (``U``), each row as its used entries in row-major order (``E``), coefficients
    scaled by the row's count.

    Attributes:
        key, spec, gpus: the job, and its GPUs in rank order.
        model: its shape's :class:`~.job_model.JobModel`.
        names: the set names with flows, in ``model.sets`` order; ``sizes``: transfers of
            each (int64 ``[S]``).
        inverse: int64 ``[F]`` row of every flow; ``row_count``: float64 ``[U]`` flows per row.
        row_entries, entry_link, entry_coef: the rows as entries (``[U]``, ``[E]``, ``[E]``).
        alone_rate: float64 ``[U]`` each row's rate alone at this placement.
        alone_s: the step alone at this placement.
        link_ids: int64 sorted unique links of the flows.
        row_component: int64 ``[U]`` its rows' components over its own links
            (:func:`row_components`).
        own_rate: float64 ``[U]`` its rows' max-min rates with all its sets in flight
            together and no other job (computed when it first shares links: see
            :meth:`Interference._own_rate`), or None.
    """

    key: int
    spec: Any
    gpus: np.ndarray
    model: JobModel
    names: tuple
    sizes: np.ndarray
    inverse: np.ndarray
    row_count: np.ndarray
    row_entries: np.ndarray
    entry_link: np.ndarray
    entry_coef: np.ndarray
    alone_rate: np.ndarray
    alone_s: float
    link_ids: np.ndarray
    row_component: np.ndarray
    own_rate: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        """Bytes held for this job (its arrays; the shape's model is shared)."""
        arrays = (
            self.inverse,
            self.row_count,
            self.row_entries,
            self.entry_link,
            self.entry_coef,
            self.alone_rate,
            self.link_ids,
            self.gpus,
            self.row_component,
        )
        own = 0 if self.own_rate is None else self.own_rate.nbytes
        return int(sum(a.nbytes for a in arrays)) + own

    def rates_by_set(self, row_rate: np.ndarray) -> dict[str, np.ndarray]:
        """``{set name: [T] rates}`` of its transfers, from a rate per row ``[U]``."""
        flow = row_rate[self.inverse]
        bounds = np.cumsum([0, *self.sizes.tolist()])
        return {n: flow[bounds[i] : bounds[i + 1]] for i, n in enumerate(self.names)}


# Job models are built per job shape and fabric and shared by every Interference of the
# process (a trace of a thousand jobs over a dozen shapes builds a dozen), within a bound.
_MODELS: dict[tuple, JobModel] = {}
MODEL_CACHE_BYTES = 2 * 2**30


class Interference:
    """Step times of co-located jobs on ``fabric`` (see the module docs).

    Args:
        fabric: the fabric (job shapes are modelled on it at their reference placement;
            :meth:`set_fabric` applies failed or repaired links later).
        routing: the collective model's routing (as :func:`fabricflow.step_time`).
        seed: ECMP hash seed of the routes.

    Example::

        inter = Interference(fabric)
        inter.add(0, job_a, standalone_a, gpus_a)
        inter.add(1, job_b, standalone_b, gpus_b)
        inter.step_times()  # {0: seconds, 1: seconds}
        inter.set_fabric(fabric.without(links=[...]))  # -> keys of jobs cut off
    """

    def __init__(self, fabric: Fabric, *, routing: str = "auto", seed: int = 0, calibration=None):
        if not isinstance(fabric, Fabric):
            raise SpecError("fabric", f"expected a Fabric, got {type(fabric).__name__}")
        if routing not in ROUTINGS:
            raise SpecError("routing", f"unknown routing {routing!r}; one of {list(ROUTINGS)}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise SpecError("seed", f"must be an integer >= 0, got {seed!r}")
        self.base = fabric
        self.fabric = fabric
        self.routing = routing
        self.seed = int(seed)
        self.calibration = calibration  # its GPU and network constants time every job
        self._fingerprint: str | None = None  # structure-cache digest of self.base
        self._jobs: dict[int, PlacedJob] = {}
        self._times: dict[int, float] = {}
        self._load: dict[int, np.ndarray] = {}  # per job: its rows' rates (joint or alone)
        self._solved: dict[frozenset, dict[int, tuple[float, np.ndarray]]] = {}
        self._dirty = False
        self._link_load: np.ndarray | None = None  # cached until the job mix changes
        self._capacity: np.ndarray | None = None  # effective capacity of self.fabric
        self._stamp: np.ndarray | None = None  # scratch [L] of -1 (see _scratch)
        self._kind_cache: dict[int, tuple] = {}  # job -> (its rates, its load per link kind)
        # each running job as placed on the healthy fabric, taken back when a repair
        # returns the fabric to it (the same GPUs: the same flows and alone rates)
        self._healthy: dict[int, PlacedJob] = {}
        self._gpu_links: GpuLinks | None = None  # the links at each GPU (same in any fabric state)
        self.stats: dict = {
            "evaluations": 0,
            "seconds": 0.0,
            "solves": 0,
            "solves_skipped": 0,
            "own_solves": 0,
            "solve_seconds": 0.0,
            "flows_last": 0,
            "components_last": 0,
            "jobs_last": 0,
            "prepared": 0,
            "prepare_seconds": 0.0,
            "placements_kept": 0,
            "job_models": 0,
            "job_model_seconds": 0.0,
            "job_model_bytes": 0,
            "running_bytes": 0,
            "running_bytes_max": 0,
            "bytes_per_running_job_max": 0,
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
        model = self._job_model(job)
        self._healthy.pop(int(key), None)
        self._jobs[int(key)] = self._place(int(key), job, model, gpus.astype(np.int64))
        self._kind_cache.pop(int(key), None)
        self._load.pop(int(key), None)
        self._forget(int(key))
        self._count_bytes()

    def _forget(self, key: int) -> None:
        """Drop the solved components holding ``key`` (a key re-added elsewhere, e.g. a
        restart, must not find its old component's answer)."""
        self._solved = {name: v for name, v in self._solved.items() if key not in name}
        self._dirty = True
        self._link_load = None

    def remove(self, key: int) -> None:
        """Stop job ``key`` (no-op when it is not running)."""
        self._healthy.pop(int(key), None)
        if self._jobs.pop(int(key), None) is not None:
            self._times.pop(int(key), None)
            self._load.pop(int(key), None)
            self._kind_cache.pop(int(key), None)
            self._forget(int(key))
            self._count_bytes()

    def set_fabric(self, fabric: Fabric) -> list[int]:
        """Links failed or repaired: re-route the running jobs whose flows meet a switch at
        either end of a changed link (ECMP choices there change); the others keep their
        routes, whose links did not change.

        Returns the keys of the jobs whose GPUs can no longer reach each other on
        ``fabric`` (a :class:`~fabricflow.errors.RoutingError` when routing them): they are
        removed here, and the caller treats them as failed (restart or wait)."""
        if not isinstance(fabric, Fabric):
            raise SpecError("fabric", f"expected a Fabric, got {type(fabric).__name__}")
        if fabric.num_links != self.fabric.num_links:
            raise SpecError("fabric", "must be the same fabric with links failed or repaired")
        changed = np.flatnonzero(
            (fabric.capacity != self.fabric.capacity) | (fabric.link_up != self.fabric.link_up)
        )
        self.fabric = fabric
        self._capacity = None
        if not changed.size:
            return []
        nodes = np.zeros(fabric.num_nodes, dtype=bool)
        nodes[fabric.link_src[changed]] = True
        nodes[fabric.link_dst[changed]] = True
        touched = nodes[fabric.link_src] | nodes[fabric.link_dst]
        cut = []
        healthy = self._is_base(fabric)
        for key, job in list(self._jobs.items()):
            if touched[job.link_ids].any():
                try:
                    kept = self._healthy.get(key) if healthy else None
                    if kept is not None and np.array_equal(kept.gpus, job.gpus):
                        self._jobs[key] = kept  # back on the healthy fabric: as placed there
                        self.stats["placements_kept"] += 1
                    else:
                        self._jobs[key] = self._place(key, job.spec, job.model, job.gpus)
                    self._kind_cache.pop(key, None)
                    self._load.pop(key, None)
                except RoutingError:
                    cut.append(key)
                    self.remove(key)
        self._solved.clear()  # capacities differ: every joint answer is stale
        self._dirty = True
        self._link_load = None
        self._count_bytes()
        return cut

    # ------------------------------------------------------------------ answers
    def step_times(self) -> dict[int, float]:
        """Seconds per step of every running job with its component's traffic."""
        if self._dirty:
            self._evaluate()
        return {key: self._times[key] for key in self._jobs}

    def link_load(self, *, fresh: bool = True) -> np.ndarray:
        """float64 ``[L]`` bytes/s on every link offered by the running jobs' representative
        flows at their current rates: joint rates after an evaluation (``fresh``: evaluate
        first when the mix changed), else the last ones known and alone rates for jobs
        added since (what a scheduler reads between two evaluations, without a solve)."""
        if fresh and self._dirty:
            self._evaluate()
        if self._link_load is None:
            jobs = list(self._jobs.values())
            if not jobs:
                return np.zeros(self.fabric.num_links)
            rate = np.concatenate(
                [np.repeat(self._load.get(j.key, j.alone_rate), j.row_entries) for j in jobs]
            )
            self._link_load = np.bincount(
                np.concatenate([j.entry_link for j in jobs]),
                weights=np.concatenate([j.entry_coef for j in jobs]) * rate,
                minlength=self.fabric.num_links,
            )
        return self._link_load.copy()

    def kind_load(self, link_kind: np.ndarray, num_kinds: int) -> np.ndarray:
        """float64 ``[num_kinds]`` bytes/s on the links of each kind (``link_kind``: int
        ``[L]``, a kind id per link) with every running job's collectives in flight
        together, max-min shared: a job that shares links with others at its joint rates,
        a job alone in its component at its own rates (all its sets together,
        :meth:`_own_rate`), not at each set's rate alone, which on links two of its sets
        share would add up past the capacity. So no link carries more than its capacity
        and the load over the kind's capacity lies in [0, 1] (each job's sum is kept until
        its rates change)."""
        if self._dirty:
            self._evaluate()
        total = np.zeros(num_kinds)
        for key, job in self._jobs.items():
            rate = self._load.get(key, job.alone_rate)
            if rate is job.alone_rate:  # alone in its component: its sets share its links
                rate = self._own_rate(job, self._capacity_of(job.model))
            cached = self._kind_cache.get(key)
            if cached is None or cached[0] is not rate:
                weights = job.entry_coef * np.repeat(rate, job.row_entries)
                kinds = link_kind[job.entry_link]
                cached = (rate, np.bincount(kinds, weights=weights, minlength=num_kinds))
                self._kind_cache[key] = cached
            total += cached[1]
        return total

    def alone_s(self, key: int) -> float:
        """Step time (s) of running job ``key`` alone at its placement."""
        return self._jobs[int(key)].alone_s

    def flows(self, key: int) -> tuple[np.ndarray, np.ndarray]:
        """``(links, coef)`` padded ``[F, W]`` (``-1`` / ``0``) of every representative flow
        of running job ``key`` at its placement, unmerged (for checks and plots)."""
        job = self._jobs[int(key)]
        starts = np.concatenate([[0], np.cumsum(job.row_entries)])
        width = int(job.row_entries.max(initial=1))
        links = np.full((job.inverse.size, width), -1, dtype=np.int64)
        coef = np.zeros(links.shape)
        for flow, row in enumerate(job.inverse.tolist()):
            lo, hi = starts[row], starts[row + 1]
            links[flow, : hi - lo] = job.entry_link[lo:hi]
            coef[flow, : hi - lo] = job.entry_coef[lo:hi] / job.row_count[row]
        return links, coef

    # ------------------------------------------------------------------ internals
    def _job_model(self, spec) -> JobModel:
        if self._fingerprint is None:
            self._fingerprint = structure_cache.fabric_fingerprint(self.base)
        key = (
            spec.model,
            spec.gpu,
            spec.layout,
            spec.order,
            self._fingerprint,
            self.routing,
            self.seed,
            calibration_key(self.calibration),
        )
        model = _MODELS.get(key)
        if model is None:
            started = time.perf_counter()
            model = prepare_job_model(
                self.base,
                spec,
                routing=self.routing,
                seed=self.seed,
                fingerprint=self._fingerprint,
                calibration=self.calibration,
            )
            if sum(m.nbytes for m in _MODELS.values()) + model.nbytes > MODEL_CACHE_BYTES:
                _MODELS.clear()
            _MODELS[key] = model
            self.stats["job_models"] += 1
            self.stats["job_model_seconds"] += time.perf_counter() - started
            self.stats["job_model_bytes"] += model.nbytes
        return model

    def _place(self, key: int, spec: Any, model: JobModel, gpus: np.ndarray) -> PlacedJob:
        """The job's representative flows at ``gpus`` on the current fabric, as rows."""
        started = time.perf_counter()
        if self._gpu_links is None:
            self._gpu_links = GpuLinks.of(self.base)
        solved = model.place(gpus, self.fabric, self._gpu_links, self._capacity_of(model))
        names = tuple(s.name for s in model.sets)
        links = [solved[n].links for n in names]
        coefs = [solved[n].coef for n in names]
        alone = [solved[n].rate.reshape(-1) for n in names]
        inverse, count, row_entries, entry_link, entry_coef = merged_rows(links, coefs)
        link_ids, local = used_links(entry_link)
        flow_rate = np.concatenate(alone) if alone else np.zeros(0)
        alone_rate = np.zeros(count.size)
        alone_rate[inverse] = flow_rate  # identical flows have identical rates
        alone_s = model.step_seconds({n: r for n, r in zip(names, alone, strict=True)})
        self.stats["prepared"] += 1
        self.stats["prepare_seconds"] += time.perf_counter() - started
        placed = PlacedJob(
            key=key,
            spec=spec,
            gpus=gpus,
            model=model,
            names=names,
            sizes=np.array([a.size for a in alone], dtype=np.int64),
            inverse=inverse,
            row_count=count,
            row_entries=row_entries,
            entry_link=entry_link,
            entry_coef=entry_coef,
            alone_rate=alone_rate,
            alone_s=alone_s,
            link_ids=link_ids,
            row_component=row_components(row_entries, local),
        )
        if self._is_base(self.fabric):
            self._healthy[key] = placed
        return placed

    def _is_base(self, fabric: Fabric) -> bool:
        """Whether ``fabric`` is the healthy fabric (the same object, or every link up
        with the same capacity)."""
        base = self.base
        return fabric is base or (
            np.array_equal(fabric.capacity, base.capacity)
            and np.array_equal(np.asarray(fabric.link_up), np.asarray(base.link_up))
        )

    def _capacity_of(self, model: JobModel) -> np.ndarray | None:
        """Effective capacity (B/s ``[L]``) of the current fabric, computed once per fabric
        (every job shares the collective model's default cost model)."""
        if not model.sets:
            return None
        if self._capacity is None:
            self._capacity = effective_capacity(self.fabric, model.sets[0].cost)
        return self._capacity

    def _count_bytes(self) -> None:
        sizes = []
        for key, job in self._jobs.items():
            kept = self._healthy.get(key)  # its healthy placement, when another is current
            sizes.append(job.nbytes + (kept.nbytes if kept is not None and kept is not job else 0))
        running = int(sum(sizes))
        self.stats["running_bytes"] = running
        self.stats["running_bytes_max"] = max(self.stats["running_bytes_max"], running)
        self.stats["bytes_per_running_job_max"] = max(
            [self.stats["bytes_per_running_job_max"], *sizes]
        )

    def _components(self) -> list[list[int]]:
        """Keys of the running jobs grouped by shared links (connected components): each
        job's links are stamped with its index in a scratch array over the fabric's links
        (reset after), and jobs meeting an earlier stamp are joined (union-find over the
        jobs): O(links used), not O(fabric links)."""
        keys = sorted(self._jobs)
        if not keys:
            return []
        stamp = self._scratch()
        parent = list(range(len(keys)))

        def root(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for index, key in enumerate(keys):
            links = self._jobs[key].link_ids
            before = stamp[links]
            for other in np.unique(before[before >= 0]).tolist():
                a, b = root(index), root(int(other))
                if a != b:
                    parent[max(a, b)] = min(a, b)
            stamp[links] = index
        for key in keys:
            stamp[self._jobs[key].link_ids] = -1
        groups: dict[int, list[int]] = {}
        for index, key in enumerate(keys):
            groups.setdefault(root(index), []).append(key)
        return list(groups.values())

    def _scratch(self) -> np.ndarray:
        """int64 ``[L]`` filled with -1, kept between calls (callers reset what they set)."""
        if self._stamp is None or self._stamp.size != self.fabric.num_links:
            self._stamp = np.full(self.fabric.num_links, -1, dtype=np.int64)
        return self._stamp

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

    def _own_rate(self, job: PlacedJob, capacity: np.ndarray | None) -> np.ndarray:
        """float64 ``[U]``: ``job``'s rows' max-min rates with every set in flight together
        and no other job: its alone rates when they fit together on its links
        (:func:`alone_rates_fit`), else one solve of its rows; kept with the placement."""
        if job.own_rate is None:
            if capacity is None or alone_rates_fit([job], capacity, self._scratch()):
                job.own_rate = job.alone_rate
            else:
                job.own_rate = self._max_min(job.row_entries, job.entry_link, job.entry_coef)
                self.stats["own_solves"] += 1
        return job.own_rate

    def _max_min(
        self, row_entries: np.ndarray, entry_link: np.ndarray, entry_coef: np.ndarray
    ) -> np.ndarray:
        """float64 ``[U]`` max-min rates of rows given as entries, on the current fabric's
        effective capacity (the shared engine, float64)."""
        start = np.concatenate([[0], np.cumsum(row_entries)])
        entries = FlowEntries(start, entry_link, entry_coef, self.fabric.num_links)
        capacity = self._capacity
        return np.asarray(max_min(entries, capacity, dtype=np.float64).rates, dtype=np.float64)

    def _solve(self, members: list[int]) -> tuple[dict[int, tuple[float, np.ndarray]], int]:
        """One max-min over the rows of every job of a component, then each job's step
        recomposed at its joint rates (see the module docs). Returns ``{key: (seconds, row
        rates [U])}`` and the number of rows solved."""
        started = time.perf_counter()
        jobs = [self._jobs[k] for k in members]
        row_entries = np.concatenate([j.row_entries for j in jobs])
        entry_link = np.concatenate([j.entry_link for j in jobs])
        entry_coef = np.concatenate([j.entry_coef for j in jobs])
        capacity = self._capacity_of(jobs[0].model)
        own = [self._own_rate(j, capacity) for j in jobs]
        rate = np.concatenate(own)
        if capacity is not None and alone_rates_fit(jobs, capacity, self._scratch(), own):
            # every job's own rates fit together on every link they use: they are the
            # joint max-min rates (see alone_rates_fit), no solve needed
            self.stats["solves_skipped"] += 1
            joined = np.zeros(rate.size, dtype=bool)
        else:
            # Only rows linked to another job's rows through chains of shared links can
            # change: the others keep their own rates (max-min is separable over
            # components of the row-link graph).
            joined = joined_rows(jobs, self._scratch())
        if joined.any():
            keep = np.repeat(joined, row_entries)
            rate[joined] = self._max_min(row_entries[joined], entry_link[keep], entry_coef[keep])
        out = {}
        starts = np.cumsum([0, *(j.row_entries.size for j in jobs)])
        for index, job in enumerate(jobs):
            mine = rate[starts[index] : starts[index + 1]]
            # what the neighbours do: the joint rates against the job's own, applied to
            # its sets' alone rates (its own sets' contention is in its coupled times)
            ratio = np.divide(mine, own[index], out=np.ones_like(mine), where=own[index] > 0)
            seconds = job.model.step_seconds(job.rates_by_set(job.alone_rate * ratio))
            out[job.key] = (max(seconds, job.alone_s), mine)
        self.stats["solves"] += 1
        self.stats["solve_seconds"] += time.perf_counter() - started
        return out, int(np.count_nonzero(joined))


# Relative slack of alone_rates_fit: a link its own set saturates sums to its capacity
# only to within rounding (a few ulp); an accepted excess changes rates by at most this.
FIT_RTOL = 1e-9

# Odd 64-bit multipliers of the row hash (fixed: the same rows in the same order each run).
_HASH = np.random.default_rng(0x5EED).integers(1, 2**63, size=4096, dtype=np.uint64) | np.uint64(1)


def merged_rows(
    links: list[np.ndarray], coefs: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Identical flows merged into rows, as used entries.

    Args:
        links, coefs: per group set, its flows' padded links (int, ``-1``) and coefficients
            ``[F_i, H_i]``.

    Returns:
        ``(inverse, count, row_entries, entry_link, entry_coef)``: every flow's row
        (int64 ``[F]``, flows in set order), flows per row (float64 ``[U]``), entries per
        row (int64 ``[U]``), and the rows' used entries (link >= 0, coefficient > 0) in
        row-major order (int64 / float64 ``[E]``), coefficients multiplied by the count.
        Rows are numbered set by set, each set's by their first flow; flows of different
        sets never merge.

    Each set's rows are found by one vectorized hash of (links, coefficient bits) and
    ``np.unique`` on it, then checked equal to their row's first flow (a hash collision
    falls back to the exact row-wise unique). Sets keep their own widths (a 16,384-GPU
    job's DP rows cross 260 links, its TP rows 16).
    """
    parts = [
        _merged_set(np.asarray(lk), np.asarray(cf)) for lk, cf in zip(links, coefs, strict=True)
    ]
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, np.zeros(0), empty, empty, np.zeros(0)
    offsets = np.cumsum([0, *(part[1].size for part in parts)])
    return (
        np.concatenate([part[0] + offset for part, offset in zip(parts, offsets, strict=False)]),
        np.concatenate([part[1] for part in parts]),
        np.concatenate([part[2] for part in parts]),
        np.concatenate([part[3] for part in parts]),
        np.concatenate([part[4] for part in parts]),
    )


def _merged_set(links: np.ndarray, coef: np.ndarray):
    """:func:`merged_rows` of one set's ``links``/``coef`` ``[F, H]``."""
    links = links.astype(np.int64, copy=False)
    coef = coef.astype(np.float64, copy=False)
    key = np.concatenate([links, coef.view(np.int64)], axis=1)
    exact = False
    if key.shape[1] <= _HASH.size:
        with np.errstate(over="ignore"):
            hashed = (key.view(np.uint64) * _HASH[: key.shape[1]]).sum(axis=1, dtype=np.uint64)
        _, first, inverse = np.unique(hashed, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        exact = np.array_equal(key, key[first[inverse]])
    if not exact:  # a collision (or rows too wide to hash): the exact row-wise unique
        rows = np.ascontiguousarray(key).view(np.dtype((np.void, 8 * key.shape[1]))).reshape(-1)
        _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
    order = np.argsort(first, kind="stable")  # number rows by their first flow
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    first, inverse = first[order], rank[inverse]
    count = np.bincount(inverse, minlength=first.size).astype(np.float64)
    row_links = links[first]
    row_coef = coef[first] * count[:, None]
    used = (row_links >= 0) & (row_coef > 0)
    return (
        inverse.astype(np.int64),
        count,
        np.count_nonzero(used, axis=1).astype(np.int64),
        row_links[used],
        row_coef[used],
    )


def used_links(entry_link: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(links, local)``: the sorted distinct links of ``entry_link`` (int ``[E]``, >= 0)
    and each entry's index among them (int64 ``[E]``), as ``np.unique(...,
    return_inverse=True)``. With many entries over a range of link ids it is a mark over
    the range (O(E + range), no sort: a 16,384-GPU job's entries on ``clos-100k`` in a few
    milliseconds); with few, a sort."""
    entry_link = np.asarray(entry_link, dtype=np.int64)
    if entry_link.size == 0:
        return entry_link.copy(), entry_link.copy()
    span = int(entry_link.max()) + 1
    if entry_link.size * 8 < span:  # few entries over a wide range: sorting them is cheaper
        links, local = np.unique(entry_link, return_inverse=True)
        return links, local.reshape(-1).astype(np.int64, copy=False)
    present = np.zeros(span, dtype=bool)
    present[entry_link] = True
    links = np.flatnonzero(present)
    index = np.empty(span, dtype=np.int64)  # only the used ids are written and read
    index[links] = np.arange(links.size)
    return links, index[entry_link]


def row_components(row_entries: np.ndarray, entry_link: np.ndarray) -> np.ndarray:
    """int64 ``[U]``: a label per row, equal for rows connected through chains of shared
    links (connected components of the row-link graph of ONE job's rows). Computed once
    per placement; :func:`joined_rows` needs no graph of the joint problem then."""
    if entry_link.size == 0:
        return np.arange(row_entries.size, dtype=np.int64)
    entry_row = np.repeat(np.arange(row_entries.size), row_entries)
    used, local = used_links(entry_link)
    rows = row_entries.size
    size = rows + used.size
    graph = coo_matrix(
        (np.ones(entry_link.size, dtype=np.int8), (entry_row, rows + local)),
        shape=(size, size),
    )
    _, label = connected_components(graph, directed=False)
    return label[:rows].astype(np.int64)


def shared_links(jobs: list, scratch: np.ndarray) -> np.ndarray:
    """int64: the links (with repeats) that two or more of ``jobs`` use (objects with
    ``link_ids``, see :class:`PlacedJob`); ``scratch``: an int64 array over the links
    filled with -1 (left so). O(links the jobs use)."""
    multi = []
    for index, job in enumerate(jobs):
        before = scratch[job.link_ids]
        multi.append(job.link_ids[before >= 0])
        scratch[job.link_ids] = index
    for job in jobs:
        scratch[job.link_ids] = -1
    return np.concatenate(multi) if multi else np.zeros(0, dtype=np.int64)


def alone_rates_fit(
    jobs: list, capacity: np.ndarray, scratch: np.ndarray, rates: list | None = None
) -> bool:
    """Whether the rows of ``jobs`` (see :class:`PlacedJob`) at their alone rates
    (``alone_rate``, each group set solved alone) load no link beyond ``capacity`` (B/s
    ``[L]``, with a relative slack of :data:`FIT_RTOL` for the rounding of saturated
    links).

    When they fit, the alone rates are the joint max-min rates of all the rows together:
    each flow's bottleneck in its set's own solve is a link that set saturates and on
    which the flow has the largest rate; when the sum fits, no other row loads that link,
    so it is still saturated with the flow's rate the largest on it, and a feasible
    allocation in which every flow has such a bottleneck is the (unique) max-min fair one.
    So a component whose jobs do not contend needs no solve (most of them in a cluster
    that is not saturated). The same holds with each job's rows at their max-min rates
    over its own rows (``rates``: float64 ``[U]`` per job, default ``alone_rate``).
    ``scratch``: an int64 array over the links filled with -1 (left so). O(entries).
    """
    links = used_links(np.concatenate([job.link_ids for job in jobs]))[0]
    if links.size == 0:
        return True
    scratch[links] = np.arange(links.size)
    load = np.zeros(links.size)
    for index, job in enumerate(jobs):
        rate = job.alone_rate if rates is None else rates[index]
        weight = job.entry_coef * np.repeat(rate, job.row_entries)
        load += np.bincount(scratch[job.entry_link], weights=weight, minlength=links.size)
    scratch[links] = -1
    return bool(np.all(load <= capacity[links] * (1.0 + FIT_RTOL)))


def joined_rows(jobs: list, scratch: np.ndarray, shared: np.ndarray | None = None) -> np.ndarray:
    """bool over the concatenated rows of ``jobs`` (objects with ``row_entries``,
    ``entry_link``, ``link_ids`` and ``row_component``, see :class:`PlacedJob`): rows
    connected, through chains of shared links, to a link that rows of two or more jobs use.

    A path from a job's row to such a link leaves the job's own rows only through a link
    another job uses too, so a row is joined exactly when its job-internal component
    (:func:`row_components`) touches a link used by two or more jobs: O(entries), with
    ``scratch`` an int64 array over the links filled with -1 (left so). ``shared``: the
    jobs' :func:`shared_links` when already known.
    """
    if shared is None:
        shared = shared_links(jobs, scratch)
    scratch[shared] = 1
    out = []
    for job in jobs:
        touch = scratch[job.entry_link] == 1
        entry_row = np.repeat(np.arange(job.row_entries.size), job.row_entries)
        marked = np.zeros(int(job.row_component.max(initial=-1)) + 1, dtype=bool)
        marked[job.row_component[entry_row[touch]]] = True
        out.append(marked[job.row_component])
    scratch[shared] = -1
    return np.concatenate(out) if out else np.zeros(0, dtype=bool)
