"""Study: scale-up (NVLink) domain size versus MoE step time.

One scale-out fabric for every case -- the ``gb200-nvl72-superpod`` preset cut to a
two-tier, rail-optimized slice of ``gpus`` GPUs (4-GPU trays, one 400G NIC per GPU,
leaves of 36 down / 36 up ports) -- and one NVLink5 bandwidth (1.8 TB/s per GPU,
bidirectional). Only the scale-up domain size changes: 8 GPUs (an HGX-style node), 72 (a
GB200 NVL72 rack) or 576 (an NVL576-style multi-rack NVLink domain). Per-GPU scale-out
and scale-up bandwidth stay equal, so the figure isolates *which* traffic the domain
keeps off the network.

The job is DeepSeek-V3 (256 routed experts, fp8) on ``job_gpus`` (1,024) of the fabric's
GB200 GPUs with TP 1, PP 8 and the expert-parallel size ``ep`` swept: with the Megatron
rank order (EP fastest), an EP group is ``ep`` consecutive ranks. Two placements:
``contiguous`` takes the fabric's first ``job_gpus`` GPUs, so power-of-two EP groups
straddle 72-GPU racks; ``domain-aligned`` takes the first ``D - D mod 64`` GPUs of every
domain of ``D >= 64`` GPUs (64 of each NVL72 rack, 8 left as spares, as NVL72 jobs are
commonly laid out), so groups of up to 64 stay inside a rack. For 8- and 576-GPU domains
the two are the same GPUs. ``ep_groups_inside_domain`` counts the groups that fit in one
domain. Every point is a real
:func:`fabricflow.step_time` evaluation; the MoE dispatch/combine all-to-all is exposed
(no DualPipe overlap), so ``all_to_all_share`` is what overlap would have to hide.

:func:`scaleup_domain_study` returns an :class:`xarray.Dataset` with dimensions
``domain_size``, ``placement``, ``ep`` (and ``part`` for the breakdown).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.fabric.spec import load_fabric
from fabricflow.workload.layout import Layout
from fabricflow.workload.placement import Placement, place
from fabricflow.workload.step import BREAKDOWN_KEYS, step_time

DOMAIN_SIZES = (8, 72, 576)
EP_SIZES = (8, 16, 32, 64, 128)
PLACEMENTS = ("contiguous", "domain-aligned")
MODEL = "deepseek-v3"
GPU = "gb200"
TRAY_GPUS = 4
LEAF_DOWN = 36


def domain_fabric(domain_size: int, gpus: int = 1152) -> Fabric:
    """The NVL72 SuperPOD's scale-out network cut to ``gpus`` GPUs (a multiple of 1,152 =
    2 x 576, so that every domain size tiles it), scale-up domains of ``domain_size``."""
    if gpus % 1152:
        raise SpecError("gpus", f"must be a multiple of 1152 (2 x 576), got {gpus}")
    if domain_size % TRAY_GPUS or gpus % domain_size:
        raise SpecError(
            "domain_size",
            f"must be a multiple of {TRAY_GPUS} (GPUs per tray) dividing {gpus}, got {domain_size}",
        )
    return load_fabric(
        "gb200-nvl72-superpod",
        name=f"gb200-slice-{gpus}-nvl{domain_size}",
        gpus=gpus,
        scale_up={"domain_size": domain_size},
        topology={
            "tiers": [
                {
                    "name": "leaf",
                    "down_ports": LEAF_DOWN,
                    "up_ports": LEAF_DOWN,
                    "latency": "0.6us",
                },
                {"name": "spine", "down_ports": gpus // (LEAF_DOWN * TRAY_GPUS) * TRAY_GPUS},
            ]
        },
    )


def moe_layout(gpus: int, ep: int, *, pp: int = 8, seq_len: int = 4096) -> Layout:
    """DeepSeek-V3 layout: TP 1, ``pp`` stages, DP ``gpus / pp``, EP ``ep``, fp8, full
    recompute, micro-batch 1, global batch 4 sequences per GPU (``4 pp`` micro-batches
    per pipeline, so the 1F1B bubble is ``(pp - 1) / (4 pp)`` of the compute)."""
    return Layout(
        tp=1,
        pp=pp,
        dp=gpus // pp,
        ep=ep,
        micro_batch=1,
        global_batch=4 * gpus,
        seq_len=seq_len,
        recompute="full",
        precision="fp8",
    )


def job_placement(fabric: Fabric, layout: Layout, kind: str) -> Placement:
    """Ranks of ``layout`` on ``fabric``: ``contiguous`` (rank r on GPU r) or
    ``domain-aligned`` (the workload's placement: the first ``D - D mod 64`` GPUs of each
    domain of ``D >= 64`` GPUs, in order; every GPU for smaller domains)."""
    if kind not in PLACEMENTS:
        raise SpecError("placement", f"must be one of {list(PLACEMENTS)}, got {kind!r}")
    return place(layout, fabric.num_gpus, placement=kind, fabric=fabric)


def inside_fraction(fabric: Fabric, placement: Placement) -> float:
    """Fraction of the placement's EP groups whose GPUs all sit in one scale-up domain."""
    groups = placement.groups("ep", expert=True)
    domain = fabric.gpu_domain[groups]
    return float(np.mean(np.all(domain == domain[:, :1], axis=1)))


def scaleup_domain_study(
    *,
    domain_sizes: Sequence[int] = DOMAIN_SIZES,
    ep_sizes: Sequence[int] = EP_SIZES,
    placements: Sequence[str] = PLACEMENTS,
    gpus: int = 1152,
    job_gpus: int = 1024,
    pp: int = 8,
    seq_len: int = 4096,
    model: str = MODEL,
    gpu: str = GPU,
):
    """MoE step time over scale-up domain size x placement x expert-parallel size.

    Returns an :class:`xarray.Dataset`: ``step_time_s``, ``mfu``, ``all_to_all_share``
    (exposed EP all-to-all / step time), ``ep_groups_inside_domain`` ``[domain_size,
    placement, ep]`` and ``breakdown_s`` ``[domain_size, placement, ep, part]`` (seconds,
    summing to the step). Points whose placement puts the ranks on the same GPUs as an
    earlier one are copied, not re-timed.
    Cost: ~2.5 min wall on the shared 2-core machine at the defaults (20 distinct step
    evaluations on 1,024 GPUs).
    """
    import xarray as xr

    shape = (len(domain_sizes), len(placements), len(ep_sizes))
    step = np.full(shape, np.nan)
    mfu = np.full(shape, np.nan)
    inside = np.full(shape, np.nan)
    parts = np.full((*shape, len(BREAKDOWN_KEYS)), np.nan)
    started = time.perf_counter()
    for d, domain_size in enumerate(domain_sizes):
        fabric = domain_fabric(int(domain_size), gpus)
        for e, ep in enumerate(ep_sizes):
            layout = moe_layout(job_gpus, int(ep), pp=pp, seq_len=seq_len)
            done: dict[bytes, int] = {}
            for k, kind in enumerate(placements):
                where = job_placement(fabric, layout, kind)
                key = where.gpu_of_rank.tobytes()
                if key in done:  # the same GPUs: the same step
                    index = (d, done[key], e)
                    for array in (step, mfu, inside, parts):
                        array[d, k, e] = array[index]
                    continue
                done[key] = k
                result = step_time(model, gpu, layout, fabric, placement=where)
                step[d, k, e] = result.step_time_s
                mfu[d, k, e] = result.mfu
                parts[d, k, e] = [result.breakdown[key] for key in BREAKDOWN_KEYS]
                inside[d, k, e] = inside_fraction(fabric, where)
    ep_index = BREAKDOWN_KEYS.index("ep")
    dims = ("domain_size", "placement", "ep")
    return xr.Dataset(
        {
            "step_time_s": (dims, step, {"units": "s"}),
            "mfu": (dims, mfu, {"units": "1"}),
            "all_to_all_share": (dims, parts[..., ep_index] / step, {"units": "1"}),
            "ep_groups_inside_domain": (dims, inside, {"units": "1"}),
            "breakdown_s": ((*dims, "part"), parts, {"units": "s"}),
        },
        coords={
            "domain_size": np.asarray(domain_sizes, dtype=np.int64),
            "placement": list(placements),
            "ep": np.asarray(ep_sizes, dtype=np.int64),
            "part": list(BREAKDOWN_KEYS),
        },
        attrs={
            "study": "scaleup_domain",
            "fabric": f"gb200-nvl72-superpod scale-out cut to {gpus} GPUs (2-tier, rail), "
            "NVLink5 1.8 TB/s per GPU at every domain size",
            "model": model,
            "gpu": gpu,
            "gpus": gpus,
            "job_gpus": job_gpus,
            "layout": f"tp=1 pp={pp} dp={job_gpus // pp} micro_batch=1 global_batch={4 * job_gpus} "
            f"seq={seq_len} recompute=full precision=fp8",
            "seconds": time.perf_counter() - started,
        },
    )


def key_numbers(data) -> dict:
    """Best step time per domain size and placement (and its EP size), the all-to-all
    share there, and the step time at every EP size."""
    out = {}
    for domain_size in data.domain_size.values:
        for kind in data.placement.values:
            row = data.sel(domain_size=domain_size, placement=kind)
            best = int(np.argmin(row.step_time_s.values))
            out[f"nvl{int(domain_size)} {kind}"] = {
                "best_ep": int(row.ep.values[best]),
                "step_time_s": float(row.step_time_s.values[best]),
                "mfu": float(row.mfu.values[best]),
                "all_to_all_share": float(row.all_to_all_share.values[best]),
                "step_time_s_per_ep": [float(v) for v in row.step_time_s.values],
            }
    return out


__all__ = [
    "DOMAIN_SIZES",
    "EP_SIZES",
    "domain_fabric",
    "PLACEMENTS",
    "inside_fraction",
    "job_placement",
    "key_numbers",
    "moe_layout",
    "scaleup_domain_study",
]
