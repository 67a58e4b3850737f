"""Why a search space has no feasible candidate, and the closest alternative that has one."""

from __future__ import annotations

import numpy as np

from ..errors import SpecError
from ..workload.memory import GIB
from . import space as _space
from .table import CandidateTable


def raise_infeasible(model, gpu, table: CandidateTable, gpus: int, global_batch: int) -> None:
    """Raise the :class:`SpecError` that says why nothing of ``table`` is feasible: no
    factorization of the GPU count (naming the closest counts that have one), a model that
    fits no layout (naming the smallest memory found and what would help), or the rules
    the layouts broke."""
    searched, single = table.searched, table.single
    if not table.sized_ok.any():
        near = closest_gpu_counts(model, searched, single, gpus, global_batch)
        hint = f"; closest GPU counts that factorize: {near}" if near else ""
        raise SpecError(
            "gpus",
            f"{gpus} GPUs have no valid factorization tp x cp x pp x dp with these sizes "
            f"(dp x micro_batch must divide global_batch={global_batch}, pp x vpp the "
            f"{model.num_layers} layers){hint}",
        )
    memory = np.where(np.isfinite(table.memory_bytes), table.memory_bytes, np.inf)
    if np.isfinite(memory).any():
        k = int(np.argmin(memory))
        lay = table.layout(k)
        pinned = [
            knob
            for knob in ("tp", "pp", "cp", "zero", "recompute", "micro_batch", "sequence_parallel")
            if knob in single and knob not in searched and knob in (_space.layout_fields())
            and single[knob] != _space.default_value(knob)
        ]  # fmt: skip
        helps = (
            f"unpin {pinned} or " if pinned else ""
        ) + "use more GPUs, a GPU with more HBM, or allow a larger tp/pp, ZeRO-3, full recompute"
        raise SpecError(
            "model",
            f"{model.name} fits no layout of the space on {gpus} x {gpu.name}: the smallest "
            f"needs {memory[k] / GIB:.1f} GiB per GPU (tp={lay.tp} pp={lay.pp} cp={lay.cp} "
            f"dp={lay.dp} zero={lay.zero} recompute={lay.recompute} micro_batch="
            f"{lay.micro_batch}) > {gpu.hbm / GIB:.1f} GiB; {helps}",
        )
    reasons = sorted({str(r) for r in table.reason[table.analysed] if r})
    raise SpecError("space", "no layout of the space is valid: " + "; ".join(reasons[:3]))


def closest_gpu_counts(model, searched, single, gpus, global_batch, limit=4) -> list:
    """GPU counts near ``gpus`` for which some tp x cp x pp x dp of the space factorizes."""

    def values(knob):
        return searched.get(knob, [single.get(knob, _space.default_value(knob))])

    counts = set()
    for tp in values("tp"):
        for cp in values("cp"):
            for pp in values("pp"):
                stages_ok = any(
                    model.num_layers % (pp * v) == 0 or (model.num_layers + 2) % (pp * v) == 0
                    for v in values("vpp")
                )
                if not stages_ok:
                    continue
                for mb in values("micro_batch"):
                    if global_batch % mb:
                        continue
                    per = global_batch // mb
                    for d in (x for x in range(1, per + 1) if per % x == 0):
                        counts.add(tp * cp * pp * d)
    near = sorted(counts, key=lambda c: (abs(c - gpus), c))
    return sorted(near[:limit])
