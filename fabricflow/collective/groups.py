"""Communicator groups: validation, the (domain x local rank) grid, and group builders.

A *group* is one communicator: a list of GPU indices. Many groups of the same size run at
once (all data-parallel groups of a job), so groups travel as an int array
``[num_groups, group_size]``.

Hierarchical and rail-aware algorithms view a group as a grid ``[num_groups, D, k]``: its
members sorted into ``D`` scale-up domains with ``k`` members each; member ``(d, j)`` is
the ``j``-th (by GPU index) member in the ``d``-th domain, so ``j`` plays the role of the
rail (NIC) index when a group has the same local GPUs in every node.
"""

from __future__ import annotations

import numpy as np

from fabricflow.errors import SpecError


def as_groups(groups, num_gpus: int) -> np.ndarray:
    """Validate ``groups`` and return them as int64 ``[num_groups, group_size]``.

    A 1-D list is one group. Every group needs >= 2 distinct GPUs in ``0..num_gpus-1``.
    """
    try:
        arr = np.asarray(groups)
    except ValueError as error:  # ragged lists
        raise SpecError("groups", f"all groups must have the same size ({error})") from None
    if arr.dtype == object:
        raise SpecError("groups", "all groups must have the same size")
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise SpecError("groups", f"must be [num_groups, group_size], got shape {arr.shape}")
    if arr.size == 0:
        raise SpecError("groups", "needs at least one group of at least 2 GPUs")
    if not np.issubdtype(arr.dtype, np.integer):
        raise SpecError("groups", f"must hold integer GPU indices, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.shape[1] < 2:
        raise SpecError(
            "groups", f"a collective needs at least 2 GPUs per group, got {arr.shape[1]}"
        )
    if arr.min() < 0 or arr.max() >= num_gpus:
        raise SpecError(
            "groups",
            f"GPU indices must lie in 0..{num_gpus - 1}; got {int(arr.min())}..{int(arr.max())}",
        )
    ordered = np.sort(arr, axis=1)
    dup = np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))
    if dup.size:
        raise SpecError("groups", f"group {int(dup[0])} lists a GPU twice: {arr[dup[0]].tolist()}")
    return arr


def domain_grid(groups: np.ndarray, gpu_domain: np.ndarray) -> np.ndarray | None:
    """Members of each group as ``[num_groups, D, k]`` sorted by (domain, GPU index).

    Returns ``None`` when the groups do not all have the same number ``k`` of members in
    every domain they touch (hierarchical algorithms then do not apply).
    """
    num_groups, size = groups.shape
    dom = gpu_domain[groups]
    order = _row_lexsort(dom, groups)
    members = np.take_along_axis(groups, order, axis=1)
    dom_sorted = np.take_along_axis(dom, order, axis=1)
    k = int(np.count_nonzero(dom_sorted[0] == dom_sorted[0, 0]))
    if size % k:
        return None
    blocks = dom_sorted.reshape(num_groups, size // k, k)
    if not np.all(blocks == blocks[:, :, :1]):
        return None
    if size // k > 1 and not np.all(blocks[:, 1:, 0] != blocks[:, :-1, 0]):
        return None
    return members.reshape(num_groups, size // k, k)


def _row_lexsort(primary: np.ndarray, secondary: np.ndarray) -> np.ndarray:
    """Per-row argsort by ``(primary, secondary)`` (both int64, vectorized over rows)."""
    span = int(secondary.max()) + 1
    return np.argsort(primary * span + secondary, axis=1, kind="stable")


def make_groups(
    num_gpus: int, group_size: int, *, layout: str = "contiguous", first_gpu: int = 0
) -> np.ndarray:
    """Groups over GPUs ``first_gpu .. first_gpu + num_gpus - 1``.

    Args:
        num_gpus: GPUs of the job (a multiple of ``group_size``).
        group_size: ranks per group.
        layout: ``contiguous`` -- group ``i`` is GPUs ``i*G .. i*G+G-1`` (tensor-parallel
            style, a group fills nodes); ``strided`` -- group ``i`` is GPUs ``i, i+N/G,
            i+2N/G, ...`` (data-parallel style: one member per block of ``N/G`` GPUs, so
            members sit at the same local rank of different nodes).

    Returns:
        int64 ``[num_gpus // group_size, group_size]``.
    """
    num_gpus, group_size = int(num_gpus), int(group_size)
    if group_size < 2:
        raise SpecError("group_size", f"must be >= 2, got {group_size}")
    if num_gpus < group_size or num_gpus % group_size:
        raise SpecError("group_size", f"must divide the GPU count {num_gpus}, got {group_size}")
    ids = first_gpu + np.arange(num_gpus, dtype=np.int64)
    if layout == "contiguous":
        return ids.reshape(num_gpus // group_size, group_size)
    if layout == "strided":
        return ids.reshape(group_size, num_gpus // group_size).T.copy()
    raise SpecError("layout", f"unknown group layout {layout!r}; one of ['contiguous', 'strided']")
