"""Small fabrics with explicit paths for congestion-control studies.

Each builder returns a :class:`Scenario`: a :class:`Fabric` built from arrays (GPU nodes,
switches, one directed link per direction of every cable) and single-path
:class:`Routes` written out hop by hop, plus the link of interest (``bottleneck``) and
named flow roles. Capacities are bytes/s, latencies s.

* ``dumbbell(n)``: n senders -> switch A -> switch B -> n receivers; A->B is the bottleneck.
* ``incast(n)``: 2-tier leaf-spine; n senders on leaf 0 send to one receiver on leaf 1,
  and a victim flow from leaf 0 goes over the same spine to leaf 2.
* ``multi_bottleneck()``: two bottleneck links of different capacity, a NIC-capped flow,
  three max-min levels; every flow crosses one congested queue.
* ``parking_lot(hops)``: one long flow over ``hops`` equal links, one short flow per link.
* ``alltoall(n)``: n hosts on a leaf-spine (hosts spread over leaves, one spine per flow
  chosen by a hash-free round robin), every host sends to every other.
* ``ring(n)``: n switches in a ring, one host each; host i sends to host i+2 clockwise --
  a cyclic buffer dependency, the textbook PFC deadlock setting.
"""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.fabric.assemble import Assembler
from fabricflow.fabric.fabric import Fabric
from fabricflow.memory_budget import check_memory
from fabricflow.routing.routes import Routes

SCENARIOS = ("incast", "dumbbell", "alltoall", "ring", "multi_bottleneck", "parking_lot")

#: What the size knob (``flows``, ``--flows``) of each scenario counts.
SIZE_KNOB = {
    "incast": "senders into one receiver (plus 1 victim flow)",
    "dumbbell": "flows over the bottleneck",
    "alltoall": "hosts (n (n-1) flows)",
    "ring": "switches of the ring (2 flows per host)",
    "multi_bottleneck": "ignored (always 6 flows)",
    "parking_lot": "hops of the long flow (hops + 1 flows)",
}


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A fabric, routes and what to look at. ``roles`` maps a role name to flow ids (every
    flow has one role); ``bottleneck`` is the link whose queue to report (None: the
    largest queue)."""

    name: str
    fabric: Fabric
    routes: Routes
    bottleneck: int | None
    roles: dict
    parts: tuple = ()

    @property
    def title(self) -> str:
        """The flows by role, e.g. ``"16 incast + 1 victim = 17 flows"``."""
        total = self.routes.num_flows
        if list(self.roles) == ["flows"]:
            return f"{total} flows"
        parts = " + ".join(f"{len(ids)} {role}" for role, ids in self.roles.items())
        return f"{parts} = {total} flows"


class _Builder:
    """Scenario fabrics from whole blocks of nodes and cables (through :class:`Assembler`).

    Node and link ids follow the order of the calls, and each cable's two directions get
    consecutive link ids (``a -> b`` then ``b -> a``), so a scenario's ids read in the
    order it is written. Node tiers: 0 GPU, 1 leaf, 2 spine; a cable touching a GPU is a
    ``nic`` link, any other a ``leaf`` link.
    """

    NODE_KINDS = ("gpu", "leaf", "spine")
    LINK_KINDS = ("nic", "leaf")

    def __init__(self, bandwidth: float, latency: float):
        self.bandwidth, self.latency = bandwidth, latency
        self.assembler = Assembler(node_kinds=self.NODE_KINDS, link_kinds=self.LINK_KINDS)
        self._tiers: list[np.ndarray] = []
        self._src: list[np.ndarray] = []
        self._dst: list[np.ndarray] = []

    def nodes(self, count: int, tier: int) -> np.ndarray:
        """Add ``count`` nodes of ``tier``; returns their int64 ids ``[count]``."""
        first = self.assembler.add_nodes(count, self.NODE_KINDS[tier], tier)
        self._tiers.append(np.full(count, tier, np.int64))
        return first + np.arange(count, dtype=np.int64)

    def cables(self, a, b, scale=1.0) -> None:
        """Cables ``a[i] <-> b[i]`` of ``scale x bandwidth`` (scalars broadcast)."""
        a, b, scale = np.broadcast_arrays(
            np.asarray(a, np.int64), np.asarray(b, np.int64), np.asarray(scale, np.float64)
        )
        a, b, scale = a.ravel(), b.ravel(), scale.ravel()
        tiers = np.concatenate(self._tiers)
        gpu_side = np.minimum(tiers[a], tiers[b]) == 0
        if gpu_side.any() != gpu_side.all():
            raise ValueError("one block of cables must be all NIC or all switch cables")
        # Interleave the directions: cable i is links 2i (a -> b) and 2i + 1 (b -> a).
        src = np.stack([a, b], axis=1).ravel()
        dst = np.stack([b, a], axis=1).ravel()
        self.assembler.add_links(
            src,
            dst,
            np.repeat(self.bandwidth * scale, 2),
            self.latency,
            "nic" if gpu_side.all() else "leaf",
        )
        self._src.append(src)
        self._dst.append(dst)

    def links(self, paths) -> np.ndarray:
        """Node paths ``[F, P]`` (``-1`` padded) -> int32 link ids ``[F, H]`` (``-1``
        padded; ``H`` = the longest path's hop count). Every hop must be a cable."""
        paths = np.asarray(paths, np.int64)
        src, dst = np.concatenate(self._src), np.concatenate(self._dst)
        num_nodes = self.assembler.num_nodes
        keys = src * num_nodes + dst
        order = np.argsort(keys, kind="stable")
        u, v = paths[:, :-1], paths[:, 1:]
        hop = (u >= 0) & (v >= 0)
        wanted = np.where(hop, u * num_nodes + v, -1)
        found = order[np.minimum(np.searchsorted(keys[order], wanted), keys.size - 1)]
        if np.any(hop & (keys[found] != wanted)):
            raise ValueError("a scenario path uses a hop that is not a cable")
        links = np.where(hop, found, -1).astype(np.int32)
        width = int(hop.sum(axis=1).max(initial=1))
        return links[:, :width]

    def fabric(self, name: str) -> Fabric:
        tiers = np.concatenate(self._tiers)
        gpu_node = np.flatnonzero(tiers == 0).astype(np.int32)
        return self.assembler.build(
            name, gpu_node, np.arange(gpu_node.shape[0]), gpus_per_node=1, meta={"scenario": name}
        )


def _routes(builder: _Builder, paths, fabric: Fabric) -> Routes:
    """Single-path routes from node paths ``[F, P]`` (``-1`` padded; first and last nodes
    of a path are GPU nodes)."""
    paths = np.asarray(paths, np.int64)
    gpu_of_node = np.full(fabric.num_nodes, -1, np.int64)
    gpu_of_node[fabric.gpu_node] = np.arange(fabric.gpu_node.shape[0])
    last = paths[np.arange(paths.shape[0]), (paths >= 0).sum(axis=1) - 1]
    return Routes(
        links=builder.links(paths),
        coef=None,
        src=gpu_of_node[paths[:, 0]].astype(np.int32),
        dst=gpu_of_node[last].astype(np.int32),
        num_links=fabric.num_links,
        policy="explicit",
    )


def _column(value, rows: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(value, np.int64), (rows,))


def _paths(*columns) -> np.ndarray:
    """Stack node-id columns (scalars broadcast) into paths ``[F, P]``."""
    rows = max(np.size(c) for c in columns)
    return np.stack([_column(c, rows) for c in columns], axis=1)


# Scenarios are small studies of congestion control; beyond this many flows building one
# alone takes minutes (and a DCQCN run of it far longer): refused before anything is built.
MAX_SCENARIO_FLOWS = 100_000
# Peak bytes per entry of a padded path matrix [F, P] while it becomes link ids: the int64
# paths plus _Builder.links' int64 temporaries (keys, search, lookup) and int32 result.
PATH_ENTRY_BYTES = 64


def _check_count(n: int, field: str, low: int, flows_per_unit=lambda n: n) -> int:
    """``n`` as an int >= ``low`` whose scenario has at most MAX_SCENARIO_FLOWS flows."""
    if isinstance(n, bool) or not isinstance(n, numbers.Real) or int(n) != n or n < low:
        raise SpecError(field, f"must be an integer >= {low}, got {n!r}")
    if flows_per_unit(int(n)) > MAX_SCENARIO_FLOWS:
        raise SpecError(
            field,
            f"{int(n)} gives {flows_per_unit(int(n)):,} flows, over the limit of "
            f"{MAX_SCENARIO_FLOWS:,} for a congestion-control scenario",
        )
    return int(n)


def dumbbell(n: int = 2, *, bandwidth: float = 5e9, latency: float = 1e-6) -> Scenario:
    """n flows over one bottleneck switch A -> switch B (all links ``bandwidth``)."""
    n = _check_count(n, "flows", 1)
    b = _Builder(bandwidth, latency)
    senders = b.nodes(n, 0)
    receivers = b.nodes(n, 0)
    left, right = b.nodes(2, 1)
    b.cables(senders, left)
    b.cables(right, receivers)
    b.cables(left, right)
    fabric = b.fabric(f"dumbbell-{n}")
    routes = _routes(b, _paths(senders, left, right, receivers), fabric)
    bottleneck = int(b.links([[left, right]])[0, 0])
    return Scenario("dumbbell", fabric, routes, bottleneck, {"flows": list(range(n))})


def incast(
    n: int = 8, *, bandwidth: float = 5e9, latency: float = 1e-6, uplink_scale: float | None = None
) -> Scenario:
    """2-tier leaf-spine incast with a victim flow.

    Leaf 0 holds n senders and a victim sender; leaf 1 holds the incast receiver, leaf 2
    the victim's receiver; every leaf has one uplink of ``uplink_scale x bandwidth``
    (default n + 1: non-blocking) to the spine. Incast flows 0..n-1 go leaf 0 -> spine ->
    leaf 1 (bottleneck: leaf 1 -> receiver); the victim (flow n) goes leaf 0 -> spine ->
    leaf 2. No link on the victim's path is saturated, so its max-min rate is its line
    rate; only PFC pauses spreading back from leaf 1 can slow it down.
    """
    n = _check_count(n, "flows", 2)
    uplink_scale = float(n + 1) if uplink_scale is None else uplink_scale
    b = _Builder(bandwidth, latency)
    senders = b.nodes(n, 0)
    victim_src, receiver, victim_dst = b.nodes(3, 0)
    leaves = b.nodes(3, 1)
    spine = b.nodes(1, 2)[0]
    b.cables(np.append(senders, victim_src), leaves[0])
    b.cables(leaves[1], receiver)
    b.cables(leaves[2], victim_dst)
    b.cables(leaves, spine, uplink_scale)
    fabric = b.fabric(f"incast-{n}")
    paths = _paths(
        np.append(senders, victim_src),
        leaves[0],
        spine,
        np.append(np.full(n, leaves[1]), leaves[2]),
        np.append(np.full(n, receiver), victim_dst),
    )
    routes = _routes(b, paths, fabric)
    bottleneck = int(b.links([[leaves[1], receiver]])[0, 0])
    return Scenario("incast", fabric, routes, bottleneck, {"incast": list(range(n)), "victim": [n]})


def multi_bottleneck(*, bandwidth: float = 5e9, latency: float = 1e-6) -> Scenario:
    """Two bottleneck switch links with three max-min levels; each flow crosses one
    congested queue.

    Switches A, B, C, D; links A -> B (C = ``bandwidth``), B -> C and B -> D (2C). Flows
    0, 1 (A -> B) and 2 (A -> B -> D) share A -> B: C/3 each (B -> D stays unsaturated).
    Flow 3 (B -> C) has a NIC of C/2, which caps it; flows 4, 5 (B -> C) share the rest of
    B -> C: 3C/4 each. Other hosts attach with 2C NICs.
    """
    b = _Builder(bandwidth, latency)
    hosts = b.nodes(12, 0)
    a, mid, c, d = b.nodes(4, 1)
    b.cables([a, mid, mid], [mid, c, d], [1.0, 2.0, 2.0])
    # Senders 0..5 attach to A, A, A, B, B, B; host 3's NIC is the C/2 cap.
    b.cables(hosts[:6], [a, a, a, mid, mid, mid], [2.0, 2.0, 2.0, 0.5, 2.0, 2.0])
    b.cables([mid, mid, d, c, c, c], hosts[6:], 2.0)
    fabric = b.fabric("multi-bottleneck")
    paths = [
        [hosts[0], a, mid, hosts[6], -1],
        [hosts[1], a, mid, hosts[7], -1],
        [hosts[2], a, mid, d, hosts[8]],
        [hosts[3], mid, c, hosts[9], -1],
        [hosts[4], mid, c, hosts[10], -1],
        [hosts[5], mid, c, hosts[11], -1],
    ]
    routes = _routes(b, paths, fabric)
    bottleneck = int(b.links([[a, mid]])[0, 0])
    return Scenario("multi_bottleneck", fabric, routes, bottleneck, {"flows": list(range(6))})


def parking_lot(hops: int = 2, *, bandwidth: float = 5e9, latency: float = 1e-6) -> Scenario:
    """A chain of ``hops`` equal switch links; flow 0 crosses all, flow i crosses link i-1.

    Max-min gives every flow C/2; under DCQCN the long flow collects marks at every
    congested queue and gets less (the ECN parking-lot unfairness).
    """
    hops = _check_count(hops, "hops", 2)
    # The long flow crosses every hop, so the padded paths and link ids are [hops + 1,
    # hops + 3]: quadratic in hops (100,000 hops = 75 GiB of int64 paths alone), although
    # the flow count stays under MAX_SCENARIO_FLOWS. Refuse before building.
    entries = (hops + 1) * (hops + 3)
    check_memory(
        entries * PATH_ENTRY_BYTES,
        f"parking_lot scenario of {hops:,} hops ({hops + 1:,} flows x {hops + 3:,} path nodes)",
        hint="use fewer hops (the long flow's path grows with every hop)",
    )
    b = _Builder(bandwidth, latency)
    switches = b.nodes(hops + 1, 1)
    b.cables(switches[:-1], switches[1:])
    long_src, long_dst = b.nodes(2, 0)
    b.cables([long_src, switches[-1]], [switches[0], long_dst], 2.0)
    short = b.nodes(2 * hops, 0).reshape(hops, 2)  # (src, dst) of short flow i
    # Per short flow: its sender's cable to switch i, then switch i+1's cable to its receiver.
    b.cables(
        np.stack([short[:, 0], switches[1:]], axis=1),
        np.stack([switches[:-1], short[:, 1]], axis=1),
        2.0,
    )
    long_path = np.concatenate([[long_src], switches, [long_dst]])
    short_paths = np.full((hops, long_path.size), -1, np.int64)
    short_paths[:, :4] = _paths(short[:, 0], switches[:-1], switches[1:], short[:, 1])
    fabric = b.fabric(f"parking-lot-{hops}")
    routes = _routes(b, np.concatenate([long_path[None, :], short_paths]), fabric)
    bottleneck = int(b.links([[switches[0], switches[1]]])[0, 0])
    return Scenario(
        "parking_lot", fabric, routes, bottleneck, {"long": [0], "short": list(range(1, hops + 1))}
    )


def alltoall(
    n: int = 8, *, bandwidth: float = 5e9, latency: float = 1e-6, leaves: int = 2, spines: int = 2
) -> Scenario:
    """n hosts spread over ``leaves`` leaves, all-to-all (n (n-1) flows); flows between
    leaves take spine ``(src + dst) % spines`` (a deterministic spread). Uplinks have
    ``bandwidth`` each, so with ``hosts per leaf > spines`` the fabric is oversubscribed."""
    n = _check_count(n, "flows", 2, lambda n: n * (n - 1))
    b = _Builder(bandwidth, latency)
    hosts = b.nodes(n, 0)
    leaf_nodes = b.nodes(leaves, 1)
    spine_nodes = b.nodes(spines, 2)
    leaf_of = leaf_nodes[np.arange(n) * leaves // n]
    b.cables(hosts, leaf_of)
    b.cables(np.repeat(leaf_nodes, spines), np.tile(spine_nodes, leaves))
    fabric = b.fabric(f"alltoall-{n}")
    i, j = np.nonzero(~np.eye(n, dtype=bool))  # ordered pairs, row-major
    same = leaf_of[i] == leaf_of[j]
    spine = spine_nodes[(i + j) % spines]
    # Same leaf: host, leaf, host; else host, leaf, spine, leaf, host (-1 padded).
    paths = np.where(
        same[:, None],
        _paths(hosts[i], leaf_of[i], hosts[j], -1, -1),
        _paths(hosts[i], leaf_of[i], spine, leaf_of[j], hosts[j]),
    )
    routes = _routes(b, paths, fabric)
    # Many links tie on load; the summary picks the one with the largest queue.
    return Scenario("alltoall", fabric, routes, None, {"flows": list(range(paths.shape[0]))})


def ring(
    n: int = 4, *, bandwidth: float = 5e9, latency: float = 1e-6, flows_per_host: int = 2
) -> Scenario:
    """n switches in a ring, one host each; every host sends ``flows_per_host`` flows to
    the host two switches clockwise. Each switch-to-switch link carries the flows of two
    hosts (2 x flows_per_host flows), and the ingress buffers depend on each other in a
    cycle around the ring."""
    n = _check_count(n, "flows", 3)
    b = _Builder(bandwidth, latency)
    hosts = b.nodes(n, 0)
    switches = b.nodes(n, 1)
    b.cables(hosts, switches, 2.0)
    b.cables(switches, np.roll(switches, -1))
    fabric = b.fabric(f"ring-{n}")
    paths = _paths(
        hosts, switches, np.roll(switches, -1), np.roll(switches, -2), np.roll(hosts, -2)
    )
    routes = _routes(b, np.repeat(paths, flows_per_host, axis=0), fabric)
    bottleneck = int(b.links([[switches[0], switches[1]]])[0, 0])
    return Scenario("ring", fabric, routes, bottleneck, {"flows": list(range(n * flows_per_host))})


@dataclasses.dataclass(frozen=True)
class Part:
    """One scenario inside a :func:`union`: its ``flows`` (a ``slice`` of the union's flow
    ids), ``bottleneck`` link and ``roles`` in the union's ids."""

    name: str
    flows: slice
    bottleneck: int | None
    roles: dict


def union(scenarios, name: str | None = None) -> Scenario:
    """Several scenarios as one, side by side on disjoint fabrics (block-diagonal).

    One run then simulates them all: one compilation, one vmapped batch, the batches-not-
    calls rule of the planner. Node, link, GPU and flow ids of scenario ``k`` are offset by
    the totals of the scenarios before it; ``parts`` says where each one is, ``roles``
    are ``"<k>:<name>:<role>"``, ``bottleneck`` is the first part's.
    """
    scenarios = list(scenarios)
    if not scenarios:
        raise SpecError("scenarios", "need at least one scenario to unite")
    fabrics = [sc.fabric for sc in scenarios]
    node_off = np.cumsum([0] + [f.num_nodes for f in fabrics])
    link_off = np.cumsum([0] + [f.num_links for f in fabrics])
    gpu_off = np.cumsum([0] + [f.num_gpus for f in fabrics])
    flow_off = np.cumsum([0] + [sc.routes.num_flows for sc in scenarios])
    name = name or "+".join(sc.name for sc in scenarios)

    def cat(attribute, offsets=None):
        arrays = [np.asarray(getattr(f, attribute)) for f in fabrics]
        if offsets is not None:
            arrays = [a + o for a, o in zip(arrays, offsets, strict=False)]
        return np.concatenate(arrays)

    fabric = Fabric(
        name=name,
        link_src=cat("link_src", node_off),
        link_dst=cat("link_dst", node_off),
        capacity=cat("capacity"),
        latency=cat("latency"),
        link_kind_id=cat("link_kind_id"),
        link_kinds=fabrics[0].link_kinds,
        node_kind_id=cat("node_kind_id"),
        node_kinds=fabrics[0].node_kinds,
        node_tier=cat("node_tier"),
        node_group=cat("node_group"),
        gpu_node=cat("gpu_node", node_off),
        gpu_domain=cat("gpu_domain", gpu_off),
        gpus_per_node=1,
        meta={"scenario": name},
    )
    hops = max(sc.routes.links.shape[1] for sc in scenarios)
    links = np.full((int(flow_off[-1]), hops), -1, np.int32)
    parts, roles = [], {}
    for k, sc in enumerate(scenarios):
        rows = slice(int(flow_off[k]), int(flow_off[k + 1]))
        own = sc.routes.links
        links[rows, : own.shape[1]] = np.where(own >= 0, own + link_off[k], -1)
        shifted = {role: [int(i + flow_off[k]) for i in ids] for role, ids in sc.roles.items()}
        roles.update({f"{k}:{sc.name}:{role}": ids for role, ids in shifted.items()})
        bottleneck = None if sc.bottleneck is None else int(sc.bottleneck + link_off[k])
        parts.append(Part(sc.name, rows, bottleneck, shifted))
    routes = Routes(
        links=links,
        coef=None,
        src=np.concatenate([sc.routes.src + gpu_off[k] for k, sc in enumerate(scenarios)]),
        dst=np.concatenate([sc.routes.dst + gpu_off[k] for k, sc in enumerate(scenarios)]),
        num_links=fabric.num_links,
        policy="explicit",
    )
    return Scenario(name, fabric, routes, parts[0].bottleneck, roles, tuple(parts))


def build_scenario(
    name: str, flows: int, *, bandwidth: float = 5e9, latency: float = 1e-6
) -> Scenario:
    """Dispatch by name (one of :data:`SCENARIOS`); ``flows`` is the scenario's size knob."""
    if name == "dumbbell":
        return dumbbell(flows, bandwidth=bandwidth, latency=latency)
    if name == "incast":
        return incast(flows, bandwidth=bandwidth, latency=latency)
    if name == "alltoall":
        return alltoall(flows, bandwidth=bandwidth, latency=latency)
    if name == "ring":
        return ring(flows, bandwidth=bandwidth, latency=latency)
    if name == "multi_bottleneck":
        return multi_bottleneck(bandwidth=bandwidth, latency=latency)
    if name == "parking_lot":
        return parking_lot(flows, bandwidth=bandwidth, latency=latency)
    raise SpecError("scenario", f"unknown scenario {name!r}; choose one of {list(SCENARIOS)}")
