"""The :class:`Fabric`: a cluster network as host-side numpy arrays.

A fabric is a directed multigraph. Nodes are GPUs (one node per GPU), scale-up switches
(NVSwitch-like) and scale-out switches; every physical cable or NVLink bundle is two
directed links, one per direction, each with its own capacity and latency. Arrays are
indexed by node id ``0..num_nodes-1`` and link id ``0..num_links-1``; GPU ``g`` sits on
node ``gpu_node[g]``.

Generators that know their structure (Clos, torus, dragonfly) attach a ``structure``
object so that routing can compute paths arithmetically, with no per-flow Python; every
other fabric is routed by the generic shortest-path fallback.

Failures keep link ids stable: :meth:`Fabric.without` returns a copy whose failed links
have ``link_up == False`` and capacity 0, so that routes computed before and after a
failure index the same arrays.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from fabricflow.errors import SpecError, did_you_mean
from fabricflow.fabric.summary import fabric_summary
from fabricflow.fabric.transport import DEFAULT_TRANSPORT, Transport
from fabricflow.typing import Capacity, GpuNodes, Latency, NodeIds

# Canonical labels. Generators use these; user graphs may add their own.
NODE_KINDS_DEFAULT = ("gpu", "nvswitch", "leaf", "spine", "core", "super", "switch")
LINK_KINDS_DEFAULT = ("nvlink", "nic", "leaf", "spine", "core", "super", "local", "global", "ici")


@dataclasses.dataclass(frozen=True, eq=False)
class Fabric:
    """A cluster network. All arrays are numpy; units are SI (bytes/s, seconds).

    Attributes:
        name: fabric name (preset name or the spec's ``name``).
        link_src, link_dst: int32 ``[L]`` node ids of each directed link.
        capacity: float64 ``[L]`` bytes/s; 0 for failed links.
        latency: float64 ``[L]`` seconds (propagation + the downstream port's forwarding).
        link_kind_id: int8 ``[L]`` index into ``link_kinds``.
        link_kinds: label of each link kind id (``nvlink``, ``nic``, ``leaf`` = leaf->spine
            and back, ``spine`` = spine->core and back, ``core``, ``local``, ``global``, ...).
            The label of a link between tiers t and t+1 is the name of tier t.
        node_kind_id: int8 ``[N]`` index into ``node_kinds``.
        node_kinds: label of each node kind id (``gpu``, ``nvswitch``, ``leaf``, ...).
        node_tier: int8 ``[N]``: 0 for GPUs, -1 for scale-up switches, t >= 1 for
            scale-out switches of tier t (1 = leaf/ToR).
        node_group: int32 ``[N]``: the pod / rack / dragonfly group of the node
            (-1 where none applies).
        gpu_node: int32 ``[G]``: node id of each GPU in GPU-index order.
        gpu_domain: int32 ``[G]``: scale-up (NVLink) domain of each GPU.
        gpus_per_node: GPUs per server (host), for placement and summaries.
        link_up: bool ``[L]``; False for failed links.
        structure: generator-specific description used for arithmetic routing, or None.
        meta: description, sources, assumptions and the spec the fabric came from.
        link_cables: int32 ``[L]``: the working physical cables a link bundles (parallel
            cables between one switch pair, ``uplink_bundle`` in a Clos spec, ``count``
            in a graph spec), 0 for failed links; its capacity is their sum. Default: 1
            per working link.
    """

    name: str
    link_src: NodeIds
    link_dst: NodeIds
    capacity: Capacity
    latency: Latency
    link_kind_id: np.ndarray
    link_kinds: tuple[str, ...]
    node_kind_id: np.ndarray
    node_kinds: tuple[str, ...]
    node_tier: np.ndarray
    node_group: np.ndarray
    gpu_node: GpuNodes
    gpu_domain: GpuNodes
    gpus_per_node: int = 1
    link_up: np.ndarray | None = None
    structure: Any = None
    meta: dict = dataclasses.field(default_factory=dict)
    link_cables: np.ndarray | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "link_src", np.ascontiguousarray(self.link_src, dtype=np.int32))
        set_(self, "link_dst", np.ascontiguousarray(self.link_dst, dtype=np.int32))
        set_(self, "capacity", np.ascontiguousarray(self.capacity, dtype=np.float64))
        set_(self, "latency", np.ascontiguousarray(self.latency, dtype=np.float64))
        set_(self, "link_kind_id", np.ascontiguousarray(self.link_kind_id, dtype=np.int8))
        set_(self, "node_kind_id", np.ascontiguousarray(self.node_kind_id, dtype=np.int8))
        set_(self, "node_tier", np.ascontiguousarray(self.node_tier, dtype=np.int8))
        set_(self, "node_group", np.ascontiguousarray(self.node_group, dtype=np.int32))
        set_(self, "gpu_node", np.ascontiguousarray(self.gpu_node, dtype=np.int32))
        set_(self, "gpu_domain", np.ascontiguousarray(self.gpu_domain, dtype=np.int32))
        if self.link_up is None:
            set_(self, "link_up", np.ones(self.link_src.shape[0], dtype=bool))
        if self.link_cables is None:
            set_(self, "link_cables", np.asarray(self.link_up, np.int32))
        set_(self, "link_cables", np.ascontiguousarray(self.link_cables, dtype=np.int32))
        self._validate()

    # ------------------------------------------------------------------ validation
    def _validate(self) -> None:
        num_links = self.link_src.shape[0]
        for field in ("link_dst", "capacity", "latency", "link_kind_id", "link_up", "link_cables"):
            if getattr(self, field).shape != (num_links,):
                raise SpecError(
                    field,
                    f"must have shape [{num_links}] like link_src, "
                    f"got {getattr(self, field).shape}",
                )
        num_nodes = self.node_kind_id.shape[0]
        for field in ("node_tier", "node_group"):
            if getattr(self, field).shape != (num_nodes,):
                raise SpecError(field, f"must have shape [{num_nodes}] like node_kind_id")
        if num_links and (
            self.link_src.min() < 0
            or self.link_src.max() >= num_nodes
            or self.link_dst.min() < 0
            or self.link_dst.max() >= num_nodes
        ):
            raise SpecError("link_src/link_dst", f"node ids must lie in 0..{num_nodes - 1}")
        if not np.all(np.isfinite(self.capacity)) or np.any(self.capacity < 0):
            raise SpecError("capacity", "link capacities must be finite and >= 0 bytes/s")
        with np.errstate(over="ignore"):
            total = self.capacity.sum()
        if not np.isfinite(total):
            # Every capacity is finite but their sum is not: totals and bisection would be inf.
            raise SpecError(
                "capacity",
                f"link capacities up to {self.capacity.max():.3g} bytes/s "
                "sum beyond float64; a link carries at most ~1e15 bytes/s",
            )
        if np.any(self.capacity[self.link_up] <= 0):
            raise SpecError("capacity", "working links must have capacity > 0 bytes/s")
        assert self.link_cables is not None and self.link_up is not None  # __post_init__
        if np.any(self.link_cables[self.link_up] < 1) or np.any(self.link_cables[~self.link_up]):
            raise SpecError("link_cables", "a working link bundles >= 1 cable, a failed link none")
        if not np.all(np.isfinite(self.latency)) or np.any(self.latency < 0):
            raise SpecError("latency", "link latencies must be finite and >= 0 s")
        if self.gpu_node.shape != self.gpu_domain.shape:
            raise SpecError("gpu_domain", "must have one entry per GPU, like gpu_node")
        if self.gpu_node.size and (self.gpu_node.min() < 0 or self.gpu_node.max() >= num_nodes):
            raise SpecError("gpu_node", f"node ids must lie in 0..{num_nodes - 1}")

    # ------------------------------------------------------------------ sizes
    @property
    def num_gpus(self) -> int:
        return int(self.gpu_node.shape[0])

    @property
    def num_nodes(self) -> int:
        return int(self.node_kind_id.shape[0])

    @property
    def num_links(self) -> int:
        return int(self.link_src.shape[0])

    @property
    def num_switches(self) -> int:
        """Every switch node: network switches and scale-up (NVLink-domain) switches."""
        return int(np.count_nonzero(self.node_tier != 0))

    @property
    def num_network_switches(self) -> int:
        """Scale-out switches (tiers >= 1: leaves, spines, cores, dragonfly routers)."""
        return int(np.count_nonzero(self.node_tier >= 1))

    @property
    def num_scale_up_switches(self) -> int:
        """Scale-up switches: one per scale-up domain (the NVSwitch planes of a server or
        rack modeled as one non-blocking switch)."""
        return int(np.count_nonzero(self.node_tier < 0))

    @property
    def scale_up_link_kind(self) -> str | None:
        """The link kind of the scale-up domain (``nvlink``, or what the spec's
        ``scale_up.name`` calls it, e.g. ``infinity-fabric``), ``None`` without one."""
        switches = self.node_tier < 0
        touching = switches[self.link_src] | switches[self.link_dst]
        if not touching.any():
            return None
        return self.link_kinds[int(self.link_kind_id[np.argmax(touching)])]

    @property
    def link_kind(self) -> np.ndarray:
        """Per-link label, a numpy string array ``[L]`` (``nvlink``, ``nic``, ``leaf``, ...)."""
        return np.asarray(self.link_kinds, dtype=object)[self.link_kind_id]

    @property
    def node_kind(self) -> np.ndarray:
        """Per-node label, a numpy string array ``[N]`` (``gpu``, ``nvswitch``, ``leaf``, ...)."""
        return np.asarray(self.node_kinds, dtype=object)[self.node_kind_id]

    @property
    def transport(self) -> Transport:
        """The scale-out :class:`~fabricflow.fabric.transport.Transport` (protocol, adaptive
        routing) from the spec's ``transport`` key; ``rocev2`` without adaptive routing when
        the fabric was built without one."""
        return self.meta.get("transport", DEFAULT_TRANSPORT)

    @property
    def num_domains(self) -> int:
        return int(self.gpu_domain.max()) + 1 if self.num_gpus else 0

    def links_of_kind(self, kind: str) -> np.ndarray:
        """Link ids whose label is ``kind``; raises naming the known kinds otherwise."""
        if kind not in self.link_kinds:
            raise SpecError(
                "kind",
                f"unknown link kind {kind!r}; this fabric has {list(self.link_kinds)}",
                value=kind,
                allowed=self.link_kinds,
            )
        return np.flatnonzero(self.link_kind_id == self.link_kinds.index(kind))

    # ------------------------------------------------------------------ failures
    def without(
        self,
        links: Iterable[int] | None = None,
        switches: Iterable[int] | None = None,
        *,
        link_kind: str | None = None,
        fraction: float = 0.0,
        seed: int = 0,
    ) -> Fabric:
        """A copy with links and/or switches failed (both directions of a cable fail together).

        Args:
            links: directed link ids to fail, with every cable they bundle; the reverse
                link of each (same endpoints, same kind) fails too, as a cut cable does.
            switches: node ids of switches to fail; every link touching them fails.
            link_kind, fraction, seed: additionally fail a random ``fraction`` of the
                working *physical* cables of kind ``link_kind`` (seeded, reproducible;
                :meth:`failed_cables`). A link that bundles several parallel cables
                loses the capacity of those that fail and goes down with the last one.

        Link ids stay the same; failed links get ``capacity == 0`` and ``link_up == False``;
        ``meta["failed_links"]`` counts the directed links down, ``meta["failed_cables"]``
        the physical cables failed (each once, not per direction) and
        ``meta["reduced_links"]`` the directed links still up with fewer cables than built
        (bundles partly failed, at reduced capacity); ``meta["built_link_cables"]`` keeps
        the cables per link as built, so repeated failures count against it. Routing then
        uses only surviving paths, and partly failed bundles at their remaining capacity.
        """
        assert self.link_up is not None and self.link_cables is not None  # __post_init__
        down = ~self.link_up.copy()
        if links is not None:
            ids = np.asarray(list(links))
            if ids.size and not np.issubdtype(ids.dtype, np.integer):
                raise SpecError("links", f"must be integer link ids, got dtype {ids.dtype}")
            ids = ids.astype(np.int64)
            if ids.size and (ids.min() < 0 or ids.max() >= self.num_links):
                raise SpecError("links", f"link ids must lie in 0..{self.num_links - 1}")
            down[ids] = True
        if switches is not None:
            nodes = np.asarray(list(switches))
            if nodes.size and not np.issubdtype(nodes.dtype, np.integer):
                raise SpecError("switches", f"must be integer node ids, got dtype {nodes.dtype}")
            nodes = nodes.astype(np.int64)
            if nodes.size and (nodes.min() < 0 or nodes.max() >= self.num_nodes):
                raise SpecError("switches", f"node ids must lie in 0..{self.num_nodes - 1}")
            if nodes.size and np.any(self.node_tier[nodes] == 0):
                raise SpecError(
                    "switches", "GPU nodes cannot be failed as switches; fail their links instead"
                )
            dead = np.zeros(self.num_nodes, dtype=bool)
            dead[nodes] = True
            down |= dead[self.link_src] | dead[self.link_dst]
        down |= self._reverse_mask(down)
        cables = np.where(down, 0, self.link_cables)
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float, np.floating)):
            raise SpecError("fraction", f"must be a number in [0, 1], got {fraction!r}")
        if fraction:
            broken = self.failed_cables(link_kind, fraction, seed)
            cables = np.maximum(cables - broken, 0)
            down |= cables == 0
        capacity = np.where(down, 0.0, self.capacity * cables / np.maximum(self.link_cables, 1))
        # each cable once: on its src < dst direction, or on its only direction
        once = (self.link_src < self.link_dst) | (self.reverse_links() < 0)
        lost = int((self.link_cables - cables)[once].sum())
        built = self.meta.get("built_link_cables")
        built = self.link_cables if built is None else built
        reduced = ~down & (cables < built)
        return dataclasses.replace(
            self,
            capacity=capacity,
            link_up=~down,
            link_cables=cables,
            meta={
                **self.meta,
                "failed_links": int(down.sum()),
                "failed_cables": int(self.meta.get("failed_cables", 0)) + lost,
                "reduced_links": int(reduced.sum()),
                "built_link_cables": built,
            },
        )

    def failed_cables(self, link_kind: str | None, fraction: float, seed: int = 0) -> np.ndarray:
        """int32 ``[L]``: the physical cables that a seeded random ``fraction`` of the
        working cables of kind ``link_kind`` takes down, per directed link (both
        directions of a cable count it). :meth:`without` applies it.

        The draw is ``round(fraction * C)`` distinct cables out of the ``C`` working
        cables of the kind, uniformly: a bundle of ``b`` parallel cables is ``b``
        candidates. On fabrics without bundles it is the same draw as over links.

        Raises:
            SpecError: (``link_kind``) a kind this fabric has no links of, with the kinds
                it has; (``fraction``) outside [0, 1] or rounding to no cable.
        """
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float, np.floating)):
            raise SpecError("fraction", f"must be a number in [0, 1], got {fraction!r}")
        if not 0.0 <= fraction <= 1.0:
            raise SpecError("fraction", f"must lie in [0, 1], got {fraction}")
        present = [
            k for k in self.link_kinds if np.any(self.link_kind_id == self.link_kinds.index(k))
        ]
        if link_kind not in present:
            raise SpecError("link_kind", self._unknown_kind_message(link_kind, present))
        assert self.link_cables is not None  # set by __post_init__
        candidates = self.links_of_kind(link_kind)
        # A cable is the link whose src < dst; fail it and its reverse together.
        cables = candidates[self.link_src[candidates] < self.link_dst[candidates]]
        working = self.link_cables[cables]
        total = int(working.sum())
        count = int(round(fraction * total))
        if count == 0 and fraction > 0:
            raise SpecError(
                "fraction",
                f"{fraction} of {total:,} working {link_kind} cables rounds "
                f"to none; use at least {0.5 / max(total, 1):.2g}",
            )
        out = np.zeros(self.num_links, np.int32)
        if count:
            owner = np.repeat(cables, working)  # one entry per physical cable
            picked = owner[np.random.default_rng(seed).choice(total, size=count, replace=False)]
            np.add.at(out, picked, 1)
            reverse = self.reverse_links()[picked]
            np.add.at(out, reverse[reverse >= 0], 1)
        return out

    def _unknown_kind_message(self, link_kind, present: list[str]) -> str:
        """What to say when ``link_kind`` names no cables of this fabric."""
        what = "no link kind given" if link_kind is None else f"no {link_kind!r} links"
        text = f"this fabric has {what}; cables of kinds {present} can fail"
        tiers = getattr(self.structure, "tier_names", None)  # a Clos
        if tiers:
            cabled = [
                f"{t!r} = {t}-{tiers[i + 1]} cables"
                for i, t in enumerate(tiers[:-1])
                if t in present
            ]
            text += (
                ". A Clos names the cables between tiers t and t+1 after tier t: here "
                + ", ".join(cabled)
                + f"; the top tier ({tiers[-1]}) has no uplinks"
            )
        return text + did_you_mean(link_kind, present)

    def reverse_links(self) -> np.ndarray:
        """int64 ``[L]``: the link with the same endpoints reversed and the same kind, the
        other direction of the same cable (``-1`` where there is none)."""
        key_fwd = self._pair_key(self.link_src, self.link_dst)
        key_rev = self._pair_key(self.link_dst, self.link_src)
        order = np.argsort(key_fwd, kind="stable")
        position = np.minimum(np.searchsorted(key_fwd[order], key_rev), max(order.size - 1, 0))
        found = key_fwd[order[position]] == key_rev if order.size else np.zeros(0, bool)
        return np.where(found, order[position], -1)

    def _reverse_mask(self, mask: np.ndarray) -> np.ndarray:
        """Mark the reverse direction of every marked link (same endpoints, same kind)."""
        if not mask.any():
            return mask
        key_fwd = self._pair_key(self.link_src, self.link_dst)
        key_rev = self._pair_key(self.link_dst, self.link_src)
        marked = np.unique(key_fwd[mask])
        return np.isin(key_rev, marked)

    def _pair_key(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (a.astype(np.int64) * self.num_nodes + b.astype(np.int64)) * 64 + self.link_kind_id

    def with_capacity(self, capacity: np.ndarray) -> Fabric:
        """A copy with new per-link capacities (bytes/s, shape ``[L]``); failed links stay at 0."""
        raw = np.asarray(capacity)
        if raw.dtype == bool or not (
            np.issubdtype(raw.dtype, np.integer) or np.issubdtype(raw.dtype, np.floating)
        ):
            raise SpecError("capacity", f"must be real numbers (bytes/s), got dtype {raw.dtype}")
        capacity = raw.astype(np.float64)
        if capacity.shape != self.capacity.shape:
            raise SpecError(
                "capacity", f"must have shape {self.capacity.shape}, got {capacity.shape}"
            )
        assert self.link_up is not None  # set by __post_init__
        return dataclasses.replace(self, capacity=np.where(self.link_up, capacity, 0.0))

    # ------------------------------------------------------------------ views
    def summary(self) -> dict:
        """Counts, tiers with oversubscription and bisection bandwidth, as a JSON-able dict."""
        return fabric_summary(self)

    def to_networkx(self):
        """A ``networkx.MultiDiGraph`` with node attrs ``kind, tier, group`` and edge attrs
        ``link_id, capacity, latency, kind, up``. Meant for small fabrics and export."""
        import networkx as nx

        graph = nx.MultiDiGraph(name=self.name)
        kinds = self.node_kind
        for node in range(self.num_nodes):
            graph.add_node(
                node,
                kind=kinds[node],
                tier=int(self.node_tier[node]),
                group=int(self.node_group[node]),
            )
        link_kind = self.link_kind
        for link in range(self.num_links):
            graph.add_edge(
                int(self.link_src[link]),
                int(self.link_dst[link]),
                key=link,
                link_id=link,
                capacity=float(self.capacity[link]),
                latency=float(self.latency[link]),
                kind=link_kind[link],
                up=bool(self.link_up[link]),  # type: ignore[index]  # set by __post_init__
            )
        return graph

    def __repr__(self) -> str:
        return (
            f"Fabric(name={self.name!r}, gpus={self.num_gpus}, nodes={self.num_nodes}, "
            f"links={self.num_links})"
        )


def kind_ids(labels: Sequence[str], table: Sequence[str]) -> np.ndarray:
    """Map label strings to ids in ``table`` (small helper for builders)."""
    index = {name: i for i, name in enumerate(table)}
    return np.asarray([index[label] for label in labels], dtype=np.int8)
