"""A class-level estimate of collective times, for ranking candidates on hashed fabrics.

On a fabric with per-flow ECMP hashing, group structures that are alike up to the fabric's
symmetry differ only in which flows collide, so their times are equal only statistically;
solving every structure with its hashes is what makes a search expensive. The class-level
model estimates a collective's time without routing or solving, from the link classes the
traffic crosses:

* per group, the alpha-beta ring / direct time (:func:`fabricflow.collective.alpha_beta.
  alpha_beta_estimate`): scale-up and NIC bandwidth, ``k`` members per scale-up domain on
  ``k`` rails, NCCL's latencies;
* per link class above the NICs (the uplinks of each leaf, of each pod), the ring traffic
  that must cross it: every group with members on both sides sends its ring bytes
  (``2 (n - 1) / n S`` for an all-reduce, ``(n - 1) / n S`` for an all-gather or a
  reduce-scatter, ``S`` for send/recv, the off-part share of an all-to-all) out of the part
  and back in, over the class's ``K`` parallel links;
* the hash-collision effect (on fabrics that hash each flow onto one path; adaptive
  routing spreads them evenly): the ``F`` flows crossing a class (groups x ring channels) are
  hashed onto its ``K`` links, and the busiest link carries the expected maximum of a
  balls-into-bins draw instead of ``F / K``, so the class delivers ``F / (K E[max])`` of
  its capacity.

The estimate is the largest of these times. It is not a bound (a ring may cross a class
more than once, another algorithm may beat the ring): a search that ranks with it says so
(``exhaustive=False``, ``counts["ranked_by_class_model"]``), and keeps the full flow-level
solve for every candidate whose estimate is within the model's documented error of the
best answers (docs/optimize.md gives the error measured against the full solve).
"""

from __future__ import annotations

import functools

import numpy as np

from fabricflow.collective.alpha_beta import alpha_beta_estimate
from fabricflow.collective.nccl_cost import DEFAULT_COST
from fabricflow.collective.structure_cache import fabric_fingerprint
from fabricflow.errors import RoutingError, SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.layout_search.cut_bound import gpu_leaf
from fabricflow.routing.transport_policy import routing_for

# Ring bytes per member per direction, per byte of the nccl-tests size S, by op.
_RING = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "sendrecv": lambda n: 1.0,
}


# Seeded draws of the balls-into-bins simulation behind collision_factor.
COLLISION_DRAWS = 4000


@functools.lru_cache(maxsize=4096)
def collision_factor(flows: int, links: int) -> float:
    """``E[max load] / mean load`` when ``flows`` flows are hashed uniformly onto ``links``
    links (1 for a single link or no flow): how much longer the busiest link takes than an
    even split. One flow on 16 links: 16 (it uses one of them); 1,000 flows on 16: ~1.2.
    The expectation comes from :data:`COLLISION_DRAWS` seeded draws of the multinomial
    (deterministic; about 1% accurate)."""
    if flows <= 0 or links <= 1:
        return 1.0
    rng = np.random.default_rng(0)
    draws = rng.multinomial(flows, np.full(links, 1.0 / links), size=COLLISION_DRAWS)
    return max(1.0, float(draws.max(axis=1).mean()) * links / flows)


class _Class:
    """One partition of the network (leaves with their GPUs, or pods): per part, the
    capacity and the number of the network links that leave it and enter it (scale-up
    links excluded: traffic inside a scale-up domain never crosses the network)."""

    def __init__(self, fabric: Fabric, node_label: np.ndarray):
        src, dst = np.asarray(fabric.link_src), np.asarray(fabric.link_dst)
        tier = np.asarray(fabric.node_tier)
        self.gpu_label = node_label[np.asarray(fabric.gpu_node)]
        self.parts = int(node_label.max()) + 1
        ls, ld = node_label[src], node_label[dst]
        network = (tier[src] >= 0) & (tier[dst] >= 0)
        if fabric.link_up is not None:
            network &= np.asarray(fabric.link_up)
        capacity = np.asarray(fabric.capacity, dtype=np.float64)
        leaves = network & (ls >= 0) & (ls != ld)
        enters = network & (ld >= 0) & (ls != ld)
        self.out = (
            np.bincount(ls[leaves], weights=capacity[leaves], minlength=self.parts),
            np.bincount(ls[leaves], minlength=self.parts),
        )
        self.into = (
            np.bincount(ld[enters], weights=capacity[enters], minlength=self.parts),
            np.bincount(ld[enters], minlength=self.parts),
        )

    def seconds_per_byte(self, groups: np.ndarray, domains: np.ndarray, op: str,
                         channels: int) -> float:  # fmt: skip
        """Seconds per byte of ``S`` the ring traffic of the groups that span scale-up
        domains needs to cross the busiest part's boundary, hash collisions included."""
        spanning = groups[domains > 1]
        if not len(spanning):
            return 0.0
        num_groups, n = spanning.shape
        part = self.gpu_label[spanning]
        pair = (np.arange(num_groups)[:, None] * self.parts + part).reshape(-1)
        pairs, a = np.unique(pair, return_counts=True)
        where = pairs % self.parts
        split = a < n
        if op == "all_to_all":
            volume = np.where(split, a * (n - a) / n, 0.0)
        else:
            volume = np.where(split, _RING[op](n), 0.0)
        bytes_per_part = np.bincount(where, weights=volume, minlength=self.parts)
        flows = np.bincount(where, weights=split * channels, minlength=self.parts).astype(int)
        worst = 0.0
        for cap, links in (self.out, self.into):
            use = np.flatnonzero((bytes_per_part > 0) & (cap > 0))
            if not len(use):
                continue
            # few distinct (flows, links) pairs: the factor once per pair
            pairs, inverse = np.unique(
                np.stack([flows[use], links[use]], axis=1), axis=0, return_inverse=True
            )
            gamma = np.asarray([collision_factor(f, k) for f, k in pairs.tolist()])
            load = bytes_per_part[use] * gamma[inverse.reshape(-1)] / cap[use]
            worst = max(worst, float(load.max()))
        return worst


class ClassModel:
    """Class-level estimates of collective times on one fabric (see the module doc)."""

    def __init__(self, fabric: Fabric):
        self.fabric = fabric
        self.fingerprint = fabric_fingerprint(fabric)  # the per-GPU bandwidths' memo key
        # hash collisions only where flows are hashed (adaptive routing spreads them)
        self.hashed = routing_for(fabric) == "ecmp"
        self.classes: list[_Class] = []
        leaf = gpu_leaf(fabric)
        if leaf is not None:
            # each leaf with the GPUs whose NIC reaches it
            leaves, gpu_label = np.unique(leaf, return_inverse=True)
            label = np.full(fabric.num_nodes, -1, dtype=np.int64)
            label[leaves] = np.arange(len(leaves))
            label[np.asarray(fabric.gpu_node)] = gpu_label.reshape(-1)
            self.classes.append(_Class(fabric, label))
        group = np.asarray(fabric.node_group, dtype=np.int64)
        gpu_group = group[np.asarray(fabric.gpu_node)]
        if gpu_group.size and gpu_group.min() >= 0 and len(np.unique(gpu_group)) > 1:
            # each pod with its GPUs and its network switches
            label = np.where(np.asarray(fabric.node_tier) >= 0, group, -1)
            self.classes.append(_Class(fabric, label))

    def seconds(self, groups: np.ndarray, op: str, size: float) -> float:
        """Estimated seconds of the slowest group of ``op`` at ``size`` on ``groups``."""
        if size <= 0:
            return 0.0
        return max(self.alone(groups, op, size), size * self.seconds_per_byte(groups, op))

    def alone(self, groups: np.ndarray, op: str, size: float) -> float:
        """The alpha-beta seconds of the slowest group at ``size`` (no contention; 0 where
        the estimate has no formula or the groups cannot reach each other)."""
        groups = np.asarray(groups, dtype=np.int64)
        if groups.ndim != 2 or groups.shape[1] < 2 or size <= 0:
            return 0.0
        try:
            return float(np.max(alpha_beta_estimate(
                self.fabric, op, groups, size, fingerprint=self.fingerprint
            )))  # fmt: skip
        except (SpecError, RoutingError):
            return 0.0

    def seconds_per_byte(self, groups: np.ndarray, op: str) -> float:
        """Seconds per byte of ``S`` of the busiest link class (hash collisions included):
        the contended part of the estimate, linear in the size."""
        groups = np.asarray(groups, dtype=np.int64)
        if groups.ndim != 2 or groups.shape[1] < 2:
            return 0.0
        domain = np.sort(np.asarray(self.fabric.gpu_domain)[groups], axis=1)
        domains = 1 + np.count_nonzero(np.diff(domain, axis=1), axis=1)
        channels = DEFAULT_COST.channels_per_rail if self.hashed else 0
        return max(
            (c.seconds_per_byte(groups, domains, op, channels) for c in self.classes),
            default=0.0,
        )
