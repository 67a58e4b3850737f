"""The class-level model's error against the full flow-level solve, on random candidates.

``ranking="class"`` skips a candidate whose class-level step estimate
(:mod:`.class_model`) exceeds the ``top_k``-th answer by more than
:data:`.branch_and_bound.CLASS_MARGIN`. That is wrong only for a candidate the model *overestimates*
by more than the margin, so the figure that matters is the largest ratio
``estimate / full`` over candidates; :func:`class_model_error` measures it (and the whole
distribution) by timing random feasible candidates of a space with ``ff.step_time``.
``fabricflow bench optimize`` reports it for its cases (docs/optimize.md).
"""

from __future__ import annotations

import time

import numpy as np

from fabricflow.errors import MemoryBudgetError, RoutingError, SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.layout_search.branch_and_bound import BranchAndBound
from fabricflow.layout_search.candidate_table import build_table
from fabricflow.layout_search.compute_model import ComputeModel
from fabricflow.layout_search.knobs import resolve_space
from fabricflow.workload.gpu import GpuSpec, load_gpu
from fabricflow.workload.model_spec import ModelSpec, load_model
from fabricflow.workload.step import step_time


def class_model_error(
    model: str | ModelSpec,
    gpu: str | GpuSpec,
    fabric: Fabric,
    *,
    gpus: int,
    global_batch: int,
    seq_len: int,
    samples: int = 12,
    seed: int = 0,
    fixed: dict | None = None,
    space: dict | None = None,
    budget_s: float | None = None,
) -> dict:
    """Time ``samples`` random feasible candidates of the space (default space unless
    ``space``/``fixed``) with ``ff.step_time`` and with the class-level estimate.

    Returns a dict: ``ratios`` (``estimate / full`` per timed candidate), ``max_ratio``
    (the largest overestimate; ``ranking="class"`` is safe while it stays below
    ``1 + CLASS_MARGIN``), ``min_ratio``, ``median_ratio``, ``timed`` and ``seconds``.
    Stops early (fewer ``timed``) when ``budget_s`` wall seconds have passed.
    """
    started = time.monotonic()
    model = load_model(model) if not isinstance(model, ModelSpec) else model
    gpu = load_gpu(gpu) if not isinstance(gpu, GpuSpec) else gpu
    searched, single = resolve_space(
        model, fabric, gpus=gpus, global_batch=global_batch, seq_len=seq_len,
        precision="bf16", fixed=fixed, space=space,
    )  # fmt: skip
    table = build_table(model, searched, single, gpus, global_batch, seq_len)
    keys = np.flatnonzero(table.sized_ok)
    table.record(keys, ComputeModel(model, gpu, gpus).analyse(table.rows(keys)))
    visit = BranchAndBound(
        model, gpu, fabric, table, top_k=1, seed=seed, collectives="fabric", gpus=gpus,
        say=lambda line: None, ranking="class",
    )  # fmt: skip
    keys, combos = np.nonzero(table.runnable & table.feasible[:, None])
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(keys), size=min(samples, len(keys)), replace=False)
    ratios = []
    for key, combo in zip(keys[pick].tolist(), combos[pick].tolist(), strict=True):
        if budget_s is not None and time.monotonic() - started > budget_s:
            break
        k, c = np.asarray([key]), np.asarray([combo])
        estimate = float(visit.bound(k, c, visit.structures.ids(k, c), isolated=False,
                                     classed=True)[0])  # fmt: skip
        try:
            full = step_time(
                model, gpu, fabric=fabric, stack=visit.stack, **visit.kwargs(key, combo)
            ).step_time_s
        except (SpecError, RoutingError, MemoryBudgetError):
            continue  # refused on the fabric: no full time to compare with
        ratios.append(estimate / full)
    out = np.asarray(ratios)
    return {
        "ratios": out.tolist(),
        "max_ratio": float(out.max()) if len(out) else float("nan"),
        "min_ratio": float(out.min()) if len(out) else float("nan"),
        "median_ratio": float(np.median(out)) if len(out) else float("nan"),
        "timed": len(out),
        "seconds": time.monotonic() - started,
    }
