"""Pipeline structure of the rows of a layout table: what each pipeline rank holds and runs.

Rows are grouped by what fixes the structure (``pp``, ``vpp``, DualPipe or not, ``pp_split``);
within a group every rank's layer counts are the same vectors ``[P]``, so per-rank
quantities are arrays ``[n, P]`` (rows of the group x ranks) built by broadcasting: no
Python loop over rows or ranks. The number of groups is the number of distinct
(``pp``, ``vpp``, schedule, split) combinations in the table (a handful in a search).

Rank ``r`` holds (1F1B / interleaved) its :meth:`~fabricflow.workload.layout.Layout.rank_layers`
entry; under DualPipe it keeps stages ``r`` and ``pp - 1 - r`` and each micro-batch passes
one of them (``(n_r + n_{pp-1-r}) / 2`` layers on average; ranks 0 and ``pp - 1`` hold both
the embedding and the head).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fabricflow.workload.layout import split_stages
from fabricflow.workload.layout_table import LayoutTable
from fabricflow.workload.model_spec import ModelSpec

# Rows of one group are processed together; a group larger than this is cut into chunks
# so that the per-rank arrays stay small (rows x ranks floats each).
CHUNK_ELEMENTS = 1 << 22


@dataclasses.dataclass(frozen=True)
class StageGroup:
    """Rows of a table that share one pipeline structure.

    Attributes:
        rows: int64 ``[n]`` indices of the rows in the table.
        pp, vpp: pipeline ranks and virtual stages per rank.
        dualpipe: the rows run DeepSeek's DualPipe schedule.
        layers: float ``[P]`` each rank's :meth:`~fabricflow.workload.layout.Layout.rank_layers`.
        kept: float ``[P]`` layers whose weights each rank keeps.
        passed: float ``[P]`` layers one micro-batch passes on each rank.
        embedding, head: bool ``[P]`` the rank holds the input embedding / the output layer.
    """

    rows: np.ndarray
    pp: int
    vpp: int
    dualpipe: bool
    layers: np.ndarray
    kept: np.ndarray
    passed: np.ndarray
    embedding: np.ndarray
    head: np.ndarray


def rank_layer_counts(num_layers: int, pp: int, vpp: int, split: tuple | None) -> np.ndarray:
    """float ``[pp]``: transformer layers of each rank (``split``, or the automatic rule of
    :meth:`~fabricflow.workload.layout.Layout.stage_split` summed over virtual stages)."""
    if split is not None:
        return np.asarray(split, dtype=np.float64)
    return split_stages(num_layers, pp * vpp).reshape(vpp, pp).sum(axis=0).astype(np.float64)


def rank_structure(
    num_layers: int, pp: int, vpp: int, dualpipe: bool, split: tuple | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(kept, passed, embedding, head), each ``[pp]``, of one pipeline structure."""
    ranks = rank_layer_counts(num_layers, pp, vpp, split)
    index = np.arange(pp)
    if dualpipe:
        kept = ranks + ranks[::-1]
        ends = (index == 0) | (index == pp - 1)
        return kept, kept / 2.0, ends, ends.copy()
    return ranks, ranks.copy(), index == 0, index == pp - 1


def stage_groups(model: ModelSpec, table: LayoutTable) -> list[StageGroup]:
    """The rows of ``table`` grouped by pipeline structure (see the module doc), each group
    cut into chunks of at most ``CHUNK_ELEMENTS`` rows x ranks."""
    n = len(table)
    if n == 0:
        return []
    splits: dict = {}
    split_id = np.array(
        [-1 if s is None else splits.setdefault(s, len(splits)) for s in table.pp_split],
        dtype=np.int64,
    )
    by_id = {v: k for k, v in splits.items()}
    dual = (table.schedule == "dualpipe").astype(np.int64)
    keys = np.stack([table.pp, table.vpp, dual, split_id], axis=1)
    unique, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(unique) + 1))
    out = []
    for g, (pp, vpp, is_dual, sid) in enumerate(unique):
        rows = order[bounds[g] : bounds[g + 1]]
        split = by_id[int(sid)] if sid >= 0 else None
        kept, passed, embedding, head = rank_structure(
            model.num_layers, int(pp), int(vpp), bool(is_dual), split
        )
        step = max(1, CHUNK_ELEMENTS // max(int(pp), 1))
        for start in range(0, len(rows), step):
            out.append(
                StageGroup(
                    rows=rows[start : start + step],
                    pp=int(pp),
                    vpp=int(vpp),
                    dualpipe=bool(is_dual),
                    layers=rank_layer_counts(model.num_layers, int(pp), int(vpp), split),
                    kept=kept,
                    passed=passed,
                    embedding=embedding,
                    head=head,
                )
            )
    return out


def in_flight_chunks(table: LayoutTable, pp: int) -> np.ndarray:
    """float ``[N, pp]``: micro-batch chunks (of ``layers_per_rank / vpp`` layers) whose
    activations each pipeline rank holds at its peak, for rows of ``table`` that all have
    ``pp`` ranks.

    1F1B: ``min(m, p - r)``. Interleaved (Megatron-Core's warm-up, the micro-batches of a
    group of ``N`` = ``microbatch_group`` or ``pp`` per virtual stage): ``2 (p - r - 1) +
    (v - 1) N + 1``, at most ``m v``; ``N`` smaller than ``pp`` is the in-flight limit of
    Llama 3's schedule. DualPipe: ``pp + 1`` stage chunks on every rank (DeepSeek-V3 report,
    Table 2), at most ``m``.
    """
    rank = np.arange(pp)[None, :]
    m = table.num_micro_batches[:, None].astype(np.float64)
    v = table.vpp[:, None].astype(np.float64)
    group = table.group_size[:, None].astype(np.float64)
    one_f_one_b = np.minimum(m, pp - rank)
    interleaved = np.minimum(m * v, 2.0 * (pp - rank - 1) + (v - 1.0) * group + 1.0)
    dual = np.minimum(m, pp + 1.0) + 0.0 * rank
    schedule = table.schedule[:, None]
    return np.where(schedule == "dualpipe", dual, np.where(v > 1, interleaved, one_f_one_b)).astype(
        np.float64
    )


def rank_names(pp: int) -> list[str]:
    """``only`` (pp = 1), else ``first``, ``rank <i>`` ..., ``last``."""
    if pp == 1:
        return ["only"]
    return ["first"] + [f"rank {i}" for i in range(1, pp - 1)] + ["last"]
