"""The alpha-beta estimate of collective times: per-GPU NVLink and NIC bandwidths, no
contention (the step model's ``collectives="alpha-beta"`` backend, for comparison).

Ring collectives and direct all-to-all from the per-GPU scale-up and NIC bandwidths
(docs/references.md §4), plus NCCL's Simple-protocol latency per ring step; congestion
above the NICs is not seen. The per-GPU bandwidths are per-fabric constants, computed
once per fabric (:func:`gpu_bandwidths`) however many groups and sizes are priced.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from fabricflow.collective.structure_cache import fabric_fingerprint
from fabricflow.errors import SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.routing.route import route

__all__ = [
    "ALPHA_BETA_OPS",
    "BASE_LATENCY_S",
    "NETWORK_HOP_S",
    "NVLINK_HOP_S",
    "alpha_beta_estimate",
    "gpu_bandwidths",
]

# The ops alpha_beta_estimate has a formula for.
ALPHA_BETA_OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "sendrecv")
# NCCL Simple-protocol latencies (docs/references.md §4, tuning.cc): base + per hop.
BASE_LATENCY_S = 8.4e-6
NVLINK_HOP_S = 3.4e-6
NETWORK_HOP_S = 14.0e-6

# Per-GPU bandwidths by fabric fingerprint (a few recent fabrics).
_bandwidths: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()
_lock = threading.Lock()
_KEEP = 16


def gpu_bandwidths(fabric: Fabric, fingerprint: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(nvlink, nic)``: float64 ``[G]`` total capacity (bytes/s) of the ``nvlink`` and
    ``nic`` links leaving each GPU (read-only arrays), computed once per fabric:
    keyed by :func:`~.structure_cache.fabric_fingerprint` (give ``fingerprint`` when known),
    so a fabric whose capacities changed is computed again."""
    key = fabric_fingerprint(fabric) if fingerprint is None else fingerprint
    with _lock:
        known = _bandwidths.get(key)
        if known is not None:
            _bandwidths.move_to_end(key)
            return known
    value = (_per_gpu_bandwidth(fabric, "nvlink"), _per_gpu_bandwidth(fabric, "nic"))
    for array in value:
        array.setflags(write=False)
    with _lock:
        _bandwidths[key] = value
        while len(_bandwidths) > _KEEP:
            _bandwidths.popitem(last=False)
    return value


def _per_gpu_bandwidth(fabric: Fabric, kind: str) -> np.ndarray:
    """float64 ``[G]``: total capacity (bytes/s) of the ``kind`` links leaving each GPU."""
    if kind not in fabric.link_kinds:
        return np.zeros(fabric.num_gpus)
    node_to_gpu = np.full(fabric.num_nodes, -1, dtype=np.int64)
    node_to_gpu[fabric.gpu_node] = np.arange(fabric.num_gpus)
    links = fabric.links_of_kind(kind)
    owner = node_to_gpu[fabric.link_src[links]]
    keep = owner >= 0
    return np.bincount(owner[keep], weights=fabric.capacity[links][keep], minlength=fabric.num_gpus)


def alpha_beta_estimate(
    fabric: Fabric,
    op: str,
    groups: np.ndarray,
    size: float,
    *,
    field: str = "backend",
    fingerprint: str | None = None,
) -> np.ndarray:
    """Analytic estimate (not the fabric flow model): ring collectives and direct all-to-all.

    A group inside one scale-up domain runs at the per-GPU NVLink bandwidth ``B_nv``. A group
    spread over ``D`` domains with ``k`` members each runs its rings over ``k`` NICs per
    domain (one ring channel per rail): bus bandwidth ``min(B_nv, k B_nic)``; its all-to-all
    sends the off-domain share over each GPU's own NIC. Times (``n`` ranks, ``S`` bytes):
    all-reduce ``2 (n-1)/n S / B``, reduce-scatter / all-gather ``(n-1)/n S / B``,
    all-to-all ``max((k-1)/n S / B_nv, (n-k)/n S / B_nic)``, send/recv ``S / B``; plus
    NCCL's Simple-protocol latency per ring step. Concurrent groups only share NICs as
    the per-rail rings above do; spine congestion is not seen here. A group whose GPUs
    cannot reach each other raises :class:`RoutingError`; one without the NVLink/NIC
    bandwidth the formulas need raises :class:`SpecError` on ``field`` (never inf/NaN).
    ``fingerprint``: the fabric's :func:`~.structure_cache.fabric_fingerprint` when known.
    """
    groups = np.asarray(groups, dtype=np.int64)
    num_groups, n = groups.shape
    domains = np.sort(fabric.gpu_domain[groups], axis=1)
    num_domains = 1 + np.count_nonzero(np.diff(domains, axis=1), axis=1)  # [G]
    per_domain = n / num_domains
    nvlink_per_gpu, nic_per_gpu = gpu_bandwidths(fabric, fingerprint)
    nvlink = nvlink_per_gpu[groups].min(axis=1)
    nic = nic_per_gpu[groups].min(axis=1)
    if not np.any(nvlink > 0):
        nvlink = nic
    intra = num_domains == 1
    ring_bw = np.where(intra, nvlink, np.minimum(nvlink, per_domain * nic))
    if n > 1:
        _require_bandwidth(fabric, op, groups, nvlink, nic, intra, per_domain, ring_bw, field)
    else:
        # One rank moves nothing over links: a missing bandwidth must not make 0 / 0.
        ring_bw, nvlink, nic = (np.where(bw > 0, bw, np.inf) for bw in (ring_bw, nvlink, nic))
    hop = np.where(intra, NVLINK_HOP_S, NETWORK_HOP_S)
    if op == "all_reduce":
        time = 2 * (n - 1) / n * size / ring_bw + BASE_LATENCY_S + 2 * (n - 1) * hop
    elif op in ("reduce_scatter", "all_gather"):
        time = (n - 1) / n * size / ring_bw + BASE_LATENCY_S + (n - 1) * hop
    elif op == "all_to_all":
        local = (per_domain - 1) / n * size / nvlink
        remote = np.where(intra, 0.0, (n - per_domain) / n * size / np.maximum(nic, 1e-30))
        time = np.maximum(local, remote) + BASE_LATENCY_S + hop
    elif op == "sendrecv":
        # The slowest pair of the group: across domains if any member is elsewhere.
        time = size / np.where(intra, nvlink, np.minimum(nvlink, nic)) + BASE_LATENCY_S + hop
    else:
        raise ValueError(f"unknown op {op!r}")
    return np.broadcast_to(time, (num_groups,)).astype(np.float64)


def _require_bandwidth(fabric, op, groups, nvlink, nic, intra, per_domain, ring_bw, field) -> None:
    """Refuse groups the alpha-beta formulas would give an infinite or NaN time: a group
    with no path between its GPUs is a :class:`RoutingError` (as with the fabric backend),
    one whose GPUs have no NVLink/NIC bandwidth the formulas use is a :class:`SpecError`."""
    if op == "all_to_all":
        missing = ((per_domain > 1) & ~(nvlink > 0)) | (~intra & ~(nic > 0))
    else:
        missing = ~(ring_bw > 0)
    if not missing.any():
        return
    group = groups[int(np.argmax(missing))]
    # Ring neighbours: raises RoutingError when some member cannot reach the next one.
    route(fabric, group, np.roll(group, -1))
    raise SpecError(
        field,
        f"the alpha-beta backend needs scale-up (nvlink) or NIC (nic) bandwidth out of each "
        f"GPU, but fabric {fabric.name!r} gives GPUs {group.tolist()[:8]} none it can use "
        f"(nvlink {float(nvlink.min()) * 8 / 1e9:g} Gbps, nic {float(nic.min()) * 8 / 1e9:g} "
        "Gbps); use the 'fabric' backend",
    )
