"""A job's standalone step time: the job alone on the empty, healthy fabric.

The reference of every slowdown in :mod:`fabricflow.cluster`: ``ff.step_time`` of the job
at GPUs ``0..gpus-1`` (contiguous placement, the job's rank order). Results are cached per
(model, GPU, layout, order, fabric fingerprint), so a trace of a thousand jobs over a dozen
distinct shapes costs a dozen step-time evaluations.
"""

from __future__ import annotations

from fabricflow.cluster.trace import JobSpec
from fabricflow.collective.structure_cache import fabric_fingerprint
from fabricflow.errors import SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.workload.calibration import Calibration, calibration_key
from fabricflow.workload.step import StepResult, step_time

_CACHE: dict[tuple, StepResult] = {}
_CACHE_LIMIT = 4096


def standalone_step(
    fabric: Fabric,
    job: JobSpec,
    *,
    fingerprint: str | None = None,
    routing: str = "auto",
    calibration: Calibration | None = None,
) -> StepResult:
    """``ff.step_time`` of ``job`` alone at GPUs ``0..job.gpus-1`` of ``fabric``.

    Args:
        fabric: the healthy fabric.
        job: the job.
        fingerprint: ``fabric_fingerprint(fabric)`` when the caller has it (saves hashing
            the fabric's arrays once per call).
        routing: the collective model's routing (see :func:`fabricflow.step_time`).
        calibration: the :class:`~fabricflow.workload.calibration.Calibration` applied.

    Raises:
        SpecError: the job does not fit the fabric or its memory (the message names why).
    """
    if job.gpus > fabric.num_gpus:
        raise SpecError(
            "gpus", f"{job.gpus} GPUs is larger than the cluster ({fabric.num_gpus} GPUs)"
        )
    fingerprint = fingerprint or fabric_fingerprint(fabric)
    key = (
        job.model,
        job.gpu,
        job.layout,
        job.order,
        fingerprint,
        routing,
        calibration_key(calibration),
    )
    result = _CACHE.get(key)
    if result is None:
        result = step_time(
            job.model,
            job.gpu,
            job.layout,
            fabric,
            order=job.order,
            placement="contiguous",
            routing=routing,
            calibration=calibration,
        )
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        _CACHE[key] = result
    return result


def clear_cache() -> None:
    """Forget every cached standalone result."""
    _CACHE.clear()
