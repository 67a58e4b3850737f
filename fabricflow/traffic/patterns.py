"""Simple traffic patterns as GPU-index flow lists (host-side numpy, vectorized).

These are the synthetic patterns used by the demo and the benchmarks; the collective
model (:mod:`fabricflow.collective`) builds the flows of real collective algorithms.
"""

from __future__ import annotations

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.memory_budget import check_memory


def _strided_groups(num_gpus: int, group_size: int, num_groups: int | None) -> np.ndarray:
    """int64 ``[num_groups, group_size]``: the first ``num_groups`` (default all) strided
    groups over the first ``stride * group_size`` GPUs, ``stride = num_gpus // group_size``:
    groups spread over the fabric, like expert-parallel groups laid out across a cluster
    (the rows of ``collective.make_groups(stride * group_size, group_size,
    layout="strided")``, built here: traffic sits below the collective floor)."""
    if num_gpus < 2:  # "must lie in 2..1" would name no valid group size
        raise SpecError("num_gpus", f"groups need at least 2 GPUs, got {num_gpus}")
    if group_size < 2 or group_size > num_gpus:
        raise SpecError("group_size", f"must lie in 2..{num_gpus}, got {group_size}")
    stride = num_gpus // group_size
    most = stride
    num_groups = most if num_groups is None else num_groups
    if not 1 <= num_groups <= most:
        raise SpecError(
            "num_groups",
            f"must lie in 1..{most} for {num_gpus} GPUs in groups of "
            f"{group_size}, got {num_groups}",
        )
    strided = np.arange(stride * group_size, dtype=np.int64).reshape(group_size, stride).T
    return strided[:num_groups].copy()


def alltoall_flows(groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All ordered pairs inside each group: ``G * g * (g - 1)`` flows as ``(src, dst)``."""
    groups = np.asarray(groups, dtype=np.int64)
    size = groups.shape[1]
    num_flows = groups.shape[0] * size * (size - 1)
    # src and dst (int64) plus the gathered temporaries, before anything is allocated
    check_memory(
        32 * num_flows + 24 * size * size,
        f"all-to-all of {groups.shape[0]:,} group(s) of {size:,} ({num_flows:,} flows)",
        hint="use smaller groups",
    )
    a, b = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    off_diagonal = a != b
    src = groups[:, a[off_diagonal]].ravel()
    dst = groups[:, b[off_diagonal]].ravel()
    return src, dst


def alltoall_groups(num_gpus: int, group_size: int, num_groups: int | None = None):
    """MoE-style all-to-all inside strided groups; returns ``(src, dst)``.

    The groups are the first ``num_groups`` (default all) rows of
    :func:`fabricflow.collective.make_groups` ``(stride * group_size, group_size,
    layout="strided")`` with ``stride = num_gpus // group_size``: member ``j`` of group
    ``i`` is GPU ``i + j * stride`` (a GPU count ``group_size`` does not divide leaves its
    last GPUs out).
    """
    return alltoall_flows(_strided_groups(num_gpus, group_size, num_groups))


def ring(gpus, channels: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Ring ``gpus[0] -> gpus[1] -> ... -> gpus[0]``, repeated for ``channels`` channels.

    Flows of different channels between the same pair hash independently (as NCCL's
    channels use different queue pairs).
    """
    order = np.asarray(gpus, dtype=np.int64)
    if order.ndim == 0:
        order = np.arange(int(order))
    if order.size < 2:
        raise SpecError("gpus", f"a ring needs at least 2 GPUs, got {order.size}")
    if channels < 1:
        raise SpecError("channels", f"must be >= 1, got {channels}")
    src = np.tile(order, channels)
    dst = np.tile(np.roll(order, -1), channels)
    return src, dst


def _check_seed(seed) -> int:
    """``seed`` as an int in ``0..2**63-1`` (numpy's generators refuse negatives)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**63:
        raise SpecError("seed", f"must be an integer in 0..2**63-1, got {seed!r}")
    return int(seed)


def permutation_flows(num_hosts: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random permutation traffic: host ``i`` sends to ``perm[i]``, no host to itself.

    A uniformly random derangement (permutations drawn until one has no fixed point, on
    average e = 2.7 draws), so every host sends one flow and receives one, as in the
    permutation matrices of packet simulators. Returns ``(src, dst)`` int64 ``[num_hosts]``.
    """
    if isinstance(num_hosts, bool) or not isinstance(num_hosts, (int, np.integer)):
        raise SpecError("hosts", f"must be an integer >= 2, got {num_hosts!r}")
    if num_hosts < 2:
        raise SpecError("hosts", f"a permutation needs at least 2 hosts, got {num_hosts}")
    rng = np.random.default_rng(_check_seed(seed))
    hosts = np.arange(num_hosts)
    while True:
        perm = rng.permutation(num_hosts)
        if not np.any(perm == hosts):
            return hosts, perm


def incast_flows(
    num_hosts: int, senders: int, receiver: int = 0, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``senders`` distinct random hosts (not ``receiver``) each send one flow to ``receiver``.

    Raises:
        SpecError: ``receiver``, ``senders`` or ``seed`` (an integer in 0..2**63-1) out of
            range.
    """
    if not 0 <= receiver < num_hosts:
        raise SpecError("receiver", f"must lie in 0..{num_hosts - 1}, got {receiver}")
    if not 1 <= senders <= num_hosts - 1:
        raise SpecError("senders", f"must lie in 1..{num_hosts - 1}, got {senders}")
    others = np.delete(np.arange(num_hosts), receiver)
    rng = np.random.default_rng(_check_seed(seed))
    src = np.sort(rng.choice(others, senders, replace=False))
    return src, np.full(senders, receiver, np.int64)
