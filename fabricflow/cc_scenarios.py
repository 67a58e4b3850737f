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

import numpy as np

from .errors import SpecError
from .fabric.fabric import Fabric
from .routing.routes import Routes

SCENARIOS = ("incast", "dumbbell", "alltoall", "ring", "multi_bottleneck", "parking_lot")


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A fabric, routes and what to look at. ``roles`` maps a role name to flow ids;
    ``bottleneck`` is the link whose queue to report (None: the largest queue)."""

    name: str
    fabric: Fabric
    routes: Routes
    bottleneck: int | None
    roles: dict


class _Builder:
    """Collects nodes and cables, then makes a Fabric (both directions of every cable)."""

    def __init__(self, bandwidth: float, latency: float):
        self.bandwidth, self.latency = bandwidth, latency
        self.tiers: list[int] = []
        self.src: list[int] = []
        self.dst: list[int] = []
        self.cap: list[float] = []
        self.index: dict[tuple[int, int], int] = {}

    def node(self, tier: int) -> int:
        self.tiers.append(tier)
        return len(self.tiers) - 1

    def cable(self, a: int, b: int, scale: float = 1.0) -> None:
        for u, v in ((a, b), (b, a)):
            self.index[(u, v)] = len(self.src)
            self.src.append(u)
            self.dst.append(v)
            self.cap.append(self.bandwidth * scale)

    def path(self, nodes: list[int]) -> list[int]:
        return [self.index[(u, v)] for u, v in zip(nodes[:-1], nodes[1:], strict=True)]

    def fabric(self, name: str) -> Fabric:
        tiers = np.asarray(self.tiers, dtype=np.int8)
        src, dst = np.asarray(self.src), np.asarray(self.dst)
        gpu_node = np.flatnonzero(tiers == 0).astype(np.int32)
        kinds = ("gpu", "leaf", "spine")
        link_tier = np.minimum(tiers[src], tiers[dst])
        return Fabric(
            name=name, link_src=src, link_dst=dst, capacity=np.asarray(self.cap),
            latency=np.full(src.shape[0], self.latency),
            link_kind_id=np.where(link_tier == 0, 0, 1), link_kinds=("nic", "leaf"),
            node_kind_id=np.minimum(tiers, 2), node_kinds=kinds, node_tier=tiers,
            node_group=np.full(tiers.shape[0], -1), gpu_node=gpu_node,
            gpu_domain=np.arange(gpu_node.shape[0]), meta={"scenario": name})


def _routes(builder: _Builder, paths: list[list[int]], fabric: Fabric) -> Routes:
    """Routes from node paths (first and last nodes are GPU nodes)."""
    link_paths = [builder.path(p) for p in paths]
    hops = max(len(p) for p in link_paths)
    links = np.full((len(paths), hops), -1, dtype=np.int32)
    for i, path in enumerate(link_paths):
        links[i, :len(path)] = path
    gpu_of_node = {int(n): g for g, n in enumerate(fabric.gpu_node)}
    src = np.asarray([gpu_of_node[p[0]] for p in paths], dtype=np.int32)
    dst = np.asarray([gpu_of_node[p[-1]] for p in paths], dtype=np.int32)
    return Routes(links=links, coef=None, src=src, dst=dst, num_links=fabric.num_links,
                  policy="explicit")


def _check_count(n: int, field: str, low: int) -> int:
    if int(n) != n or n < low:
        raise SpecError(field, f"must be an integer >= {low}, got {n}")
    return int(n)


def dumbbell(n: int = 2, *, bandwidth: float = 5e9, latency: float = 1e-6) -> Scenario:
    """n flows over one bottleneck switch A -> switch B (all links ``bandwidth``)."""
    n = _check_count(n, "flows", 1)
    b = _Builder(bandwidth, latency)
    senders = [b.node(0) for _ in range(n)]
    receivers = [b.node(0) for _ in range(n)]
    left, right = b.node(1), b.node(1)
    for s in senders:
        b.cable(s, left)
    for r in receivers:
        b.cable(right, r)
    b.cable(left, right)
    fabric = b.fabric(f"dumbbell-{n}")
    routes = _routes(b, [[s, left, right, r] for s, r in zip(senders, receivers, strict=True)], fabric)
    return Scenario("dumbbell", fabric, routes, b.index[(left, right)], {"flows": list(range(n))})


def incast(n: int = 8, *, bandwidth: float = 5e9, latency: float = 1e-6,
           uplink_scale: float | None = None) -> Scenario:
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
    senders = [b.node(0) for _ in range(n)]
    victim_src, receiver, victim_dst = b.node(0), b.node(0), b.node(0)
    leaves = [b.node(1) for _ in range(3)]
    spine = b.node(2)
    for s in [*senders, victim_src]:
        b.cable(s, leaves[0])
    b.cable(leaves[1], receiver)
    b.cable(leaves[2], victim_dst)
    for leaf in leaves:
        b.cable(leaf, spine, uplink_scale)
    fabric = b.fabric(f"incast-{n}")
    paths = [[s, leaves[0], spine, leaves[1], receiver] for s in senders]
    paths.append([victim_src, leaves[0], spine, leaves[2], victim_dst])
    routes = _routes(b, paths, fabric)
    return Scenario("incast", fabric, routes, b.index[(leaves[1], receiver)],
                    {"incast": list(range(n)), "victim": [n]})


def multi_bottleneck(*, bandwidth: float = 5e9, latency: float = 1e-6) -> Scenario:
    """Two bottleneck switch links with three max-min levels; each flow crosses one
    congested queue.

    Switches A, B, C, D; links A -> B (C = ``bandwidth``), B -> C and B -> D (2C). Flows
    0, 1 (A -> B) and 2 (A -> B -> D) share A -> B: C/3 each (B -> D stays unsaturated).
    Flow 3 (B -> C) has a NIC of C/2, which caps it; flows 4, 5 (B -> C) share the rest of
    B -> C: 3C/4 each. Other hosts attach with 2C NICs.
    """
    b = _Builder(bandwidth, latency)
    hosts = [b.node(0) for _ in range(12)]
    a, mid, c, d = (b.node(1) for _ in range(4))
    b.cable(a, mid, 1.0)
    b.cable(mid, c, 2.0)
    b.cable(mid, d, 2.0)
    senders = [(hosts[0], a, 2.0), (hosts[1], a, 2.0), (hosts[2], a, 2.0),
               (hosts[3], mid, 0.5), (hosts[4], mid, 2.0), (hosts[5], mid, 2.0)]
    receivers = [(hosts[6], mid), (hosts[7], mid), (hosts[8], d), (hosts[9], c),
                 (hosts[10], c), (hosts[11], c)]
    for host, switch, scale in senders:
        b.cable(host, switch, scale)
    for host, switch in receivers:
        b.cable(switch, host, 2.0)
    fabric = b.fabric("multi-bottleneck")
    paths = [[hosts[0], a, mid, hosts[6]], [hosts[1], a, mid, hosts[7]],
             [hosts[2], a, mid, d, hosts[8]], [hosts[3], mid, c, hosts[9]],
             [hosts[4], mid, c, hosts[10]], [hosts[5], mid, c, hosts[11]]]
    routes = _routes(b, paths, fabric)
    return Scenario("multi_bottleneck", fabric, routes, b.index[(a, mid)],
                    {"flows": list(range(6))})


def parking_lot(hops: int = 2, *, bandwidth: float = 5e9, latency: float = 1e-6) -> Scenario:
    """A chain of ``hops`` equal switch links; flow 0 crosses all, flow i crosses link i-1.

    Max-min gives every flow C/2; under DCQCN the long flow collects marks at every
    congested queue and gets less (the ECN parking-lot unfairness).
    """
    hops = _check_count(hops, "hops", 2)
    b = _Builder(bandwidth, latency)
    switches = [b.node(1) for _ in range(hops + 1)]
    for u, v in zip(switches[:-1], switches[1:], strict=True):
        b.cable(u, v)
    long_src, long_dst = b.node(0), b.node(0)
    b.cable(long_src, switches[0], 2.0)
    b.cable(switches[-1], long_dst, 2.0)
    paths = [[long_src, *switches, long_dst]]
    for i in range(hops):
        src, dst = b.node(0), b.node(0)
        b.cable(src, switches[i], 2.0)
        b.cable(switches[i + 1], dst, 2.0)
        paths.append([src, switches[i], switches[i + 1], dst])
    fabric = b.fabric(f"parking-lot-{hops}")
    routes = _routes(b, paths, fabric)
    return Scenario("parking_lot", fabric, routes, b.index[(switches[0], switches[1])],
                    {"long": [0], "short": list(range(1, hops + 1))})


def alltoall(n: int = 8, *, bandwidth: float = 5e9, latency: float = 1e-6, leaves: int = 2,
             spines: int = 2) -> Scenario:
    """n hosts spread over ``leaves`` leaves, all-to-all (n (n-1) flows); flows between
    leaves take spine ``(src + dst) % spines`` (a deterministic spread). Uplinks have
    ``bandwidth`` each, so with ``hosts per leaf > spines`` the fabric is oversubscribed."""
    n = _check_count(n, "flows", 2)
    b = _Builder(bandwidth, latency)
    hosts = [b.node(0) for _ in range(n)]
    leaf_nodes = [b.node(1) for _ in range(leaves)]
    spine_nodes = [b.node(2) for _ in range(spines)]
    leaf_of = [leaf_nodes[i * leaves // n] for i in range(n)]
    for h, leaf in zip(hosts, leaf_of, strict=True):
        b.cable(h, leaf)
    for leaf in leaf_nodes:
        for spine in spine_nodes:
            b.cable(leaf, spine)
    fabric = b.fabric(f"alltoall-{n}")
    paths = []
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            if leaf_of[i] == leaf_of[j]:
                paths.append([hosts[i], leaf_of[i], hosts[j]])
            else:
                spine = spine_nodes[(i + j) % spines]
                paths.append([hosts[i], leaf_of[i], spine, leaf_of[j], hosts[j]])
    routes = _routes(b, paths, fabric)
    # Many links tie on load; the summary picks the one with the largest queue.
    return Scenario("alltoall", fabric, routes, None,
                    {"flows": list(range(len(paths)))})


def ring(n: int = 4, *, bandwidth: float = 5e9, latency: float = 1e-6, flows_per_host: int = 2
         ) -> Scenario:
    """n switches in a ring, one host each; every host sends ``flows_per_host`` flows to
    the host two switches clockwise. Each switch-to-switch link carries the flows of two
    hosts (2 x flows_per_host flows), and the ingress buffers depend on each other in a
    cycle around the ring."""
    n = _check_count(n, "flows", 3)
    b = _Builder(bandwidth, latency)
    hosts = [b.node(0) for _ in range(n)]
    switches = [b.node(1) for _ in range(n)]
    for h, s in zip(hosts, switches, strict=True):
        b.cable(h, s, 2.0)
    for i in range(n):
        b.cable(switches[i], switches[(i + 1) % n])
    fabric = b.fabric(f"ring-{n}")
    paths = []
    for i in range(n):
        for _ in range(flows_per_host):
            paths.append([hosts[i], switches[i], switches[(i + 1) % n], switches[(i + 2) % n],
                          hosts[(i + 2) % n]])
    routes = _routes(b, paths, fabric)
    return Scenario("ring", fabric, routes, b.index[(switches[0], switches[1])],
                    {"flows": list(range(len(paths)))})


def build_scenario(name: str, flows: int, *, bandwidth: float = 5e9,
                   latency: float = 1e-6) -> Scenario:
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
