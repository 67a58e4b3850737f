"""Job placement policies of the cluster simulator: ``first-fit``, ``packed``, ``topology``,
``block``; preemption by priority.

A scheduler answers two questions about a :class:`Request` on a :class:`ClusterState`:
:meth:`Scheduler.place` (which GPUs, in rank order, or ``None`` when the job cannot start
now) and :meth:`Scheduler.victims` (which lower-priority running jobs to preempt so that it
can). Rules shared by all but ``first-fit`` (docs/cluster-scheduling.md):

* a job smaller than a server (1, 2, 4 GPUs on 8-GPU servers) is *sliced* onto one
  server, the partly used ones first (best fit: the fewest free GPUs that still fit), so
  that small jobs do not break whole servers;
* a job of a server or more gets whole free servers (``ceil(n / gpus_per_node)``; a
  remainder of the last server stays free for small jobs), and its ranks fill each server
  in GPU order, so rank ``r`` of every server sits on rail ``r`` of a rail-optimized Clos.

Policies:

* ``first-fit``: the lowest-numbered free GPUs, whatever their servers (no whole-node rule).
* ``packed``: the smallest subtree (rail group / leaf, then pod, ...) with enough whole free
  servers, best fit (the one with the fewest free servers that still fits); a job larger
  than any subtree's free room spans the fewest blocks (largest free room first).
* ``topology``: the same candidate subtrees, but the one whose switch links carry the least
  load from running jobs (``load``: bytes/s per link), so the new job's traffic meets the
  least of theirs; ties (within 1% utilization) go to best fit. A job whose traffic shape
  says it sends nothing over the network is placed best fit.
* ``block``: Slurm topology/block-like: blocks of ``block_servers`` servers (default: the
  finest subtree, a rail group / leaf); a job of a block or more gets ``ceil(k / B)``
  wholly free blocks (segments); a smaller one fits inside one block (best fit).

Every choice is a handful of ``bincount``/``argsort`` calls over servers and blocks.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Protocol

import numpy as np

from fabricflow.cluster.interference import JobTraffic
from fabricflow.cluster.state import FREE, ClusterState
from fabricflow.errors import SpecError
from fabricflow.fabric.fabric import Fabric

SCHEDULERS: tuple[str, ...] = ("first-fit", "packed", "topology", "block")
# Utilization difference below which two candidate subtrees count as equally loaded.
LOAD_TIE = 0.01


class Request(NamedTuple):
    """What a scheduler needs to know about a job: its key, GPU count, priority (larger
    = more important) and traffic shape (:func:`~.interference.job_traffic_shape`) or
    ``None``."""

    key: int
    gpus: int
    priority: int
    traffic: JobTraffic | None


class Scheduler(Protocol):
    name: str

    def place(
        self, state: ClusterState, request: Request, load: np.ndarray | None
    ) -> np.ndarray | None: ...

    def victims(
        self, state: ClusterState, request: Request, running: dict[int, int]
    ) -> list[int]: ...


def make_scheduler(name: str, fabric: Fabric, **options) -> Scheduler:
    """The scheduler called ``name`` (one of :data:`SCHEDULERS`) for ``fabric``.

    Options: ``block_servers`` (``block`` only): servers per block (default: the finest
    subtree's size, or 16 servers on a fabric without subtrees).
    """
    if name not in SCHEDULERS:
        raise SpecError("scheduler", f"unknown scheduler {name!r}; one of {list(SCHEDULERS)}")
    allowed = {"block_servers"} if name == "block" else set()
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise SpecError(
            "scheduler",
            f"{name} takes no option {unknown[0]!r}; options: {sorted(allowed) or 'none'}",
        )
    if not isinstance(fabric, Fabric):
        raise SpecError("fabric", f"expected a Fabric, got {type(fabric).__name__}")
    cls = {
        "first-fit": FirstFit,
        "packed": Packed,
        "topology": Topology,
        "block": Block,
    }[name]
    return cls(fabric, **options)


class _Base:
    """Shared pieces: slicing small jobs, whole-server expansion, preemption."""

    name = ""

    def __init__(self, fabric: Fabric):
        self.fabric = fabric

    # -------------------------------------------------------------- placement
    def place(
        self, state: ClusterState, request: Request, load: np.ndarray | None
    ) -> np.ndarray | None:
        """GPU ids (int64 ``[request.gpus]``, rank order) or ``None``."""
        n = _check_request(state, request)
        if n < state.gpus_per_node:
            return _slice(state, n)
        servers = self._servers(state, -(-n // state.gpus_per_node), request, load)
        if servers is None:
            return None
        per = state.gpus_per_node
        gpus = (servers[:, None] * per + np.arange(per)[None, :]).reshape(-1)
        return gpus[:n].astype(np.int64)

    def _servers(
        self, state: ClusterState, count: int, request: Request, load: np.ndarray | None
    ) -> np.ndarray | None:
        raise NotImplementedError

    # -------------------------------------------------------------- preemption
    def victims(self, state: ClusterState, request: Request, running: dict[int, int]) -> list[int]:
        """Keys of running jobs of lower priority than ``request`` whose release lets it be
        placed (the cheapest set found: lowest priority first, then fewest GPUs; jobs not
        needed in the end are dropped); ``[]`` when it fits already or cannot be made to."""
        if self.place(state, request, None) is not None:
            return []
        lower = [
            (int(p), int(state.gpus_of(k).size), int(k))
            for k, p in running.items()
            if p < request.priority
        ]
        lower.sort()
        trial = state.copy()
        chosen: list[int] = []
        for _, _, key in lower:
            trial.release(key)
            chosen.append(key)
            if self.place(trial, request, None) is not None:
                break
        else:
            return []
        # Drop victims whose release turned out unnecessary (largest first).
        for key in sorted(chosen, key=lambda k: -state.gpus_of(k).size):
            rest = [k for k in chosen if k != key]
            probe = state.copy()
            for k in rest:
                probe.release(k)
            if self.place(probe, request, None) is not None:
                chosen = rest
        return chosen


class FirstFit(_Base):
    """The lowest-numbered free GPUs (no whole-node or subtree rule)."""

    name = "first-fit"

    def place(
        self, state: ClusterState, request: Request, load: np.ndarray | None
    ) -> np.ndarray | None:
        n = _check_request(state, request)
        free = state.free_gpus()
        return free[:n] if free.size >= n else None


class Packed(_Base):
    """Whole servers in the smallest subtree that fits, best fit."""

    name = "packed"

    def _servers(self, state, count, request, load):
        whole = state.whole_free_servers()
        if int(whole.sum()) < count:
            return None
        for blocks in state.levels:
            room = np.bincount(blocks[whole], minlength=int(blocks.max()) + 1)
            fits = np.flatnonzero(room >= count)
            if fits.size:
                best = fits[np.argmin(room[fits])]  # ties: lowest block id
                return _take(state, whole & (blocks == best), count)
        return _span(state, whole, count, order=None)


class Topology(_Base):
    """Candidate subtrees as ``packed``; the least-loaded one wins (see the module docs)."""

    name = "topology"

    def __init__(self, fabric: Fabric):
        super().__init__(fabric)
        self._anchors = _Anchors(fabric)

    def _servers(self, state, count, request, load):
        whole = state.whole_free_servers()
        if int(whole.sum()) < count:
            return None
        quiet = request.traffic is not None and request.traffic.network_Bps <= 0
        use_load = load is not None and not quiet and np.any(load > 0)
        for level, blocks in enumerate(state.levels):
            num_blocks = int(blocks.max()) + 1
            room = np.bincount(blocks[whole], minlength=num_blocks)
            fits = np.flatnonzero(room >= count)
            if not fits.size:
                continue
            if use_load:
                util = self._anchors.block_utilization(state, level, load)[fits]
                # near-equal loads count as equal: then pack (best fit)
                util = np.floor(util / LOAD_TIE)
                best = fits[np.lexsort((fits, room[fits], util))[0]]
            else:
                best = fits[np.argmin(room[fits])]
            return _take(state, whole & (blocks == best), count)
        order = None
        if use_load and state.levels:
            top = len(state.levels) - 1
            order = self._anchors.block_utilization(state, top, load)
        return _span(state, whole, count, order=order)


class Block(_Base):
    """Slurm topology/block-like segments of whole blocks."""

    name = "block"

    def __init__(self, fabric: Fabric, block_servers: int | None = None):
        super().__init__(fabric)
        if block_servers is not None and (
            isinstance(block_servers, bool)
            or not isinstance(block_servers, (int, np.integer))
            or block_servers < 1
        ):
            raise SpecError("block_servers", f"must be an integer >= 1, got {block_servers!r}")
        self.block_servers = block_servers
        self._blocks: np.ndarray | None = None

    def blocks(self, state: ClusterState) -> np.ndarray:
        """int64 ``[S]`` block id of every server."""
        if self._blocks is None or self._blocks.size != state.num_servers:
            if self.block_servers is None and state.levels:
                self._blocks = state.levels[0]
            else:
                size = self.block_servers or 16
                position = np.empty(state.num_servers, dtype=np.int64)
                position[state.server_order] = np.arange(state.num_servers)
                self._blocks = position // size
        return self._blocks

    def _servers(self, state, count, request, load):
        whole = state.whole_free_servers()
        if int(whole.sum()) < count:
            return None
        blocks = self.blocks(state)
        num_blocks = int(blocks.max()) + 1
        size = np.bincount(blocks, minlength=num_blocks)
        room = np.bincount(blocks[whole], minlength=num_blocks)
        block_size = int(size.max())
        if count < block_size:
            fits = np.flatnonzero(room >= count)
            if not fits.size:
                return None
            best = fits[np.argmin(room[fits])]
            return _take(state, whole & (blocks == best), count)
        empty = np.flatnonzero((room == size) & (size == block_size))
        need = math.ceil(count / block_size)
        if empty.size < need:
            return None
        return _take(state, whole & np.isin(blocks, empty[:need]), count)


# ------------------------------------------------------------------ shared helpers
def _check_request(state: ClusterState, request: Request) -> int:
    n = request.gpus
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise SpecError("gpus", f"a job needs an integer >= 1 GPUs, got {n!r}")
    if n > state.fabric.num_gpus:
        raise SpecError(
            "gpus", f"the job needs {n} GPUs but the fabric has {state.fabric.num_gpus}"
        )
    return int(n)


def _slice(state: ClusterState, n: int) -> np.ndarray | None:
    """``n`` (< a server) free GPUs of one server: the partly used server with the fewest
    free GPUs that fit first, then wholly free ones; locality order breaks ties."""
    per_server = state.free_per_server()[state.server_order]
    fits = per_server >= n
    if not fits.any():
        return None
    # Best fit over servers in locality order: argmin takes the first minimum.
    score = np.where(fits, per_server, np.iinfo(np.int64).max)
    server = int(state.server_order[int(np.argmin(score))])
    per = state.gpus_per_node
    gpus = np.arange(server * per, (server + 1) * per, dtype=np.int64)
    return gpus[state.owner[gpus] == FREE][:n]


def _take(state: ClusterState, mask: np.ndarray, count: int) -> np.ndarray:
    """The first ``count`` servers of ``mask`` (bool ``[S]``) in locality order."""
    ordered = state.server_order[mask[state.server_order]]
    return ordered[:count]


def _span(
    state: ClusterState, whole: np.ndarray, count: int, *, order: np.ndarray | None
) -> np.ndarray:
    """``count`` whole free servers over the fewest top-level blocks: blocks by most free
    room (or by ``order`` ``[B]`` ascending, then room), servers in locality order inside."""
    if not state.levels:
        return _take(state, whole, count)
    blocks = state.levels[-1]
    num_blocks = int(blocks.max()) + 1
    room = np.bincount(blocks[whole], minlength=num_blocks)
    ids = np.arange(num_blocks)
    keys = (ids, -room) if order is None else (ids, -room, np.floor(order / LOAD_TIE))
    ranked = np.lexsort(keys)
    rank_of_block = np.empty(num_blocks, dtype=np.int64)
    rank_of_block[ranked] = ids
    position = np.empty(state.num_servers, dtype=np.int64)
    position[state.server_order] = np.arange(state.num_servers)
    candidates = np.flatnonzero(whole)
    candidates = candidates[np.lexsort((position[candidates], rank_of_block[blocks[candidates]]))]
    return candidates[:count]


class _Anchors:
    """Where a subtree meets shared links: the first-hop switches of its GPUs (tier >= 1),
    or, on a switchless fabric (torus), the GPUs themselves. A subtree's utilization is
    the load over the capacity of the links incident to its anchors, other than a GPU's
    own link to its anchor (private to that GPU)."""

    def __init__(self, fabric: Fabric):
        src, dst = fabric.link_src, fabric.link_dst
        tier = fabric.node_tier
        gpu_of_node = np.full(fabric.num_nodes, -1, dtype=np.int64)
        gpu_of_node[fabric.gpu_node] = np.arange(fabric.num_gpus)
        # anchor of each GPU: the tier >= 1 switch of its first NIC-like link, else itself
        anchor = fabric.gpu_node.astype(np.int64).copy()
        up = (gpu_of_node[src] >= 0) & (tier[dst] >= 1)
        gpus_up = gpu_of_node[src[up]]
        first = np.unique(gpus_up, return_index=True)[1]
        anchor[gpus_up[first]] = dst[up][first]
        self.anchor_of_gpu = anchor
        is_anchor = np.zeros(fabric.num_nodes, dtype=bool)
        is_anchor[anchor] = True
        # a link counts for an anchor endpoint unless it is a GPU's link to its own anchor
        anchor_of_node = np.full(fabric.num_nodes, -1, dtype=np.int64)
        anchor_of_node[fabric.gpu_node] = anchor
        private = (anchor_of_node[src] == dst) | (anchor_of_node[dst] == src)
        self.src_counts = is_anchor[src] & ~private
        self.dst_counts = is_anchor[dst] & ~private
        self.fabric_src, self.fabric_dst = src, dst
        self.capacity = fabric.capacity
        self.num_nodes = fabric.num_nodes
        self._block_of_anchor: dict[int, np.ndarray] = {}

    def _anchor_blocks(self, state: ClusterState, level: int) -> np.ndarray:
        """int64 ``[N]``: block (at ``level``) of each anchor node, -1 elsewhere (an
        anchor shared by several blocks takes its lowest GPU's)."""
        if level not in self._block_of_anchor:
            out = np.full(self.num_nodes, -1, dtype=np.int64)
            server = np.arange(self.anchor_of_gpu.size) // state.gpus_per_node
            block = state.levels[level][server]
            # reversed so that the lowest GPU's block is written last
            out[self.anchor_of_gpu[::-1]] = block[::-1]
            self._block_of_anchor[level] = out
        return self._block_of_anchor[level]

    def block_utilization(self, state: ClusterState, level: int, load: np.ndarray) -> np.ndarray:
        """float64 ``[B]``: load / capacity of the shared links at each block's anchors."""
        load = np.asarray(load, dtype=np.float64)
        if load.shape != self.capacity.shape:
            raise SpecError("load", f"must have shape {self.capacity.shape}, got {load.shape}")
        blocks = self._anchor_blocks(state, level)
        num_blocks = int(state.levels[level].max()) + 1
        total = np.zeros(num_blocks)
        capacity = np.zeros(num_blocks)
        for counts, end in ((self.src_counts, self.fabric_src), (self.dst_counts, self.fabric_dst)):
            b = blocks[end[counts]]
            keep = b >= 0
            total += np.bincount(b[keep], weights=load[counts][keep], minlength=num_blocks)
            capacity += np.bincount(
                b[keep], weights=self.capacity[counts][keep], minlength=num_blocks
            )
        return np.divide(total, capacity, out=np.zeros(num_blocks), where=capacity > 0)
