"""Phases -> fluid rates on the fabric: route every hop, merge each transfer into one
flow, solve max-min fair rates over all transfers of all groups at once.

A pipelined transfer crosses several hops; in steady state it runs at one rate ``r`` on
all of them, so it is one flow whose route is the union of its hops' routes, with a
coefficient per link = how many bytes the link carries per byte of progress (hop load x
routing split, summed over the hops that cross the link; hops of one ``max_group`` take the
maximum instead: in-network reduction, where a link carries the stream once). Max-min fairness among these flows is
what congestion control converges to when the transfers of all groups contend.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fabricflow.collective.nccl_cost import CostModel
from fabricflow.collective.phase import Phase
from fabricflow.collective.symmetry import DomainReplica, domain_replica, replicated_domains
from fabricflow.errors import SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.link_loads import link_load
from fabricflow.routing.route import route
from fabricflow.solve.maxmin.batch import max_min_batch
from fabricflow.solve.maxmin.engine import max_min
from fabricflow.solve.maxmin.entries import FlowEntries


@dataclasses.dataclass(frozen=True, eq=False)
class SolvedPhase:
    """Rates and latencies of one phase's transfers (arrays ``[G, Tg]``).

    Attributes:
        phase: the phase.
        rate: float64 bytes/s of progress of each transfer (before protocol efficiency).
        path_latency_s: float64 critical-path fabric latency (sum over hops of latency
            count x path latency).
        intra_steps / network_steps: float64 critical-path steps inside a scale-up domain /
            across the network (each costs the protocol's software overhead).
        links, coef: the merged flows ``[T, H]`` (``T = G * Tg``) given to the solver.
        solver: the max-min backend that solved them (``"numpy"``, ``"jax"``, ``"custom"``).
        serial: a number shared by the phases that reuse one solve (twins), unique per
            solve; ``-1`` when not shared (a custom solver).
        replicated: the groups are translations of one another (:mod:`.symmetry`): their
            rates, latencies and steps are equal, group by group.
    """

    phase: Phase
    rate: np.ndarray
    path_latency_s: np.ndarray
    intra_steps: np.ndarray
    network_steps: np.ndarray
    links: np.ndarray
    coef: np.ndarray
    solver: str = "numpy"
    serial: int = -1
    replicated: bool = False

    def used_links(self, num_links: int) -> np.ndarray:
        """int64 ``[U]``: the links the phase's flows cross, ascending (computed once)."""
        used = self.__dict__.get("_used_links")
        if used is None:
            mark = np.zeros(num_links, dtype=bool)
            mark[self.links[self.links >= 0]] = True
            used = np.flatnonzero(mark)
            self.__dict__["_used_links"] = used  # a memo on the frozen dataclass
        return used

    def link_load(self, num_links: int) -> np.ndarray:
        """float64 ``[num_links]`` bytes/s of progress x coefficient summed per link."""
        return link_load(self.links, self.rate.reshape(-1), num_links, self.coef)


def effective_capacity(fabric: Fabric, cost: CostModel) -> np.ndarray:
    """float64 ``[L]`` payload bytes/s: line rate x the link technology's efficiency
    (scale-up links touch a scale-up switch, tier ``-1``)."""
    scale_up = (fabric.node_tier[fabric.link_src] < 0) | (fabric.node_tier[fabric.link_dst] < 0)
    return fabric.capacity * np.where(scale_up, cost.scale_up_efficiency, cost.network_efficiency)


def solve_phase(
    fabric: Fabric,
    phase: Phase,
    capacity: np.ndarray,
    *,
    routing: str = "ecmp",
    seed: int = 0,
    solver=None,
) -> SolvedPhase:
    """Route and solve one phase (:func:`solve_phases` of one)."""
    return solve_phases(fabric, [phase], capacity, routing=routing, seed=seed, solver=solver)[0]


def solve_phases(
    fabric: Fabric,
    phases: list[Phase],
    capacity: np.ndarray,
    *,
    routing: str = "ecmp",
    seed: int = 0,
    solver=None,
) -> list[SolvedPhase]:
    """Route and solve independent phases, their max-min solves in one engine batch
    (:func:`~fabricflow.solve.maxmin.batch.max_min_batch`: one block-diagonal call on an
    accelerator, one after another on a CPU). ``capacity``: ``[L]`` bytes/s (see
    :func:`effective_capacity`). Each phase's answer is the one it gets alone: each is
    routed in its own call (hash keys count a pair's flows within the phase).

    A phase whose groups are translations of each other inside their own scale-up domains
    (:mod:`.symmetry`: a TP phase) is routed and solved for one group and translated to
    the others, exactly; any other phase is routed and solved whole.

    Complexity per phase: one routing call over all ``G * Tg * P`` hops (``Tg * P`` plus
    a pair table for a replicated phase), a sort of the route entries, and a max-min
    solve over ``G * Tg`` flows (``Tg``).
    """
    plans = [_plan(fabric, phase, capacity, routing, seed) for phase in phases]
    rates = _rates([(plan.links, plan.coef) for plan in plans], capacity, solver)
    return [_finish(plan, rate, method) for plan, (rate, method) in zip(plans, rates, strict=True)]


@dataclasses.dataclass(frozen=True, eq=False)
class _Plan:
    """A phase routed and merged into transfers, before its max-min solve: the flows
    ``links``/``coef`` of all its groups, or of group 0 when ``replica`` maps them to the
    others, with their latencies (``[G, Tg]``, ``[1, Tg]`` replicated)."""

    phase: Phase
    links: np.ndarray
    coef: np.ndarray
    path_latency_s: np.ndarray
    intra_steps: np.ndarray
    network_steps: np.ndarray
    replica: DomainReplica | None


def _plan(fabric: Fabric, phase: Phase, capacity, routing: str, seed: int) -> _Plan:
    domains = replicated_domains(fabric, phase) if routing != "optimized" else None
    replica = None
    if domains is not None:
        replica = _routed(
            lambda: domain_replica(fabric, phase, domains, capacity, routing=routing, seed=seed),
            fabric,
            routing,
        )
    if replica is None:
        valid = phase.hop_src >= 0
        routes = _routed(lambda: _route_hops(fabric, phase, valid, routing, seed), fabric, routing)
        latency = routes.path_latency(fabric.latency)
        links, coef, path, intra, network = _transfers(
            fabric, phase, routes.links, routes.coef, latency
        )
        return _Plan(phase, links, coef, path, intra, network, None)
    single = dataclasses.replace(
        phase,
        hop_src=phase.hop_src[:1],
        hop_dst=phase.hop_dst[:1],
        hop_load=phase.hop_load[:1],
        hop_latency_count=phase.hop_latency_count[:1],
        bytes_per_size=phase.bytes_per_size[:1],
        max_group=None if phase.max_group is None else phase.max_group[:1],
    )
    own = replica.routes
    links, coef, path, intra, network = _transfers(
        fabric, single, own.links, own.coef, own.path_latency(fabric.latency)
    )
    return _Plan(phase, links, coef, path, intra, network, replica)


def _rates(problems: list, capacity: np.ndarray, solver) -> list[tuple[np.ndarray, str]]:
    """``(rates, method)`` of each ``(links, coef)`` problem (see :func:`fair_rates`)."""
    if solver is not None or len(problems) < 2:
        return [fair_rates(links, capacity, coef, solver) for links, coef in problems]
    entries = [FlowEntries.from_padded(links, coef, capacity.size) for links, coef in problems]
    solutions = max_min_batch(entries, [capacity] * len(entries), dtype=np.float64)
    return [(solution.rates, solution.method) for solution in solutions]


def _finish(plan: _Plan, rate: np.ndarray, method: str) -> SolvedPhase:
    """The :class:`SolvedPhase` of a plan with its flows' rates (group 0's, replicated)."""
    phase = plan.phase
    num_groups, per_group = phase.hop_src.shape[:2]
    if plan.replica is None:
        shape = (num_groups, per_group)
        return SolvedPhase(
            phase,
            rate.reshape(shape),
            plan.path_latency_s.reshape(shape),
            plan.intra_steps.reshape(shape),
            plan.network_steps.reshape(shape),
            plan.links,
            plan.coef,
            method,
        )

    def tiled(values):  # every group's copy of group 0's values: a read-only view
        return np.broadcast_to(values.reshape(1, per_group), (num_groups, per_group))

    return SolvedPhase(
        phase,
        tiled(rate),
        tiled(plan.path_latency_s),
        tiled(plan.intra_steps),
        tiled(plan.network_steps),
        plan.replica.translate(plan.links),
        np.tile(plan.coef, (num_groups, 1)),
        method,
        replicated=True,
    )


def _routed(build, fabric: Fabric, routing: str):
    """``build()``, with a routing policy the fabric has no router for named as such."""
    try:
        return build()
    except SpecError as error:
        if error.field != "policy":
            raise
        raise SpecError(
            "routing",
            f"{routing!r} does not apply to fabric {fabric.name} ({error}); pick another routing",
        ) from None


def _route_hops(fabric: Fabric, phase: Phase, valid: np.ndarray, routing: str, seed: int):
    """Routes of the phase's valid hops (row-major over groups, transfers, hops)."""
    src, dst = phase.hop_src[valid], phase.hop_dst[valid]
    if routing == "optimized":  # split over candidate paths to minimize the makespan
        # lazy: the routing optimizer imports JAX and optax; other routings stay JAX-free
        from fabricflow.routing_optimizer.makespan import optimize_routing

        return optimize_routing(fabric, src, dst, size=phase.hop_load[valid], seed=seed).routes()
    return route(fabric, src, dst, policy=routing, seed=seed)


def _transfers(fabric, phase, hop_links, hop_coef, hop_latency):
    """The phase's transfers from its routed valid hops (``hop_links``, ``hop_coef`` or
    ``None``, path latency ``hop_latency`` seconds): ``(links, coef, path_latency,
    intra_steps, network_steps)``, the merged rows ``[G * Tg, W]`` and latencies ``[G * Tg]``."""
    num_groups, per_group, num_hops = phase.hop_src.shape
    valid = phase.hop_src >= 0
    transfer = np.broadcast_to(
        np.arange(num_groups * per_group).reshape(num_groups, per_group, 1), valid.shape
    )[valid]
    src, dst = phase.hop_src[valid], phase.hop_dst[valid]
    hop_links = hop_links.astype(np.int64)
    single_path = hop_coef is None  # one path per hop (no split): no link twice in a row
    if hop_coef is None:
        hop_coef = np.where(hop_links >= 0, phase.hop_load[valid][:, None], 0.0)
    else:
        hop_coef = np.where(
            hop_links >= 0, hop_coef.astype(np.float64) * phase.hop_load[valid][:, None], 0.0
        )

    # Critical-path latency: path latency and software steps, counted per hop.
    count = phase.hop_latency_count[valid]
    intra = fabric.gpu_domain[src] == fabric.gpu_domain[dst]
    num_transfers = num_groups * per_group
    path_latency = np.bincount(transfer, weights=count * hop_latency, minlength=num_transfers)
    intra_steps = np.bincount(transfer, weights=count * intra, minlength=num_transfers)
    network_steps = np.bincount(transfer, weights=count * ~intra, minlength=num_transfers)

    hop_index = np.flatnonzero(valid.ravel())
    assert phase.max_group is not None  # filled in by Phase.__post_init__
    max_group = phase.max_group[valid]
    # Hops outside a max group get a unique group (their own index): plain sums.
    merge_group = (
        np.where(max_group >= 0, max_group, hop_index + max_group.max(initial=0) + 1)
        if np.any(max_group >= 0)
        else None
    )
    if merge_group is None and num_hops == 1 and single_path and hop_index.size == num_transfers:
        # One hop per transfer on a simple path (each link once): the rows are the routes.
        links, coef = hop_links.astype(np.int32), hop_coef
    elif merge_group is None:
        links, coef = _merge_rows(hop_index, hop_links, hop_coef, num_transfers, num_hops)
    else:
        links, coef = _merge_transfers(transfer, merge_group, hop_links, hop_coef, num_transfers)
    return links, coef, path_latency, intra_steps, network_steps


def _merge_transfers(
    transfer: np.ndarray,
    merge_group: np.ndarray,
    hop_links: np.ndarray,
    hop_coef: np.ndarray,
    num_transfers: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Entries of all hops of a transfer -> one padded row per transfer, each link once.

    Within a ``merge_group`` (per hop; ``None``: every hop its own) repeated links keep the
    largest coefficient; across groups the coefficients add up.
    """
    keep = hop_links >= 0
    row = np.broadcast_to(transfer[:, None], hop_links.shape)[keep]
    if merge_group is not None:
        group = np.broadcast_to(merge_group[:, None], hop_links.shape)[keep]
    link = hop_links[keep]
    weight = hop_coef[keep]
    if merge_group is not None:
        row, link, _, weight = _reduce_runs(np.maximum, (row, link, group), weight)
    row, link, weight = _reduce_runs(np.add, (row, link), weight)
    return _pad_rows(row, link, weight, num_transfers)


def _pad_rows(row: np.ndarray, link: np.ndarray, weight: np.ndarray, num_transfers: int):
    """Entries sorted by row -> ``links`` int32 / ``coef`` float64 ``[num_transfers, W]``
    (``-1`` / ``0`` padded, ``W`` the widest row, at least 1)."""
    first_of_row = np.ones(row.size, dtype=bool)
    first_of_row[1:] = row[1:] != row[:-1]
    run_start = np.maximum.accumulate(np.where(first_of_row, np.arange(row.size), 0))
    position = np.arange(row.size) - run_start
    width = int(position.max(initial=-1)) + 1
    links = np.full((num_transfers, max(width, 1)), -1, dtype=np.int32)
    coef = np.zeros((num_transfers, max(width, 1)), dtype=np.float64)
    links[row, position] = link
    coef[row, position] = weight
    return links, coef


def _merge_rows(
    hop_index: np.ndarray,
    hop_links: np.ndarray,
    hop_coef: np.ndarray,
    num_transfers: int,
    num_hops: int,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_merge_transfers` without max groups (every hop's loads add up), row by row.

    ``hop_index``: each routed hop's flat index in ``[num_transfers, num_hops]``. The hops'
    entries are laid out as one row per transfer (hop by hop), each row is sorted by link
    (stable) and runs of one link are summed: the same entries, in the same order, summed
    in the same order as the global sort of :func:`_merge_transfers` (so the same bits),
    but a sort of short rows instead of a sort of every entry of the phase.
    """
    width = hop_links.shape[1]
    if hop_index.size == num_transfers * num_hops:  # every hop slot used: already in place
        rows, weights = hop_links, hop_coef
    else:
        rows = np.full((num_transfers * num_hops, width), -1, dtype=np.int64)
        rows[hop_index] = hop_links
        weights = np.zeros(rows.shape)
        weights[hop_index] = hop_coef
    rows = rows.reshape(num_transfers, num_hops * width)
    weights = weights.reshape(rows.shape)
    # -1 padding sorts last (as the largest key) so that each row's entries come first.
    order = np.argsort(np.where(rows >= 0, rows, np.iinfo(np.int64).max), axis=1, kind="stable")
    rows = np.take_along_axis(rows, order, axis=1)
    weights = np.take_along_axis(weights, order, axis=1)
    if not np.any((rows[:, 1:] == rows[:, :-1]) & (rows[:, 1:] >= 0)):
        # No link twice in a row (single-path hops, disjoint hops): the sorted rows are
        # the merged rows; cut the padding columns no row uses.
        used = int((rows >= 0).sum(axis=1).max(initial=0))
        return rows[:, : max(used, 1)].astype(np.int32), weights[:, : max(used, 1)]
    rows, weights = rows.ravel(), weights.ravel()
    keep = np.flatnonzero(rows >= 0)
    row, link, weight = keep // (num_hops * width), rows[keep], weights[keep]
    new = np.ones(row.size, dtype=bool)
    new[1:] = (row[1:] != row[:-1]) | (link[1:] != link[:-1])
    starts = np.flatnonzero(new)
    if starts.size:
        weight = np.add.reduceat(weight, starts)
    row, link = row[starts], link[starts]
    return _pad_rows(row, link, weight, num_transfers)


def _reduce_runs(reduce, keys: tuple, weight: np.ndarray):
    """Sort entries by ``keys`` (most significant first) and reduce runs of equal keys."""
    order = np.lexsort(tuple(reversed(keys)))
    keys = tuple(k[order] for k in keys)
    weight = weight[order]
    new = np.zeros(weight.size, dtype=bool)
    new[:1] = True
    for key in keys:
        new[1:] |= key[1:] != key[:-1]
    starts = np.flatnonzero(new)
    merged = reduce.reduceat(weight, starts) if starts.size else weight[:0]
    return (*(k[starts] for k in keys), merged)


def fair_rates(links, capacity: np.ndarray, coef=None, solver=None) -> tuple[np.ndarray, str]:
    """``(rates, method)``: float64 ``[F]`` max-min fair rates of the collective model's
    flows and the backend that computed them.

    ``links``: padded rows int ``[F, H]`` (with ``coef``) or
    :class:`~fabricflow.solve.maxmin.entries.FlowEntries`; ``capacity`` ``[L]`` bytes/s.
    The engine's entry point :func:`~fabricflow.solve.maxmin.engine.max_min` in float64,
    its backend picked by size and device (``method="auto"``: ``"numpy"`` or ``"jax"``);
    ``solver``: a user's ``(links, capacity, coef=) -> rates`` instead (``"custom"``).
    """
    if solver is not None:
        if isinstance(links, FlowEntries):
            links, coef = links.to_padded()
        return np.asarray(solver(links, capacity, coef=coef), dtype=np.float64), "custom"
    solution = max_min(links, capacity, coef=coef, dtype=np.float64, merge=False)
    return solution.rates, solution.method


__all__ = [
    "SolvedPhase",
    "effective_capacity",
    "fair_rates",
    "solve_phase",
    "solve_phases",
]
