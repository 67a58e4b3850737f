"""``design_fabric``: search fabric designs for a workload, under a budget, into a sweep store.

Every design of the space (:mod:`fabricflow.design.space`) is one point of a resumable
sweep (:func:`fabricflow.sweeps`, task :func:`~fabricflow.design.space.evaluate_design`,
local processes or a Dask scheduler): the fabric is built, priced, and each job gets its
best layout from :func:`fabricflow.optimize_layout` within ``layout_budget_work`` units of work
(structures solved plus candidates timed: reproducible, unlike seconds). Where some
design's search did not finish, a second sweep (its store beside the first,
``<store>-common``) times the union of every design's best layouts on each such design,
which then takes the fastest of them: designs are compared on the same candidate set, so
a design never ranks behind another for a layout its own search missed.
Designs whose spec cannot hold the workload are listed with the reason and not run.
The answer ranks the designs by ``objective`` (those over ``capex_budget``, a cap on total
capex, are not eligible), marks the Pareto front of cost per million tokens against step
time, and draws it (:func:`plot_design_front`) with the winners labelled.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np

from fabricflow.design.space import (
    DEFAULT_LAYOUT_BUDGET_WORK,
    check_jobs,
    design_codes,
    design_metrics,
    design_spec,
)
from fabricflow.errors import SpecError
from fabricflow.fabric.cost_table import default_table
from fabricflow.layout_search.layout_codes import decode, describe
from fabricflow.plots.figures import new_figure, save_figure
from fabricflow.sweeps.run import sweep
from fabricflow.workload.calibration import as_calibration

OBJECTIVES = {  # name -> (metric, sign: +1 maximise, -1 minimise)
    "tokens_per_dollar": ("tokens_per_dollar", 1),
    "cost_per_million_tokens": ("cost_per_million_tokens", -1),
    "step_time": ("step_time_s", -1),
    "capex": ("capex", -1),
    "power": ("power_W", -1),
}
TASK = "fabricflow.design.space:evaluate_design"


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
        objective, capex_budget: as given.
        common: the common-layout sweep's Dataset (None when every search finished).
        currency: of every cost in the rows (the price table's).

    A row holds every metric of :func:`~fabricflow.design.space.evaluate_design`, each
    job's layout (``job0``, ... : knob -> value), ``layout`` (the first job's, as one
    line), ``search`` (``finished`` when every job's layout search of the design was
    exhaustive, else ``stopped``), ``layout_from`` (``own``: its own search's best;
    ``common``: a faster one another design's search found) and ``pareto``,
    ``over_budget``.
    """

    rows: list[dict]
    best: dict | None
    infeasible: dict[str, str]
    failed: dict[str, str]
    dataset: object
    objective: str
    capex_budget: float | None
    common: object = None
    currency: str = ""


def design_fabric(
    workload,
    *,
    space: dict | None = None,
    capex_budget: float | None = None,
    objective: str = "tokens_per_dollar",
    store: str | Path,
    gpu: str | None = None,
    layout_budget_work: int = DEFAULT_LAYOUT_BUDGET_WORK,
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
        space: design knob -> values (:data:`~fabricflow.design.space.DEFAULT_SPACE`
            for the others).
        capex_budget: most total capex (GPUs and network, the table's currency) a winner may
            cost; None: no cap.
        objective: one of :data:`OBJECTIVES`.
        layout_budget_work: work of each job's layout search per design (group structures solved
            plus candidates timed, ``optimize_layout(budget_work=...)``); a search that
            runs out returns its best so far (``layouts_exhaustive`` 0) and the design
            then takes the fastest of every design's best layouts (module doc).
        cost: price table overrides (the layout of a spec's ``cost:`` section).
        calibration: a :class:`~fabricflow.workload.calibration.Calibration` (or its
            file) every layout search uses (it becomes part of the store's SPEC).
        workers, scheduler, overwrite: as :func:`fabricflow.sweeps` (the stores resume: a
            rerun computes only the designs not done).
        progress: a bar per sweep and a line per phase on stderr (default: when stderr
            is a terminal).
    """
    if objective not in OBJECTIVES:
        raise SpecError("objective", f"one of {list(OBJECTIVES)}, got {objective!r}")
    if capex_budget is not None and (
        isinstance(capex_budget, bool)
        or not isinstance(capex_budget, int | float)
        or not capex_budget > 0
        or not math.isfinite(capex_budget)
    ):  # fmt: skip
        raise SpecError("capex_budget", f"must be a finite capex > 0, got {capex_budget!r}")
    if (
        isinstance(layout_budget_work, bool)
        or not isinstance(layout_budget_work, int)
        or layout_budget_work < 1
    ):
        raise SpecError(
            "layout_budget_work", f"must be an integer >= 1, got {layout_budget_work!r}"
        )
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
    say = _say(progress)
    fixed: dict = {"jobs": jobs, "gpu": gpu, "layout_budget_work": layout_budget_work}
    if cost:
        fixed["cost"] = cost
    calibration = as_calibration(calibration)
    if calibration is not None:
        fixed["calibration"] = calibration.to_dict()
    options: dict[str, Any] = {"workers": workers, "scheduler": scheduler,
                               "overwrite": overwrite, "progress": progress,
                               "metrics": design_metrics(jobs)}  # fmt: skip
    say(f"{len(feasible)} designs to evaluate ({len(infeasible)} infeasible): each job's layout "
        f"search within {layout_budget_work} units of work")  # fmt: skip
    dataset = sweep(TASK, {"design": feasible}, fixed=fixed, store=str(store), **options)
    rows, failed = _rows(dataset, jobs)
    unfinished = [r["design"] for r in rows if not r["layouts_exhaustive"]]
    common = _common_layouts(rows, jobs)
    common_dataset = None
    if unfinished and any(len(c) > 1 for c in common):
        say(f"{len(unfinished)} layout searches did not finish: timing the "
            f"{max(len(c) for c in common)} best layouts of all designs on each of them")  # fmt: skip
        common_dataset = sweep(
            TASK, {"design": unfinished}, fixed={**fixed, "common": common},
            store=common_store(store), **options,
        )  # fmt: skip
        rows = _merge(rows, *_rows(common_dataset, jobs), failed)
    for row in rows:
        row["over_budget"] = capex_budget is not None and row["capex"] > capex_budget
    mark_pareto(rows, "step_time_s", "cost_per_million_tokens")
    metric, sign = OBJECTIVES[objective]
    rows.sort(key=lambda r: (r["over_budget"], -sign * r[metric], r["design"]))
    eligible = [r for r in rows if not r["over_budget"]]
    return DesignSearch(rows, eligible[0] if eligible else None, infeasible, failed, dataset,
                        objective, capex_budget, common_dataset, _currency(cost))  # fmt: skip


def common_store(store: str | Path) -> str:
    """The store of the common-layout sweep beside ``store`` (``designs.zarr`` ->
    ``designs-common.zarr``)."""
    path = Path(store)
    return str(path.with_name(f"{path.stem}-common{path.suffix}"))


def _say(progress: bool | None):
    import sys

    show = sys.stderr.isatty() if progress is None else bool(progress)
    if not show:
        return lambda line: None
    return lambda line: print(line, file=sys.stderr, flush=True)


def _currency(cost: dict | None) -> str:
    currency = (cost or {}).get("currency", default_table().get("currency", ""))
    return str(currency)


def _rows(dataset, jobs: list) -> tuple[list[dict], dict[str, str]]:
    """Done designs as rows (metrics, each job's layout ``job<i>`` as a candidate mapping
    and ``layout`` the first job's label) and failed ones with their error."""
    status = np.asarray(dataset["status"].values)
    codes = [str(c) for c in dataset["design"].values]
    errors = np.asarray(dataset["error"].values)
    metrics = [name for name in dataset.data_vars if name not in ("status", "error")]
    rows, failed = [], {}
    for i, code in enumerate(codes):
        if status[i] != 1:
            failed[code] = str(errors[i]) or "not computed"
            continue
        values = {m: float(dataset[m].values[i]) for m in metrics}
        row: dict[str, Any] = {"design": code}
        row.update({m: v for m, v in values.items() if not m.startswith("job")})
        for j, job in enumerate(jobs):
            row[f"job{j}"] = decode(values, job, f"job{j}_")
        row["layout"] = describe(row["job0"])
        row["search"] = "finished" if row["layouts_exhaustive"] else "stopped"
        row["layout_from"] = "own"
        rows.append(row)
    return rows, failed


def _common_layouts(rows: list[dict], jobs: list) -> list[list[dict]]:
    """Per job, the distinct best layouts of every design (in design order)."""
    out = []
    for j in range(len(jobs)):
        seen: list[dict] = []
        for row in sorted(rows, key=lambda r: r["design"]):
            if row[f"job{j}"] not in seen:
                seen.append(row[f"job{j}"])
        out.append(seen)
    return out


def _merge(rows: list[dict], timed: list[dict], errors: dict, failed: dict) -> list[dict]:
    """Each design's row where the common set found a faster layout for it replaced by the
    common sweep's row (which keeps ``search``: whether its own search finished)."""
    by_code = {r["design"]: r for r in timed}
    out = []
    for row in rows:
        other = by_code.get(row["design"])
        if other is not None and other["step_time_s"] < row["step_time_s"]:
            row = {**other, "layouts_exhaustive": row["layouts_exhaustive"],
                   "search": row["search"], "layout_from": "common"}  # fmt: skip
        out.append(row)
    failed.update({code: f"common layouts: {error}" for code, error in errors.items()})
    return out


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
        if not pick:  # the legend lists only what the figure shows
            continue
        ax.scatter([r["step_time_s"] for r in pick], [r["cost_per_million_tokens"] for r in pick],
                   s=22, color=colour, alpha=0.7, label=attachment)  # fmt: skip
    front = sorted((r for r in rows if r["pareto"]), key=lambda r: r["step_time_s"])
    if len(front) > 1:
        ax.plot([r["step_time_s"] for r in front],
                [r["cost_per_million_tokens"] for r in front],
                color="black", lw=1, label="Pareto front")  # fmt: skip
    named = {r["design"]: r for r in [r for r in rows if not r["over_budget"]][:label]}
    if front:
        named.setdefault(front[0]["design"], front[0])
        named.setdefault(front[-1]["design"], front[-1])
    # designs at the same point (to 4 digits) share one label, one code per line
    spots: dict[tuple, list[str]] = {}
    for code, r in named.items():
        spot = (f"{r['step_time_s']:.4g}", f"{r['cost_per_million_tokens']:.4g}")
        spots.setdefault(spot, []).append(code)
    for codes in spots.values():
        r = named[codes[0]]
        ax.annotate("\n".join(codes), (r["step_time_s"], r["cost_per_million_tokens"]),
                    fontsize=7, xytext=(4, 4), textcoords="offset points")  # fmt: skip
    if search.best is not None:
        ax.scatter([search.best["step_time_s"]], [search.best["cost_per_million_tokens"]],
                   marker="*", s=180, color="red", label=f"best ({search.objective})")  # fmt: skip
    for axis, key in (("x", "step_time_s"), ("y", "cost_per_million_tokens")):
        values = [r[key] for r in rows if r[key] > 0]
        if values and max(values) > 10 * min(values):  # spans a decade: log scale
            getattr(ax, f"set_{axis}scale")("log")
    ax.set_xlabel("step time of the first job (s)")
    currency = f"{search.currency}, " if search.currency else ""
    ax.set_ylabel(f"cost per million tokens ({currency}capex amortized + energy)")
    ax.set_title(f"{len(rows)} fabric designs" + (f", {len(search.infeasible)} infeasible"
                                                  if search.infeasible else ""))  # fmt: skip
    ax.legend(fontsize=8)
    return save_figure(fig, path)
