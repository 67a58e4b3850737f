"""Exact equivalence of a phase's groups: identical disjoint components solved once.

A tensor-parallel phase inside NVLink domains is ``G`` copies of one problem: every group
sits in its own scale-up domain, sends the same hops in domain-local terms, and its flows
cross only its domain's links, of the same capacities. Max-min rates are then the same in
every group, so the phase is routed and solved for one group and the answer is
translated to the others (their links found through a per-domain link map).

Nothing is assumed about the router: the translation is checked on the routes
themselves. Every pair of local ranks the phase uses is routed in every group's domain,
twice (the second copy of a pair gets another hash key, as a second channel of the pair
would), and the phase is replicated only when

- both copies take the same links in every domain (the routes do not depend on hashing),
  and the representative group's own routed hops are exactly its table's routes;
- every domain's table is the representative's relabelled one-to-one (a link appears at
  the same positions in both tables), and the domains' link sets are disjoint;
- the corresponding links have equal capacities and latencies.

Otherwise (per-flow ECMP spreading inside a domain, a failed link, a domain of another
size) the phase is routed and solved in full. Under per-flow ECMP across the network the
groups are only statistically alike, and are never replicated here.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..fabric.fabric import Fabric
from ..routing.route import route
from .phase import Phase

__all__ = ["DomainReplica", "domain_replica", "replicated_domains"]


def _local_ranks(fabric: Fabric) -> tuple[np.ndarray, np.ndarray]:
    """``(local [G], members [D, n])``: each GPU's rank in its scale-up domain (by GPU
    index) and each domain's GPUs (``-1`` padded to the largest domain)."""
    domain = np.asarray(fabric.gpu_domain, np.int64)
    order = np.argsort(domain, kind="stable")
    sizes = np.bincount(domain)
    start = np.cumsum(sizes) - sizes
    local = np.empty(domain.size, np.int64)
    local[order] = np.arange(domain.size) - np.repeat(start, sizes)
    members = np.full((sizes.size, int(sizes.max(initial=1))), -1, np.int64)
    members[domain[order], local[order]] = order
    return local, members


def replicated_domains(fabric: Fabric, phase: Phase) -> np.ndarray | None:
    """int64 ``[G]``: the scale-up domain of each group when the phase is the same in
    every group up to a translation between domains (every hop inside its group's own
    domain, no two groups in one domain, the same hops in domain-local ranks with the same
    loads, latency counts and max-merge pattern); ``None`` otherwise or for one group."""
    hop_src, hop_dst = phase.hop_src, phase.hop_dst
    num_groups = hop_src.shape[0]
    if num_groups < 2:
        return None
    valid = hop_src >= 0
    if not valid[0].any() or not np.array_equal(valid, np.broadcast_to(valid[0], valid.shape)):
        return None
    domain = np.asarray(fabric.gpu_domain, np.int64)
    src_domain = np.where(valid, domain[np.maximum(hop_src, 0)], -1)
    dst_domain = np.where(valid, domain[np.maximum(hop_dst, 0)], -1)
    first = tuple(np.argwhere(valid[0])[0])
    group_domain = src_domain[(slice(None), *first)]
    inside = (src_domain == group_domain[:, None, None]) & (dst_domain == src_domain)
    if not inside[valid].all() or np.unique(group_domain).size != num_groups:
        return None
    local, _ = _local_ranks(fabric)
    pattern = [
        np.where(valid, local[np.maximum(hop_src, 0)], -1),
        np.where(valid, local[np.maximum(hop_dst, 0)], -1),
        phase.hop_load,
        phase.hop_latency_count,
    ]
    assert phase.max_group is not None  # filled in by Phase.__post_init__
    groups = phase.max_group
    lowest = np.where(groups >= 0, groups, np.iinfo(np.int64).max).min(axis=(1, 2))
    pattern.append(np.where(groups >= 0, groups - lowest[:, None, None], -1))
    for values in pattern:
        if not np.array_equal(values, np.broadcast_to(values[:1], values.shape)):
            return None
    return group_domain


@dataclasses.dataclass(frozen=True, eq=False)
class DomainReplica:
    """Group 0 of a replicated phase, routed, and the link map to every group.

    ``links``/``coef``: the representative group's routed hops (rows of the phase's valid
    hops of group 0, in order); ``link_map`` int64 ``[G, K]``: for group ``g`` the link
    that plays the part of the ``k``-th link of group 0 (``links`` use only those ``K``);
    ``slot`` int64 ``[L]``: the ``k`` of each of group 0's links (``-1`` elsewhere)."""

    links: np.ndarray
    coef: np.ndarray | None
    link_map: np.ndarray
    slot: np.ndarray

    def translate(self, links: np.ndarray) -> np.ndarray:
        """int ``[G, R, W]``: rows ``links`` of group 0 (``[R, W]``, ``-1`` padded) as
        every group's own links."""
        local = np.where(links >= 0, self.slot[np.maximum(links, 0)], -1)
        mapped = self.link_map[:, np.maximum(local, 0)]
        return np.where(local >= 0, mapped, -1)


def domain_replica(
    fabric: Fabric,
    phase: Phase,
    domains: np.ndarray,
    capacity: np.ndarray,
    *,
    routing: str,
    seed: int,
) -> DomainReplica | None:
    """Route group 0 of ``phase`` and check that every group ``g`` (in ``domains[g]``)
    is its translation (module docs); ``None`` when a check fails."""
    valid = phase.hop_src[0] >= 0
    src, dst = phase.hop_src[0][valid], phase.hop_dst[0][valid]
    own = route(fabric, src, dst, policy=routing, seed=seed)
    local, members = _local_ranks(fabric)
    pairs, pair_of_hop = np.unique(
        np.stack([local[src], local[dst]], axis=1), axis=0, return_inverse=True
    )
    pair_of_hop = pair_of_hop.reshape(-1)
    num_groups, num_pairs = domains.size, pairs.shape[0]
    # Every group's domain, every pair, twice (the copy hashes as a second channel would).
    table_src = np.repeat(members[domains][:, pairs[:, 0]][:, None, :], 2, axis=1)
    table_dst = np.repeat(members[domains][:, pairs[:, 1]][:, None, :], 2, axis=1)
    if (table_src < 0).any() or (table_dst < 0).any():
        return None
    table = route(fabric, table_src.reshape(-1), table_dst.reshape(-1), policy=routing, seed=seed)
    if table.coef is not None or own.coef is not None:
        return None  # split routes: the replication below keeps single paths only
    width = max(table.links.shape[1], own.links.shape[1])
    copies = _widen(table.links, width).reshape(num_groups, 2, num_pairs, width)
    if not np.array_equal(copies[:, 0], copies[:, 1]):
        return None  # the routes depend on the flow's hash
    rows = copies[:, 0].reshape(num_groups, num_pairs * width)
    if not np.array_equal(_widen(own.links, width), copies[0, 0][pair_of_hop]):
        return None
    link_map = _link_map(rows, fabric.num_links)
    if link_map is None:
        return None
    for values in (capacity, fabric.latency):
        if not np.array_equal(
            values[link_map], np.broadcast_to(values[link_map[:1]], link_map.shape)
        ):
            return None
    slot = np.full(fabric.num_links, -1, np.int64)
    slot[link_map[0]] = np.arange(link_map.shape[1])
    return DomainReplica(own.links, own.coef, link_map, slot)


def _widen(links: np.ndarray, width: int) -> np.ndarray:
    """``links`` ``[F, H]`` padded with ``-1`` to ``width`` columns."""
    if links.shape[1] == width:
        return links
    out = np.full((links.shape[0], width), -1, links.dtype)
    out[:, : links.shape[1]] = links
    return out


def _link_map(rows: np.ndarray, num_links: int) -> np.ndarray | None:
    """int64 ``[G, K]``: each group's links in the order of group 0's first appearances,
    when every row relabels group 0's one-to-one and the groups' links are disjoint."""
    used = rows[0] >= 0
    if not np.array_equal(rows >= 0, np.broadcast_to(used, rows.shape)):
        return None
    reference = rows[0][used]
    distinct, first = np.unique(reference, return_index=True)
    order = np.sort(first)  # first appearance of each of group 0's links
    position = np.empty(num_links, np.int64)
    position[reference[order]] = np.arange(order.size)
    kept = rows[:, used]
    link_map = kept[:, order]
    # one-to-one: every entry is the group's image of group 0's link at that entry
    if not np.array_equal(kept, link_map[:, position[reference]]):
        return None
    if np.unique(link_map).size != link_map.size:
        return None  # two of group 0's links share an image, or two groups share a link
    del distinct
    return link_map
