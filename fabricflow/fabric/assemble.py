"""Incremental, vectorized assembly of a :class:`Fabric` from blocks of nodes and links.

Generators add whole blocks at a time (numpy arrays, never per-link Python), get back the
id ranges they were given, and finally call :meth:`Assembler.build`.
"""

from __future__ import annotations

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.fabric.fabric import LINK_KINDS_DEFAULT, NODE_KINDS_DEFAULT, Fabric
from fabricflow.memory_budget import check_memory

# Peak bytes per directed link / node while building and summarising (int64 src/dst,
# float64 capacity/latency, the concatenation copies, and the final Fabric arrays).
# Measured peak RSS: 79-97 B per link (nodes included) on Clos fabrics of 0.2M-10M links
# and dragonflies of 0.6M-3M links; these constants leave margin for address space that
# numpy reserves but does not touch (what RLIMIT_AS counts).
BUILD_BYTES_PER_LINK = 160
BUILD_BYTES_PER_NODE = 48


def build_bytes(num_nodes: int, num_links: int) -> int:
    """Estimated peak bytes of building a fabric of this size (Python ints: no overflow)."""
    return int(num_links) * BUILD_BYTES_PER_LINK + int(num_nodes) * BUILD_BYTES_PER_NODE


def check_build_size(
    num_nodes: int, num_links: int, what: str, *, budget: int | None = None
) -> None:
    """Refuse, before allocating, a fabric whose build would exceed the memory budget.

    Raises:
        MemoryBudgetError: naming the size needed and the budget
            (:func:`fabricflow.memory_budget.check_memory`: cgroup, ``RLIMIT_AS``, RAM or
            ``$FABRICFLOW_MEMORY_BUDGET``).
    """
    check_memory(
        build_bytes(num_nodes, num_links),
        f"{what} ({num_nodes:,} nodes, {num_links:,} directed links)",
        hint="shrink the spec",
        budget=budget,
    )


class Assembler:
    """Collects node and link blocks; ids are assigned in the order blocks are added."""

    def __init__(self, node_kinds=NODE_KINDS_DEFAULT, link_kinds=LINK_KINDS_DEFAULT):
        self.node_kinds = list(node_kinds)
        self.link_kinds = list(link_kinds)
        self._nodes: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._links: list[tuple[np.ndarray, ...]] = []
        self.num_nodes = 0
        self.num_links = 0

    def _kind_id(self, table: list[str], kind: str) -> int:
        if kind not in table:
            if len(table) >= 127:
                raise SpecError("kind", f"at most 127 distinct node or link kinds, adding {kind!r}")
            table.append(kind)
        return table.index(kind)

    def add_nodes(self, count: int, kind: str, tier: int, group=-1) -> int:
        """Add ``count`` nodes; returns the first id. ``group`` is a scalar or ``[count]``."""
        kind_id = self._kind_id(self.node_kinds, kind)
        self._nodes.append(
            (
                np.full(count, kind_id, np.int8),
                np.full(count, tier, np.int8),
                np.broadcast_to(np.asarray(group, np.int32), (count,)).copy(),
            )
        )
        start = self.num_nodes
        self.num_nodes += count
        return start

    def add_links(self, src, dst, capacity, latency, kind: str, cables=1) -> int:
        """Add directed links ``src[i] -> dst[i]``; scalars broadcast. ``cables``: the
        parallel physical cables each link bundles (its capacity is their sum). Returns
        the first id."""
        src = np.asarray(src, dtype=np.int64)
        count = src.shape[0]
        kind_id = self._kind_id(self.link_kinds, kind)
        self._links.append(
            (
                src,
                np.broadcast_to(np.asarray(dst, np.int64), (count,)),
                np.broadcast_to(np.asarray(capacity, np.float64), (count,)),
                np.broadcast_to(np.asarray(latency, np.float64), (count,)),
                np.full(count, kind_id, np.int8),
                np.broadcast_to(np.asarray(cables, np.int32), (count,)),
            )
        )
        start = self.num_links
        self.num_links += count
        return start

    def add_cables(self, a, b, capacity, latency, kind: str, cables=1) -> tuple[int, int]:
        """Add both directions of cables ``a[i] <-> b[i]``: first all ``a -> b`` links, then
        all ``b -> a`` links, so link ``start_ab + i`` and ``start_ba + i`` are one cable
        (or one bundle of ``cables`` parallel cables)."""
        return (
            self.add_links(a, b, capacity, latency, kind, cables),
            self.add_links(b, a, capacity, latency, kind, cables),
        )

    def build(
        self,
        name: str,
        gpu_node,
        gpu_domain,
        gpus_per_node: int,
        structure=None,
        meta: dict | None = None,
        node_groups=(),
    ) -> Fabric:
        """The :class:`Fabric` of the blocks added so far.

        ``node_groups``: ``(nodes, groups)`` pairs that overwrite the group of ``nodes``
        (int ``[n]``) with ``groups`` (scalar or int ``[n]``), in order.
        """
        kinds, tiers, groups = (
            np.concatenate(parts) if parts else np.zeros(0) for parts in zip(*self._nodes)
        )
        for nodes, values in node_groups:
            groups[nodes] = values
        if self._links:
            src, dst, cap, lat, kind, cables = (
                np.concatenate(parts) for parts in zip(*self._links)
            )
        else:
            src = dst = np.zeros(0, np.int64)
            cap = lat = np.zeros(0)
            kind = np.zeros(0, np.int8)
            cables = np.zeros(0, np.int32)
        return Fabric(
            name=name,
            link_src=src,
            link_dst=dst,
            capacity=cap,
            latency=lat,
            link_kind_id=kind,
            link_kinds=tuple(self.link_kinds),
            node_kind_id=kinds,
            node_kinds=tuple(self.node_kinds),
            node_tier=tiers,
            node_group=groups,
            gpu_node=gpu_node,
            gpu_domain=gpu_domain,
            gpus_per_node=gpus_per_node,
            structure=structure,
            meta=meta or {},
            link_cables=cables,
        )
