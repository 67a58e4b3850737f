"""A job's step time from its representative traffic: prepared once per job shape, priced
at any placement and any rates in milliseconds, held compactly.

A :class:`JobModel` is built once per job shape (model, GPU type, layout, rank order) on
the healthy fabric, at the reference placement: the job alone at GPUs ``0..n-1`` in its
rank order, where the step model's own composition (:func:`fabricflow.step_time`'s:
every collective priced by the collective model, the overlap windows of the job's own
dimensions coupled) gives its standalone step. It keeps, and nothing else:

- the seconds the composition asked for each collective (``base``: ``(name, op, size) ->
  s``, the coupled alone times), so that the step can be recomposed from a table;
- per group set (``tp``, ``cp``, ``ep``, ``pp``, ``dp``, ``edp``) its representative
  collective's bound phase (:class:`SetModel`): the phase's hops (to route it at another
  placement), its solve at the reference placement, the bytes and latency of each
  transfer (its time at rate ``r`` is ``bytes / r + latency``, the cost model's), the
  groups' alone and bound-phase seconds, and the same two arrays for the set's other
  collectives (slowed by the representative phase's slowdown).

So the prepared collectives (routes and solves of every algorithm of every collective)
are dropped after preparation: a running job is its representative flows at its
placement (:class:`PlacedJob`) and a reference to its shape's model.

:meth:`JobModel.place` routes and solves the representative phases at a placement (or
reuses the reference solve there), and :meth:`JobModel.step_seconds` recomposes the step
with any rates of those transfers (alone there, or in a joint solve with other jobs): each
collective takes the larger of its coupled alone time and its bound phase priced at those
rates (the representative) or slowed by the representative phase's slowdown (the set's
others), as the co-location model always did (docs/cluster-scheduling.md). A job alone at
the reference placement gets its standalone step exactly; at another placement it pays
for what that placement does to its representative phases (a spread placement crossing
spines, ECMP collisions, failed links), never less than at the reference.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from fabricflow.collective import structure_cache
from fabricflow.collective.comm import CollectiveCache
from fabricflow.collective.coupling import bound_phase, plan_windows
from fabricflow.collective.flow_rates import effective_capacity, solve_phase
from fabricflow.collective.nccl_cost import DEFAULT_COST
from fabricflow.errors import SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.workload.hetero import job_gpus, split_for_gpus
from fabricflow.workload.placement import Placement, parse_order
from fabricflow.workload.step import compose_step, issue_rates, register_groups

DIMENSION_NAMES = ("tp", "cp", "ep", "pp", "dp", "edp")
COMPOSED_MEMO = 512  # remembered compositions per job shape


@dataclasses.dataclass(frozen=True, eq=False)
class SetModel:
    """One group set's representative bound phase (arrays over its ``T = G x Tg``
    transfers, or its ``G`` groups).

    Attributes:
        name: the group set.
        rep: ``(name, op, size)`` of the representative collective.
        phase: the bound :class:`~fabricflow.collective.phase.Phase` (GPUs of the
            reference placement, which are rank ids).
        solved: its solve at the reference placement (a ``SolvedPhase``).
        flow_bytes: float64 ``[T]`` bytes of each transfer at full efficiency.
        latency_s: float64 ``[T]`` latency of each transfer (repeats included).
        group: int64 ``[T]`` group of each transfer.
        total_s, phase_s: float64 ``[G]`` the representative's seconds alone and its bound
            phase's, per group.
        others: ``{(op, size): (total_s, phase_s)}`` of the set's other collectives.
        cost: the collective model's cost model (its link efficiencies).
        routing, seed: how the collective model routed the phase.
        fabric: the fabric of the reference solve.
    """

    name: str
    rep: tuple
    phase: Any
    solved: Any
    flow_bytes: np.ndarray
    latency_s: np.ndarray
    group: np.ndarray
    total_s: np.ndarray
    phase_s: np.ndarray
    others: dict
    cost: Any
    routing: str
    seed: int
    fabric: Fabric

    def seconds(self, rate: np.ndarray) -> tuple[float, float]:
        """``(factor, priced_s)`` with the phase's transfers at ``rate`` (B/s ``[T]``):
        the phase's slowdown against alone (>= 1, the largest over groups) and the
        representative's slowest group seconds with the phase at those rates."""
        with np.errstate(divide="ignore"):
            transfer = np.where(self.flow_bytes > 0, self.flow_bytes / rate, 0.0) + self.latency_s
        phase = np.full(self.total_s.shape, -np.inf)
        np.maximum.at(phase, self.group, transfer)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(self.phase_s > 0, phase / self.phase_s, 1.0)
        factor = max(1.0, float(np.max(ratio)))
        return factor, float((self.total_s - self.phase_s + phase).max())


class _Table:
    """Collective seconds for the step composition: the reference's coupled alone times,
    or with some group sets re-priced (``changed``: name -> (factor, priced_s))."""

    backend = "fabric"

    def __init__(self, model: JobModel, changed: dict[str, tuple[float, float]]):
        self.model = model
        self.changed = changed

    def slowest(self, name: str, op: str, size: float) -> float:
        key = (name, op, float(size))
        base = self.model.base.get(key)
        if base is None:  # asked first now (a composition that differs): not expected
            raise KeyError(f"the job model has no time for {key}")
        if name not in self.changed:
            return base
        factor, priced = self.changed[name]
        sets = self.model.sets_by_name[name]
        if sets.rep == key:
            return max(base, priced)
        other = sets.others.get((op, float(size)))
        if other is None:
            return base
        total, phase = other
        return max(base, float((total - phase + factor * phase).max()))


class _Recorder:
    """Stands in for the coupled view during the reference composition: answers from it
    and records every ``(name, op, size) -> seconds`` asked."""

    backend = "fabric"

    def __init__(self, view):
        self.view = view
        self.asked: dict[tuple, float] = {}

    def slowest(self, name: str, op: str, size: float) -> float:
        key = (name, op, float(size))
        if key not in self.asked:
            self.asked[key] = float(self.view.slowest(name, op, size))
        return self.asked[key]


@dataclasses.dataclass(frozen=True, eq=False)
class JobModel:
    """A job shape's step model from its representative traffic (see the module docs).

    Attributes:
        model, layout, rank_gpus: what the step composition needs.
        gpus: the job's GPU count.
        base: ``{(name, op, size): coupled alone seconds}`` at the reference placement.
        sets: the group sets with network flows (:class:`SetModel`), in a fixed order.
        alone_s: the step alone at the reference placement (the standalone step).
        fabric: the healthy fabric it was prepared on (the reference placement's).
    """

    model: Any
    layout: Any
    rank_gpus: tuple
    gpus: int
    base: dict
    sets: tuple
    alone_s: float
    fabric: Fabric
    # the steps composed for given (factor, priced) of the changed sets: a job whose rates
    # do not change between two joint solves of its component is not composed again
    _composed: dict = dataclasses.field(default_factory=dict, repr=False)

    @property
    def sets_by_name(self) -> dict[str, SetModel]:
        return {s.name: s for s in self.sets}

    @property
    def nbytes(self) -> int:
        """Bytes held (arrays of the sets and their reference solves)."""
        total = 0
        for s in self.sets:
            total += s.flow_bytes.nbytes * 3 + s.total_s.nbytes * 2
            total += sum(a.nbytes for a in _solved_arrays(s.solved))
            total += sum(a.nbytes for a in _phase_arrays(s.phase))
            total += sum(t.nbytes + p.nbytes for t, p in s.others.values())
        return int(total)

    def step_seconds(self, rates: dict[str, np.ndarray]) -> float:
        """The step (s) with the sets' transfers at ``rates`` (``name -> [T]`` B/s; a set
        left out, or at exactly its reference rates, keeps its coupled alone times)."""
        changed = {}
        for s in self.sets:
            rate = rates.get(s.name)
            if rate is None or np.array_equal(rate, s.solved.rate.reshape(-1)):
                continue
            changed[s.name] = s.seconds(rate)
        if not changed:
            return self.alone_s
        memo = self._composed
        key = tuple(sorted(changed.items()))
        if key not in memo:
            table = _Table(self, changed)
            seconds = sum(compose_step(self.model, self.rank_gpus, self.layout, table)[2].values())
            if len(memo) >= COMPOSED_MEMO:
                memo.clear()
            memo[key] = max(float(seconds), self.alone_s)
        return memo[key]

    def place(
        self,
        gpus: np.ndarray,
        fabric: Fabric,
        table: GpuLinks | None = None,
        capacity: np.ndarray | None = None,
    ) -> dict:
        """``{name: SolvedPhase}``: each representative phase at ``gpus`` (int ``[n]``, rank
        order) on ``fabric``: the reference solve at the reference placement on the fabric
        prepared on; the reference solve mapped link for link when the placement is
        equivalent to it for this phase (:func:`map_placement`: the same rates, exactly);
        else routed and solved alone there by the collective model's
        :func:`~fabricflow.collective.flow_rates.solve_phase`.

        Raises:
            RoutingError: the GPUs cannot all reach each other on ``fabric``.
        """
        gpus = np.asarray(gpus, dtype=np.int64)
        reference = fabric is self.fabric and np.array_equal(gpus, np.arange(self.gpus))
        out = {}
        for s in self.sets:
            if reference:
                out[s.name] = s.solved
                continue
            if table is None:
                table = GpuLinks.of(self.fabric)
            mapped = map_placement(s, gpus, fabric, table)
            if mapped is not None:
                out[s.name] = mapped
                continue
            if capacity is None:
                capacity = effective_capacity(fabric, s.cost)
            phase = s.phase
            moved = dataclasses.replace(
                phase,
                hop_src=np.where(phase.hop_src >= 0, gpus[np.maximum(phase.hop_src, 0)], -1),
                hop_dst=np.where(phase.hop_dst >= 0, gpus[np.maximum(phase.hop_dst, 0)], -1),
            )
            out[s.name] = solve_phase(fabric, moved, capacity, routing=s.routing, seed=s.seed)
        return out


@dataclasses.dataclass(frozen=True)
class GpuLinks:
    """The links at each GPU, by link kind: ``up[k, g]`` the link of kind ``k`` out of
    GPU ``g`` and ``down[k, g]`` into it (``-1`` none, ``-2`` several: not mappable)."""

    up: np.ndarray
    down: np.ndarray
    gpu_of_node: np.ndarray

    @classmethod
    def of(cls, fabric: Fabric) -> GpuLinks:
        gpu_of_node = np.full(fabric.num_nodes, -1, dtype=np.int64)
        gpu_of_node[fabric.gpu_node] = np.arange(fabric.num_gpus)
        kinds = fabric.link_kind_id.astype(np.int64)
        num_kinds = int(kinds.max(initial=0)) + 1
        tables = []
        for end in (fabric.link_src, fabric.link_dst):
            gpu = gpu_of_node[end]
            at = np.flatnonzero(gpu >= 0)
            table = np.full((num_kinds, fabric.num_gpus), -1, dtype=np.int64)
            flat = kinds[at] * fabric.num_gpus + gpu[at]
            counts = np.bincount(flat, minlength=table.size)
            table.reshape(-1)[flat] = at
            table.reshape(-1)[counts > 1] = -2
            tables.append(table)
        return cls(tables[0], tables[1], gpu_of_node)


def map_placement(s: SetModel, gpus: np.ndarray, fabric: Fabric, table: GpuLinks):
    """The reference solve of set ``s`` moved to ``gpus`` link for link, or None when the
    placement is not equivalent to the reference for this phase.

    Equivalent means: every link of the phase's flows touches a GPU (NVLink, NIC cables:
    a rail-local data-parallel ring, a tensor-parallel group in its server), each maps to
    the same kind of link at the GPU taking that rank, the switches at the other ends map
    one to one (so GPUs that shared a leaf or an NVLink switch still do), and the mapped
    links are up with the same capacity and latency. The mapped flows are then the same
    max-min problem with links renamed: the same rates, the same latencies.
    """
    solved = s.solved
    valid = solved.links >= 0
    ref = solved.links[valid].astype(np.int64)
    ref_fabric = s.fabric
    src_gpu = table.gpu_of_node[ref_fabric.link_src[ref]]
    dst_gpu = table.gpu_of_node[ref_fabric.link_dst[ref]]
    up = src_gpu >= 0
    down = dst_gpu >= 0
    if not np.all(up ^ down):  # a switch-to-switch link, or a GPU-to-GPU cable
        return None
    kind = ref_fabric.link_kind_id[ref].astype(np.int64)
    rank = np.where(up, src_gpu, dst_gpu)
    if rank.max(initial=-1) >= gpus.size:
        return None
    moved_gpu = gpus[rank]
    mapped = np.where(up, table.up[kind, moved_gpu], table.down[kind, moved_gpu])
    if np.any(mapped < 0):
        return None
    ref_switch = np.where(up, ref_fabric.link_dst[ref], ref_fabric.link_src[ref])
    new_switch = np.where(up, fabric.link_dst[mapped], fabric.link_src[mapped])
    pairs = np.unique(ref_switch * np.int64(fabric.num_nodes) + new_switch)
    if (
        np.unique(pairs // fabric.num_nodes).size != pairs.size
        or np.unique(pairs % fabric.num_nodes).size != pairs.size
    ):
        return None  # two switches would become one, or one two: not the same problem
    link_up = fabric.link_up
    if not (
        (link_up is None or bool(np.all(link_up[mapped])))
        and np.array_equal(fabric.capacity[mapped], ref_fabric.capacity[ref])
        and np.array_equal(fabric.latency[mapped], ref_fabric.latency[ref])
    ):
        return None
    links = solved.links.copy()
    links[valid] = mapped
    return dataclasses.replace(solved, links=links)


def _solved_arrays(solved) -> list[np.ndarray]:
    return [solved.rate, solved.path_latency_s, solved.links, solved.coef]


def _phase_arrays(phase) -> list[np.ndarray]:
    return [phase.hop_src, phase.hop_dst, phase.hop_load, phase.hop_latency_count]


def prepare_job_model(
    fabric: Fabric,
    spec,
    *,
    routing: str = "auto",
    seed: int = 0,
    fingerprint: str | None = None,
    calibration=None,
) -> JobModel:
    """The :class:`JobModel` of ``spec`` (a JobSpec) on the healthy ``fabric``: the step
    model's composition at GPUs ``0..n-1`` (see the module docs), with ``calibration``'s
    GPU and network constants when given."""
    model, given = spec.model, spec.layout
    given.validate(model)
    rank_gpus = job_gpus(spec.gpu, given)
    if calibration is not None:
        rank_gpus = tuple(calibration.gpu_spec(each) for each in rank_gpus)
    layout = split_for_gpus(model, given, rank_gpus).validate(model)
    n = int(layout.num_gpus)
    where = Placement(layout=given, order=parse_order(spec.order), gpu_of_rank=np.arange(n))
    cost = DEFAULT_COST if calibration is None else calibration.cost_model()
    cache = CollectiveCache(fabric, "fabric", routing=routing, seed=seed, cost=cost)
    # every job shares one fabric: hash it once (~0.2 s on clos-100k), not per job
    cache._fabric_fingerprint = fingerprint or structure_cache.fabric_fingerprint(fabric)
    cache = register_groups(cache, where, model, layout)
    # step_time's own composition (step._coupled_step), recording what it asks
    _, slow, _ = compose_step(model, rank_gpus, layout, cache)
    recorder = _Recorder(plan_windows(cache, layout, issue_rates(model, layout, slow)))
    alone_s = float(sum(compose_step(model, rank_gpus, layout, recorder)[2].values()))
    asked = cache.asked()
    sets = []
    for name in DIMENSION_NAMES:
        items = [k for k in asked if k[0] == name and asked[k] > 0]
        if not items:
            continue
        rep = max(items, key=lambda k: (asked[k], k))
        bound = bound_phase(cache, *rep)
        if bound is None or not bound.sp.links.size:
            continue
        others = {}
        for key in recorder.asked:
            if key[0] != name or key == rep:
                continue
            other = bound_phase(cache, *key)
            if other is not None:
                others[(key[1], key[2])] = (other.total_s.copy(), other.phase_s.copy())
        groups, per_group = bound.sp.rate.shape
        sets.append(
            SetModel(
                name=name,
                rep=rep,
                phase=bound.sp.phase,
                solved=bound.sp,
                flow_bytes=bound.flow_bytes().astype(np.float64),
                latency_s=bound.latency_s().reshape(-1).astype(np.float64),
                group=np.repeat(np.arange(groups), per_group),
                total_s=np.asarray(bound.total_s, dtype=np.float64),
                phase_s=np.asarray(bound.phase_s, dtype=np.float64),
                others=others,
                cost=bound.prepared.cost,
                routing=bound.prepared.routing,
                seed=int(seed),
                fabric=fabric,
            )
        )
    return JobModel(
        model=model,
        layout=layout,
        rank_gpus=rank_gpus,
        gpus=n,
        base=dict(recorder.asked),
        sets=tuple(sets),
        alone_s=alone_s,
        fabric=fabric,
    )


def check_gpus(job_model_gpus: int, gpus) -> np.ndarray:
    """``gpus`` as int64 ``[n]`` for a job of ``job_model_gpus`` GPUs (SpecError if not)."""
    gpus = np.asarray(gpus)
    if gpus.ndim != 1 or (gpus.size and not np.issubdtype(gpus.dtype, np.integer)):
        raise SpecError("gpus", "must be a 1-D array of integer GPU ids")
    if gpus.size != job_model_gpus:
        raise SpecError("gpus", f"the job has {job_model_gpus} GPUs, got {gpus.size}")
    return gpus.astype(np.int64)
