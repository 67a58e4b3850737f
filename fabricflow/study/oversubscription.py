"""Study: oversubscription of the spine (aggregation) tier versus training step time.

The fabric is the ``clos-100k`` preset (rail-optimized, 400G per GPU, 8-GPU nodes) cut to a
job-sized three-tier slice: leaves of 32 down / 32 up ports, pods of 16 leaves
(``pod_gpus`` GPUs), and the spine tier's uplinks to the core run at ``400G / ratio``.
Scaling the spine uplink capacity (rather than removing ports) is what fewer cables per
spine-core bundle does; it keeps the number of equal-cost paths, so the figure separates
the capacity cut from ECMP path diversity. Only traffic between pods crosses that tier.

Every grid point is a real :func:`fabricflow.step_time` evaluation (collectives as flows
sharing the fabric, max-min rates). Two rank orders show where the cut bites: the
Megatron default ``tp-cp-ep-dp-pp`` (pipeline stages outermost, so pods split the
pipeline and only the pipeline send/recv crosses the core) and ``tp-cp-ep-pp-dp``
(data-parallel outermost, so the gradient reduction crosses it).

:func:`oversubscription_study` returns an :class:`xarray.Dataset` with dimensions
``oversubscription``, ``model``, ``order`` (and ``part`` for the breakdown), the same shape
a sweep over those keys gives.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.fabric.spec import load_fabric
from fabricflow.workload.layout import Layout
from fabricflow.workload.step import BREAKDOWN_KEYS, step_time

RATIOS = (1.0, 2.0, 3.0, 5.0, 7.0)
ORDERS = ("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp")
NIC_GBPS = 400.0


@dataclasses.dataclass(frozen=True)
class Job:
    """One training job of the study: a model preset, a GPU preset and its layout."""

    label: str
    model: str
    gpu: str
    layout: Layout


def default_jobs(gpus: int, *, fast: bool = False) -> tuple[Job, ...]:
    """A dense and an MoE job filling ``gpus`` GPUs (a multiple of 512).

    Full: Llama 3 70B (TP 8, PP 4, 8k sequences) and Mixtral 8x22B (TP 4, PP 4, EP 8,
    4k sequences), global batch of 1 sequence per data-parallel rank per micro-batch
    times 8. Fast: Llama 3 8B (TP 8) and Mixtral 8x7B (TP 2, EP 8), PP 2, short steps.
    """
    if gpus % 512:
        raise SpecError("gpus", f"must be a multiple of 512 (pods of 512 GPUs), got {gpus}")
    return dense_and_moe_jobs(gpus, fast=fast)


def dense_and_moe_jobs(gpus: int, *, fast: bool = False) -> tuple[Job, ...]:
    """The dense and the MoE job of :func:`default_jobs` on ``gpus`` GPUs (a multiple of
    32; the callers check their own fabric's granularity)."""
    if fast:
        dense = Layout(
            tp=8,
            pp=2,
            dp=gpus // 16,
            micro_batch=1,
            global_batch=gpus // 4,
            seq_len=4096,
            recompute="selective",
        )
        moe = Layout(
            tp=2,
            pp=2,
            dp=gpus // 4,
            ep=8,
            micro_batch=1,
            global_batch=gpus // 2,
            seq_len=4096,
            recompute="full",
        )
        return (
            Job("dense", "llama3-8b", "h100-sxm", dense),
            Job("moe", "mixtral-8x7b", "h100-sxm", moe),
        )
    dense = Layout(
        tp=8,
        pp=4,
        dp=gpus // 32,
        micro_batch=1,
        global_batch=gpus // 4,
        seq_len=8192,
        recompute="selective",
    )
    moe = Layout(
        tp=4,
        pp=4,
        dp=gpus // 16,
        ep=8,
        micro_batch=1,
        global_batch=gpus // 2,
        seq_len=4096,
        recompute="full",
    )
    return (
        Job("dense", "llama3-70b", "h100-sxm", dense),
        Job("moe", "mixtral-8x22b", "h100-sxm", moe),
    )


def oversubscribed_clos(ratio: float, gpus: int, *, pod_gpus: int = 512) -> Fabric:
    """``clos-100k`` cut to ``gpus`` GPUs in pods of ``pod_gpus``, spine tier at ``ratio``:1.

    Leaves: 32 GPU ports down, 32 uplinks (non-blocking). Spines: ``pod_gpus / 32`` leaves
    down, 16 uplinks at ``400G * (pod_gpus / 32) / 16 / ratio`` each, so the spine tier's
    down:up capacity is exactly ``ratio``:1. Cores join the ``gpus / pod_gpus`` pods.
    """
    if not np.isfinite(ratio) or ratio < 1:
        raise SpecError("oversubscription", f"must be a finite ratio >= 1, got {ratio!r}")
    if pod_gpus % 256 or gpus % pod_gpus or gpus // pod_gpus < 2:
        raise SpecError(
            "gpus",
            f"need at least 2 pods of pod_gpus (a multiple of 256) GPUs; got gpus={gpus}, "
            f"pod_gpus={pod_gpus}",
        )
    spine_down = pod_gpus // 32
    uplink_gbps = NIC_GBPS * spine_down / 16 / ratio
    return load_fabric(
        "clos-100k",
        name=f"clos-100k-{gpus}-spine-{ratio:g}to1",
        gpus=gpus,
        topology={
            "tiers": [
                {"name": "leaf", "down_ports": 32, "up_ports": 32, "latency": "0.6us"},
                {
                    "name": "spine",
                    "down_ports": spine_down,
                    "up_ports": 16,
                    "uplink_bandwidth": f"{uplink_gbps:.9g}Gbps",
                    "latency": "0.6us",
                },
                {"name": "core", "down_ports": gpus // pod_gpus},
            ]
        },
    )


def spine_ratio(fabric: Fabric) -> float:
    """The spine tier's down:up capacity ratio as the fabric summary reports it."""
    tier = next(t for t in fabric.summary()["tiers"] if t["name"] == "spine")
    return float(tier["down_capacity_Bps"] / tier["up_capacity_Bps"])


def oversubscription_study(
    *,
    ratios: Sequence[float] = RATIOS,
    gpus: int = 2048,
    pod_gpus: int = 512,
    jobs: Sequence[Job] | None = None,
    orders: Sequence[str] = ORDERS,
    fast: bool = False,
):
    """Step time, MFU and the breakdown over spine oversubscription x job x rank order.

    Returns an :class:`xarray.Dataset`: ``step_time_s``, ``mfu``, ``tokens_per_s``
    ``[oversubscription, model, order]``, ``breakdown_s`` ``[oversubscription, model,
    order, part]`` (seconds; parts sum to the step time), ``bisection_Bps`` and
    ``spine_ratio`` ``[oversubscription]`` (the ratio the built fabric has), and the jobs'
    model names and layouts as attributes.
    Cost: ~35 s on 2 cores at the defaults (20 step evaluations on 2,048 GPUs).
    """
    import xarray as xr

    jobs = tuple(jobs) if jobs is not None else default_jobs(gpus, fast=fast)
    shape = (len(ratios), len(jobs), len(orders))
    step = np.full(shape, np.nan)
    mfu = np.full(shape, np.nan)
    tokens = np.full(shape, np.nan)
    parts = np.full((*shape, len(BREAKDOWN_KEYS)), np.nan)
    bisection = np.zeros(len(ratios))
    built_ratio = np.zeros(len(ratios))
    started = time.perf_counter()
    for i, ratio in enumerate(ratios):
        fabric = oversubscribed_clos(float(ratio), gpus, pod_gpus=pod_gpus)
        bisection[i] = fabric.summary()["bisection_bandwidth_Bps"]
        built_ratio[i] = spine_ratio(fabric)
        for j, job in enumerate(jobs):
            for k, order in enumerate(orders):
                result = step_time(job.model, job.gpu, job.layout, fabric, order=order)
                step[i, j, k] = result.step_time_s
                mfu[i, j, k] = result.mfu
                tokens[i, j, k] = result.tokens_per_s
                parts[i, j, k] = [result.breakdown[key] for key in BREAKDOWN_KEYS]
    dims = ("oversubscription", "model", "order")
    return xr.Dataset(
        {
            "step_time_s": (dims, step, {"units": "s"}),
            "mfu": (dims, mfu, {"units": "1"}),
            "tokens_per_s": (dims, tokens, {"units": "tokens/s"}),
            "breakdown_s": ((*dims, "part"), parts, {"units": "s"}),
            "bisection_Bps": (("oversubscription",), bisection, {"units": "B/s"}),
            "spine_ratio": (("oversubscription",), built_ratio, {"units": "1"}),
        },
        coords={
            "oversubscription": np.asarray(ratios, dtype=float),
            "model": [job.label for job in jobs],
            "order": list(orders),
            "part": list(BREAKDOWN_KEYS),
            "model_name": ("model", [job.model for job in jobs]),
        },
        attrs={
            "study": "oversubscription",
            "fabric": f"clos-100k cut to {gpus} GPUs, pods of {pod_gpus}",
            "gpus": gpus,
            "pod_gpus": pod_gpus,
            "layouts": "; ".join(
                f"{job.label}: {job.model} {_layout_text(job.layout)}" for job in jobs
            ),
            "seconds": time.perf_counter() - started,
        },
    )


def _layout_text(layout: Layout) -> str:
    return (
        f"tp={layout.tp} pp={layout.pp} dp={layout.dp} ep={layout.ep} "
        f"micro_batch={layout.micro_batch} global_batch={layout.global_batch} "
        f"seq={layout.seq_len} recompute={layout.recompute}"
    )


def key_numbers(data) -> dict:
    """Step-time slowdown at the largest ratio relative to 1:1, per job and order."""
    first, last = data.oversubscription.values[0], data.oversubscription.values[-1]
    out = {}
    for model in data.model.values:
        for order in data.order.values:
            t = data.step_time_s.sel(model=model, order=order)
            out[f"{model} {order}"] = {
                "step_time_s_at_1to1": float(t.sel(oversubscription=first)),
                f"step_time_s_at_{last:g}to1": float(t.sel(oversubscription=last)),
                "slowdown": float(t.sel(oversubscription=last) / t.sel(oversubscription=first)),
            }
    return out


__all__ = [
    "ORDERS",
    "RATIOS",
    "Job",
    "default_jobs",
    "key_numbers",
    "oversubscribed_clos",
    "oversubscription_study",
    "spine_ratio",
]
