"""Why a search space has no feasible candidate, and the closest alternative that has one."""

from __future__ import annotations

import itertools

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.layout_search import knobs
from fabricflow.layout_search.candidate_table import CandidateTable
from fabricflow.workload.gpu_memory import GIB
from fabricflow.workload.layout import layout_table, table_problems

SIZE_FIELDS = ("tp", "cp", "pp", "vpp", "micro_batch")


def raise_infeasible(model, gpu, table: CandidateTable, gpus: int, global_batch: int) -> None:
    """Raise the :class:`SpecError` that says why nothing of ``table`` is feasible: no
    factorization of the GPU count (naming the closest counts that have one), a model that
    fits no layout (naming the smallest memory found and what would help), or the rules
    the layouts broke."""
    searched, single = table.searched, table.single
    if not table.sized_ok.any():
        near, why = closest_gpu_counts(model, searched, single, gpus, global_batch)
        if near:
            hint = f"; closest GPU counts whose layouts pass every rule: {near}"
        else:
            hint = f"; no nearby GPU count helps, every layout of the space breaks a rule ({why})"
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
            if knob in single and knob not in searched and knob in (knobs.layout_fields())
            and single[knob] != knobs.default_value(knob)
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


def closest_gpu_counts(
    model, searched, single, gpus, global_batch, limit=4, scan=256
) -> tuple[list[int], str]:
    """GPU counts near ``gpus`` for which some tp x cp x pp x dp of the space passes every
    layout rule with this model (:func:`~fabricflow.workload.layout.table_problems`: heads,
    KV heads, experts, layers, batch and pipeline divisibility), so that a suggested count
    runs; the ``scan`` counts nearest ``gpus`` that factorize are checked, closest first.
    Returns ``(counts, why)``: ``why`` is the rule the nearest count broke when none passes
    ("" otherwise)."""

    def values(knob):
        return searched.get(knob, [single.get(knob, knobs.default_value(knob))])

    sizes = list(itertools.product(*(values(k) for k in SIZE_FIELDS)))
    grid = {k: np.asarray([s[i] for s in sizes], dtype=np.int64) for i, k in enumerate(SIZE_FIELDS)}
    ranks = grid["tp"] * grid["cp"] * grid["pp"]
    counts = {int(r) * d for r in set(ranks.tolist()) for d in _batch_divisors(global_batch)}
    near = sorted(counts - {gpus}, key=lambda c: (abs(c - gpus), c))[:scan]
    fixed = {k: values(k)[0] for k in knobs.layout_fields() if k not in (*SIZE_FIELDS, "dp", "ep")}
    fixed.update(global_batch=global_batch, ep=values("ep")[0])
    found: list[int] = []
    why = ""
    for count in near:
        fits = count % ranks == 0
        if not fits.any():
            continue
        pick = {k: v[fits] for k, v in grid.items()}
        dp = count // (pick["tp"] * pick["cp"] * pick["pp"])
        table = layout_table(**fixed, **pick, dp=dp)
        ok, field, message = table_problems(table, model, num_gpus=count)
        if ok.any():
            found.append(count)
            if len(found) == limit:
                break
        elif not why:
            why = f"{field[0]}: {message[0]}"
    return sorted(found), "" if found else why


def _batch_divisors(global_batch: int) -> list[int]:
    return [d for d in range(1, global_batch + 1) if global_batch % d == 0]
