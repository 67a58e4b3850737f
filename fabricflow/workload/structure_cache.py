"""Process-wide cache of collectives routed and solved on a fabric, by group structure.

Routing the flows of a collective and solving their max-min rates is the expensive part of
a step-time evaluation (seconds for 16k GPUs); pricing a message size on the solved rates
is cheap. The solved collective depends only on the fabric, the op, the GPU groups, the
algorithm, the routing policy and its seed, so it is kept here under that key and reused
by every later :func:`fabricflow.step_time` call (a notebook re-timing a layout, the layout
optimizer timing thousands of candidates that share a few group structures).

The fabric enters the key as a fingerprint of its arrays (capacities, latencies, link
ends, link states, GPU-to-node and GPU-to-domain maps), its transport and scale-up/in-network flags, not
as its name or identity: a fabric with a failed link, or with capacities changed in place,
never hits an entry solved on the healthy one. The cache is an LRU bounded both in entries
and in bytes (the arrays the solved phases hold), so a long search cannot grow without
limit; :func:`clear` empties it and :func:`info` reports its size and hit rate.
"""

from __future__ import annotations

import gc
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from ..fabric.fabric import Fabric

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

    Calling it with ``size_bytes`` returns float64 ``[num_groups]`` seconds (a shared
    array: do not modify it). A step asks for the same few sizes again and again.
    """

    MAX_SIZES = 1024

    def __init__(self, prepared):
        self.prepared = prepared
        self._times: dict[float, np.ndarray] = {}

    def __call__(self, size_bytes: float) -> np.ndarray:
        size = float(size_bytes)
        times = self._times.get(size)
        if times is None:
            result = self.prepared.evaluate([size])[0]
            times = np.asarray(result.group_time_s, dtype=np.float64)
            times.setflags(write=False)
            if len(self._times) >= self.MAX_SIZES:
                self._times.clear()
            self._times[size] = times
        return times


def prepared_collective(
    fabric: Fabric,
    op: str,
    groups: np.ndarray,
    *,
    algo: str = "auto",
    routing: str = "auto",
    seed: int = 0,
    fingerprint: str | None = None,
    cc: str | None = None,
) -> SolvedTimes:
    """:func:`fabricflow.collective.prepare_collective` of ``(fabric, op, groups)``, solved
    once per process for each (fabric fingerprint, op, groups digest, algo, routing, seed).

    ``fingerprint``: :func:`fabric_fingerprint` of ``fabric`` when the caller already has
    it (a step asks for several collectives on one fabric). ``cc``: a congestion-control
    law whose fluid sets the phase rates (:mod:`fabricflow.collective.cc_rates`), or
    ``None`` for max-min."""
    from ..collective import prepare_collective

    if fingerprint is None:
        fingerprint = fabric_fingerprint(fabric)
    key = (
        "collective",
        fingerprint,
        str(op),
        groups_digest(groups),
        str(algo),
        str(routing),
        int(seed),
        *(() if cc is None else (("cc", str(cc)),)),
    )
    return cached(
        key,
        lambda: SolvedTimes(
            prepare_collective(
                fabric,
                op,
                groups,
                algo=algo,
                routing=routing,
                seed=seed,
                fabric_fingerprint=fingerprint,
                solver=None if cc is None else _cc_solver(fabric, cc),
            )
        ),
    )


def _cc_solver(fabric: Fabric, cc: str):
    from ..collective.cc_rates import CCRates  # deferred: the congestion-control fluid is JAX

    return CCRates(fabric, cc)


def clear() -> None:
    """Drop every entry and reset the counters.

    Also collects garbage: the collective model shares solved phases through weak
    references (:mod:`fabricflow.collective.model`), and solved collectives caught in
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
