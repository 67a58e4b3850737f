"""Cross-dimension coupling of the step model: traffic that overlaps in time shares the fabric.

Each parallel dimension's collectives are priced alone by :class:`~.comm.CollectiveCache`
(all groups of one dimension together). On a real run, the traffic of several dimensions
is in flight at once. The step is split into overlap windows (details and approximations
in docs/step-coupling.md):

* ``steady``: the 1F1B steady state: every pipeline stage computes at once, so each
  dimension's TP, CP, EP and PP traffic runs with the other dimensions' (and, under
  ZeRO-3 with overlap, the per-micro-batch DP gathers and scatters);
* ``backward_tail``: the DP (and expert-DP) gradient reduction, overlapped with the last
  backward passes, with the TP, CP, EP and PP traffic those passes send;
* ``forward_head``: the ZeRO-1/2 parameter all-gather with the first forward passes.

Without ``dp_overlap`` the DP collectives run alone (no coupling for them).

For a member collective of a window, the phase that bounds it alone (its *bound phase*:
the longest phase of the algorithm and protocol NCCL picks for that size; NCCL's choice
does not adapt to contention) is solved jointly, max-min over the union of its flows and
the bound-phase flows of one representative collective (the longest alone) of each other
dimension of the window. Only the flows connected to the member's through shared links
take part. The member's phase is re-priced with the joint rates by the same NCCL cost
model; its other phases keep their isolated times.

Held rates overstate the contention when the background finishes first and releases its
bandwidth: when the flows' finish times at the joint rates differ by more than
:data:`RELEASE_RTOL`, the union is replayed with its bytes by the event-driven fluid
model of :func:`~fabricflow.solve.completion.max_min_completion` (rates re-solved as flows
finish, in batched windows; a background collective counts as many times as its dimension
issues it during the member), and that answer is used when it differs from the held
rates' by more than :data:`RELEASE_RTOL`. A member is never credited with finishing
sooner than alone (adding flows can speed a third flow up under max-min; that is not
counted): coupled seconds = max(isolated, joint).

Joint max-min solves depend only on the group structure (not on message sizes), so they
are cached on the :class:`~.comm.CollectiveCache` (its ``joint`` dict).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from fabricflow.collective.comm import CollectiveCache
from fabricflow.collective.flow_rates import SolvedPhase, fair_rates
from fabricflow.collective.timing import PreparedCollective
from fabricflow.errors import MemoryBudgetError
from fabricflow.memory_budget import check_memory
from fabricflow.solve.completion import max_min_completion
from fabricflow.solve.completion_loop import subset_key
from fabricflow.solve.maxmin.entries import FlowEntries

# Relative change below which held (snapshot) rates stand for time-varying ones.
RELEASE_RTOL = 0.01
# Batched windows of the flow-completion replay: one solve completes every flow projected
# to finish within (1 + COMPLETION_EPS) of the earliest, plus RELEASE_WINDOW x the longest
# held-rate finish time (bandwidth is released at most that late; half of RELEASE_RTOL).
COMPLETION_EPS = 1e-3
RELEASE_WINDOW = 5e-3
# ... widened so that the background's finishes fall in at most this many windows: a flow's
# bandwidth reaches the others at most one window late, whatever the number of windows.
MAX_REPLAY_WINDOWS = 8
STEADY_DIMENSIONS = ("tp", "cp", "ep", "pp")
DP_DIMENSIONS = ("dp", "edp")
REDUCE_OPS = ("reduce_scatter", "all_reduce")
WINDOWS = ("steady", "backward_tail", "forward_head")


@dataclasses.dataclass(frozen=True, eq=False)
class Bound:
    """One collective at one size, alone: its bound phase and times.

    Attributes:
        key: ``(name, op, algorithm, phase index)``: the flow structure (no size).
        prepared: the :class:`~fabricflow.collective.PreparedCollective`.
        sp: the bound phase (rates ``[G, Tg]`` alone).
        protocol: the NCCL protocol priced.
        size: bytes (nccl-tests convention).
        total_s: float64 ``[G]`` seconds of each group alone.
        phase_s: float64 ``[G]`` seconds of the bound phase alone.
    """

    key: tuple
    prepared: PreparedCollective
    sp: SolvedPhase
    protocol: str
    size: float
    total_s: np.ndarray
    phase_s: np.ndarray

    def flow_bytes(self) -> np.ndarray:
        """float64 ``[G * Tg]`` bytes each flow moves at full efficiency: its time at rate
        ``r`` is ``bytes / r``, as the cost model prices it (repeats included)."""
        efficiency = self.prepared.cost.protocol_efficiency[self.protocol]
        per = self.sp.phase.bytes_per_size * self.size * self.sp.phase.repeat / efficiency
        return per.reshape(-1)

    def latency_s(self) -> np.ndarray:
        """float64 ``[G, Tg]`` latency of each transfer, repeats included (the cost model's)."""
        cost = self.prepared.cost
        intra_s, network_s = cost.step_overhead_s(self.sp.phase.family, self.protocol)
        sp = self.sp
        latency = sp.path_latency_s + sp.intra_steps * intra_s + sp.network_steps * network_s
        return latency * sp.phase.repeat

    def priced(self, rate: np.ndarray) -> float:
        """Slowest group's seconds with the bound phase at ``rate`` ``[G, Tg]`` (others alone)."""
        sp = dataclasses.replace(self.sp, rate=rate)
        phase = self.prepared.phase_times(sp, self.protocol, [self.size])[0]
        return float((self.total_s - self.phase_s + phase).max())


@dataclasses.dataclass(frozen=True)
class Coupled:
    """Seconds of one member collective in its window: ``isolated_s``, ``coupled_s``
    (``>= isolated_s``) and ``method``: ``alone`` (no shared link with the window's other
    traffic), ``snapshot`` (held joint rates) or ``completion`` (flow-completion replay).
    ``snapshot_s``: the held joint rates' answer (the upper end: background that never
    finishes), kept for comparison."""

    isolated_s: float
    coupled_s: float
    method: str
    snapshot_s: float


def bound_phase(cache: CollectiveCache, name: str, op: str, size: float) -> Bound | None:
    """The :class:`Bound` of ``(name, op, size)``; ``None`` without flows (alpha-beta, one
    rank per group, zero bytes)."""
    key = ("bound", name, op, float(size))
    if key in cache.joint:
        return cache.joint[key]  # type: ignore[return-value]
    prepared = cache.collective(name, op) if size > 0 else None
    bound = None
    if prepared is not None:
        result = prepared.evaluate([float(size)])[0]
        solved = next(s for s in prepared.solved if s.algorithm.name == result.algorithm)
        sizes = np.array([float(size)])
        per_phase = np.stack(
            [prepared.phase_times(sp, result.protocol, sizes)[0] for sp in solved.phases]
        )  # [P, G]
        index = int(np.argmax(per_phase[:, result.slowest_group]))
        bound = Bound(
            key=(name, op, result.algorithm, index),
            prepared=prepared,
            sp=solved.phases[index],
            protocol=result.protocol,
            size=float(size),
            total_s=np.asarray(result.group_time_s, dtype=np.float64),
            phase_s=per_phase[index],
        )
    cache.joint[key] = bound
    return bound


@dataclasses.dataclass(frozen=True, eq=False)
class _Union:
    """Flows of a member's bound phase and the background flows connected to them.

    ``parts``: index into ``[member, *background]`` of each kept flow's owner; ``flows``:
    each kept flow's row in its owner's phase; ``entries``: their route entries, ragged
    (:class:`~fabricflow.solve.maxmin.entries.FlowEntries`: a 2-link NVLink transfer costs
    2 entries beside a 1,000-link ring); ``rate`` ``[F]`` joint max-min rates (bytes/s);
    ``solves``: rates of the flow subsets the replays solved, by subset (the replays of a
    reduce-scatter and of its twin all-gather meet the same subsets)."""

    parts: np.ndarray
    flows: np.ndarray
    entries: FlowEntries
    rate: np.ndarray
    solves: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class _OverBudget:
    """A joint solve the memory budget refused (``reason``): the member is timed alone and
    the coupling report says so."""

    reason: str


def _joint(
    cache: CollectiveCache, member: Bound, background: list[Bound]
) -> _Union | _OverBudget | None:
    """Joint max-min rates of the member's flows with the connected background flows
    (``None`` when no background flow shares a link with them; :class:`_OverBudget` when
    the padded union would not fit the memory budget). Cached by the solved phases taking
    part: twins (a reduce-scatter and an all-gather sharing one solved ring phase) share
    the joint solve too, computed and stored once."""
    key = ("joint", _flows_key(member), tuple(_flows_key(b) for b in background))
    if key in cache.joint:
        return cache.joint[key]  # type: ignore[return-value]
    phases = [member.sp, *(b.sp for b in background)]
    # Connectivity on each phase's own rows; then the connected rows' used entries only
    # (ragged): padding them to the widest phase's rows (hundreds of links for a
    # data-parallel ring) would cost far more than the flows that take part.
    keep = _connected_parts(
        [sp.links for sp in phases],
        cache.fabric.num_links,
        [sp.used_links(cache.fabric.num_links) for sp in phases],
    )
    union = None
    if any(k.any() for k in keep[1:]):
        kept = [int(np.count_nonzero(k)) for k in keep]
        used = sum(
            int(np.count_nonzero(sp.links[k] >= 0)) for sp, k in zip(phases, keep, strict=True)
        )
        # The entries (int64 link, float64 coef, flow) and the solver's per-entry arrays:
        # ~64 bytes per entry.
        try:
            check_memory(
                64.0 * used,
                f"joint max-min solve of {sum(kept):,} flows ({used:,} route entries)",
                hint="time the step with coupling=False",
            )
        except MemoryBudgetError as error:
            # One window member left uncoupled is better than no step time: the report
            # names it (method "alone: ...") and the step stays a valid lower estimate.
            refused = _OverBudget(str(error))
            cache.joint[key] = refused
            return refused
        num_links = cache.fabric.num_links
        parts = [
            FlowEntries.from_padded(sp.links[k], sp.coef[k], num_links)
            for sp, k in zip(phases, keep, strict=True)
        ]
        entries = FlowEntries(
            np.concatenate([[0], np.cumsum(np.concatenate([p.counts() for p in parts]))]).astype(
                np.int64
            ),
            np.concatenate([p.link for p in parts]),
            np.concatenate([p.coef_or_ones() for p in parts]),
            num_links,
        )
        rate = fair_rates(entries, member.prepared.capacity)[0]
        union = _Union(
            parts=np.repeat(np.arange(len(phases)), kept),
            flows=np.concatenate([np.flatnonzero(k) for k in keep]),
            entries=entries,
            rate=rate,
        )
    cache.joint[key] = union
    return union


def _flows_key(bound: Bound) -> tuple:
    """What a bound phase's flows are: the serial of its solve when shared (twins have
    the same), else its own structure key."""
    return ("serial", bound.sp.serial) if bound.sp.serial >= 0 else bound.key


def _connected_parts(
    parts: list[np.ndarray], num_links: int, link_sets: list[np.ndarray] | None = None
) -> list[np.ndarray]:
    """bool ``[F_i]`` per part (int ``[F_i, H_i]`` link rows, ``-1`` padded): the flows
    connected to every flow of part 0 through chains of shared links. The same flows as
    :func:`_connected` on the parts stacked and padded to one width, without the stack.
    ``link_sets``: the links each part uses, when known: a part none of whose links is
    reached is skipped without reading its rows."""
    reached = np.zeros(num_links + 1, dtype=bool)  # the last slot stands for padding (-1)
    keep = [np.zeros(links.shape[0], dtype=bool) for links in parts]
    keep[0][:] = True
    fresh = [k.copy() for k in keep]
    while any(f.any() for f in fresh):
        for links, new in zip(parts, fresh, strict=True):
            hops = links[new]
            reached[hops[hops >= 0]] = True
        for i, links in enumerate(parts):
            if keep[i].all() or (link_sets is not None and not reached[link_sets[i]].any()):
                fresh[i] = np.zeros_like(keep[i])
                continue
            touched = reached[links].any(axis=1)  # padding reads reached[-1], never set
            fresh[i] = touched & ~keep[i]
            keep[i] |= touched
    return keep


def _connected(links: np.ndarray, seed: np.ndarray, num_links: int) -> np.ndarray:
    """bool ``[F]``: flows connected to the ``seed`` flows through chains of shared links
    (grown one shared link at a time; a few rounds on collective phases)."""
    reached = np.zeros(num_links + 1, dtype=bool)  # the last slot stands for padding (-1)
    keep = seed.copy()
    fresh = seed
    while fresh.any():
        hops = links[fresh]
        reached[hops[hops >= 0]] = True
        touched = reached[links].any(axis=1)  # padding reads reached[-1], never set
        fresh = touched & ~keep
        keep |= touched
    return keep


def coupled_seconds(
    cache: CollectiveCache,
    member: tuple,
    background: list[tuple],
    counts: list[float] | None = None,
) -> Coupled:
    """Slowest-group seconds of ``member`` ``(name, op, size)`` while the ``background``
    collectives ``[(name, op, size), ...]`` run on the same fabric (see the module docs).

    ``counts``: how many of each background collective run during the member (default 1
    each); the flow-completion replay gives their flows that many times the bytes (the
    held-rate snapshot has them in flight throughout anyway)."""
    isolated = cache.slowest(*member)
    counts = [1.0] * len(background) if counts is None else [float(c) for c in counts]
    key = ("coupled", tuple(member), tuple(background), tuple(counts))
    if key in cache.joint:
        return cache.joint[key]  # type: ignore[return-value]
    out = Coupled(isolated, isolated, "alone", isolated)
    bound = bound_phase(cache, *member)
    pairs = [(bound_phase(cache, *item), n) for item, n in zip(background, counts, strict=True)]
    others = [b for b, _ in pairs if b is not None]
    scale = [1.0, *(n for b, n in pairs if b is not None)]
    union = _joint(cache, bound, others) if bound is not None and others else None
    if isinstance(union, _OverBudget):
        out = Coupled(isolated, isolated, f"alone: {union.reason}", isolated)
    elif bound is not None and union is not None:
        mine = union.parts == 0
        rate = bound.sp.rate.reshape(-1).copy()
        rate[union.flows[mine]] = union.rate[mine]
        snapshot = bound.priced(rate.reshape(bound.sp.rate.shape))
        snapshot = max(isolated, snapshot)
        out = Coupled(isolated, snapshot, "snapshot", snapshot)
        # The replay lies between the isolated time and the snapshot: skip it when that
        # bracket is already within RELEASE_RTOL.
        replay = None
        if snapshot - isolated > RELEASE_RTOL * snapshot:
            replay = _replay(bound, [bound, *others], scale, union)
        if replay is not None and abs(replay - snapshot) > RELEASE_RTOL * snapshot:
            out = Coupled(isolated, max(isolated, replay), "completion", snapshot)
    cache.joint[key] = out
    return out


def _replay(member: Bound, parts: list[Bound], scale: list[float], union: _Union) -> float | None:
    """The member's slowest-group seconds when the union's flows carry their bytes and
    release bandwidth as they finish (``None`` when the held rates' finish times already
    agree within :data:`RELEASE_RTOL`, so nothing is released early enough to matter)."""
    size = np.concatenate([p.flow_bytes() * n for p, n in zip(parts, scale, strict=True)])
    starts = np.concatenate([[0], np.cumsum([p.sp.links.shape[0] for p in parts])[:-1]])
    size = size[starts[union.parts] + union.flows]
    moving = size > 0
    with np.errstate(divide="ignore"):
        held = size[moving] / union.rate[moving]
    if not held.size or not np.all(np.isfinite(held)):
        return None  # a flow without bandwidth: the isolated model already says so
    if held.min() >= (1.0 - RELEASE_RTOL) * held.max():
        return None
    mine = union.parts == 0
    alone = np.zeros(size.size)
    alone[mine] = member.sp.rate.reshape(-1)[union.flows[mine]]
    background = ~mine[moving]
    done = max_min_completion(
        union.entries.select(moving),
        member.prepared.capacity,
        size[moving],
        mode="batched",
        eps=COMPLETION_EPS,
        window=max(
            RELEASE_WINDOW * float(held.max()),
            float(held[background].max(initial=0.0)) / MAX_REPLAY_WINDOWS,
        ),
        stop_after=background,
        first_rates=union.rate[moving],
        merge=False,
        solves=union.solves.setdefault(subset_key(moving), {}),
        dtype=np.float64,
    )
    # Once the background has finished, the member's flows run at their rates alone.
    finish = np.zeros(size.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        rest = done.stop_time + done.remaining / alone[moving]
    finish[moving] = np.where(np.isfinite(done.elapsed), done.elapsed, rest)
    seconds = (member.flow_bytes() / member.sp.rate.reshape(-1)).copy()
    seconds[union.flows[mine]] = finish[mine]
    transfer = seconds.reshape(member.sp.rate.shape) + member.latency_s()
    transfer = np.where(member.sp.phase.bytes_per_size > 0, transfer, member.latency_s())
    return float((member.total_s - member.phase_s + transfer.max(axis=1)).max())


class CoupledTimes:
    """Stands in for a :class:`~.comm.CollectiveCache` in the step composition:
    :meth:`slowest` answers the coupled seconds of a collective in its window.

    ``window_of(name, op)`` -> window name or ``None`` (alone); ``background`` maps each
    window to ``{dimension: (name, op, size)}``, the representative traffic of each
    dimension in flight then (a member's own dimension is left out); ``rates``: how many
    collectives each dimension issues per second (default: one during any member). A
    member of ``T`` seconds alone sees ``rate x T`` of a background collective, at least
    one and at most as many as fit back to back.
    """

    def __init__(
        self,
        cache: CollectiveCache,
        window_of: Callable[[str, str], str | None],
        background: dict[str, dict[str, tuple]],
        rates: dict[str, float] | None = None,
    ):
        self.cache = cache
        self.backend = cache.backend
        self.window_of = window_of
        self.background = background
        self.rates = rates or {}
        self.members: dict[tuple, tuple[str, Coupled]] = {}

    def prepare_many(self, pairs) -> None:
        """As :meth:`~.comm.CollectiveCache.prepare_many` (the collectives alone)."""
        self.cache.prepare_many(pairs)

    def slowest(self, name: str, op: str, size: float) -> float:
        window = self.window_of(name, op)
        if window is None:
            return self.cache.slowest(name, op, size)
        member = (name, op, float(size))
        others = [item for dim, item in self.background[window].items() if dim != name]
        alone = self.cache.slowest(*member)
        counts = []
        for item in others:
            fit = alone / max(self.cache.slowest(*item), 1e-30)
            counts.append(min(max(1.0, fit), max(1.0, self.rates.get(item[0], 0.0) * alone)))
        coupled = coupled_seconds(self.cache, member, others, counts)
        self.members[member] = (window, coupled)
        return coupled.coupled_s

    def report(self) -> dict:
        """``{window: {"background": [...], "members": [...]}}`` for the step's details."""
        out: dict = {}
        for (name, op, size), (window, c) in self.members.items():
            entry = out.setdefault(
                window,
                {
                    "background": [
                        {"dimension": n, "op": o, "size_bytes": s}
                        for n, o, s in self.background[window].values()
                    ],
                    "members": [],
                },
            )
            entry["members"].append(
                {
                    "dimension": name,
                    "op": op,
                    "size_bytes": size,
                    "isolated_s": c.isolated_s,
                    "coupled_s": c.coupled_s,
                    "added_s": c.coupled_s - c.isolated_s,
                    "method": c.method,
                    "snapshot_s": c.snapshot_s,
                }
            )
        return out


def plan_windows(
    cache: CollectiveCache, layout, rates: dict[str, float] | None = None
) -> CoupledTimes:
    """The overlap windows of one step, from the collectives the isolated model asked for
    (``cache.asked()``): each dimension's representative is its longest one alone.
    ``rates``: collectives issued per second by each dimension (see :class:`CoupledTimes`)."""
    asked = cache.asked()

    def longest(name: str, ops: tuple[str, ...] | None = None) -> tuple | None:
        items = [k for k in asked if k[0] == name and (ops is None or k[1] in ops)]
        items = [k for k in items if asked[k] > 0]
        return max(items, key=lambda k: (asked[k], k)) if items else None

    steady = {d: rep for d in STEADY_DIMENSIONS if (rep := longest(d)) is not None}
    zero3 = layout.zero == 3 and layout.dp_overlap
    if zero3:
        steady.update({d: rep for d in DP_DIMENSIONS if (rep := longest(d)) is not None})
    tail = dict(steady)
    head = dict(steady)
    if layout.dp_overlap and not zero3:
        tail.update({d: r for d in DP_DIMENSIONS if (r := longest(d, REDUCE_OPS)) is not None})
        head.update({d: r for d in DP_DIMENSIONS if (r := longest(d, ("all_gather",)))})

    def window_of(name: str, op: str) -> str | None:
        if name in STEADY_DIMENSIONS:
            return "steady"
        if zero3:
            return "steady"
        if not layout.dp_overlap:
            return None  # DP runs alone
        return "forward_head" if op == "all_gather" else "backward_tail"

    return CoupledTimes(
        cache, window_of, {"steady": steady, "backward_tail": tail, "forward_head": head}, rates
    )
