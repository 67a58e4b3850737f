"""Capacity planning: the best layout of each GPU count as one ``xarray.Dataset``.

Answers "how many GPUs for this batch, and at what efficiency":
:func:`~fabricflow.layout_search.optimize.capacity_sweep` runs the full search of each
count, and :func:`sweep_dataset` records the best step time, MFU, tokens per GPU-second
and the winning layout of each. A count with no feasible layout is kept as a row of NaN
with the reason, so the curve shows where the model stops fitting. This module takes the
searches' results and never runs a search itself.
"""

from __future__ import annotations

import numpy as np

LAYOUT_COLUMNS = ("tp", "cp", "pp", "vpp", "ep", "dp", "micro_batch", "zero")


def best_count(searches: dict, objective: str) -> int:
    """The GPU count of ``searches`` (count -> :class:`LayoutSearch`) with the best
    ``objective``: most tokens per GPU-second for ``tokens_per_gpu``, else the shortest
    step."""
    if objective == "tokens_per_gpu":
        return max(searches, key=lambda c: searches[c].best.tokens_per_s / c)
    return min(searches, key=lambda c: searches[c].best.step_time_s)


def sweep_dataset(counts: list[int], searches: dict, reasons: dict[int, str], objective: str):
    """``xarray.Dataset`` over ``gpus`` (the sorted ``counts``): ``step_time_s``, ``mfu``,
    ``tokens_per_gpu_s``, ``tokens_per_s``, ``memory_gib_per_gpu``, the winning layout's
    sizes, ``order``, ``placement``, ``recompute``, ``evaluated``, ``considered``,
    ``exhaustive`` and ``reason``; ``searches`` maps a count to its :class:`LayoutSearch`,
    ``reasons`` a count without a feasible layout to why (its row is NaN)."""
    import xarray as xr  # deferred: xarray is slow to import and only the result needs it

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
    return sweep
