"""ECMP, spray and an optimized plan on the same flows: the numbers an architect compares.

For each routing (ECMP hash, spray over all equal-cost paths where the fabric has it,
the optimized split):

* ``makespan_s``: max over links of bytes / capacity (ideal drain of the busiest link);
* ``max_utilization``: the busiest link's time-average utilization over the flow set's
  completion, ``makespan_s / completion_s`` (1: the bottleneck link is busy throughout);
* ``throughput_Bps``: the aggregate max-min fair rate of all flows started together;
* ``completion_s``: when the last flow finishes under max-min sharing recomputed as
  flows finish (:func:`fabricflow.max_min_completion`).
"""

from __future__ import annotations

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.routing.route import route
from fabricflow.routing.routes import Routes
from fabricflow.solve.completion import max_min_completion
from fabricflow.solve.maxmin.checked import max_min_rates

COMPLETION_MODES = ("batched", "exact")


def routing_figures(
    routes: Routes, size: np.ndarray, capacity: np.ndarray, mode: str, *, completion: bool = True
) -> dict:
    """The four figures of one routing (see the module docstring). ``completion=False``
    skips the completion run (one max-min solve per event; the slow part on large flow
    sets): ``completion_s`` and ``max_utilization`` are then ``None``."""
    load = routes.link_load(size)
    with np.errstate(divide="ignore", invalid="ignore"):
        times = np.where(load > 0, load / capacity, 0.0)
    makespan = float(times.max(initial=0.0))
    rates = np.asarray(max_min_rates(routes.links, capacity, coef=routes.coef), np.float64)
    if not completion:
        return {
            "makespan_s": makespan,
            "max_utilization": None,
            "throughput_Bps": float(rates.sum()),
            "completion_s": None,
        }
    done = max_min_completion(routes.links, capacity, size, coef=routes.coef, mode=mode)
    finish = float(np.max(np.asarray(done.finish_time, np.float64), initial=0.0))
    return {
        "makespan_s": makespan,
        "max_utilization": makespan / finish if finish > 0 else 0.0,
        "throughput_Bps": float(rates.sum()),
        "completion_s": finish,
    }


def compare_routings(plan, *, seed: int = 0, completion_mode: str = "batched") -> dict:
    """``{"ecmp": {...}, "spray": {...} or None, "optimized": {...}, "gain": {...}}``.

    ``spray`` is ``None`` on fabrics whose router has no spray policy (torus, dragonfly,
    generic graphs). ``gain``: ECMP makespan and completion over the optimized ones.
    """
    if completion_mode not in COMPLETION_MODES:
        raise SpecError(
            "completion_mode", f"must be one of {list(COMPLETION_MODES)}, got {completion_mode!r}"
        )
    fabric, size = plan.fabric, plan.size
    capacity = fabric.capacity
    out: dict = {}
    out["ecmp"] = routing_figures(
        route(fabric, plan.src, plan.dst, policy="ecmp", seed=seed), size, capacity, completion_mode
    )
    try:
        spray = route(fabric, plan.src, plan.dst, policy="spray", seed=seed)
    except SpecError as error:
        if error.field != "policy":
            raise
        out["spray"] = None
    else:
        out["spray"] = routing_figures(spray, size, capacity, completion_mode)
    out["optimized"] = routing_figures(plan.routes(), size, capacity, completion_mode)
    best = out["optimized"]
    out["gain"] = {
        "makespan_vs_ecmp": out["ecmp"]["makespan_s"] / best["makespan_s"]
        if best["makespan_s"] > 0
        else 1.0,
        "completion_vs_ecmp": out["ecmp"]["completion_s"] / best["completion_s"]
        if best["completion_s"] > 0
        else 1.0,
    }
    return out
