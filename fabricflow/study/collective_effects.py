"""The effects users come to a collective model for, as small reusable experiments.

Each function runs :func:`~fabricflow.collective.collective_time` on a fabric and returns
plain numbers (bus bandwidths in bytes/s), so that the design-review figures
(``studies/collective_effects.py``) and the tests run the same code at different sizes:

* :func:`ecmp_vs_spray` -- ECMP hash collisions versus ideal spraying;
* :func:`attachment_comparison`, :func:`alltoall_attachment` -- rail-optimized versus ToR
  attachment for same-rail and cross-rail traffic, and PXN-style all-to-all;
* :func:`failed_link_effect` -- failing the most loaded fabric links, one at a time;
* :func:`shared_jobs` -- several jobs' collectives sharing the fabric.
"""

from __future__ import annotations

import numpy as np

from fabricflow.collective.flow_rates import effective_capacity
from fabricflow.collective.groups import make_groups
from fabricflow.collective.timing import collective_time, prepare_collective
from fabricflow.fabric.fabric import Fabric
from fabricflow.fabric.spec import build_fabric


def small_clos(
    *,
    attachment: str = "rail",
    gpus: int = 256,
    leaf_down: int = 16,
    leaf_up: int = 16,
    spine_radix: int = 32,
    nic: str = "400Gbps",
    nvlink_bidirectional: str = "900GB/s",
    nvls: bool = False,
    name: str | None = None,
) -> Fabric:
    """A 2-tier Clos of 8-GPU nodes (one NIC per GPU), for experiments and tests.

    ``leaf_down / leaf_up`` is the leaf oversubscription; ``attachment`` ``rail`` puts GPU
    ``r`` of every node on rail leaf ``r``, ``tor`` puts whole nodes on a leaf.
    """
    spec = {
        "name": name or f"clos-{attachment}-{gpus}-{leaf_down}to{leaf_up}",
        "gpus": gpus,
        "gpus_per_node": 8,
        "scale_up": {
            "domain_size": 8,
            "bandwidth_bidirectional": nvlink_bidirectional,
            "latency": "0.5us",
            "nvls": nvls,
        },
        "topology": {
            "type": "clos",
            "attachment": attachment,
            "nic_bandwidth": nic,
            "nic_latency": "0.6us",
            "tiers": [
                {"name": "leaf", "down_ports": leaf_down, "up_ports": leaf_up, "latency": "0.6us"},
                {"name": "spine", "radix": spine_radix},
            ],
        },
    }
    return build_fabric(spec)


def ecmp_vs_spray(
    fabric: Fabric,
    groups,
    *,
    op: str = "all_reduce",
    size: float = 2**30,
    algorithm: str = "ring",
    seeds=(0, 1, 2, 3),
) -> dict:
    """Bus bandwidth (bytes/s, slowest group) with ECMP for several hash seeds, and with
    an even split over all equal-cost paths (``spray``)."""
    ecmp = [
        collective_time(
            fabric, op, groups, size, algorithm=algorithm, routing="ecmp", seed=seed
        ).busbw_Bps
        for seed in seeds
    ]
    spray = collective_time(
        fabric, op, groups, size, algorithm=algorithm, routing="spray"
    ).busbw_Bps
    return {"ecmp_Bps": np.asarray(ecmp), "spray_Bps": float(spray)}


def node_pairs(num_gpus: int, *, shift: int, gpus_per_node: int = 8) -> np.ndarray:
    """Send/recv pairs ``[num_gpus, 2]`` (as groups): GPU ``j`` of node ``2m`` sends to GPU
    ``(j + shift) mod 8`` of node ``2m + 1`` and back -- ``shift = 0`` is same-rail traffic,
    ``shift != 0`` cross-rail."""
    nodes = num_gpus // gpus_per_node
    even = np.arange(0, nodes, 2)
    local = np.arange(gpus_per_node)
    src = (even[:, None] * gpus_per_node + local[None, :]).ravel()
    dst = ((even[:, None] + 1) * gpus_per_node + (local[None, :] + shift) % gpus_per_node).ravel()
    return np.stack([src, dst], axis=1)


def attachment_comparison(
    fabrics: dict, *, size: float = 2**28, shifts=(0, 1), routing: str = "spray"
) -> dict:
    """``{fabric label: {shift: sendrecv busbw (bytes/s)}}`` for node-pair traffic on each
    fabric (see :func:`node_pairs`): all pairs run at once; ``spray`` routing by default so
    that the comparison shows the attachment, not hash luck."""
    out = {}
    for label, fabric in fabrics.items():
        out[label] = {
            int(shift): collective_time(
                fabric,
                "sendrecv",
                node_pairs(fabric.num_gpus, shift=shift),
                size,
                algorithm="direct",
                routing=routing,
            ).busbw_Bps
            for shift in shifts
        }
    return out


def alltoall_attachment(
    fabrics: dict, *, group_size: int = 64, size: float = 2**28, routing: str = "spray"
) -> dict:
    """``{fabric label: {"direct": busbw, "hierarchical": busbw}}`` (bytes/s) of all-to-all
    in contiguous groups (MoE expert parallelism): direct cross-rail flows versus PXN-style
    aggregation inside the node first, so that network flows stay on their rail."""
    out = {}
    for label, fabric in fabrics.items():
        groups = make_groups(fabric.num_gpus, group_size)
        out[label] = {
            algorithm: collective_time(
                fabric, "all_to_all", groups, size, algorithm=algorithm, routing=routing
            ).busbw_Bps
            for algorithm in ("direct", "hierarchical")
        }
    return out


def failed_link_effect(
    fabric: Fabric,
    groups,
    *,
    op: str = "all_reduce",
    size: float = 2**30,
    algorithm: str = "ring",
    routing: str = "spray",
    link_kind: str = "leaf",
    max_failed: int = 3,
) -> dict:
    """Bus bandwidth as the most loaded cables of ``link_kind`` fail one after another.

    The cable to fail next is the busiest link of that kind in the current run (where a
    failure hurts); both directions fail together. Returns ``{"failed": [0, 1, ...],
    "busbw_Bps": [...], "failed_links": [...]}``.
    """
    failed_links: list[int] = []
    busbw, counts = [], []
    current = fabric
    candidates = fabric.links_of_kind(link_kind)
    for step in range(max_failed + 1):
        prepared = prepare_collective(current, op, groups, algorithm=algorithm, routing=routing)
        result = prepared.evaluate([size])[0]
        busbw.append(result.busbw_Bps)
        counts.append(step)
        if step == max_failed:
            break
        solved = next(s for s in prepared.solved if s.algorithm.name == result.algorithm)
        load = np.zeros(fabric.num_links)
        for sp in solved.phases:
            load += sp.link_load(fabric.num_links)
        utilization = load / np.maximum(effective_capacity(current, prepared.cost), 1e-30)
        assert current.link_up is not None  # set by Fabric.__post_init__
        alive = candidates[current.link_up[candidates]]
        victim = int(alive[np.argmax(utilization[alive])])
        failed_links.append(victim)
        current = current.without(links=[victim])
    return {"failed": counts, "busbw_Bps": np.asarray(busbw), "failed_links": failed_links}


def interleaved_jobs(
    num_gpus: int, num_jobs: int, group_size: int, *, gpus_per_node: int = 8
) -> list[np.ndarray]:
    """``num_jobs`` jobs whose nodes interleave (node ``m`` belongs to job ``m % num_jobs``),
    as a scheduler that fills free nodes does; each job's groups are data-parallel style
    (strided over the job's GPUs). Returns one ``[groups, group_size]`` array per job."""
    node = np.arange(num_gpus) // gpus_per_node
    jobs = []
    for job in range(num_jobs):
        gpus = np.flatnonzero(node % num_jobs == job)
        local = make_groups(gpus.size, group_size, layout="strided")
        jobs.append(gpus[local])
    return jobs


def shared_jobs(
    fabric: Fabric,
    jobs: list,
    *,
    op: str = "all_reduce",
    size: float = 2**30,
    algorithm: str = "ring",
    routing: str = "ecmp",
    seed: int = 0,
) -> dict:
    """Each job's slowest-group bus bandwidth alone and with all jobs running together.

    Args:
        jobs: list of group arrays ``[num_groups_j, n]`` (same ``n`` for all jobs).
    Returns:
        ``{"alone_Bps": [J], "together_Bps": [J]}``.
    """
    alone, together = [], []
    combined = np.concatenate([np.asarray(job) for job in jobs], axis=0)
    result = collective_time(
        fabric, op, combined, size, algorithm=algorithm, routing=routing, seed=seed
    )
    start = 0
    for job in jobs:
        rows = np.asarray(job).shape[0]
        slowest = float(result.group_time_s[start : start + rows].max())
        together.append(result.busbw_Bps * result.time_s / slowest)
        start += rows
        alone.append(
            collective_time(
                fabric, op, job, size, algorithm=algorithm, routing=routing, seed=seed
            ).busbw_Bps
        )
    return {"alone_Bps": np.asarray(alone), "together_Bps": np.asarray(together)}
