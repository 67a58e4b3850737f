"""A lower bound of collective times from the fabric's cuts around scale-up domains.

Traffic between scale-up (NVLink) domains must cross the links that leave a domain (its
GPUs' NICs, its scale-up switches' uplinks); traffic between pods must cross the pod's
uplinks (on an oversubscribed fabric, a fraction of its NICs). The same count runs for
both partitions, domains and the fabric's node groups (pods, racks), and the larger
bound holds. For a group set placed on the fabric (every
group running at once, as in a training step), count for each part ``D`` (a domain or a pod) the members
``a`` each group has there and the bytes that must cross ``D``'s cut for each group, with
``n`` the group size and ``S`` the nccl-tests size:

* all-gather: ``D`` must import the ``(n - a) / n`` of the result held outside;
* reduce-scatter: ``D`` must export its (at best locally reduced) contribution to the
  ``(n - a) / n`` of the shards owned outside;
* all-reduce: every element's result needs inputs from both sides, so at least ``S``
  crosses the cut, in one direction or the other;
* send/recv (pipeline or ring neighbours): a group with members on both sides has at least
  one neighbour pair across the cut, so ``S`` crosses it;
* all-to-all: each of the ``a`` members sends ``(n - a) / n`` of its buffer out.

No routing, algorithm, protocol or contention can move those bytes faster than the cut's
capacity, so ``max_D bytes(D) / capacity(D)`` is a lower bound of the slowest group's time
(latencies and efficiencies only add). It costs a ``bincount`` per group set, no routing.
"""

from __future__ import annotations

import numpy as np

from ..collective.structure_cache import groups_digest
from ..fabric.fabric import Fabric

OPS = ("all_gather", "reduce_scatter", "all_reduce", "sendrecv", "all_to_all")


class _Partition:
    """Cut capacities (bytes/s, out of and into each part) of one partition of the nodes."""

    def __init__(self, fabric: Fabric, gpu_label: np.ndarray, node_label: np.ndarray):
        src, dst = np.asarray(fabric.link_src), np.asarray(fabric.link_dst)
        tier = np.asarray(fabric.node_tier)
        label = node_label.copy()
        label[np.asarray(fabric.gpu_node)] = gpu_label
        for _ in range(2):  # scale-up switches one or two hops from a GPU join its part
            up = (tier[dst] < 0) & (label[dst] < 0) & (label[src] >= 0)
            label[dst[up]] = label[src[up]]
        parts = int(max(label.max(), gpu_label.max())) + 1 if label.size else 1
        capacity = np.asarray(fabric.capacity, dtype=np.float64)
        if fabric.link_up is not None:
            capacity = np.where(np.asarray(fabric.link_up), capacity, 0.0)
        ls, ld = label[src], label[dst]
        leaves = (ls >= 0) & (ls != ld)
        enters = (ld >= 0) & (ls != ld)
        self.cap_out = np.bincount(ls[leaves], weights=capacity[leaves], minlength=parts)
        self.cap_in = np.bincount(ld[enters], weights=capacity[enters], minlength=parts)
        self.gpu_label = gpu_label.astype(np.int64)
        self.parts = parts

    def seconds_per_byte(self, groups: np.ndarray, op: str) -> float:
        num_groups, n = groups.shape
        part = self.gpu_label[groups]  # [G, n]
        pair = (np.arange(num_groups)[:, None] * self.parts + part).reshape(-1)
        pairs, a = np.unique(pair, return_counts=True)
        where = pairs % self.parts
        outside = (n - a) / n
        split = a < n
        if op == "all_gather":
            load, cap = outside, self.cap_in
        elif op == "reduce_scatter":
            load, cap = outside, self.cap_out
        elif op in ("all_reduce", "sendrecv"):
            load, cap = split.astype(np.float64), self.cap_in + self.cap_out
        elif op == "all_to_all":
            load, cap = a * outside, self.cap_out
        else:
            raise ValueError(f"unknown op {op!r}; one of {list(OPS)}")
        per_part = np.bincount(where, weights=load, minlength=self.parts)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(per_part > 0, per_part / cap, 0.0)
        # A part with traffic to cross and no capacity gives no finite bound (the step
        # model refuses such a route itself); 0 keeps the bound valid.
        ratio = np.where(np.isfinite(ratio), ratio, 0.0)
        return float(ratio.max()) if ratio.size else 0.0


class CutBound:
    """Seconds per byte of each op on a group set, from the cuts around scale-up domains
    and around the fabric's groups (pods, racks: ``Fabric.node_group``)."""

    def __init__(self, fabric: Fabric):
        self.fabric = fabric
        none = np.full(fabric.num_nodes, -1, dtype=np.int64)
        self.partitions = [_Partition(fabric, np.asarray(fabric.gpu_domain), none)]
        group = np.asarray(fabric.node_group, dtype=np.int64)
        gpu_group = group[np.asarray(fabric.gpu_node)]
        if gpu_group.size and gpu_group.min() >= 0 and len(np.unique(gpu_group)) > 1:
            # network switches keep their group; scale-up switches follow their GPUs
            network = np.where(np.asarray(fabric.node_tier) >= 1, group, -1)
            self.partitions.append(_Partition(fabric, gpu_group, network))
        self._memo: dict = {}

    def seconds_per_byte(self, groups: np.ndarray, op: str) -> float:
        """Lower bound of the slowest group's time of ``op`` per byte of nccl-tests size."""
        groups = np.asarray(groups, dtype=np.int64)
        if groups.ndim != 2 or groups.shape[1] < 2:
            return 0.0
        key = (groups_digest(groups), op)
        if key not in self._memo:
            self._memo[key] = max(p.seconds_per_byte(groups, op) for p in self.partitions)
        return self._memo[key]
