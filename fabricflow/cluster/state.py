"""Who holds which GPU of a shared cluster, and the fabric's subtrees schedulers pack into.

:class:`ClusterState` keeps one owner code per GPU (int32 ``[G]``): a job key ``>= 0``,
:data:`FREE`, :data:`DOWN` (failed, waiting for repair) or :data:`SPARE` (held back as a
hot spare). Every query and update is a numpy mask over the ``G`` GPUs; nothing loops
over GPUs in Python.

A *server* (node) is ``gpus_per_node`` consecutive GPUs (``gpu // gpus_per_node``), the
unit a scheduler hands out whole. Servers are grouped into nested *blocks* (subtrees),
finest first (:attr:`ClusterState.levels`): a scale-up domain of several servers (an
NVL72 rack) when there is one, then

* Clos: the block of a server at level ``i`` is the level-``i`` switch block of its
  lowest GPU (``slot // H[i]`` of the arithmetic structure): the leaf (ToR attachment) or
  the rail group of ``gpus_per_node`` rail leaves (rail attachment: GPU ``r`` of every
  server of a rail group sits on rail leaf ``r``), then the pod, ... Planes share slots.
* other fabrics: the node group of the server's GPUs (a dragonfly group); a torus has no
  subtree coarser than a server, and schedulers fall back to the fabric's locality order
  (:func:`fabricflow.workload.placement.locality_order`: GPU index order grouped by
  scale-up domain), as the step model's topology-aware placement does.

Levels with a single block (the whole fabric) or one block per server are dropped.

Fragmentation (:meth:`ClusterState.fragmentation`) is the share of free GPUs stranded in
servers that are partly held, failed or spared: they can only take jobs smaller than a
server, while every job of a server or more needs whole free servers (the whole-node rule
of the schedulers). It is the "GPUs unusable by the workload" measure of fragmentation
(Weng et al., USENIX ATC 2023), for a workload of whole-server jobs; see
docs/cluster-scheduling.md.
"""

from __future__ import annotations

import contextlib

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.fabric.clos import ClosStructure
from fabricflow.fabric.fabric import Fabric
from fabricflow.workload.placement import locality_order

FREE, DOWN, SPARE = -1, -2, -3
RESERVED = -4  # held back for another job's reservation, within one placement only


def server_blocks(fabric: Fabric) -> list[np.ndarray]:
    """Block id of every server at each subtree level, finest first: a list of int64
    ``[S]`` arrays with ids ``0..B_i-1`` (``S = G / gpus_per_node`` servers). Levels with
    one block, or one block per server, are left out (see the module docs)."""
    per_node = server_size(fabric)
    first_gpu = np.arange(0, fabric.num_gpus, per_node, dtype=np.int64)
    num_servers = first_gpu.size
    raw: list[np.ndarray] = []
    # a scale-up domain of several servers (NVL72) is the finest subtree: NVLink inside
    domain = fabric.gpu_domain[first_gpu].astype(np.int64)
    if fabric.num_gpus and fabric.num_gpus // fabric.num_domains > per_node:
        raw.append(domain)
    structure = fabric.structure
    if isinstance(structure, ClosStructure):
        slot = structure.slot_of_gpu[first_gpu]
        raw += [slot // int(structure.H[i]) for i in range(1, structure.levels)]
    else:
        group = fabric.node_group[fabric.gpu_node[first_gpu]].astype(np.int64)
        if np.all(group >= 0):
            raw.append(group)
    levels: list[np.ndarray] = []
    for ids in raw:
        dense = np.unique(ids, return_inverse=True)[1].reshape(-1).astype(np.int64)
        count = int(dense.max()) + 1 if dense.size else 0
        # a level that groups servers as the previous one does adds nothing
        if 1 < count < num_servers and (not levels or count < int(levels[-1].max()) + 1):
            levels.append(dense)
    return levels


def server_size(fabric: Fabric) -> int:
    """GPUs per server: ``fabric.gpus_per_node`` when it divides the GPU count, else 1."""
    per_node = max(int(fabric.gpus_per_node), 1)
    return per_node if fabric.num_gpus % per_node == 0 else 1


class ClusterState:
    """Owner of every GPU of ``fabric`` (all :data:`FREE` at first).

    Attributes:
        fabric: the fabric.
        owner: int32 ``[G]``: job key (``>= 0``), FREE, DOWN or SPARE. Read it; change it
            only through the methods (they keep the counts below in step).
        gpus_per_node: GPUs per server (see :func:`server_size`).
        levels: block id of every server per subtree level (:func:`server_blocks`).
        server_order: int64 ``[S]`` servers in the fabric's locality order.
        num_free, num_busy, num_down, num_spare: GPUs of each kind (held by a job: busy).

    Counts and free GPUs per server are kept up to date by every change (O(changed
    GPUs)), so that the simulator's per-event accounting costs O(1) and
    :meth:`fragmentation` O(servers) instead of a pass over the GPUs.
    """

    def __init__(self, fabric: Fabric):
        if not isinstance(fabric, Fabric):
            raise SpecError("fabric", f"expected a Fabric, got {type(fabric).__name__}")
        self.fabric = fabric
        self.owner = np.full(fabric.num_gpus, FREE, dtype=np.int32)
        self.gpus_per_node = server_size(fabric)
        self.num_servers = fabric.num_gpus // self.gpus_per_node
        self.levels = server_blocks(fabric)
        # a server's place in locality order = that of its lowest GPU
        gpu_rank = np.empty(fabric.num_gpus, dtype=np.int64)
        gpu_rank[locality_order(fabric)] = np.arange(fabric.num_gpus)
        first = gpu_rank[:: self.gpus_per_node]
        self.server_order = np.argsort(first, kind="stable").astype(np.int64)
        self._held: dict[int, np.ndarray] = {}
        self._free_count = np.full(self.num_servers, self.gpus_per_node, dtype=np.int64)
        self.num_free = fabric.num_gpus
        self.num_busy = self.num_down = self.num_spare = 0

    # ------------------------------------------------------------------ queries
    def free_gpus(self) -> np.ndarray:
        """int64 sorted ids of the FREE GPUs."""
        return np.flatnonzero(self.owner == FREE).astype(np.int64)

    def gpus_of(self, key: int) -> np.ndarray:
        """int64 GPUs held by job ``key`` in the order they were allocated (rank order),
        without any that went DOWN since; empty when it holds none."""
        held = self._held.get(int(key))
        if held is None:
            return np.zeros(0, dtype=np.int64)
        return held[self.owner[held] == key]

    def free_per_server(self) -> np.ndarray:
        """int64 ``[S]``: FREE GPUs of every server (a copy)."""
        return self._free_count.copy()

    def whole_free_servers(self) -> np.ndarray:
        """bool ``[S]``: servers whose GPUs are all FREE."""
        return self._free_count == self.gpus_per_node

    def fragmentation(self) -> float:
        """Share in [0, 1] of the FREE GPUs that sit in servers not wholly free (partly
        held, DOWN or SPARE): usable only by jobs smaller than a server. 0 when no GPU is
        free or every free GPU lies in a wholly free server."""
        if self.num_free == 0:
            return 0.0
        whole = int(np.count_nonzero(self._free_count == self.gpus_per_node))
        return float(1.0 - whole * self.gpus_per_node / self.num_free)

    def copy(self) -> ClusterState:
        """An independent copy (same fabric and subtrees; owner, holdings and counts copied)."""
        other = object.__new__(ClusterState)
        other.__dict__.update(self.__dict__)
        other.owner = self.owner.copy()
        other._held = dict(self._held)
        other._free_count = self._free_count.copy()
        return other

    def projected(self, keys, up: np.ndarray) -> ClusterState:
        """A copy with the jobs ``keys`` gone (their GPUs FREE) and the DOWN GPUs among
        ``up`` repaired: the cluster as it will be once they end (one vectorized pass,
        for reservations; the copy's counts are recounted)."""
        other = self.copy()
        owner = other.owner
        keys = np.asarray(list(keys), dtype=np.int64)
        freed = np.isin(owner, keys) if keys.size else np.zeros(owner.size, dtype=bool)
        up = np.asarray(up, dtype=np.int64)
        if up.size:
            repaired = np.zeros(owner.size, dtype=bool)
            repaired[up] = True
            freed |= repaired & (owner == DOWN)
        owner[freed] = FREE
        for key in keys.tolist():
            other._held.pop(int(key), None)
        other._recount()
        return other

    # ------------------------------------------------------------------ updates
    def allocate(self, key: int, gpus: np.ndarray) -> None:
        """Give ``gpus`` (int ``[n]``, rank order) to job ``key`` (``>= 0``); SpecError when
        any is not FREE, repeats, or the key already holds GPUs."""
        key = _check_key(key)
        gpus = self._check_gpus(gpus, "gpus")
        if key in self._held and self.gpus_of(key).size:
            raise SpecError("key", f"job {key} already holds GPUs; release it first")
        if np.unique(gpus).size != gpus.size:
            raise SpecError("gpus", "lists a GPU more than once")
        busy = self.owner[gpus] != FREE
        if busy.any():
            bad = gpus[busy]
            raise SpecError(
                "gpus",
                f"{bad.size} of them are not free (GPU {int(bad[0])} has owner "
                f"{_owner_name(int(self.owner[bad[0]]))})",
            )
        self._set(gpus, key)
        self._held[key] = gpus

    def release(self, key: int) -> np.ndarray:
        """Free the GPUs of job ``key``; returns the GPUs it held (rank order), now FREE,
        except any DOWN, which stay DOWN until :meth:`set_up`."""
        key = _check_key(key)
        held = self._held.pop(key, np.zeros(0, dtype=np.int64))
        self._set(held[self.owner[held] == key], FREE)
        return held

    def set_down(self, gpus: np.ndarray) -> np.ndarray:
        """Mark ``gpus`` DOWN (failed); returns the sorted job keys that held any of them
        (int64; those jobs keep their other GPUs until released)."""
        gpus = self._check_gpus(gpus, "gpus")
        owners = self.owner[gpus]
        self._set(gpus, DOWN)
        return np.unique(owners[owners >= 0]).astype(np.int64)

    def set_up(self, gpus: np.ndarray) -> None:
        """Repair: DOWN GPUs among ``gpus`` become FREE (others are left as they are)."""
        gpus = self._check_gpus(gpus, "gpus")
        self._set(gpus[self.owner[gpus] == DOWN], FREE)

    def reserve_spares(self, gpus: np.ndarray) -> None:
        """FREE -> SPARE for ``gpus``; SpecError when any is not FREE."""
        gpus = self._check_gpus(gpus, "gpus")
        if np.any(self.owner[gpus] != FREE):
            raise SpecError("gpus", "spares must be FREE GPUs")
        self._set(gpus, SPARE)

    def take_spare(self, count: int) -> np.ndarray | None:
        """``count`` GPUs from whole SPARE servers (the fewest servers, locality order),
        turned FREE so that the caller allocates them; the rest of the last server stays
        SPARE. ``None`` when the wholly spare servers hold fewer than ``count`` GPUs."""
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
            raise SpecError("count", f"must be an integer >= 1, got {count!r}")
        per = self.gpus_per_node
        need = -(-int(count) // per)
        if self.num_spare < need * per:
            return None
        spare = np.all((self.owner == SPARE).reshape(self.num_servers, per), axis=1)
        servers = self.server_order[spare[self.server_order]]
        if servers.size < need:
            return None
        gpus = (servers[:need, None] * per + np.arange(per)[None, :]).reshape(-1)[:count]
        gpus = gpus.astype(np.int64)
        self._set(gpus, FREE)
        return gpus

    @contextlib.contextmanager
    def held_back(self, gpus: np.ndarray):
        """Within the ``with`` block the FREE GPUs among ``gpus`` are RESERVED: not free
        for any placement (a backfill placement around another job's reservation)."""
        gpus = self._check_gpus(gpus, "gpus")
        held = gpus[self.owner[gpus] == FREE]
        self._set(held, RESERVED)
        try:
            yield held
        finally:
            self._set(held, FREE)

    # ------------------------------------------------------------------ helpers
    def _recount(self) -> None:
        """Counts from the owner array (O(G))."""
        owner = self.owner
        self.num_free = int(np.count_nonzero(owner == FREE))
        self.num_busy = int(np.count_nonzero(owner >= 0))
        self.num_down = int(np.count_nonzero(owner == DOWN))
        self.num_spare = int(np.count_nonzero(owner == SPARE))
        free = (owner == FREE).reshape(self.num_servers, self.gpus_per_node)
        self._free_count = free.sum(axis=1).astype(np.int64)

    def _set(self, gpus: np.ndarray, code: int) -> None:
        """``owner[gpus] = code`` with the counts kept in step (``gpus`` distinct)."""
        if gpus.size == 0:
            return
        old = self.owner[gpus]
        was_free = old == FREE
        self.num_free += (gpus.size if code == FREE else 0) - int(np.count_nonzero(was_free))
        self.num_busy += (gpus.size if code >= 0 else 0) - int(np.count_nonzero(old >= 0))
        self.num_down += (gpus.size if code == DOWN else 0) - int(np.count_nonzero(old == DOWN))
        self.num_spare += (gpus.size if code == SPARE else 0) - int(np.count_nonzero(old == SPARE))
        delta = int(code == FREE) - was_free.astype(np.int64)
        changed = delta != 0
        if changed.any():
            np.add.at(self._free_count, gpus[changed] // self.gpus_per_node, delta[changed])
        self.owner[gpus] = code

    def _check_gpus(self, gpus, field: str) -> np.ndarray:
        array = np.asarray(gpus)
        if array.ndim != 1 or (array.size and not np.issubdtype(array.dtype, np.integer)):
            raise SpecError(field, f"must be a 1-D array of integer GPU ids, got {array.dtype}")
        array = array.astype(np.int64)
        if array.size and (array.min() < 0 or array.max() >= self.owner.size):
            raise SpecError(field, f"GPU ids must lie in 0..{self.owner.size - 1}")
        return array


def _check_key(key) -> int:
    if isinstance(key, bool) or not isinstance(key, (int, np.integer)) or key < 0:
        raise SpecError("key", f"a job key is an integer >= 0, got {key!r}")
    return int(key)


def _owner_name(code: int) -> str:
    return {FREE: "FREE", DOWN: "DOWN", SPARE: "SPARE", RESERVED: "RESERVED"}.get(
        code, f"job {code}"
    )
