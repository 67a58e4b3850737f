"""``collective_time``: the time of one collective on many concurrent groups.

Pipeline: groups -> algorithm phases (:mod:`.algorithms`) -> routes + max-min rates of all
groups' transfers together (:mod:`.flow_rates`) -> per-size, per-protocol times (:mod:`.nccl_cost`).
Routing and solving do not depend on the message size or the protocol (both scale every
transfer alike), so one solve per algorithm serves a whole nccl-tests size sweep.
"""

from __future__ import annotations

import dataclasses
import numbers
import time
from collections.abc import Callable

import numpy as np

from fabricflow.collective import estimate as _estimate
from fabricflow.collective.algorithms import (
    ALGORITHMS,
    Algorithm,
    Context,
    NotApplicable,
    algorithms_for,
    get_algorithm,
)
from fabricflow.collective.flow_rates import SolvedPhase, effective_capacity, solve_phases
from fabricflow.collective.groups import as_groups, domain_grid
from fabricflow.collective.nccl_cost import DEFAULT_COST, CostModel, protocols_for
from fabricflow.collective.ops import busbw_factor, canonical_op
from fabricflow.collective.phase import Phase
from fabricflow.collective.structure_cache import SharedPhases
from fabricflow.errors import SpecError, check_flag
from fabricflow.fabric.fabric import Fabric
from fabricflow.link_loads import link_load
from fabricflow.routing.transport_policy import routing_for
from fabricflow.typing import GroupsLike

# "auto": the routing that stands for the fabric's transport (fabricflow.fabric.transport):
# an even split over all equal-cost paths under adaptive routing on a Clos ("adaptive", the
# compact form of "spray" with the same rates), one hashed path per flow (ecmp) otherwise.
# "optimized": each phase's hops split over candidate paths (fabricflow.optimize_routing).
ROUTINGS = ("auto", "ecmp", "multipath", "spray", "adaptive", "optimized")
# Most channels per group: each one multiplies the flows routed and solved (NCCL uses <= 64).
MAX_CHANNELS = 64


@dataclasses.dataclass(frozen=True, eq=False)
class CollectiveResult:
    """Time of one collective of ``size`` run by all groups at once.

    Attributes:
        op, algorithm, protocol: what ran (``algorithm``/``protocol`` as chosen by ``auto``).
        size: ``S`` in nccl-tests' convention (see :mod:`.ops`).
        group_size: ranks per group ``n``.
        group_time_s: float64 ``[num_groups]`` seconds per group.
        time_s: the slowest group's time (the job waits for it).
        slowest_group: index of that group.
        phase_time_s: ``{phase name: seconds}`` of the slowest group (repeats included;
            the launch latency is under ``"launch"``).
        bottleneck_links: int64 link ids saturated on the slowest transfer of the slowest
            group, most loaded first (empty when latency, not bandwidth, bounds it).
        bottleneck_kinds: their link kinds (``nic``, ``leaf``, ``nvlink``, ...).
        bottleneck_utilization: their load / payload capacity (``~1`` when saturated).
        num_flows: flows given to the solver (merged transfers) over all phases.
        candidates: ``{"algorithm/protocol": slowest-group seconds}`` of every option tried.
    """

    op: str
    algorithm: str
    protocol: str
    size: float
    group_size: int
    group_time_s: np.ndarray
    time_s: float
    slowest_group: int
    phase_time_s: dict
    bottleneck_links: np.ndarray
    bottleneck_kinds: tuple
    bottleneck_utilization: np.ndarray
    num_flows: int
    candidates: dict

    @property
    def num_groups(self) -> int:
        return int(self.group_time_s.shape[0])

    @property
    def algbw_Bps(self) -> float:
        """``S / t`` of the slowest group, bytes/s."""
        return self.size / self.time_s if self.time_s > 0 else float("inf")

    @property
    def busbw_Bps(self) -> float:
        """nccl-tests bus bandwidth of the slowest group, bytes/s."""
        return self.algbw_Bps * busbw_factor(self.op, self.group_size)

    def to_dict(self) -> dict:
        """JSON-able summary (per-group times summarised, not listed)."""
        return {
            "op": self.op,
            "algorithm": self.algorithm,
            "protocol": self.protocol,
            "bytes": self.size,
            "group_size": self.group_size,
            "num_groups": self.num_groups,
            "time_s": self.time_s,
            "algbw_GBps": self.algbw_Bps / 1e9,
            "busbw_GBps": self.busbw_Bps / 1e9,
            "group_time_s": {
                "min": float(self.group_time_s.min()),
                "median": float(np.median(self.group_time_s)),
                "max": float(self.group_time_s.max()),
            },
            "slowest_group": self.slowest_group,
            "phase_time_s": self.phase_time_s,
            "bottleneck_links": self.bottleneck_links.tolist(),
            "bottleneck_kinds": list(self.bottleneck_kinds),
            "bottleneck_utilization": self.bottleneck_utilization.tolist(),
            "num_flows": self.num_flows,
            "candidates": self.candidates,
        }


@dataclasses.dataclass(frozen=True, eq=False)
class _Solved:
    algorithm: Algorithm
    phases: list[SolvedPhase]
    protocols: tuple[str, ...]


def _check_channels(channels: int | None) -> None:
    """Checks ``channels``: ``None`` (the algorithm's default) or an integer from 1 to
    :data:`MAX_CHANNELS`, the channels per group.

    Raises:
        SpecError: anything else (a bool included).
    """
    if channels is not None and (
        isinstance(channels, bool)
        or not isinstance(channels, numbers.Integral)
        or not 1 <= channels <= MAX_CHANNELS
    ):
        # Each channel multiplies the flows routed and solved; NCCL itself uses <= 64.
        raise SpecError("channels", f"must be an integer in 1..{MAX_CHANNELS}, got {channels!r}")


def _algorithm_names(op: str, algorithm: str) -> list[str]:
    """The candidate algorithms of ``op`` (canonical): every one that implements it for
    ``"auto"``, else the canonical name of ``algorithm``.

    Raises:
        SpecError: an unknown algorithm, or one that does not implement ``op``.
    """
    names = algorithms_for(op) if algorithm == "auto" else [get_algorithm(algorithm).name]
    if algorithm != "auto" and op not in ALGORITHMS[names[0]].builders:
        raise SpecError(
            "algorithm",
            f"{names[0]} does not implement {op}; for {op} "
            f"use one of {['auto', *algorithms_for(op)]}",
        )
    return names


class PreparedCollective:
    """Phases of a collective routed and solved once; :meth:`evaluate` prices any sizes.

    Build it with :func:`prepare_collective`; arguments as :func:`collective_time`. Use it
    when the same groups run the same collective at many sizes (a step-time model, a
    size sweep): the cost of routing and solving is paid once.

    ``progress``: called with a line of text (the estimate, then one line per solved
    phase) when the estimated time reaches
    :data:`~fabricflow.collective.estimate.PROGRESS_AFTER_S`; the command line prints
    them on stderr. Work estimated past
    :data:`~fabricflow.collective.estimate.MAX_ESTIMATE_S`, or past the memory budget, is
    refused before anything is routed (:func:`~fabricflow.collective.estimate.check_work`).

    ``fabric_fingerprint``: :func:`~.structure_cache.fabric_fingerprint` of ``fabric`` when
    the caller already computed it (the step model's collective cache); phases shared
    between collectives are keyed by it, so it is not hashed once more per collective.
    """

    def __init__(
        self,
        fabric: Fabric,
        op: str,
        groups,
        *,
        algorithm: str = "auto",
        protocol: str = "auto",
        routing: str = "auto",
        seed: int = 0,
        channels: int | None = None,
        rail_aware: bool = True,
        cost: CostModel = DEFAULT_COST,
        solver=None,
        progress: Callable[[str], None] | None = None,
        fabric_fingerprint: str | None = None,
        solve: bool = True,
    ):
        if not isinstance(fabric, Fabric):
            raise SpecError(
                "fabric",
                f"expected a Fabric (ff.load_fabric(name) builds one), got {type(fabric).__name__}",
            )
        rail_aware = check_flag(rail_aware, "rail_aware")
        self.fabric = fabric
        self.op = canonical_op(op)
        self.groups = as_groups(groups, fabric.num_gpus)
        self.cost = cost
        if routing not in ROUTINGS:
            raise SpecError("routing", f"unknown routing {routing!r}; one of {list(ROUTINGS)}")
        # The routing actually used: "auto" resolved from the fabric's transport.
        self.routing = routing_for(fabric) if routing == "auto" else routing
        _check_channels(channels)
        if protocol != "auto":
            protocols_for(protocol, "ring")  # validates the name
        ordered, grid = _ordered_and_grid(self.groups, fabric.gpu_domain)
        capacity = effective_capacity(fabric, cost)
        names = _algorithm_names(self.op, algorithm)
        self.skipped: dict[str, str] = {}
        self.solved: list[_Solved] = []
        built = self._build_phases(
            names,
            algorithm,
            protocol,
            (ordered, grid),
            channels=channels,
            rail_aware=rail_aware,
        )
        say = self._announce(built, progress)
        # Phases with the same flows (a reduce-scatter's and an all-gather's ring, ...)
        # share one route and solve; only the default solver, whose answer is known.
        self.shared = (
            SharedPhases(
                fabric,
                capacity,
                self.routing,
                seed,
                fingerprint=fabric_fingerprint,
                capacity_known=cost is DEFAULT_COST,
            )
            if solver is None
            else None
        )
        self._built = built
        self._say = say
        self._seed, self._solver = seed, solver
        self._capacity = capacity
        # Per-link load of each solved phase, by id(SolvedPhase): it depends on neither the
        # size nor the protocol, so a size sweep computes it once per phase.
        self._link_load: dict[int, np.ndarray] = {}
        if solve:
            self.attach(self._solve(self.pending_phases()))

    def _build_phases(
        self, names: list[str], algorithm: str, protocol: str, placement, *, channels, rail_aware
    ) -> list[tuple]:
        """``(candidate, phases, protocols)`` of each algorithm of ``names`` that applies
        (every phase built before any is solved); the others go to :attr:`skipped` with the
        reason. ``placement`` is ``(ordered, grid)`` of :func:`_ordered_and_grid`.

        Raises:
            SpecError: the ``algorithm`` asked for by name does not apply, or none applies.
        """
        ordered, grid = placement
        cost, fabric = self.cost, self.fabric
        built = []  # (candidate, phases, protocols): every phase is built before any solve
        for name in names:
            candidate = ALGORITHMS[name]
            rails = grid.shape[2] if grid is not None else 1
            default_channels = 1 if candidate.per_pair_channels else cost.channels_per_rail * rails
            ctx = Context(
                self.op,
                self.groups,
                ordered,
                grid,
                int(channels) if channels is not None else default_channels,
                rail_aware=rail_aware,
                nvls=bool(fabric.meta.get("nvls", False)),
                sharp=bool(fabric.meta.get("in_network_reduction", False)),
                nvls_efficiency=cost.nvls_efficiency,
                sharp_efficiency=cost.sharp_efficiency,
            )
            try:
                phases = candidate.build(ctx)
                if candidate.simple_only and protocol not in ("auto", "Simple"):
                    raise NotApplicable(f"{name} runs the Simple protocol only")
            except NotApplicable as why:
                if algorithm != "auto":
                    raise SpecError("algorithm", str(why)) from None
                self.skipped[name] = str(why)
                continue
            protos = (
                ("Simple",) if candidate.simple_only else protocols_for(protocol, candidate.family)
            )
            built.append((candidate, phases, protos))
        if not built:
            raise SpecError(
                "algorithm", f"no algorithm applies to {self.op} on these groups: {self.skipped}"
            )
        return built

    def _announce(self, built: list[tuple], progress) -> Callable[[str], None] | None:
        """``progress`` when the estimated time of routing and solving ``built`` reaches
        :data:`~fabricflow.collective.estimate.PROGRESS_AFTER_S` seconds (after telling it
        the estimate), else ``None``.

        Raises:
            SpecError, MemoryBudgetError: work past the limits of
                :func:`~fabricflow.collective.estimate.check_work`, refused before
                anything is routed.
        """
        # Refuse before routing anything when the work is absurd; tell long runs how long.
        estimate = _estimate.check_work(self.fabric, self.op, self.groups.shape, built)
        say = progress if progress is not None and estimate >= _estimate.PROGRESS_AFTER_S else None
        if say is not None:
            say(
                f"collective {self.op}: {self.groups.shape[0]:,} groups of "
                f"{self.groups.shape[1]:,}, {sum(len(b[1]) for b in built)} phases over "
                f"{len(built)} algorithm(s), estimated ~{estimate:.0f} s"
            )
        return say

    def pending_phases(self) -> list[Phase]:
        """Every phase of every candidate algorithm, in order, before :meth:`attach`."""
        return [phase for _, phases, _ in self._built for phase in phases]

    def _solve(self, phases: list[Phase]) -> list[SolvedPhase]:
        if self.shared is not None:
            return self.shared.solve_many(phases)
        return solve_phases(
            self.fabric,
            phases,
            self._capacity,
            routing=self.routing,
            seed=self._seed,
            solver=self._solver,
        )

    def attach(self, solved: list[SolvedPhase]) -> None:
        """Take the solved :meth:`pending_phases` (for :func:`prepare_collectives`, which
        solves many collectives' phases at once)."""
        started = time.monotonic()
        index = 0
        for algorithm, phases, protos in self._built:
            mine = solved[index : index + len(phases)]
            index += len(phases)
            if self._say is not None:
                for i, (phase, sp) in enumerate(zip(phases, mine, strict=True)):
                    self._say(
                        f"  {algorithm.name} phase {i + 1}/{len(phases)} ({phase.name}): "
                        f"{sp.links.shape[0]:,} flows solved, "
                        f"{time.monotonic() - started:.1f} s elapsed"
                    )
            self.solved.append(_Solved(algorithm, list(mine), protos))
        self._built = []

    def evaluate(self, sizes) -> list[CollectiveResult]:
        """One :class:`CollectiveResult` per size (bytes), the fastest option for each."""
        sizes = _as_sizes(sizes)
        if sizes.ndim != 1 or not np.all(np.isfinite(sizes)) or np.any(sizes < 0):
            raise SpecError("size", f"sizes must be finite and >= 0 bytes, got {sizes}")
        options = []  # (label, solved, protocol, group_times [K, G], per-phase [P, K, G])
        for solved in self.solved:
            for protocol in solved.protocols:
                per_phase = np.stack(
                    [self._phase_times(sp, protocol, sizes, sp.replicated) for sp in solved.phases]
                )
                launch = self.cost.base_s(solved.algorithm.family, protocol)
                options.append(
                    (
                        f"{solved.algorithm.name}/{protocol}",
                        solved,
                        protocol,
                        per_phase.sum(axis=0) + launch,
                        per_phase,
                        launch,
                    )
                )
        slowest = np.stack([option[3].max(axis=1) for option in options])  # [O, K]
        best = np.argmin(slowest, axis=0)
        results = []
        for k, size in enumerate(sizes):
            label, solved, protocol, totals, per_phase, launch = options[best[k]]
            group_time = totals[k]
            worst = int(np.argmax(group_time))
            phase_time = {"launch": launch}
            for sp, times in zip(solved.phases, per_phase[:, k, worst], strict=True):
                phase_time[sp.phase.name] = phase_time.get(sp.phase.name, 0.0) + float(times)
            links, util = self._bottleneck(
                solved, protocol, float(size), worst, per_phase[:, k, worst]
            )
            names = self.fabric.link_kinds
            kinds = tuple(names[i] for i in self.fabric.link_kind_id[links]) if links.size else ()
            results.append(
                CollectiveResult(
                    op=self.op,
                    algorithm=solved.algorithm.name,
                    protocol=protocol,
                    size=float(size),
                    group_size=int(self.groups.shape[1]),
                    group_time_s=group_time,
                    time_s=float(group_time[worst]),
                    slowest_group=worst,
                    phase_time_s=phase_time,
                    bottleneck_links=links,
                    bottleneck_kinds=kinds,
                    bottleneck_utilization=util,
                    num_flows=sum(sp.links.shape[0] for sp in solved.phases),
                    candidates={
                        option[0]: float(slowest[i, k]) for i, option in enumerate(options)
                    },
                )
            )
        return results

    @property
    def capacity(self) -> np.ndarray:
        """float64 ``[L]`` payload bytes/s the phases were solved against."""
        return self._capacity

    def phase_times(self, sp: SolvedPhase, protocol: str, sizes) -> np.ndarray:
        """float64 ``[K, G]``: seconds of solved phase ``sp`` per size (bytes) and group,
        repeats included, by the cost model of :meth:`evaluate`. ``sp`` may carry other
        rates than its own solve (``dataclasses.replace(sp, rate=...)``: the same flows
        sharing the fabric with other traffic)."""
        return self._phase_times(sp, protocol, np.asarray(sizes, dtype=np.float64).reshape(-1))

    def _phase_times(
        self, sp: SolvedPhase, protocol: str, sizes: np.ndarray, alike: bool = False
    ) -> np.ndarray:
        """float64 ``[K, G]``: the phase's time per size and group (repeats included).

        ``alike``: the phase's own solve, replicated over its groups (``sp.replicated``):
        when every group also moves the same bytes, one group is priced and its times
        copied to the others (the same arithmetic, so the same bits)."""
        efficiency = self.cost.protocol_efficiency[protocol]
        intra_s, network_s = self.cost.step_overhead_s(sp.phase.family, protocol)
        bps, rate = sp.phase.bytes_per_size, sp.rate
        steps: tuple[np.ndarray, ...] = (sp.path_latency_s, sp.intra_steps, sp.network_steps)
        num_groups = rate.shape[0]
        one = alike and num_groups > 1 and _bytes_alike(sp.phase)
        if one:
            bps, rate, steps = bps[:1], rate[:1], tuple(x[:1] for x in steps)
        latency = steps[0] + steps[1] * intra_s + steps[2] * network_s
        with np.errstate(divide="ignore"):
            seconds_per_byte = np.where(bps > 0, bps / (rate * efficiency), 0.0)
        if sizes.size > 2 and seconds_per_byte.shape[1] > 4:
            seconds_per_byte, latency = _upper_envelope(seconds_per_byte, latency)
        out = np.empty((sizes.size, rate.shape[0]))
        for k, size in enumerate(sizes):  # K sizes; each step is vectorized over transfers
            out[k] = (size * seconds_per_byte + latency).max(axis=1)
        out *= sp.phase.repeat
        return np.broadcast_to(out, (sizes.size, num_groups)).copy() if one else out

    def _bottleneck(
        self, solved: _Solved, protocol: str, size: float, group: int, phase_times: np.ndarray
    ):
        """Saturated links on the slowest transfer of ``group`` in its longest phase."""
        sp = solved.phases[int(np.argmax(phase_times))]
        efficiency = self.cost.protocol_efficiency[protocol]
        with np.errstate(divide="ignore"):
            transfer_time = size * sp.phase.bytes_per_size[group] / (sp.rate[group] * efficiency)
        per_group = sp.rate.shape[1]
        row = group * per_group + int(np.argmax(transfer_time))
        if sp.replicated:  # the group's links carry its own flows only (disjoint groups)
            rows = slice(group * per_group, (group + 1) * per_group)
            load = link_load(sp.links[rows], sp.rate[group], self.fabric.num_links, sp.coef[rows])
        else:
            cached = self._link_load.get(id(sp))
            if cached is None:
                cached = self._link_load[id(sp)] = sp.link_load(self.fabric.num_links)
            load = cached
        on_row = sp.links[row][sp.links[row] >= 0].astype(np.int64)
        with np.errstate(divide="ignore", invalid="ignore"):
            util = load[on_row] / self._capacity[on_row]
        saturated = util >= 1.0 - 1e-4
        order = np.argsort(-util[saturated], kind="stable")
        return on_row[saturated][order], util[saturated][order]


def _bytes_alike(phase: Phase) -> bool:
    """Whether every group of ``phase`` moves the same bytes per transfer (memoised)."""
    alike = phase.__dict__.get("_bytes_alike")
    if alike is None:
        bps = phase.bytes_per_size
        alike = bool(np.array_equal(bps, np.broadcast_to(bps[:1], bps.shape)))
        phase.__dict__["_bytes_alike"] = alike  # a memo on the frozen dataclass
    return alike


def _upper_envelope(slope: np.ndarray, offset: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop the transfers that can never be a group's slowest: ``[G, T]`` -> ``[G, T']``.

    A transfer ``t`` of a group whose time ``size * slope + offset`` is bounded, at every
    size ``>= 0``, by another transfer's of the same group (slope and offset both ``>=``)
    is dropped; padding is ``(0, -inf)``. Rounding is monotonic, so the maximum over the
    kept transfers is the maximum over all, bit for bit. Returns the inputs unchanged when
    that would not at least halve the row length.
    """
    order = np.argsort(-slope, axis=1, kind="stable")  # steepest first
    slope_sorted = np.take_along_axis(slope, order, axis=1)
    offset_sorted = np.take_along_axis(offset, order, axis=1)
    keep = np.ones(slope.shape, dtype=bool)
    # Kept: higher offset than every transfer at least as steep (listed before it).
    keep[:, 1:] = offset_sorted[:, 1:] > np.maximum.accumulate(offset_sorted, axis=1)[:, :-1]
    keep |= np.isnan(offset_sorted) | np.isnan(slope_sorted)  # never drop a NaN
    count = keep.sum(axis=1)
    width = int(count.max(initial=0))
    if 2 * width > slope.shape[1]:
        return slope, offset
    position = np.cumsum(keep, axis=1) - 1
    rows = np.broadcast_to(np.arange(slope.shape[0])[:, None], slope.shape)[keep]
    new_slope = np.zeros((slope.shape[0], max(width, 1)))
    new_offset = np.full(new_slope.shape, -np.inf)
    new_slope[rows, position[keep]] = slope_sorted[keep]
    new_offset[rows, position[keep]] = offset_sorted[keep]
    return new_slope, new_offset


def _ordered_and_grid(groups: np.ndarray, gpu_domain: np.ndarray):
    grid = domain_grid(groups, gpu_domain)
    if grid is not None:
        return grid.reshape(groups.shape), grid
    dom = gpu_domain[groups]
    order = np.argsort(dom * (int(groups.max()) + 1) + groups, axis=1, kind="stable")
    return np.take_along_axis(groups, order, axis=1), None


def prepare_collective(fabric: Fabric, op: str, groups, **options) -> PreparedCollective:
    """Route and solve a collective once for many sizes; see :class:`PreparedCollective`."""
    return PreparedCollective(fabric, op, groups, **options)


def prepare_collectives(fabric: Fabric, requests, **options) -> list[PreparedCollective]:
    """Many collectives ``[(op, groups), ...]`` on one fabric prepared at once: the same
    results as :func:`prepare_collective` on each, with every phase of every collective
    solved together (phases with the same flows once; the max-min solves in one engine
    batch, :func:`~fabricflow.solve.maxmin.batch.max_min_batch`). ``options`` as
    :func:`collective_time` (shared by all). For the layout search and the cluster
    simulator, which time many group structures on one fabric."""
    prepared = [
        PreparedCollective(fabric, op, groups, **options, solve=False) for op, groups in requests
    ]
    phases = [pc.pending_phases() for pc in prepared]
    if not prepared:
        return []
    solved = prepared[0]._solve([phase for part in phases for phase in part])
    index = 0
    for pc, part in zip(prepared, phases, strict=True):
        pc.attach(solved[index : index + len(part)])
        index += len(part)
    return prepared


def collective_time(
    fabric: Fabric,
    op: str,
    groups: GroupsLike,
    size: float,
    *,
    algorithm: str = "auto",
    protocol: str = "auto",
    routing: str = "auto",
    seed: int = 0,
    channels: int | None = None,
    rail_aware: bool = True,
    cost: CostModel = DEFAULT_COST,
    solver=None,
    progress: Callable[[str], None] | None = None,
    cc=None,
) -> CollectiveResult:
    """Time of collective ``op`` of ``size`` run by all ``groups`` at once on ``fabric``.

    All groups' flows share the fabric (max-min fair rates), so concurrent groups slow
    each other down where their routes meet; the result gives every group's time, the
    slowest one (what a synchronous job waits for) and the links that bound it.

    Args:
        fabric: the network (:func:`fabricflow.load_fabric`).
        op: ``all_reduce``, ``reduce_scatter``, ``all_gather``, ``all_to_all``,
            ``broadcast`` or ``sendrecv`` (NCCL / nccl-tests spellings accepted).
        groups: int ``[num_groups, group_size]`` GPU indices, one row per communicator
            (a single list = one group). Rank 0 of a row is the broadcast root.
        size: ``S`` in bytes, as nccl-tests counts it (:mod:`fabricflow.collective.ops`).
        algorithm: ``auto`` (fastest applicable for this size) or one of ``ring``, ``tree``,
            ``halving_doubling``, ``hierarchical``, ``nvls``, ``sharp``, ``direct``.
        protocol: ``auto``, ``LL``, ``LL128`` or ``Simple``.
        routing: ``auto`` (default: what the fabric's transport does, see
            :func:`fabricflow.routing.transport_policy.routing_for`: ``adaptive`` for InfiniBand or
            Ethernet with adaptive routing on a Clos, ``ecmp`` for RoCEv2 and fabrics
            without adaptive routing), ``ecmp`` (hashed single path per flow),
            ``multipath``, ``spray`` (every equal-cost path listed), ``adaptive`` (the
            same rates as ``spray``, one representative link per hop level: bottleneck
            links then name one link of each saturated set) or ``optimized`` (each phase's
            hops split over candidate paths to minimize the busiest link's load,
            :func:`fabricflow.optimize_routing`); an explicit policy overrides the
            transport.
        seed: ECMP hash seed.
        channels: channels per group (default: 2 per rail for ring/tree; 1 per pair for
            all-to-all and send/recv).
        rail_aware: rail-to-rail network hops for rings (NCCL PXN).
        cost: :class:`~fabricflow.collective.nccl_cost.CostModel` constants.
        solver: max-min solver ``(links, capacity, coef=) -> rates`` (default: float64
            numpy solvers, see :mod:`fabricflow.collective.flow_rates`).
        progress: called with lines of progress when the work is estimated at 10 s or
            more (see :class:`PreparedCollective`); ``None``: silent.
        cc: ``None`` (default: max-min rates, an ideal congestion control) or a rate law
            (``dcqcn``, ``hpcc``, ``timely``, ``swift``, ``predictive``) or a
            :class:`~fabricflow.collective.cc_rates.CCRates` (its options): each phase's
            rates are then its max-min rates times each flow's efficiency under that law,
            found by running the congestion-control fluid on the phase
            (:mod:`fabricflow.collective.cc_rates`; one fluid run per distinct phase).

    Returns:
        :class:`CollectiveResult` (``time_s``, ``group_time_s`` ``[num_groups]``,
        ``algbw_Bps``, ``busbw_Bps``, ``bottleneck_links``, ``algorithm``, ``protocol``).

    Complexity: routing ``G * Tg * P`` hops and one max-min solve over ``G * Tg`` flows per
    phase and candidate algorithm (e.g. 2,048 groups x 16 ring channels = 32k flows);
    about 1 us per scale-up hop and 4 us per network hop on 2 CPU cores (all-reduce of
    12,800 groups of 8 on ``clos-100k``: ~5 s). Work estimated past 30 min, or past the
    memory budget, raises before anything is routed.

    Raises:
        SpecError: bad arguments, or work estimated past 30 min (field ``groups``).
        MemoryBudgetError: the largest phase would not fit the memory budget.

    Example:
        >>> fabric = ff.load_fabric("dgx-h100-superpod")
        >>> r = collective_time(fabric, "all_reduce", np.arange(8), 8 * 2**30, algorithm="ring")
        >>> round(r.busbw_Bps / 1e9)        # ~370 GB/s, as measured on a DGX H100
    """
    if isinstance(size, bool) or not isinstance(size, numbers.Real):
        raise SpecError(
            "size",
            f"must be one number of bytes, got {size!r} (for many sizes use "
            "PreparedCollective(...).evaluate(sizes))",
        )
    if cc is not None:
        # lazy: the congestion-control fluid imports JAX; a max-min collective stays JAX-free
        from fabricflow.collective.cc_rates import as_cc_rates

        solver = as_cc_rates(fabric, cc, solver)
    prepared = PreparedCollective(
        fabric,
        op,
        groups,
        algorithm=algorithm,
        protocol=protocol,
        routing=routing,
        seed=seed,
        channels=channels,
        rail_aware=rail_aware,
        cost=cost,
        solver=solver,
        progress=progress,
    )
    return prepared.evaluate([size])[0]


def _as_sizes(sizes) -> np.ndarray:
    """Sizes in bytes as float64 ``[K]``; booleans and text are refused, not converted."""
    values = np.atleast_1d(np.asarray(sizes, dtype=object))
    if any(
        isinstance(v, bool | np.bool_) or not isinstance(v, numbers.Real) for v in values.ravel()
    ):
        raise SpecError("size", f"sizes must be numbers of bytes, got {sizes!r}")
    return values.astype(np.float64)
