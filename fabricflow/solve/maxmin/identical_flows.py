"""Merging identical flows into one weighted flow before a max-min solve (host, numpy).

Flows with the same row of ``links`` and ``coef`` cross the same links in the same
proportions, so in a weighted max-min allocation they sit at the same fill level: each
runs at ``weight[f] * t``. They can be solved as one flow of weight ``sum(weight)`` and
the result split back in proportion to the weights. With demands the flows must also
share the demand level ``demand / weight`` (the level at which each stops); the merged
flow then gets ``sum(demand)``. The merge is exact, not an approximation.

Rows are hashed (64-bit, vectorised over columns), grouped with ``np.unique`` on the
hash, and every row is verified against its group's representative; a hash collision
falls back to an exact ``np.unique(axis=0)``. Cost: ``O(F H)`` plus a sort of ``F``
64-bit keys.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class MergedFlows(NamedTuple):
    """Unique flows and the map back to the original ones.

    Attributes:
        links, coef: ``[U, H]`` rows of the unique flows (``coef`` may be ``None``).
        weight: ``[U]`` or ``[B, U]`` summed weights (``None`` when all weights were 1
            and no flows merged).
        demand: ``[U]`` or ``[B, U]`` summed demands, or ``None``.
        inverse: int64 ``[F]``: the unique flow of each original flow.
        fraction: ``[F]`` or ``[B, F]``: each flow's share of its merged flow's rate.
    """

    links: np.ndarray
    coef: np.ndarray | None
    weight: np.ndarray | None
    demand: np.ndarray | None
    inverse: np.ndarray
    fraction: np.ndarray

    @property
    def num_unique(self) -> int:
        return int(self.links.shape[0])

    def split(self, merged_values: np.ndarray) -> np.ndarray:
        """Per-flow rates from merged rates ``[U]`` / ``[B, U]``: ``rate * fraction``."""
        return np.take(merged_values, self.inverse, axis=-1) * self.fraction

    def spread(self, merged_values: np.ndarray) -> np.ndarray:
        """Per-flow copies of a merged per-flow value (bottleneck link, finish time...)."""
        return np.take(merged_values, self.inverse, axis=-1)


def merge_identical_flows(
    links: np.ndarray,
    coef: np.ndarray | None = None,
    weight: np.ndarray | None = None,
    demand: np.ndarray | None = None,
    extra_keys: tuple = (),
) -> MergedFlows:
    """Group flows with identical ``(links row, coef row[, demand level])``.

    Args:
        links: int32 ``[F, H]``, ``-1`` padded; rows compare as given (entries in the
            same order), as routers emit them.
        coef: ``[F, H]`` or ``None``.
        weight: ``[F]`` / ``[B, F]`` positive weights or ``None`` (all 1).
        demand: ``[F]`` / ``[B, F]`` or ``None``; flows merge only when their demand level
            ``demand / weight`` is the same in every scenario.
        extra_keys: more ``[F]`` float arrays that merged flows must share (the flow
            completion engine passes start times and ``size / weight``).

    Returns:
        :class:`MergedFlows`.
    """
    num_flows = links.shape[0]
    columns = [links.astype(np.int64).T]
    if coef is not None:
        columns.append(np.asarray(coef, np.float64).view(np.int64).T)
    if demand is not None:
        level = np.asarray(demand, np.float64) / (1.0 if weight is None else weight)
        columns.append(np.atleast_2d(level).view(np.int64))
    for key in extra_keys:
        columns.append(np.atleast_2d(np.asarray(key, np.float64)).view(np.int64))
    keys = np.concatenate(columns, axis=0) if columns else np.zeros((0, num_flows), np.int64)
    inverse, first = _group_rows(keys)
    num_unique = first.size

    ones = np.ones(num_flows)
    per_flow_weight = ones if weight is None else np.asarray(weight, np.float64)
    total = _sum_groups(per_flow_weight, inverse, num_unique)
    fraction = per_flow_weight / np.take(total, inverse, axis=-1)
    merged_weight = None if (weight is None and num_unique == num_flows) else total
    merged_demand = None
    if demand is not None:
        merged_demand = _sum_groups(np.asarray(demand, np.float64), inverse, num_unique)
    return MergedFlows(
        links[first],
        None if coef is None else coef[first],
        merged_weight,
        merged_demand,
        inverse,
        fraction,
    )


def _group_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``keys`` int64 ``[K, F]`` (one column per flow) -> ``(inverse [F], first [U])``."""
    num_flows = keys.shape[1]
    if num_flows == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    digest = np.full(num_flows, 0x9E3779B97F4A7C15, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for column in keys.view(np.uint64):
            digest = (digest ^ column) * np.uint64(0xBF58476D1CE4E5B9)
            digest ^= digest >> np.uint64(31)
    _, first, inverse = np.unique(digest, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if not np.array_equal(keys[:, first[inverse]], keys):  # a 64-bit hash collision
        _, first, inverse = np.unique(keys.T, axis=0, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
    return inverse.astype(np.int64), first.astype(np.int64)


def _sum_groups(values: np.ndarray, inverse: np.ndarray, num_groups: int) -> np.ndarray:
    """Sum ``values`` ``[F]`` or ``[B, F]`` over groups -> ``[U]`` or ``[B, U]``."""
    if values.ndim == 1:
        return np.bincount(inverse, weights=values, minlength=num_groups)
    return np.stack([np.bincount(inverse, weights=row, minlength=num_groups) for row in values])
