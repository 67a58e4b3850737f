"""``design_fabric``: search fabric designs for a workload, under a budget, into a sweep store.

Every design of the space (:mod:`fabricflow.optimize.design`) is one point of a resumable
sweep (:func:`fabricflow.sweep`, task :func:`~fabricflow.optimize.design.evaluate_design`,
local processes or a Dask scheduler): the fabric is built, priced, and each job gets its
best layout from :func:`fabricflow.optimize_layout` within ``layout_budget_s`` seconds.
Designs whose spec cannot hold the workload are listed with the reason and not run.
The answer ranks the designs by ``objective`` (those over ``budget``, a cap on total
capex, are not eligible), marks the Pareto front of cost per million tokens against step
time, and draws it (:func:`plot_design_front`) with the winners labelled.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from ..errors import SpecError
from ..optimize.design import check_jobs, design_codes, design_spec
from ..workload.calibration import as_calibration
from .figures import new_figure, save_figure
from .sweep.run import sweep

OBJECTIVES = {  # name -> (metric, sign: +1 maximise, -1 minimise)
    "tokens_per_dollar": ("tokens_per_dollar", 1),
    "cost_per_million_tokens": ("cost_per_million_tokens", -1),
    "step_time": ("step_time_s", -1),
    "capex": ("capex", -1),
    "power": ("power_W", -1),
}
TASK = "fabricflow.optimize.design:evaluate_design"


@dataclasses.dataclass(frozen=True)
class DesignSearch:
    """Outcome of :func:`design_fabric`.

    Attributes:
        rows: one mapping per evaluated design (``design`` code and every metric, plus
            ``pareto`` and ``over_budget``), best first by ``objective``.
        best: the best eligible row (None when none is).
        infeasible: design code -> why its spec cannot hold the workload.
        failed: design code -> the error of a design that failed while evaluated.
        dataset: the sweep store's ``xarray.Dataset`` (dimension ``design``).
        objective, budget: as given.
    """

    rows: list[dict]
    best: dict | None
    infeasible: dict[str, str]
    failed: dict[str, str]
    dataset: object
    objective: str
    budget: float | None


def design_fabric(
    workload,
    *,
    space: dict | None = None,
    budget: float | None = None,
    objective: str = "tokens_per_dollar",
    store: str | Path,
    gpu: str | None = None,
    layout_budget_s: float = 10.0,
    cost: dict | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
    overwrite: bool = False,
    progress: bool | None = None,
    calibration=None,
) -> DesignSearch:
    """Search fabric designs for ``workload`` into the sweep store ``store``.

    Args:
        workload: ``{"gpu": NAME, "jobs": [{model, gpus, global_batch, seq_len}, ...]}``
            or a list of jobs (then ``gpu`` is required); job ``fixed``/``space`` pass to
            the layout search.
        space: design knob -> values (:data:`~fabricflow.optimize.design.DEFAULT_SPACE`
            for the others).
        budget: most total capex (GPUs and network, the table's currency) a winner may
            cost; None: no cap.
        objective: one of :data:`OBJECTIVES`.
        layout_budget_s: seconds of layout search per job and design (the search returns
            its best so far when they run out: ``layouts_exhaustive`` says whether it did).
        cost: price table overrides (the layout of a spec's ``cost:`` section).
        calibration: a :class:`~fabricflow.workload.calibration.Calibration` (or its
            file) every layout search uses (it becomes part of the store's SPEC).
        workers, scheduler, overwrite, progress: as :func:`fabricflow.sweep` (the store
            resumes: a rerun computes only the designs not done).
    """
    if objective not in OBJECTIVES:
        raise SpecError("objective", f"one of {list(OBJECTIVES)}, got {objective!r}")
    if budget is not None and (
        isinstance(budget, bool) or not isinstance(budget, int | float) or not budget > 0
        or not math.isfinite(budget)
    ):  # fmt: skip
        raise SpecError("budget", f"must be a finite capex > 0, got {budget!r}")
    if isinstance(workload, dict):
        gpu = workload.get("gpu", gpu)
        jobs = check_jobs(workload.get("jobs"))
    else:
        jobs = check_jobs(workload)
    if not isinstance(gpu, str):
        raise SpecError("gpu", f"a GPU preset name is required, got {gpu!r}")
    total = sum(job["gpus"] for job in jobs)
    feasible, infeasible = [], {}
    for code in design_codes(space):
        try:
            design_spec(code, total)
        except SpecError as error:
            infeasible[code] = str(error)
            continue
        feasible.append(code)
    if not feasible:
        raise SpecError("space", f"no design of the space holds {total:,} GPUs: {infeasible}")
    fixed = {"jobs": jobs, "gpu": gpu, "layout_budget_s": float(layout_budget_s)}
    if cost:
        fixed["cost"] = cost
    calibration = as_calibration(calibration)
    if calibration is not None:
        fixed["calibration"] = calibration.to_dict()
    dataset = sweep(
        TASK,
        {"design": feasible},
        fixed=fixed,
        store=str(store),
        workers=workers,
        scheduler=scheduler,
        overwrite=overwrite,
        progress=progress,
    )
    rows, failed = _rows(dataset, budget)
    metric, sign = OBJECTIVES[objective]
    rows.sort(key=lambda r: (r["over_budget"], -sign * r[metric]))
    eligible = [r for r in rows if not r["over_budget"]]
    return DesignSearch(rows, eligible[0] if eligible else None, infeasible, failed, dataset,
                        objective, budget)  # fmt: skip


def _rows(dataset, budget) -> tuple[list[dict], dict[str, str]]:
    """Done designs as rows (with the Pareto flag) and failed ones with their error."""
    status = np.asarray(dataset["status"].values)
    codes = [str(c) for c in dataset["design"].values]
    errors = np.asarray(dataset["error"].values)
    metrics = [name for name in dataset.data_vars if name not in ("status", "error")]
    rows, failed = [], {}
    for i, code in enumerate(codes):
        if status[i] != 1:
            failed[code] = str(errors[i]) or "not computed"
            continue
        row = {"design": code, **{m: float(dataset[m].values[i]) for m in metrics}}
        row["over_budget"] = budget is not None and row["capex"] > budget
        rows.append(row)
    mark_pareto(rows, "step_time_s", "cost_per_million_tokens")
    return rows, failed


def mark_pareto(rows: list[dict], x: str, y: str) -> None:
    """Set ``row["pareto"]``: no other row is at least as good in both ``x`` and ``y``
    (both minimised) and better in one."""
    points = np.array([[r[x], r[y]] for r in rows]) if rows else np.zeros((0, 2))
    for i, row in enumerate(rows):
        better = np.all(points <= points[i], axis=1) & np.any(points < points[i], axis=1)
        row["pareto"] = not better.any()


def plot_design_front(search: DesignSearch, path: str | Path, *, label: int = 3) -> Path:
    """Cost per million tokens against step time of every design; the Pareto front joined,
    the ``label`` best eligible designs and the front's ends labelled."""
    rows = search.rows
    fig = new_figure(figsize=(9, 6))
    ax = fig.subplots()
    colours = {"rail": "tab:blue", "tor": "tab:orange", "rail-only": "tab:green"}
    for attachment, colour in colours.items():
        pick = [r for r in rows if r["design"].split("/")[2] == attachment]
        ax.scatter([r["step_time_s"] for r in pick], [r["cost_per_million_tokens"] for r in pick],
                   s=22, color=colour, alpha=0.7, label=attachment)  # fmt: skip
    front = sorted((r for r in rows if r["pareto"]), key=lambda r: r["step_time_s"])
    ax.plot([r["step_time_s"] for r in front], [r["cost_per_million_tokens"] for r in front],
            color="black", lw=1, label="Pareto front")  # fmt: skip
    named = {r["design"]: r for r in [r for r in rows if not r["over_budget"]][:label]}
    if front:
        named.setdefault(front[0]["design"], front[0])
        named.setdefault(front[-1]["design"], front[-1])
    for code, r in named.items():
        ax.annotate(code, (r["step_time_s"], r["cost_per_million_tokens"]), fontsize=7,
                    xytext=(4, 4), textcoords="offset points")  # fmt: skip
    if search.best is not None:
        ax.scatter([search.best["step_time_s"]], [search.best["cost_per_million_tokens"]],
                   marker="*", s=180, color="red", label=f"best ({search.objective})")  # fmt: skip
    for axis, key in (("x", "step_time_s"), ("y", "cost_per_million_tokens")):
        values = [r[key] for r in rows if r[key] > 0]
        if values and max(values) > 10 * min(values):  # spans a decade: log scale
            getattr(ax, f"set_{axis}scale")("log")
    ax.set_xlabel("step time of the first job (s)")
    ax.set_ylabel("cost per million tokens (capex amortized + energy)")
    ax.set_title(f"{len(rows)} fabric designs" + (f", {len(search.infeasible)} infeasible"
                                                  if search.infeasible else ""))  # fmt: skip
    ax.legend(fontsize=8)
    return save_figure(fig, path)
