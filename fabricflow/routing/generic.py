"""Generic shortest-path routing with per-hop ECMP, for any fabric (the fallback).

``ff.route`` sends every fabric without a registered structure here (YAML ``graph``
fabrics, a Clos whose ``structure`` was dropped, ...), and the torus and dragonfly
routers send the few flows that failures cut off from their structured paths.

Algorithm (no per-flow Python):
    1. Hop distances *to* every destination node used, by breadth-first search on the
       reversed graph of working links (``scipy.sparse.csgraph``), a block of
       destinations at a time so the distance table stays small.
    2. A vectorized walk from all sources at once: at every step each flow looks at the
       out-links of its current node and picks, by a seeded hash of the flow and the step
       (``hashing.choose``), one whose far end is closest to its destination. This is
       per-hop ECMP as switches do it: every route is a minimal-hop path over working
       links, and ties are split by hash at every hop (not uniformly over whole paths).

``spray`` (also accepted as ``adaptive``, the fluid limit of per-packet adaptive routing on
InfiniBand or Spectrum-X): instead of one hashed choice, every hop splits the flow evenly
over all out-links whose far end is closest to the destination, so the routes carry
``coef`` (the share of the flow on each link; the shares of one hop level sum to one).
On a symmetric Clos this is the Clos router's ``spray``; on an irregular tree (an
imported Slurm file) it is what switches that balance per packet over their minimal
ports do.

Scale-up domains: flows between two GPUs of one scale-up domain take its switch
(GPU -> NVSwitch-like tier -1 node -> GPU) while those two links work, as NCCL keeps such
traffic on NVLink, instead of an equally short path through the NICs.

Transit through GPUs: a GPU is never an intermediate hop unless the fabric says its
accelerators forward traffic (``fabric.meta["gpu_transit"]``, set by the torus generator
and by ``gpu_transit: true`` in a graph spec). When the key is absent, GPUs forward only
on fabrics with no switches at all (direct-connect fabrics).

Size limit: the breadth-first searches cost about ``D x (N + L)`` edge visits for ``D``
distinct destination nodes, ``N`` nodes and ``L`` links. Above
:data:`GENERIC_MAX_WORK` (1e9, roughly 10-30 s on one core) the router refuses with
:class:`RoutingError` (a limit on time, not memory) and says to use a structured
generator; e.g. an all-to-all over a 20,000-node graph with 100,000 links (2.4e9) is
refused, a 4,096-chip torus all-to-all (1.2e8) is not.
"""

from __future__ import annotations

import numpy as np

from fabricflow.errors import RoutingError, SpecError
from fabricflow.memory_budget import check_memory
from fabricflow.routing import hashing
from fabricflow.routing.route_limits import (
    GENERIC_WIDTH_GUESS,
    ROUTE_BYTES_PER_ENTRY,
    unreachable_error,
)
from fabricflow.routing.routes import Routes

POLICIES = ("ecmp", "spray", "adaptive")
SPLIT_POLICIES = ("spray", "adaptive")  # per-hop even splits over the minimal out-links
GENERIC_MAX_WORK = 1_000_000_000
DIST_BLOCK_ENTRIES = 8_000_000  # distances held at once: destinations x nodes (int32)
WALK_BLOCK_ENTRIES = 4_000_000  # candidate links examined at once: flows x max out-degree
SPLIT_BYTES_PER_CANDIDATE = 64  # a split step's candidate table: int64 slots, links, dists
_UNREACHED = np.iinfo(np.int32).max


def route_width(structure: None, policy: str, options: dict) -> tuple[int, int]:
    """(route entries per flow, peak bytes per entry): a guess, paths are found later
    (splits are checked again once their width is known)."""
    return GENERIC_WIDTH_GUESS, ROUTE_BYTES_PER_ENTRY


def route_generic(
    fabric, src: np.ndarray, dst: np.ndarray, *, policy: str = "ecmp", seed: int = 0
) -> Routes:
    """Shortest-path routes with per-hop ECMP over the working links of any fabric.

    Args:
        fabric: any :class:`~fabricflow.fabric.fabric.Fabric`.
        src, dst: int64 ``[F]`` GPU indices (validated by ``ff.route``).
        policy: ``"ecmp"`` (one hashed minimal path per flow), ``"spray"`` or
            ``"adaptive"`` (the same: an even split at every hop over the minimal
            out-links; module docs).
        seed: hash seed for the ECMP choices.

    Returns:
        :class:`Routes` with ``links`` int32 ``[F, H]``, ``H`` = the longest path (ECMP) or
        the most links one flow's split uses, and ``coef`` for splits (policy ``spray``).

    Raises:
        RoutingError: flows with no working path (count and an example), or a fabric
            and destination set beyond :data:`GENERIC_MAX_WORK` search steps.
    """
    if policy not in POLICIES:
        raise SpecError(
            "policy",
            f"unknown policy {policy!r} for the generic shortest-path "
            f"router (fabrics without a structured router); one of {list(POLICIES)}",
            value=policy,
            allowed=POLICIES,
        )
    key = hashing.flow_key(src, dst, seed)
    local, local_links = scale_up_paths(fabric, src, dst)
    rest = np.flatnonzero(~local)
    split = policy in SPLIT_POLICIES
    walked, shares = shortest_path_links(
        fabric,
        fabric.gpu_node[src[rest]],
        fabric.gpu_node[dst[rest]],
        key[rest],
        src_gpu=src,
        dst_gpu=dst,
        flow_index=rest,
        split=split,
    )
    links = np.full((src.shape[0], max(walked.shape[1], 2 if local.any() else 1)), -1, np.int32)
    links[rest, : walked.shape[1]] = walked
    if local.any():
        links[local, :2] = local_links[local]
    if shares is None:
        return Routes(links, None, src, dst, fabric.num_links, policy)
    coef = np.where(links >= 0, 1.0, 0.0).astype(np.float32)
    coef[rest, : shares.shape[1]] = shares
    return Routes(links, coef, src, dst, fabric.num_links, "spray")


def scale_up_paths(fabric, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flows inside one scale-up domain take its switch (GPU -> tier -1 switch -> GPU),
    as NCCL keeps such traffic on NVLink, rather than an equally short path through a NIC.

    Returns bool ``[F]`` (flows that have a working such path) and int64 ``[F, 2]`` links.
    """
    num = src.shape[0]
    paths = np.full((num, 2), -1, np.int64)
    tier = fabric.node_tier
    is_gpu_node = np.zeros(fabric.num_nodes, bool)
    is_gpu_node[fabric.gpu_node] = True
    up_mask = fabric.link_up & is_gpu_node[fabric.link_src] & (tier[fabric.link_dst] == -1)
    down_mask = fabric.link_up & (tier[fabric.link_src] == -1) & is_gpu_node[fabric.link_dst]
    if not up_mask.any() or num == 0:
        return np.zeros(num, bool), paths
    gpu_of_node = np.full(fabric.num_nodes, -1, np.int64)
    gpu_of_node[fabric.gpu_node] = np.arange(fabric.num_gpus)
    up_of_gpu = np.full(fabric.num_gpus, -1, np.int64)
    down_of_gpu = np.full(fabric.num_gpus, -1, np.int64)
    up_ids, down_ids = np.flatnonzero(up_mask), np.flatnonzero(down_mask)
    up_of_gpu[gpu_of_node[fabric.link_src[up_ids]]] = up_ids
    down_of_gpu[gpu_of_node[fabric.link_dst[down_ids]]] = down_ids
    up, down = up_of_gpu[src], down_of_gpu[dst]
    local = (fabric.gpu_domain[src] == fabric.gpu_domain[dst]) & (up >= 0) & (down >= 0)
    local &= fabric.link_dst[np.maximum(up, 0)] == fabric.link_src[np.maximum(down, 0)]
    paths[local, 0], paths[local, 1] = up[local], down[local]
    return local, paths


def gpu_transit(fabric) -> bool:
    """Whether GPUs may be intermediate hops (see the module docstring)."""
    value = fabric.meta.get("gpu_transit")
    if value is None:
        return fabric.num_switches == 0
    return bool(value)


def shortest_path_links(
    fabric,
    src_node: np.ndarray,
    dst_node: np.ndarray,
    key: np.ndarray,
    *,
    src_gpu: np.ndarray,
    dst_gpu: np.ndarray,
    flow_index: np.ndarray | None = None,
    why: str = "over the working links",
    split: bool = False,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Minimal-hop walks ``src_node[f] -> dst_node[f]``: int32 ``[F, H]`` links, ``-1``
    padded, and None; with ``split``, every hop's share split evenly over all minimal
    out-links, the links of each flow and float32 ``[F, H]`` shares.

    ``key`` (uint64 ``[F]``, from :func:`hashing.flow_key`) drives the per-hop choices.
    ``src_gpu``/``dst_gpu`` (all flows of the request) only name flows in errors;
    ``flow_index`` (int ``[F]``) says which of them these walks are (default: all).
    """
    num_flows = src_node.shape[0]
    if num_flows == 0:
        return np.full((0, 1), -1, np.int32), (np.zeros((0, 1), np.float32) if split else None)
    targets, target_of_flow = np.unique(dst_node, return_inverse=True)
    work = targets.size * (fabric.num_nodes + fabric.num_links)
    if work > GENERIC_MAX_WORK:
        raise RoutingError(
            f"generic shortest-path routing to {targets.size:,} destination nodes on a fabric of "
            f"{fabric.num_nodes:,} nodes and {fabric.num_links:,} links needs ~{work:.2g} "
            f"breadth-first-search steps, over the limit of {GENERIC_MAX_WORK:.0e}; use a "
            "structured generator (clos, torus, dragonfly) or route fewer destinations"
        )
    graph = _Graph(fabric)
    block = max(1, DIST_BLOCK_ENTRIES // max(fabric.num_nodes, 1))
    paths = np.full((num_flows, 1), -1, np.int64)
    shares = np.zeros((num_flows, 1), np.float32)
    unreachable = np.zeros(num_flows, bool)
    order = np.argsort(target_of_flow, kind="stable")
    bounds = np.searchsorted(target_of_flow[order], np.arange(0, targets.size + block, block))
    for index, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        if lo == hi:
            continue
        flows = order[lo:hi]
        dist = graph.distances_to(targets[index * block : (index + 1) * block])
        rows = target_of_flow[flows] - index * block
        if split:
            walked, share, bad = graph.split(src_node[flows], dst_node[flows], rows, dist)
        else:
            walked, bad = graph.walk(src_node[flows], dst_node[flows], rows, dist, key[flows])
            share = np.zeros((0, 0), np.float32)
        if walked.shape[1] > paths.shape[1]:
            grow = ((0, 0), (0, walked.shape[1] - paths.shape[1]))
            paths = np.pad(paths, grow, constant_values=-1)
            shares = np.pad(shares, grow) if split else shares
        paths[flows, : walked.shape[1]] = walked
        if split:
            shares[flows, : walked.shape[1]] = share
        unreachable[flows] = bad
    if unreachable.any():
        bad = unreachable
        if flow_index is not None:
            bad = np.zeros(src_gpu.shape[0], bool)
            bad[flow_index[unreachable]] = True
        raise unreachable_error(src_gpu, dst_gpu, bad, why)
    return paths.astype(np.int32), (shares if split else None)


class _Graph:
    """Working links in CSR order (out-links grouped by source node) and the BFS graph."""

    def __init__(self, fabric):
        from scipy.sparse import csr_matrix

        self.fabric = fabric
        up = np.flatnonzero(fabric.link_up)
        order = np.argsort(fabric.link_src[up], kind="stable")
        self.out_links = up[order].astype(np.int64)
        degree = np.bincount(fabric.link_src[self.out_links], minlength=fabric.num_nodes)
        self.indptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
        self.degree = degree.astype(np.int64)
        self.max_degree = int(degree.max(initial=0))
        # Links out of a GPU are BFS edges only where GPUs forward; the walk still leaves
        # the source GPU through any of its links (see the module docstring).
        keep = self.out_links
        if not gpu_transit(fabric):
            keep = keep[fabric.node_tier[fabric.link_src[keep]] != 0]
        n = fabric.num_nodes
        # Reversed graph: an edge v -> u for every link u -> v, so BFS from a destination
        # gives the hop count from every node to it.
        self.reverse = csr_matrix(
            (np.ones(keep.size, np.int8), (fabric.link_dst[keep], fabric.link_src[keep])),
            shape=(n, n),
        )

    def distances_to(self, targets: np.ndarray) -> np.ndarray:
        """int32 ``[len(targets), N]`` hop counts to each target (``_UNREACHED`` if none)."""
        from scipy.sparse.csgraph import shortest_path

        dist = shortest_path(self.reverse, directed=True, unweighted=True, indices=targets)
        dist = np.atleast_2d(dist)
        return np.where(np.isfinite(dist), dist, _UNREACHED).astype(np.int32)

    def walk(self, src, dst, rows, dist, key) -> tuple[np.ndarray, np.ndarray]:
        """Walk flows (in blocks bounding flows x max degree); returns (links, unreachable)."""
        num = src.shape[0]
        step_block = max(1, WALK_BLOCK_ENTRIES // max(self.max_degree, 1))
        parts, bad = [], np.zeros(num, bool)
        for lo in range(0, num, step_block):
            part, part_bad = self._walk_block(
                src[lo : lo + step_block],
                dst[lo : lo + step_block],
                rows[lo : lo + step_block],
                dist,
                key[lo : lo + step_block],
            )
            parts.append(part)
            bad[lo : lo + step_block] = part_bad
        width = max(p.shape[1] for p in parts)
        return (
            np.concatenate(
                [np.pad(p, ((0, 0), (0, width - p.shape[1])), constant_values=-1) for p in parts]
            ),
            bad,
        )

    def _walk_block(self, src, dst, rows, dist, key) -> tuple[np.ndarray, np.ndarray]:
        fabric = self.fabric
        num = src.shape[0]
        cur = src.astype(np.int64).copy()
        active = cur != dst
        bad = np.zeros(num, bool)
        columns = []
        offsets = np.arange(max(self.max_degree, 1))
        # A minimal path visits each node at most once: N steps bound the loop.
        for step in range(fabric.num_nodes + 1):
            ids = np.flatnonzero(active)
            if ids.size == 0:
                break
            here = cur[ids]
            valid = offsets[None, :] < self.degree[here][:, None]
            slot = np.minimum(
                self.indptr[here][:, None] + offsets[None, :], max(self.out_links.size - 1, 0)
            )
            cand = self.out_links[slot] if self.out_links.size else np.zeros_like(slot)
            far = fabric.link_dst[cand]
            cand_dist = np.where(valid, dist[rows[ids][:, None], far], _UNREACHED)
            best = cand_dist.min(axis=1)
            stuck = best == _UNREACHED
            if stuck.any():
                bad[ids[stuck]] = True
                active[ids[stuck]] = False
                keep = ~stuck
                ids, cand, cand_dist, best = ids[keep], cand[keep], cand_dist[keep], best[keep]
            ok = cand_dist == best[:, None]
            pick = hashing.choose(key[ids], 1 + step, ok.sum(axis=1))
            chosen = np.argmax(np.cumsum(ok, axis=1) > pick[:, None], axis=1)
            link = cand[np.arange(ids.size), chosen]
            column = np.full(num, -1, np.int64)
            column[ids] = link
            columns.append(column)
            cur[ids] = fabric.link_dst[link]
            active[ids] = cur[ids] != dst[ids]
        if not columns:
            return np.full((num, 1), -1, np.int64), bad
        links = np.stack(columns, axis=1)
        links[bad] = -1
        return links, bad

    def split(self, src, dst, rows, dist) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Even per-hop splits of flows ``src -> dst`` over every minimal out-link: int64
        ``[n, W]`` links (``-1`` padded), float32 ``[n, W]`` shares and bool ``[n]``
        unreachable. Each step carries ``(flow, node, share)`` entries one hop on; entries
        of a flow that meet at a node merge, so the work is flows x links used, not paths."""
        fabric = self.fabric
        num, nodes = src.shape[0], fabric.num_nodes
        flow = np.arange(num, dtype=np.int64)
        here = src.astype(np.int64).copy()
        share = np.ones(num)
        bad = np.zeros(num, bool)
        out_flow, out_link, out_share = [], [], []
        offsets = np.arange(max(self.max_degree, 1))
        for _ in range(nodes + 1):  # a minimal path visits each node at most once
            moving = here != dst[flow]
            flow, here, share = flow[moving], here[moving], share[moving]
            if flow.size == 0:
                break
            check_memory(
                flow.size * max(self.max_degree, 1) * SPLIT_BYTES_PER_CANDIDATE,
                f"splitting {num:,} flows over their minimal paths on {fabric.name!r}",
                hint="route fewer flows at a time, or use policy='ecmp'",
            )
            valid = offsets[None, :] < self.degree[here][:, None]
            slot = np.minimum(
                self.indptr[here][:, None] + offsets[None, :], max(self.out_links.size - 1, 0)
            )
            cand = self.out_links[slot] if self.out_links.size else np.zeros_like(slot)
            cand_dist = np.where(
                valid, dist[rows[flow][:, None], fabric.link_dst[cand]], _UNREACHED
            )
            best = cand_dist.min(axis=1)
            stuck = best == _UNREACHED
            bad[flow[stuck]] = True
            ok = (cand_dist == best[:, None]) & ~stuck[:, None]
            entry, column = np.nonzero(ok)
            link = cand[entry, column]
            part = share[entry] / ok.sum(axis=1)[entry]
            out_flow.append(flow[entry])
            out_link.append(link)
            out_share.append(part)
            # the entries of a flow that reach one node go on as one
            key, inverse = np.unique(
                flow[entry] * nodes + fabric.link_dst[link], return_inverse=True
            )
            flow, here = key // nodes, key % nodes
            share = np.bincount(inverse, weights=part, minlength=key.size)
        if not out_flow:
            return np.full((num, 1), -1, np.int64), np.zeros((num, 1), np.float32), bad
        flows = np.concatenate(out_flow)
        links = np.concatenate(out_link)
        parts = np.concatenate(out_share)
        keep = ~bad[flows]
        flows, links, parts = flows[keep], links[keep], parts[keep]
        order = np.argsort(flows, kind="stable")  # hop order kept within a flow
        flows, links, parts = flows[order], links[order], parts[order]
        starts = np.searchsorted(flows, np.arange(num))
        column = np.arange(flows.size) - starts[flows]
        width = int(column.max(initial=0)) + 1
        out = np.full((num, width), -1, np.int64)
        shares = np.zeros((num, width), np.float32)
        out[flows, column] = links
        shares[flows, column] = parts
        return out, shares, bad
