"""A lower bound of collective times from the fabric's cuts around scale-up domains.

Traffic between scale-up (NVLink) domains must cross the links that leave a domain (its
GPUs' NICs, its scale-up switches' uplinks). For a group set placed on the fabric (every
group running at once, as in a training step), count for each domain ``D`` the members
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

from ..fabric.fabric import Fabric
from ..workload.structure_cache import groups_digest

OPS = ("all_gather", "reduce_scatter", "all_reduce", "sendrecv", "all_to_all")


class CutBound:
    """Seconds per byte of each op on a group set, from the domain cuts of ``fabric``."""

    def __init__(self, fabric: Fabric):
        self.fabric = fabric
        gpu_domain = np.asarray(fabric.gpu_domain, dtype=np.int64)
        num_domains = int(gpu_domain.max()) + 1 if gpu_domain.size else 1
        # Domain of every node: GPUs by gpu_domain, scale-up switches by the GPUs they
        # link to, network switches none (-1).
        node_domain = np.full(fabric.num_nodes, -1, dtype=np.int64)
        node_domain[np.asarray(fabric.gpu_node)] = gpu_domain
        src, dst = np.asarray(fabric.link_src), np.asarray(fabric.link_dst)
        tier = np.asarray(fabric.node_tier)
        for _ in range(2):  # switches one or two scale-up hops from a GPU
            scale_up = (tier[dst] < 0) & (node_domain[dst] < 0) & (node_domain[src] >= 0)
            node_domain[dst[scale_up]] = node_domain[src[scale_up]]
        capacity = np.asarray(fabric.capacity, dtype=np.float64)
        if fabric.link_up is not None:
            capacity = np.where(np.asarray(fabric.link_up), capacity, 0.0)
        ds, dd = node_domain[src], node_domain[dst]
        leaves = (ds >= 0) & (ds != dd)
        enters = (dd >= 0) & (ds != dd)
        self.cap_out = np.bincount(ds[leaves], weights=capacity[leaves], minlength=num_domains)
        self.cap_in = np.bincount(dd[enters], weights=capacity[enters], minlength=num_domains)
        self.gpu_domain = gpu_domain
        self.num_domains = num_domains
        self._memo: dict = {}

    def seconds_per_byte(self, groups: np.ndarray, op: str) -> float:
        """Lower bound of the slowest group's time of ``op`` per byte of nccl-tests size."""
        groups = np.asarray(groups, dtype=np.int64)
        if groups.ndim != 2 or groups.shape[1] < 2:
            return 0.0
        key = (groups_digest(groups), op)
        if key in self._memo:
            return self._memo[key]
        num_groups, n = groups.shape
        dom = self.gpu_domain[groups]  # [G, n]
        pair = (np.arange(num_groups)[:, None] * self.num_domains + dom).reshape(-1)
        pairs, a = np.unique(pair, return_counts=True)
        domain = pairs % self.num_domains
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
        per_domain = np.bincount(domain, weights=load, minlength=self.num_domains)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(per_domain > 0, per_domain / cap, 0.0)
        # A domain with traffic to cross and no capacity: no finite bound from it (the
        # step model would refuse the route itself); 0 keeps the bound valid.
        ratio = np.where(np.isfinite(ratio), ratio, 0.0)
        value = float(ratio.max()) if ratio.size else 0.0
        self._memo[key] = value
        return value
