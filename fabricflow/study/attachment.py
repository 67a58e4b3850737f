"""Study: rail-optimized versus ToR attachment at equal switch count.

Both fabrics are the same two-tier Clos of 8-GPU nodes, one 400G NIC per GPU, leaves of
16 GPU ports (:func:`fabricflow.study.collective_effects.small_clos`): the switch count,
cabling and capacities are identical, only which leaf a GPU's NIC plugs into differs.
``rail`` puts GPU ``r`` of every node of a 16-node group on rail leaf ``r``; ``tor`` puts
two whole nodes on each leaf. Leaves are non-blocking (``16:16``) or oversubscribed
(``16:4``), which is where the attachment matters.

Measured with the real models, per attachment and leaf ratio:

* nccl-tests style bus bandwidth over message sizes of

  - ring all-reduce in groups of 64 GPUs (8 whole nodes, every group at once) with
    NCCL's PXN rail-to-rail ring hops on and off (``rail_aware``);
  - all-to-all in the same groups (MoE expert parallelism), direct versus PXN-style
    hierarchical (aggregate inside the node, then send on the own rail);
  - both with NCCL's automatic algorithm choice (``busbw_auto_Bps``: tree, halving-
    doubling, ... whichever is fastest per size);

* :func:`fabricflow.step_time` of a dense and an MoE job filling the fabric, with the MoE
  dispatch/combine all-to-all forced direct (PXN off) or hierarchical (PXN on); the dense
  job has no all-to-all, so PXN changes nothing there (a check on the model).

:func:`attachment_study` returns an :class:`xarray.Dataset`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from fabricflow.collective.groups import make_groups
from fabricflow.collective.timing import prepare_collective
from fabricflow.errors import SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.study.collective_effects import small_clos
from fabricflow.study.oversubscription import Job, dense_and_moe_jobs
from fabricflow.workload.step import step_time

ATTACHMENTS = ("rail", "tor")
LEAF_UPLINKS = (16, 4)  # of 16 leaf down ports: 1:1 and 4:1
SIZES = tuple(float(2**e) for e in (20, 22, 24, 26, 28, 30))  # 1 MiB .. 1 GiB
LEAF_DOWN = 16


def attachment_fabric(attachment: str, gpus: int, leaf_up: int) -> Fabric:
    """Two-tier Clos, ``gpus`` GPUs (a multiple of 128), leaves ``16 down : leaf_up up``."""
    if attachment not in ATTACHMENTS:
        raise SpecError("attachment", f"must be one of {list(ATTACHMENTS)}, got {attachment!r}")
    if gpus % 128 or gpus < 256:
        raise SpecError("gpus", f"must be a multiple of 128 and >= 256, got {gpus}")
    return small_clos(
        attachment=attachment,
        gpus=gpus,
        leaf_down=LEAF_DOWN,
        leaf_up=leaf_up,
        spine_radix=gpus // LEAF_DOWN,
    )


def default_jobs(gpus: int, *, fast: bool = False) -> tuple[Job, ...]:
    """A dense and an MoE job filling ``gpus`` GPUs (a multiple of 128).

    Full: Llama 3 70B (TP 8, PP 4) and Mixtral 8x22B (TP 4, PP 4, EP 8: expert groups span
    4 nodes). Fast: Llama 3 8B (TP 8, PP 2) and Mixtral 8x7B (TP 2, PP 2, EP 8: 2 nodes).
    """
    if gpus % 128:
        raise SpecError("gpus", f"must be a multiple of 128, got {gpus}")
    return dense_and_moe_jobs(gpus, fast=fast)


def _busbw(
    fabric: Fabric, op: str, pxn: bool | None, sizes: np.ndarray, group_size: int
) -> np.ndarray:
    """Bus bandwidth (B/s) per size of ``op`` in contiguous groups of ``group_size`` GPUs.

    ``pxn`` True/False: all-reduce as rings with rail-to-rail (PXN) hops or without,
    all-to-all hierarchical (PXN) or direct; ``None``: NCCL-style automatic choice."""
    groups = make_groups(fabric.num_gpus, group_size)
    if pxn is None:
        prepared = prepare_collective(fabric, op, groups)
    elif op == "all_reduce":
        prepared = prepare_collective(fabric, op, groups, algorithm="ring", rail_aware=pxn)
    else:
        algorithm = "hierarchical" if pxn else "direct"
        prepared = prepare_collective(fabric, op, groups, algorithm=algorithm)
    return np.array([result.busbw_Bps for result in prepared.evaluate(sizes)])


def attachment_study(
    *,
    gpus: int = 512,
    leaf_uplinks: Sequence[int] = LEAF_UPLINKS,
    sizes: Sequence[float] = SIZES,
    jobs: Sequence[Job] | None = None,
    group_size: int = 64,
    fast: bool = False,
):
    """Collective bus bandwidth and step time, rail versus ToR attachment.

    Returns an :class:`xarray.Dataset` with ``busbw_Bps`` ``[attachment,
    leaf_oversubscription, op, pxn, size]`` (bytes/s; ``op`` in ``all_reduce``,
    ``all_to_all``), ``busbw_auto_Bps`` ``[attachment, leaf_oversubscription, op, size]``, ``step_time_s``, ``mfu`` and ``ep_s`` (exposed all-to-all seconds)
    ``[attachment, leaf_oversubscription, model, pxn]``, and ``switches`` /
    ``bisection_Bps`` ``[attachment, leaf_oversubscription]``.
    Cost: ~15 s on 2 cores at the defaults (512 GPUs; 24 collective preparations, 16 step
    evaluations).
    """
    import xarray as xr

    jobs = tuple(jobs) if jobs is not None else default_jobs(gpus, fast=fast)
    sizes_array = np.asarray(sizes, dtype=float)
    ops = ("all_reduce", "all_to_all")
    pxn_values = (False, True)
    shape = (len(ATTACHMENTS), len(leaf_uplinks))
    busbw = np.full((*shape, len(ops), 2, sizes_array.size), np.nan)
    auto = np.full((*shape, len(ops), sizes_array.size), np.nan)
    step = np.full((*shape, len(jobs), 2), np.nan)
    mfu = np.full_like(step, np.nan)
    ep_s = np.full_like(step, np.nan)
    switches = np.zeros(shape, dtype=np.int64)
    bisection = np.zeros(shape)
    started = time.perf_counter()
    for a, attachment in enumerate(ATTACHMENTS):
        for u, up in enumerate(leaf_uplinks):
            fabric = attachment_fabric(attachment, gpus, int(up))
            summary = fabric.summary()
            switches[a, u] = summary["num_network_switches"]  # not the NVLink domains
            bisection[a, u] = summary["bisection_bandwidth_Bps"]
            for o, op in enumerate(ops):
                for p, pxn in enumerate(pxn_values):
                    busbw[a, u, o, p] = _busbw(fabric, op, pxn, sizes_array, group_size)
                auto[a, u, o] = _busbw(fabric, op, None, sizes_array, group_size)
            for j, job in enumerate(jobs):
                for p, pxn in enumerate(pxn_values):
                    algorithms = {"ep": "hierarchical" if pxn else "direct"}
                    if job.layout.ep == 1:
                        algorithms = {}
                    result = step_time(
                        job.model, job.gpu, job.layout, fabric, algorithms=algorithms
                    )
                    step[a, u, j, p] = result.step_time_s
                    mfu[a, u, j, p] = result.mfu
                    ep_s[a, u, j, p] = result.breakdown["ep"]
    ratio = [LEAF_DOWN / up for up in leaf_uplinks]
    fabric_dims = ("attachment", "leaf_oversubscription")
    step_dims = (*fabric_dims, "model", "pxn")
    return xr.Dataset(
        {
            "busbw_Bps": ((*fabric_dims, "op", "pxn", "size"), busbw, {"units": "B/s"}),
            "busbw_auto_Bps": ((*fabric_dims, "op", "size"), auto, {"units": "B/s"}),
            "step_time_s": (step_dims, step, {"units": "s"}),
            "mfu": (step_dims, mfu, {"units": "1"}),
            "ep_s": (step_dims, ep_s, {"units": "s", "long_name": "exposed all-to-all"}),
            "switches": (fabric_dims, switches, {"long_name": "network (leaf + spine) switches"}),
            "bisection_Bps": (fabric_dims, bisection, {"units": "B/s"}),
        },
        coords={
            "attachment": list(ATTACHMENTS),
            "leaf_oversubscription": np.asarray(ratio, dtype=float),
            "op": list(ops),
            "pxn": np.array(pxn_values),
            "size": ("size", sizes_array, {"units": "B"}),
            "model": [job.label for job in jobs],
            "model_name": ("model", [job.model for job in jobs]),
        },
        attrs={
            "study": "attachment",
            "fabric": f"2-tier Clos, {gpus} GPUs, 8-GPU nodes, 400G NICs, 16-port leaf downlinks",
            "gpus": gpus,
            "groups": f"{group_size} contiguous GPUs ({group_size // 8} whole nodes), all at once",
            "pxn": "all-reduce: ring with rail-to-rail hops (on) or plain (off); "
            "all-to-all: hierarchical (on) or direct (off)",
            "seconds": time.perf_counter() - started,
        },
    )


def key_numbers(data) -> dict:
    """Largest-size bus bandwidths (GB/s) and step times at the most oversubscribed ratio."""
    ratio = data.leaf_oversubscription.values.max()
    at = data.sel(leaf_oversubscription=ratio)
    big = at.busbw_Bps.isel(size=-1) / 1e9
    out: dict = {"leaf_oversubscription": float(ratio), "busbw_GBps_at_largest_size": {}}
    for attachment in data.attachment.values:
        for op in data.op.values:
            for pxn in data.pxn.values:
                key = f"{attachment} {op} pxn={'on' if pxn else 'off'}"
                out["busbw_GBps_at_largest_size"][key] = float(
                    big.sel(attachment=attachment, op=op, pxn=pxn)
                )
    out["step_time_s"] = {
        f"{attachment} {model} pxn={'on' if pxn else 'off'}": float(
            at.step_time_s.sel(attachment=attachment, model=model, pxn=pxn)
        )
        for attachment in data.attachment.values
        for model in data.model.values
        for pxn in data.pxn.values
    }
    return out


__all__ = ["ATTACHMENTS", "attachment_fabric", "attachment_study", "default_jobs", "key_numbers"]
