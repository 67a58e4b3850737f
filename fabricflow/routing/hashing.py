"""Seeded, vectorized per-flow hashes for ECMP decisions.

Switches hash a flow's 5-tuple; we hash ``(src, dst, flow index within the pair, seed,
salt)`` with splitmix64, which is fast in numpy, well mixed, and reproducible. ``salt``
separates independent decisions of one flow (the choice at each tier, retries after a
failure, the k paths of a multipath split).
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser over a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def flow_key(src: np.ndarray, dst: np.ndarray, seed: int) -> np.ndarray:
    """uint64 ``[F]`` key of each flow: its endpoints, its index among flows of the same
    pair (so that parallel flows of one pair, like NCCL channels, hash independently),
    and the seed."""
    src64 = np.asarray(src, dtype=np.uint64)
    dst64 = np.asarray(dst, dtype=np.uint64)
    with np.errstate(over="ignore"):
        pair = (src64 << np.uint64(32)) | dst64
        occurrence = _occurrence_index(pair).astype(np.uint64)
        return splitmix64(splitmix64(pair ^ splitmix64(np.uint64(seed) + occurrence)))


def _occurrence_index(keys: np.ndarray) -> np.ndarray:
    """For each entry, how many earlier entries carry the same key (0, 1, 2, ...)."""
    if keys.size == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.ones(keys.size, dtype=bool)
    starts[1:] = sorted_keys[1:] != sorted_keys[:-1]
    run_start = np.maximum.accumulate(np.where(starts, np.arange(keys.size), 0))
    occurrence = np.empty(keys.size, dtype=np.int64)
    occurrence[order] = np.arange(keys.size) - run_start
    return occurrence


def choose(key: np.ndarray, salt: int, choices: np.ndarray | int) -> np.ndarray:
    """int64 ``[F]`` uniform choice in ``0..choices-1`` from the flow key and a salt."""
    with np.errstate(over="ignore"):
        mixed = splitmix64(key ^ splitmix64(np.asarray(np.uint64(salt) * _GOLDEN)))
    return (mixed % np.asarray(choices, dtype=np.uint64)).astype(np.int64)
