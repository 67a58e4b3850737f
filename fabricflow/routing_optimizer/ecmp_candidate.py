"""ECMP's own path as every flow's first candidate.

An optimized routing replaces the ECMP hash, so it must never be worse than it: with the
path ``ff.route(fabric, src, dst, policy="ecmp", seed=seed)`` gives each flow among the
candidates, the ECMP assignment is one of the splits the optimizer searches over (a
one-hot split), the linear-program bound is at most ECMP's makespan, and both the
fractional and the integral mode can start from it.
"""

from __future__ import annotations

import numpy as np

from fabricflow.routing.candidates import distinct_paths
from fabricflow.routing.route import route


def with_ecmp_first(fabric, src: np.ndarray, dst: np.ndarray, paths: np.ndarray, seed: int):
    """int32 ``[F, K, H']``: ``paths`` (``[F, K, H]`` candidates, ``-1`` padded) with each
    flow's ECMP path (seed ``seed``) in row 0, followed by the other candidates in their
    order, at most ``K`` distinct paths per flow (the last one gives way when ECMP's path
    was not among them). ``H' >= H`` when ECMP's path is longer (a detour around a
    failure).

    Falls back to ``paths`` unchanged when the ECMP router splits flows (``coef`` set:
    there is no single ECMP path to start from).
    """
    num, k, hops = paths.shape
    if num == 0:
        return paths
    ecmp = route(fabric, src, dst, policy="ecmp", seed=seed)
    if ecmp.coef is not None:
        return paths
    width = max(hops, ecmp.links.shape[1])
    stacked = np.full((num, k + 1, width), -1, np.int64)
    stacked[:, 0, : ecmp.links.shape[1]] = ecmp.links
    stacked[:, 1:, :hops] = paths
    out = distinct_paths(stacked, k)
    used = int((out >= 0).sum(axis=2).max(initial=1))
    return np.ascontiguousarray(out[:, :, : max(used, 1)], dtype=np.int32)
