"""The process-wide cache of collectives routed and solved on a fabric, and its one
fabric fingerprint.

Routing the flows of a collective and solving their max-min rates is the expensive part of
a step-time evaluation; pricing a message size on the solved rates is cheap. The solved
collective depends only on the fabric, the op, the GPU groups, the algorithm, the routing
policy and its seed, so it is kept here under that key and reused by every later
:func:`fabricflow.step_time` call (a notebook re-timing a layout, the layout optimizer
timing thousands of candidates that share a few group structures, the cluster
simulator). Below the collectives, :class:`SharedPhases` lets phases with identical flows
(a ring reduce-scatter's and the ring all-gather's) share one route and solve.

The fabric enters the key as a fingerprint of its arrays (capacities, latencies, link
ends, link states, GPU-to-node and GPU-to-domain maps), its transport and scale-up/in-network flags, not
as its name or identity: a fabric with a failed link, or with capacities changed in place,
never hits an entry solved on the healthy one. The cache is an LRU bounded both in entries
and in bytes (the arrays the solved phases hold), so a long search cannot grow without
limit; :func:`clear` empties it and :func:`info` reports its size and hit rate.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import itertools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from fabricflow.collective.flow_rates import SolvedPhase, solve_phases
from fabricflow.fabric.fabric import Fabric

__all__ = [
    "MAX_BYTES",
    "MAX_ENTRIES",
    "MISSING",
    "SharedPhases",
    "SolvedTimes",
    "cached",
    "clear",
    "fabric_fingerprint",
    "groups_digest",
    "info",
    "lookup",
    "store",
]

# Bounds of the cache: entries and bytes of solved arrays (a 16k-GPU data-parallel
# all-reduce holds ~10-100 MB of routed flows; a few dozen such structures fit).
MAX_ENTRIES = 16384  # solved collectives and the step coupling's joint solves
MAX_BYTES = 2 * 2**30

_FABRIC_ARRAYS = (
    "capacity",
    "latency",
    "link_src",
    "link_dst",
    "link_up",
    "gpu_node",
    "gpu_domain",
    "link_kind_id",
)

_lock = threading.Lock()
_entries: OrderedDict[tuple, tuple[Any, int]] = OrderedDict()
_stats = {"hits": 0, "misses": 0, "bytes": 0}


def fabric_fingerprint(fabric: Fabric) -> str:
    """Digest (hex) of everything about ``fabric`` a solved collective depends on.

    Hashes the link and GPU arrays byte for byte (about a millisecond per million links),
    so two fabrics with equal arrays share entries and any change to one (a failure, a
    capacity edit) gives a new fingerprint.
    """
    digest = hashlib.blake2b(digest_size=16)
    digest.update(str(fabric.name).encode())
    digest.update(str(fabric.gpus_per_node).encode())
    for name in _FABRIC_ARRAYS:
        value = getattr(fabric, name, None)
        digest.update(name.encode())
        if value is None:
            digest.update(b"none")
            continue
        array = np.ascontiguousarray(value)
        digest.update(str(array.dtype).encode() + str(array.shape).encode())
        digest.update(array.tobytes())
    # the transport decides what routing="auto" means (adaptive spraying or per-flow hashing)
    digest.update(repr(fabric.transport).encode())
    meta = fabric.meta or {}
    for flag in ("nvls", "in_network_reduction"):
        digest.update(f"{flag}={bool(meta.get(flag, False))}".encode())
    return digest.hexdigest()


def groups_digest(groups: np.ndarray) -> str:
    """Digest (hex) of an int64 ``[num_groups, group_size]`` group array (shape included)."""
    array = np.ascontiguousarray(groups, dtype=np.int64)
    digest = hashlib.blake2b(digest_size=16)
    digest.update(str(array.shape).encode())
    digest.update(array.tobytes())
    return digest.hexdigest()


def _nbytes(value: Any, depth: int = 0) -> int:
    """Bytes of the numpy arrays reachable from ``value`` (attributes, lists, dicts)."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if depth > 8 or isinstance(value, (str, bytes, int, float, bool, type(None), Fabric)):
        return 0
    if isinstance(value, dict):
        return sum(_nbytes(v, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v, depth + 1) for v in value)
    if hasattr(value, "__dict__"):
        # The fabric is held by its caller. A prepared collective (its capacities, routes
        # and solved phases) is counted with the SolvedTimes entry that owns it; the joint
        # solves that point to it again are not charged twice.
        skip = ("fabric",) if isinstance(value, SolvedTimes) else ("fabric", "prepared")
        return sum(_nbytes(v, depth + 1) for k, v in vars(value).items() if k not in skip)
    return 0


# Solved phases by what decides their rates, for :class:`SharedPhases`: key -> weak
# references, so an entry lives exactly as long as some prepared collective (e.g. in the
# step model's structure cache) still holds the phase; nothing is kept for sharing alone.
_shared_lock = threading.Lock()
_shared_phases: dict[tuple, list[weakref.ref]] = {}
# A serial number per distinct solve: twins (a phase shared by two collectives) carry
# the same one, so later solves over them (the step coupling's joint solves) are done once.
_serials = itertools.count()
# Elements of each hop array sampled into a phase's key (the key only narrows the
# candidates; a hit is confirmed by comparing every array in full).
_KEY_SAMPLES = 4096
# Hop arrays that decide a phase's routes, rates and latencies (not name, bytes, repeats).
_HOP_ARRAYS = ("hop_src", "hop_dst", "hop_load", "hop_latency_count", "max_group")


def _digest(*arrays: np.ndarray) -> str:
    """Hex digest of arrays' dtypes, shapes and bytes."""
    digest = hashlib.blake2b(digest_size=16)
    for array in arrays:
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _sample_key(phase) -> str:
    """Digest of a strided sample of the phase's hop arrays (shapes and dtypes in full):
    hashing every byte of every phase costs more than comparing the few that match."""
    sample = []
    for name in _HOP_ARRAYS:
        flat = getattr(phase, name).reshape(-1)
        sample.append(flat[:: max(1, flat.size // _KEY_SAMPLES)])
        sample.append(np.asarray(getattr(phase, name).shape))
    return _digest(*sample)


def _same_flows(a, b) -> bool:
    """Whether phases ``a`` and ``b`` have equal hop arrays (shape, dtype and values)."""
    for name in _HOP_ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        if x.shape != y.shape or x.dtype != y.dtype or not np.array_equal(x, y):
            return False
    return True


class SharedPhases:
    """:func:`~.flow_rates.solve_phase` with phases of identical flows solved once.

    A solved phase depends on the fabric, the capacities, the routing policy and seed and
    the phase's hops (``hop_src``, ``hop_dst``, ``hop_load``, ``max_group``,
    ``hop_latency_count``), never on its name, family, bytes or repeats. Two phases equal
    in all of these (a ring reduce-scatter and the ring all-gather on the same groups, the
    steps of halving-doubling for both) get the same rates bit for bit, so the second
    reuses the first's arrays (and serial number), under its own :class:`~.phase.Phase`.
    The fabric enters by :func:`fabric_fingerprint` (``fingerprint``, when the caller has
    it) and the capacities by a digest of their own unless ``capacity_known`` (they follow
    from the fabric: the default cost model), so a fabric edited in place never reuses
    rates solved before the edit.
    """

    def __init__(
        self,
        fabric: Fabric,
        capacity: np.ndarray,
        routing: str,
        seed: int,
        *,
        fingerprint: str | None = None,
        capacity_known: bool = False,
    ):
        self.fabric, self.capacity, self.routing, self.seed = fabric, capacity, routing, seed
        self.key = (
            fabric_fingerprint(fabric) if fingerprint is None else fingerprint,
            "" if capacity_known else _digest(capacity),
            routing,
            repr(seed),  # validated by routing; no sharing across spellings
        )

    def solve(self, phase) -> SolvedPhase:
        """The solved phase (:meth:`solve_many` of one)."""
        return self.solve_many([phase])[0]

    def solve_many(self, phases: list) -> list[SolvedPhase]:
        """Every phase solved, each distinct set of flows once: a phase equal to one
        solved before (still held by someone) or earlier in the list reuses its arrays;
        the others are solved together (:func:`~.flow_rates.solve_phases`)."""
        keys = [(*self.key, _sample_key(phase)) for phase in phases]
        out: list[SolvedPhase | None] = [None] * len(phases)
        pending: list[int] = []  # index of the first phase of each new set of flows
        twin_of: dict[int, int] = {}
        for i, (phase, key) in enumerate(zip(phases, keys, strict=True)):
            with _shared_lock:
                alive = [ref() for ref in _shared_phases.get(key, [])]
            hit = next(
                (sp for sp in alive if sp is not None and _same_flows(sp.phase, phase)), None
            )
            if hit is not None:
                out[i] = dataclasses.replace(hit, phase=phase)
                continue
            first = next(
                (j for j in pending if keys[j] == key and _same_flows(phases[j], phase)), None
            )
            if first is None:
                pending.append(i)
            else:
                twin_of[i] = first
        solved = solve_phases(
            self.fabric,
            [phases[i] for i in pending],
            self.capacity,
            routing=self.routing,
            seed=self.seed,
        )
        fresh = {}
        for i, sp in zip(pending, solved, strict=True):
            fresh[i] = dataclasses.replace(sp, serial=next(_serials))
            self._remember(keys[i], fresh[i])
            out[i] = fresh[i]
        for i, first in twin_of.items():
            out[i] = dataclasses.replace(fresh[first], phase=phases[i])
        return out  # type: ignore[return-value]

    @staticmethod
    def _remember(key: tuple, solved: SolvedPhase) -> None:
        with _shared_lock:
            refs = [ref for ref in _shared_phases.get(key, []) if ref() is not None]
            _shared_phases[key] = [*refs, weakref.ref(solved)]
            if len(_shared_phases) > 4096:  # drop the keys whose phases are all gone
                for dead in [k for k, v in _shared_phases.items() if all(r() is None for r in v)]:
                    del _shared_phases[dead]


MISSING = object()  # what :func:`lookup` returns for a key not stored


def lookup(key: tuple) -> Any:
    """The value stored under ``key`` (marked most recently used), or :data:`MISSING`."""
    with _lock:
        if key in _entries:
            _entries.move_to_end(key)
            _stats["hits"] += 1
            return _entries[key][0]
    return MISSING


def cached(key: tuple, build: Callable[[], Any]) -> Any:
    """The value stored under ``key``, built with ``build()`` on a miss (LRU, bounded)."""
    value = lookup(key)
    if value is not MISSING:
        return value
    value = build()  # outside the lock: building may take seconds
    store(key, value)
    return value


def store(key: tuple, value: Any) -> None:
    """Keep ``value`` under ``key``, evicting the least recently used entries past the
    bounds (a value larger than :data:`MAX_BYTES` alone is not kept)."""
    size = _nbytes(value)
    with _lock:
        _stats["misses"] += 1
        if key not in _entries and size <= MAX_BYTES:
            _entries[key] = (value, size)
            _stats["bytes"] += size
            while len(_entries) > MAX_ENTRIES or _stats["bytes"] > MAX_BYTES:
                _, (_, dropped) = _entries.popitem(last=False)
                _stats["bytes"] -= dropped


class SolvedTimes:
    """A collective solved on a fabric, pricing sizes with a memo of the sizes asked.

    Calling it with ``size`` (bytes) returns float64 ``[num_groups]`` seconds (a shared
    array: do not modify it). A step asks for the same few sizes again and again.
    """

    MAX_SIZES = 1024

    def __init__(self, prepared):
        self.prepared = prepared
        self._times: dict[float, np.ndarray] = {}

    def __call__(self, size: float) -> np.ndarray:
        size = float(size)
        times = self._times.get(size)
        if times is None:
            result = self.prepared.evaluate([size])[0]
            times = np.asarray(result.group_time_s, dtype=np.float64)
            times.setflags(write=False)
            if len(self._times) >= self.MAX_SIZES:
                self._times.clear()
            self._times[size] = times
        return times


def clear() -> None:
    """Drop every entry and reset the counters.

    Also collects garbage: the collective model shares solved phases through weak
    references (:mod:`fabricflow.collective.timing`), and solved collectives caught in
    reference cycles would otherwise stay reachable to that sharing until the next
    collection, so a "cold" call after ``clear()`` would not be cold."""
    with _lock:
        _entries.clear()
        _stats.update(hits=0, misses=0, bytes=0)
    gc.collect()


def info() -> dict:
    """``{"entries", "bytes", "hits", "misses", "max_entries", "max_bytes"}``."""
    with _lock:
        return {
            "entries": len(_entries),
            **_stats,
            "max_entries": MAX_ENTRIES,
            "max_bytes": MAX_BYTES,
        }
