"""Capacity planning: the best layout for each GPU count, as one ``xarray.Dataset``.

Answers "how many GPUs for this batch, and at what efficiency": for each count the full
search of :func:`~fabricflow.layout_search.optimize.optimize_layout` runs, and the sweep records
the best step time, MFU, tokens per GPU-second and the winning layout. A count with no
feasible layout is kept as a row of NaN with the reason, so the curve shows where the
model stops fitting.
"""

from __future__ import annotations

import time

import numpy as np

from fabricflow.errors import SpecError

LAYOUT_COLUMNS = ("tp", "cp", "pp", "vpp", "ep", "dp", "micro_batch", "zero")


def capacity_sweep(model, gpu, fabric, *, gpus: list[int], objective: str = "tokens_per_gpu",
                   budget_s: float | None = None, progress=None, **options):  # fmt: skip
    """Search each GPU count of ``gpus``; returns the :class:`LayoutSearch` of the count
    with the best ``objective`` with ``.sweep`` (Dataset over ``gpus``: ``step_time_s``,
    ``mfu``, ``tokens_per_gpu_s``, ``tokens_per_s``, ``memory_gib_per_gpu``, the winning
    layout's sizes, ``order``, ``placement``, ``evaluated``, ``considered``, ``reason``).

    ``budget_s`` is shared by all counts; ``budget_work`` (in ``options``) bounds each
    count's search. Other options as :func:`optimize_layout`.
    """
    import xarray as xr

    from fabricflow.layout_search.optimize import optimize_layout

    if not gpus:
        raise SpecError("gpus", "the GPU-count sweep needs at least one count")
    counts = sorted({int(g) for g in gpus})
    started = time.monotonic()
    searches = {}
    reasons = {}
    for count in counts:
        left = None if budget_s is None else max(budget_s - (time.monotonic() - started), 1e-3)
        if progress is not None:
            progress(f"{count} GPUs:")
        try:
            searches[count] = optimize_layout(
                model, gpu, fabric, gpus=count, objective=objective, budget_s=left,
                progress=progress, **options,
            )  # fmt: skip
        except SpecError as error:
            reasons[count] = str(error)
    if not searches:
        raise SpecError(
            "gpus",
            "no GPU count of the sweep has a feasible layout: "
            + "; ".join(f"{c}: {r}" for c, r in list(reasons.items())[:3]),
        )
    n = len(counts)
    data: dict = {name: np.full(n, np.nan) for name in (
        "step_time_s", "mfu", "tokens_per_gpu_s", "tokens_per_s", "memory_gib_per_gpu"
    )}  # fmt: skip
    for name in LAYOUT_COLUMNS + ("evaluated", "considered"):
        data[name] = np.zeros(n, dtype=np.int64)
    text = {name: [""] * n for name in ("order", "placement", "recompute", "reason")}
    exhaustive = np.zeros(n, dtype=bool)
    for i, count in enumerate(counts):
        search = searches.get(count)
        if search is None:
            text["reason"][i] = reasons[count]
            continue
        best = search.best
        data["step_time_s"][i] = best.step_time_s
        data["mfu"][i] = best.mfu
        data["tokens_per_s"][i] = best.tokens_per_s
        data["tokens_per_gpu_s"][i] = best.tokens_per_s / count
        data["memory_gib_per_gpu"][i] = best.memory_gib_per_gpu
        lay = search.best_kwargs["layout"]
        for name in LAYOUT_COLUMNS:
            data[name][i] = getattr(lay, name)
        data["evaluated"][i] = search.counts["evaluated"]
        data["considered"][i] = search.counts["considered"]
        text["order"][i] = search.best_kwargs["order"]
        text["placement"][i] = search.best_kwargs["placement"]
        text["recompute"][i] = lay.recompute
        exhaustive[i] = search.exhaustive
    variables = {name: ("gpus", values) for name, values in data.items()}
    variables.update({name: ("gpus", np.asarray(v, dtype=str)) for name, v in text.items()})
    variables["exhaustive"] = ("gpus", exhaustive)
    sweep = xr.Dataset(variables, coords={"gpus": np.asarray(counts, dtype=np.int64)})
    sweep.attrs["objective"] = objective
    if objective == "tokens_per_gpu":
        pick = max(searches, key=lambda c: searches[c].best.tokens_per_s / c)
    else:
        pick = min(searches, key=lambda c: searches[c].best.step_time_s)
    chosen = searches[pick]
    chosen.sweep = sweep
    chosen.seconds = time.monotonic() - started
    return chosen
