"""Exact equivalence of a phase's groups: identical disjoint components solved once.

A tensor-parallel phase inside NVLink domains is ``G`` copies of one problem: every group
sits in its own scale-up domain, sends the same hops in domain-local terms, and its flows
cross only its domain's links, of the same capacities. Max-min rates are then the same in
every group, so the phase is routed and solved for one group and the answer is
translated to the others (their links found through a per-domain link map).

Nothing is assumed about the router: the translation is checked on the routes
themselves. Every pair of local ranks the phase uses is routed in every group's domain,
and the phase is replicated only when

- the representative group's own routed hops (several hash keys of a pair, one per
  channel) are exactly its table's routes, so the routes do not depend on hashing
  (when group 0 sends some pair only once, the table routes every pair twice, the
  second copy with another hash key);
- every domain's table is the representative's relabelled one-to-one (a link appears at
  the same positions in both tables), and the domains' link sets are disjoint;
- the corresponding links have equal capacities and latencies.

Otherwise (per-flow ECMP spreading inside a domain, a failed link, a domain of another
size) the phase is routed and solved in full. Under per-flow ECMP across the network the
groups are only statistically alike, and are never replicated here.
"""

from __future__ import annotations

import dataclasses
import threading

import numpy as np

from fabricflow.collective.phase import Phase
from fabricflow.fabric.fabric import Fabric
from fabricflow.routing.route import route
from fabricflow.routing.routes import Routes

__all__ = ["DomainReplica", "domain_replica", "replicated_domains"]


_ranks_lock = threading.Lock()
_ranks: dict[int, tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]] = {}


def _local_ranks(fabric: Fabric) -> tuple[np.ndarray, np.ndarray]:
    """``(local [G], members [D, n])``: each GPU's rank in its scale-up domain (by GPU
    index) and each domain's GPUs (``-1`` padded to the largest domain); computed once
    per ``gpu_domain`` array (the last few are kept)."""
    key = id(fabric.gpu_domain)
    with _ranks_lock:
        known = _ranks.get(key)
    if known is not None and np.array_equal(known[0], fabric.gpu_domain):
        return known[1]
    value = _ranks_of(fabric.gpu_domain)
    with _ranks_lock:
        if len(_ranks) >= 8:
            _ranks.clear()
        _ranks[key] = (np.array(fabric.gpu_domain, copy=True), value)
    return value


def _ranks_of(gpu_domain: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    domain = np.asarray(gpu_domain, np.int64)
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
    valid = hop_src[0] >= 0
    if not valid.any():
        return None
    domain = np.asarray(fabric.gpu_domain, np.int64)
    src0, dst0 = hop_src[0][valid], hop_dst[0][valid]
    home = domain[src0[0]]
    if not ((domain[src0] == home) & (domain[dst0] == home)).all():
        return None  # group 0 leaves its domain
    group_domain = domain[np.maximum(hop_src[:, valid][:, 0], 0)]
    if np.unique(group_domain).size != num_groups:
        return None
    local, members = _local_ranks(fabric)
    # Group 0's hops translated into every group's domain must be the group's hops.
    translated = members[group_domain]  # [G, n]
    dense = bool(valid.all())
    for hops, own in ((hop_src, src0), (hop_dst, dst0)):
        if dense:  # no padding: compare the hops in place
            same = np.array_equal(hops.reshape(num_groups, -1), translated[:, local[own]])
        else:
            expected = np.full(hops.shape, -1, hops.dtype)
            expected[:, valid] = translated[:, local[own]]
            same = np.array_equal(hops, expected)
        if not same:
            return None
    for values in (phase.hop_load, phase.hop_latency_count):
        if not np.array_equal(values, np.broadcast_to(values[:1], values.shape)):
            return None
    assert phase.max_group is not None  # filled in by Phase.__post_init__
    groups = phase.max_group
    if groups.max(initial=-1) >= 0:
        lowest = np.where(groups >= 0, groups, np.iinfo(np.int64).max).min(axis=(1, 2))
        relative = np.where(groups >= 0, groups - lowest[:, None, None], -1)
        if not np.array_equal(relative, np.broadcast_to(relative[:1], relative.shape)):
            return None
    return group_domain


@dataclasses.dataclass(frozen=True, eq=False)
class DomainReplica:
    """Group 0 of a replicated phase, routed, and the link map to every group.

    ``routes``: the representative group's routed hops (rows of the phase's valid hops of
    group 0, in order; :class:`~fabricflow.routing.routes.Routes`); ``link_map`` int32
    ``[G, K]``: for group ``g`` the link
    that plays the part of the ``k``-th link of group 0 (``links`` use only those ``K``);
    ``slot`` int64 ``[L]``: the ``k`` of each of group 0's links (``-1`` elsewhere)."""

    routes: Routes
    link_map: np.ndarray
    slot: np.ndarray

    def translate(self, links: np.ndarray) -> np.ndarray:
        """int32 ``[G * R, W]``: rows ``links`` of group 0 (``[R, W]``, ``-1`` padded) as
        every group's own rows, group after group."""
        local = np.where(links >= 0, self.slot[np.maximum(links, 0)], -1).reshape(-1)
        mapped = self.link_map[:, np.maximum(local, 0)]  # [G, R * W]
        padding = local < 0
        if padding.any():
            mapped[:, padding] = -1
        return mapped.reshape(-1, links.shape[1])


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
    # Every group's domain, every pair: once when group 0's own hops repeat every pair
    # (their routes, checked below, cover several hash keys of each), else twice (the
    # copy hashes as a second channel of the pair would).
    repeats = 1 if np.bincount(pair_of_hop).min() >= 2 else 2
    table_src = np.repeat(members[domains][:, pairs[:, 0]][:, None, :], repeats, axis=1)
    table_dst = np.repeat(members[domains][:, pairs[:, 1]][:, None, :], repeats, axis=1)
    if (table_src < 0).any() or (table_dst < 0).any():
        return None
    table = route(fabric, table_src.reshape(-1), table_dst.reshape(-1), policy=routing, seed=seed)
    if (table.coef is None) != (own.coef is None):
        return None
    width = max(table.links.shape[1], own.links.shape[1])
    copies = _widen(table.links, width).reshape(num_groups, repeats, num_pairs, width)
    if not (copies == copies[:, :1]).all():
        return None  # the routes depend on the flow's hash
    rows = copies[:, 0].reshape(num_groups, num_pairs * width)
    if not np.array_equal(_widen(own.links, width), copies[0, 0][pair_of_hop]):
        return None
    if table.coef is not None and own.coef is not None:  # split routes: the same fractions
        fractions = _widen(table.coef, width, 0.0).reshape(num_groups, repeats, num_pairs, width)
        if not (fractions == fractions[:1, :1]).all():
            return None
        if not np.array_equal(_widen(own.coef, width, 0.0), fractions[0, 0][pair_of_hop]):
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
    return DomainReplica(own, link_map.astype(np.int32), slot)


def _widen(values: np.ndarray, width: int, fill=-1) -> np.ndarray:
    """``values`` ``[F, H]`` padded with ``fill`` to ``width`` columns."""
    if values.shape[1] == width:
        return values
    out = np.full((values.shape[0], width), fill, values.dtype)
    out[:, : values.shape[1]] = values
    return out


def _link_map(rows: np.ndarray, num_links: int) -> np.ndarray | None:
    """int64 ``[G, K]``: each group's links in the order of group 0's first appearances,
    when every row relabels group 0's one-to-one and the groups' links are disjoint."""
    used = rows[0] >= 0
    if not np.array_equal(rows >= 0, np.broadcast_to(used, rows.shape)):
        return None
    reference = rows[0][used]
    _, first = np.unique(reference, return_index=True)
    order = np.sort(first)  # first appearance of each of group 0's links
    position = np.empty(num_links, np.int64)
    position[reference[order]] = np.arange(order.size)
    kept = rows[:, used]
    link_map = kept[:, order]
    # one-to-one: every entry is the group's image of group 0's link at that entry
    if not np.array_equal(kept, link_map[:, position[reference]]):
        return None
    if np.bincount(link_map.reshape(-1), minlength=num_links).max(initial=0) > 1:
        return None  # two of group 0's links share an image, or two groups share a link
    return link_map
