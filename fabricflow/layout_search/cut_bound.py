"""A lower bound of collective times from the fabric's cuts: GPUs, leaves, scale-up
domains and pods.

Traffic between parts of the fabric must cross the links between them. For a *partition*
of the nodes (each GPU alone; the GPUs under one leaf with that leaf; each scale-up domain
with its scale-up switches; each pod, the fabric's node groups, with its switches) and a
group set placed on the fabric (every group running at once, as in a training step),
count for each part ``D`` the members ``a`` each group has there (``0 < a < n``, ``n`` the
group size, ``S`` the nccl-tests size) and the bytes that must cross ``D``'s cut:

* all-gather: ``D`` must import the ``(n - a) / n`` of the result held outside;
* reduce-scatter: ``D`` must export its (at best locally reduced) contribution to the
  ``(n - a) / n`` of the shards owned outside;
* all-reduce: every element of the result depends on inputs on both sides, so ``D`` must
  import at least ``S`` (one value per element for its members) and export at least ``S``
  (its inputs' share of the outside results), in-network reduction included;
* send/recv (``sendrecv``: a ring, rank ``i`` to ``i + 1``): a ring with members on both
  sides crosses the cut at least once in each direction, ``S`` each way;
* all-to-all: each of the ``a`` members sends ``(n - a) / n`` of its buffer out and
  receives as much from outside.

No routing, algorithm, protocol or contention can move those bytes faster than the cut's
capacity, so ``max_D bytes(D) / capacity(D)`` (per direction) is a lower bound of the
slowest group's time (latencies and efficiencies only add). The bound of a group set is
the largest over the partitions. It costs a ``bincount`` per group set and partition, no
routing.
"""

from __future__ import annotations

import numpy as np

from fabricflow.fabric.fabric import Fabric

OPS = ("all_gather", "reduce_scatter", "all_reduce", "sendrecv", "all_to_all")


class Partition:
    """Cut capacities (bytes/s, out of and into each part) of one partition of the nodes.

    Args:
        fabric: the network.
        gpu_label: int ``[G]`` part of each GPU (``>= 0``).
        node_label: int ``[N]`` part of each node (``-1``: outside every part); the GPUs'
            entries are overwritten by ``gpu_label``.
        join_scale_up: scale-up switches one or two hops from a GPU join its part (for
            parts that hold whole scale-up domains).
    """

    def __init__(
        self,
        fabric: Fabric,
        gpu_label: np.ndarray,
        node_label: np.ndarray,
        *,
        join_scale_up: bool = True,
    ):
        src, dst = np.asarray(fabric.link_src), np.asarray(fabric.link_dst)
        tier = np.asarray(fabric.node_tier)
        label = np.asarray(node_label, dtype=np.int64).copy()
        label[np.asarray(fabric.gpu_node)] = gpu_label
        for _ in range(2 if join_scale_up else 0):
            up = (tier[dst] < 0) & (label[dst] < 0) & (label[src] >= 0)
            label[dst[up]] = label[src[up]]
        parts = int(max(label.max(), np.max(gpu_label))) + 1 if label.size else 1
        capacity = np.asarray(fabric.capacity, dtype=np.float64)
        if fabric.link_up is not None:
            capacity = np.where(np.asarray(fabric.link_up), capacity, 0.0)
        ls, ld = label[src], label[dst]
        leaves = (ls >= 0) & (ls != ld)
        enters = (ld >= 0) & (ls != ld)
        self.cap_out = np.bincount(ls[leaves], weights=capacity[leaves], minlength=parts)
        self.cap_in = np.bincount(ld[enters], weights=capacity[enters], minlength=parts)
        self.gpu_label = np.asarray(gpu_label, dtype=np.int64)
        self.parts = parts

    def seconds_per_byte(self, groups: np.ndarray) -> dict[str, float]:
        """Lower bound of the slowest group's seconds per byte of size ``S``, for each op
        of :data:`OPS` (one count of the members each group has in each part serves all)."""
        num_groups, n = groups.shape
        part = self.gpu_label[groups]  # [G, n]
        pair = (np.arange(num_groups)[:, None] * self.parts + part).reshape(-1)
        pairs, a = np.unique(pair, return_counts=True)
        where = pairs % self.parts
        outside = (n - a) / n
        split = (a < n).astype(np.float64)

        def worst(load: np.ndarray, cap: np.ndarray) -> float:
            per_part = np.bincount(where, weights=load, minlength=self.parts)
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(per_part > 0, per_part / cap, 0.0)
            # A part with traffic to cross and no capacity gives no finite bound (the step
            # model refuses such a route itself); 0 keeps the bound valid.
            ratio = np.where(np.isfinite(ratio), ratio, 0.0)
            return float(ratio.max()) if ratio.size else 0.0

        both = max(worst(split, self.cap_in), worst(split, self.cap_out))
        return {
            "all_gather": worst(outside, self.cap_in),
            "reduce_scatter": worst(outside, self.cap_out),
            "all_reduce": both,
            "sendrecv": both,
            "all_to_all": max(worst(a * outside, self.cap_in), worst(a * outside, self.cap_out)),
        }


class GpuPartition:
    """The partition of each GPU alone (its own NVLink and NIC links): every member of a
    group is alone in its part, so the counts need no sort."""

    def __init__(self, fabric: Fabric):
        gpus = np.arange(fabric.num_gpus, dtype=np.int64)
        none = np.full(fabric.num_nodes, -1, dtype=np.int64)
        cuts = Partition(fabric, gpus, none, join_scale_up=False)
        self.cap_in, self.cap_out = cuts.cap_in, cuts.cap_out

    def seconds_per_byte(self, groups: np.ndarray) -> dict[str, float]:
        n = groups.shape[1]
        cap_in = float(self.cap_in[groups].min())
        cap_out = float(self.cap_out[groups].min())
        outside = (n - 1) / n

        def ratio(load: float, cap: float) -> float:
            return load / cap if cap > 0 else 0.0

        both = max(ratio(1.0, cap_in), ratio(1.0, cap_out))
        return {
            "all_gather": ratio(outside, cap_in),
            "reduce_scatter": ratio(outside, cap_out),
            "all_reduce": both,
            "sendrecv": both,
            "all_to_all": max(ratio(outside, cap_in), ratio(outside, cap_out)),
        }


def gpu_leaf(fabric: Fabric) -> np.ndarray | None:
    """int64 ``[G]``: the lowest-numbered tier-1 switch (leaf) each GPU's NIC links reach,
    or ``None`` when some GPU reaches none (no leaf partition then)."""
    src, dst = np.asarray(fabric.link_src), np.asarray(fabric.link_dst)
    tier = np.asarray(fabric.node_tier)
    node_to_gpu = np.full(fabric.num_nodes, -1, dtype=np.int64)
    node_to_gpu[np.asarray(fabric.gpu_node)] = np.arange(fabric.num_gpus)
    owner = node_to_gpu[src]
    up = (owner >= 0) & (tier[dst] == 1)
    if not up.any():
        return None
    leaf = np.full(fabric.num_gpus, np.iinfo(np.int64).max)
    np.minimum.at(leaf, owner[up], dst[up].astype(np.int64))
    if (leaf == np.iinfo(np.int64).max).any():
        return None
    return leaf


class CutBound:
    """Seconds per byte of each op on a group set, from the cuts around each GPU, each
    leaf, each scale-up domain and each of the fabric's groups (pods, racks:
    ``Fabric.node_group``)."""

    def __init__(self, fabric: Fabric):
        self.fabric = fabric
        none = np.full(fabric.num_nodes, -1, dtype=np.int64)
        self.partitions: list = [
            GpuPartition(fabric),
            Partition(fabric, np.asarray(fabric.gpu_domain), none),
        ]
        leaf = gpu_leaf(fabric)
        if leaf is not None:
            leaves, gpu_label = np.unique(leaf, return_inverse=True)
            node_label = none.copy()
            node_label[leaves] = np.arange(len(leaves))
            self.partitions.append(
                Partition(fabric, gpu_label.reshape(-1), node_label, join_scale_up=False)
            )
        group = np.asarray(fabric.node_group, dtype=np.int64)
        gpu_group = group[np.asarray(fabric.gpu_node)]
        if gpu_group.size and gpu_group.min() >= 0 and len(np.unique(gpu_group)) > 1:
            # network switches keep their group; scale-up switches follow their GPUs
            network = np.where(np.asarray(fabric.node_tier) >= 1, group, -1)
            self.partitions.append(Partition(fabric, gpu_group, network))

    def seconds_per_byte(self, groups: np.ndarray) -> dict[str, float]:
        """Lower bound of the slowest group's time per byte of nccl-tests size, for each
        op of :data:`OPS` (0 for groups of one rank)."""
        groups = np.asarray(groups, dtype=np.int64)
        if groups.ndim != 2 or groups.shape[1] < 2:
            return dict.fromkeys(OPS, 0.0)
        rates = [p.seconds_per_byte(groups) for p in self.partitions]
        return {op: max(r[op] for r in rates) for op in OPS}
