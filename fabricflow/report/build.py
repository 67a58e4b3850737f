"""The design-review report: one job on one fabric, computed section by section.

:func:`build_report` runs the models a design review asks about and returns plain data
(tables as lists of dicts, figures as PNG bytes); :mod:`.html` turns it into one
self-contained HTML page. Sections, in order:

- ``fabric``: :meth:`Fabric.summary` (tiers, oversubscription, bisection) and
  :func:`fabricflow.plots.fabric.plot_tiers`.
- ``layouts``: :func:`fabricflow.optimize_layout` with a time budget, its top ``top_k``
  and the Pareto front (skipped at ``budget_s=0`` when the layout is given).
- ``step``: :func:`fabricflow.step_time` of the job's layout, its breakdown.
- ``utilization``: each of the job's collectives routed and max-min solved at the job's
  placement, link utilization by tier (:func:`~fabricflow.solve.maxmin.link_views.tier_summary`).
- ``failures``: the step time again with a fraction of one link kind's cables failed,
  for a few fractions and seeds.
- ``cost``: network capex and power per tier, the bill of materials and the job's cost
  per token (:mod:`.cost_section`).

Every section records what was computed with which settings (``settings``), so the page
can say it. The computation is the library's; nothing here is fitted or scaled.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import tempfile
import time
from collections.abc import Callable, Sequence

import numpy as np

from fabricflow.collective.comm import CollectiveCache
from fabricflow.errors import FabricflowError, SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.fabric.spec import load_fabric
from fabricflow.fabric.summary import cables_per_kind, failure_text, port_usage_text
from fabricflow.layout_search.optimize import optimize_layout
from fabricflow.plots.fabric import plot_tiers
from fabricflow.plots.figures import new_figure, save_figure
from fabricflow.plots.layout_search import plot_breakdown_top, plot_pareto
from fabricflow.plots.rates import plot_utilization_by_tier
from fabricflow.plots.step import plot_breakdown
from fabricflow.report.cost_section import cost_section
from fabricflow.routing.clos import adaptive_link_values
from fabricflow.routing.transport_policy import routing_for
from fabricflow.solve.maxmin.link_views import tier_summary
from fabricflow.units import format_bandwidth
from fabricflow.workload.gpu import GpuSpec, load_gpu
from fabricflow.workload.gpu_memory import stage_parameters
from fabricflow.workload.model_spec import ModelSpec, load_model
from fabricflow.workload.placement import place
from fabricflow.workload.step import BREAKDOWN_KEYS, register_groups, step_time
from fabricflow.workload.step_command import (
    describe_layout,
    describe_options,
    describe_step,
    step_arguments,
)

SECTIONS = ("fabric", "layouts", "step", "utilization", "failures", "cost")
DEFAULT_FAIL_FRACTIONS = (0.01, 0.02, 0.05, 0.1)
# Link kinds that are no switch-to-switch cables: failing them removes GPUs, not paths.
_NOT_CABLES = ("nvlink", "nic", "ici")


def _png(plot: Callable[[str], object]) -> bytes:
    """Run ``plot(path)`` into a temporary PNG and return its bytes."""
    with tempfile.TemporaryDirectory(prefix="fabricflow-report-") as folder:
        path = os.path.join(folder, "figure.png")
        plot(path)
        with open(path, "rb") as handle:
            return handle.read()


def default_fail_kind(fabric) -> str:
    """The link kind whose cables the failure section fails: ``leaf`` (leaf-to-spine
    cables) when the fabric has it, else its first switch-to-switch kind, else ``ici`` (a
    torus has no switches: its chip-to-chip cables are the network, and routing goes
    around a failed one)."""
    present = [k for k in fabric.link_kinds if (fabric.link_kind == k).any()]
    if "leaf" in present:
        return "leaf"
    cables = [k for k in present if k not in _NOT_CABLES]
    if not cables and "ici" in present:
        return "ici"
    if not cables:
        raise SpecError(
            "fail_kind",
            f"{fabric.name} has no switch-to-switch cables to fail (link kinds {present})",
        )
    return cables[0]


def _as_fabric(fabric):
    """A Fabric, or the one a preset name or YAML path names (as model and gpu take names);
    anything else is a SpecError, not an AttributeError deep in a section."""
    if isinstance(fabric, Fabric):
        return fabric
    if isinstance(fabric, (str, os.PathLike)):
        return load_fabric(os.fspath(fabric))
    raise SpecError(
        "fabric", f"expected a Fabric, a preset name or a YAML path, got {type(fabric).__name__}"
    )


def _check_inputs(fabric, gpus, fail_fractions, seeds, budget_s, top_k, fail_kind):
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise SpecError("gpus", f"must be an integer >= 1, got {gpus!r}")
    if gpus > fabric.num_gpus:
        raise SpecError(
            "gpus", f"{gpus:,} GPUs do not fit {fabric.name!r}, which has {fabric.num_gpus:,}"
        )
    for value in fail_fractions:
        if not (isinstance(value, (int, float)) and math.isfinite(value) and 0 < value < 1):
            raise SpecError("fail_fractions", f"each must lie in (0, 1), got {value!r}")
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise SpecError("fail_seeds", f"must be an integer >= 1, got {seeds!r}")
    if not (isinstance(budget_s, (int, float)) and math.isfinite(budget_s) and budget_s >= 0):
        raise SpecError("budget_s", f"must be a finite number of seconds >= 0, got {budget_s!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise SpecError("top_k", f"must be an integer >= 1, got {top_k!r}")
    present = [k for k in fabric.link_kinds if (fabric.link_kind == k).any()]
    if fail_kind is not None and fail_kind not in present:
        raise SpecError("fail_kind", f"unknown link kind {fail_kind!r}; one of {present}")


def build_report(
    fabric,
    model,
    gpu,
    gpus: int,
    *,
    layout=None,
    order: str | None = None,
    placement: str | None = None,
    global_batch: int | None = None,
    seq_len: int = 4096,
    budget_s: float = 30.0,
    top_k: int = 5,
    fail_kind: str | None = None,
    fail_fractions: Sequence[float] = DEFAULT_FAIL_FRACTIONS,
    fail_seeds: int = 3,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    calibration=None,
    interval_level: float = 0.8,
) -> dict:
    """Compute every section of the design-review report of one training job.

    Args:
        fabric: a :class:`~fabricflow.Fabric` (or a preset name or YAML path).
        model, gpu: :class:`ModelSpec` / :class:`GpuSpec` (or preset names).
        gpus: GPUs of the job (the fabric's first ones, or where the placement puts them).
        layout: the job's :class:`Layout`; ``None`` takes the layout optimizer's best.
        order, placement: rank order and placement of a given layout (default
            ``tp-cp-ep-dp-pp``, ``deployed``); with ``layout=None`` the optimizer's.
        global_batch, seq_len: sequences per step (default: one per GPU) and tokens per
            sequence, for the optimizer; a given layout carries its own.
        budget_s: seconds the layout optimizer may time candidates (0: skip the search,
            which needs ``layout``).
        top_k: layouts listed.
        fail_kind: link kind whose cables fail (default :func:`default_fail_kind`).
        fail_fractions: fractions of those cables failed, each in (0, 1).
        fail_seeds: random failure draws per fraction (seeds ``seed .. seed+n-1``).
        seed: seed of the ``scattered`` placement (the job's ``placement_seed``) and the
            first failure seed. The collectives are routed with step_time's routing seed
            (0) in every section, as the layout search times them.
        progress: called with one line per finished section.
        calibration: a :class:`~fabricflow.workload.calibration.Calibration` (or its file)
            every step time of the report uses; interval_level: the level of the step
            time's prediction interval.

    Returns:
        ``{"title", "job", "headline", "sections": [...], "seconds"}``; each section is
        ``{"id", "title", "text", "settings", "tables", "figures", "seconds"}`` with
        tables ``{"caption", "columns": [(key, header)], "rows": [dict]}`` and figures
        ``{"name", "caption", "png": bytes}``.
    """
    model = model if isinstance(model, ModelSpec) else load_model(model)
    gpu = gpu if isinstance(gpu, GpuSpec) else load_gpu(gpu)
    fabric = _as_fabric(fabric)
    _check_inputs(fabric, gpus, fail_fractions, fail_seeds, budget_s, top_k, fail_kind)
    if layout is None and budget_s == 0:
        raise SpecError("budget_s", "0 skips the layout search, so give the job's layout")
    if layout is not None and layout.num_gpus != gpus:
        raise SpecError(
            "layout", f"tp x cp x pp x dp = {layout.num_gpus} GPUs, but the job has {gpus}"
        )
    say = progress or (lambda line: None)
    started = time.monotonic()
    sections = [_fabric_section(fabric)]
    say(f"fabric summary done ({sections[-1]['seconds']:.1f} s)")

    timing = {"calibration": calibration, "interval_level": interval_level}
    job: dict = dict(timing)
    step = None
    if layout is not None:
        job = {"layout": layout.validate(model, num_gpus=gpus), "placement_seed": seed, **timing}
        job.update(order=order or "tp-cp-ep-dp-pp", placement=placement or "deployed")
        # timed before the search: a layout over the memory budget is refused at once
        step = _step_section(fabric, model, gpu, job, optimized=False)
    if budget_s > 0:
        section, best_kwargs = _layouts_section(
            fabric,
            model,
            gpu,
            gpus,
            global_batch or gpus,
            seq_len,
            layout,
            budget_s,
            top_k,
            seed,
            calibration,
        )
        sections.append(section)
        say(f"layout search done ({section['seconds']:.1f} s)")
        if layout is None:
            job = {**best_kwargs, **timing}
            job.setdefault("placement_seed", seed)
    if step is None:
        step = _step_section(fabric, model, gpu, job, optimized=True)
    section, result = step
    sections.append(section)
    say(f"step time done ({section['seconds']:.1f} s)")
    sections.append(_utilization_section(fabric, model, job, result.details["routing_seed"]))
    say(f"utilization done ({sections[-1]['seconds']:.1f} s)")
    kind = fail_kind or default_fail_kind(fabric)
    sections.append(
        _failure_section(fabric, model, gpu, job, result, kind, fail_fractions, fail_seeds, seed)
    )
    say(f"failure sensitivity done ({sections[-1]['seconds']:.1f} s)")
    sections.append(cost_section(fabric, gpu.name, gpus, result))
    say(f"cost and power done ({sections[-1]['seconds']:.1f} s)")

    return {
        "title": f"{model.name} on {gpus:,} x {gpu.name}, {fabric.name}",
        "job": _job_entry(fabric, model, gpu, gpus, job),
        "headline": _headline(result, job, sections, given_layout=layout is not None),
        "sections": sections,
        "seconds": time.monotonic() - started,
    }


def _headline(result, job: dict, sections: list[dict], *, given_layout: bool) -> dict:
    """The report's headline numbers: the job's step time (with its interval), MFU,
    throughput and memory, the fabric's bisection bandwidth, and with ``given_layout`` the
    best layout the search found; the worst failure slowdown when one was measured."""
    headline = {
        "step_time_s": result.step_time_s,
        **(
            {
                "step_time_interval_s": result.interval.to_list(),
                "step_time_interval_level": result.interval.level,
            }
            if result.interval is not None
            else {}
        ),
        "mfu": result.mfu,
        "tokens_per_s": result.tokens_per_s,
        "memory_gib_per_gpu": result.memory_gib_per_gpu,
        "layout": _describe(job),
        "bisection_Bps": sections[0]["bisection_Bps"],
    }
    search = next((s for s in sections if s["id"] == "layouts"), None)
    if search is not None and given_layout:  # the given layout against the best found
        headline["best_layout"] = search["best_layout"]
        headline["best_step_time_s"] = search["best_step_time_s"]
    failures = next(s for s in sections if s["id"] == "failures")
    if failures["worst_slowdown"] is not None:
        headline["worst_failure_slowdown"] = failures["worst_slowdown"]
    return headline


def _job_entry(fabric, model, gpu, gpus: int, job: dict) -> dict:
    """The report's ``job`` entry: what was timed (fabric, model, GPU, layout, order,
    placement, routing...) and the ``fabricflow step`` flags that time it again."""
    lay = job["layout"]
    return {
        "fabric": fabric.name,
        "model": model.name,
        "gpu": gpu.name,
        "gpus": gpus,
        "layout": dataclasses.asdict(lay),
        "order": job["order"],
        "placement": job["placement"],
        "placement_seed": job.get("placement_seed", 0),
        "routing": job.get("routing", "auto"),
        "algorithms": dict(job.get("algorithms") or {}),
        "collectives": job.get("collectives", "fabric"),
        # the flags of 'fabricflow step' that time this job again (after the job's
        # fabric, model, GPU and GPU count): the headline's number, exactly
        "step_arguments": step_arguments(lay, **{k: job[k] for k in STEP_OPTIONS if k in job}),
    }


def _section(id_: str, title: str, text: str, settings: dict, started: float, **extra) -> dict:
    return {
        "id": id_,
        "title": title,
        "text": text,
        "settings": settings,
        "tables": extra.pop("tables", []),
        "figures": extra.pop("figures", []),
        "seconds": time.monotonic() - started,
        **extra,
    }


def _fabric_section(fabric) -> dict:
    started = time.monotonic()
    summary = fabric.summary()
    overview = _fabric_overview(summary)
    kinds, tiers = _kind_and_tier_rows(summary)
    return _section(
        "fabric",
        "Fabric summary and bisection",
        f"{summary['description']}. Bisection: {summary['bisection_definition']}."
        + "".join(f" Warning: {w}." for w in summary["warnings"]),
        {"fabric": fabric.name},
        started,
        tables=[
            {"caption": "Overview", "columns": [("item", ""), ("value", "")], "rows": overview},
            {
                "caption": "Links per kind (a cable is two directed links; parallel cables "
                "between one switch pair are one link)",
                "columns": [
                    ("kind", "kind"),
                    ("links", "directed links"),
                    ("cables", "physical cables"),
                    ("total_Tbps", "total Tb/s"),
                ],
                "rows": kinds,
            },
            {
                "caption": "Switch tiers",
                "columns": [
                    ("tier", "tier"),
                    ("name", "name"),
                    ("switches", "switches"),
                    ("oversubscription", "oversubscription (down:up)"),
                    ("ports", "ports used per switch"),
                ],
                "rows": tiers,
            },
        ],
        figures=[
            {
                "name": "fabric_tiers",
                "caption": "Links and capacity per link kind",
                "png": _png(lambda path: plot_tiers(fabric, path)),
            }
        ],
        bisection_Bps=summary["bisection_bandwidth_Bps"],
    )


def _fabric_overview(summary: dict) -> list[dict]:
    """The rows (``item``, ``value`` as text) of the fabric's overview table, from
    :meth:`~fabricflow.Fabric.summary`: GPUs, scale-up domain, switches, links, failures,
    bisection bandwidth in total and per GPU."""
    scale_up = summary["scale_up_link_kind"]
    return [
        {"item": "GPUs", "value": f"{summary['num_gpus']:,}"},
        {"item": "GPUs per node", "value": summary["gpus_per_node"]},
        {
            "item": "scale-up domain",
            "value": f"{summary['scale_up_domain_size']} GPUs"
            + (f" ({scale_up})" if scale_up else ""),
        },
        {"item": "network switches", "value": f"{summary['num_network_switches']:,}"},
        {
            "item": "scale-up switches",
            "value": f"{summary['num_scale_up_switches']:,} (one per {scale_up} domain)"
            if scale_up
            else "0",
        },
        {"item": "directed links", "value": f"{summary['num_links']:,}"},
        {"item": "failures", "value": failure_text(summary)},
        {
            "item": "bisection bandwidth (one way)",
            "value": format_bandwidth(summary["bisection_bandwidth_Bps"])
            + f" ({summary['bisection_bandwidth_Bps'] / 1e12:,.2f} TB/s)",
        },
        {
            "item": "bisection per GPU (over the GPUs of one half)",
            "value": format_bandwidth(summary["bisection_per_gpu_Bps"])
            + (
                f", {100 * summary['bisection_ratio']:.3g} % of full bisection"
                if summary["bisection_ratio"] is not None
                else ""
            ),
        },
    ]


def _kind_and_tier_rows(summary: dict) -> tuple[list[dict], list[dict]]:
    """The rows of the links-per-kind table (directed links, cables, total Tb/s) and of
    the switch-tier table (switches, oversubscription, ports used), from
    :meth:`~fabricflow.Fabric.summary`."""
    kinds = [
        {
            "kind": kind,
            "links": count,
            "cables": summary["cables_per_kind"][kind],
            "total_Tbps": summary["capacity_per_kind_Bps"][kind] * 8 / 1e12,
        }
        for kind, count in summary["links_per_kind"].items()
    ]
    tiers = [
        {
            "tier": t["tier"],
            "name": t["name"],
            "switches": t["switches"],
            "oversubscription": "top tier"
            if t["oversubscription"] is None
            else f"{t['oversubscription']:.3g}:1",
            "ports": port_usage_text(t),
        }
        for t in summary["tiers"]
    ]
    return kinds, tiers


# step_time's options besides the layout that a job (or an optimizer candidate) carries
STEP_OPTIONS = ("order", "placement", "placement_seed", "routing", "algorithms", "collectives")


def _describe(kwargs: dict) -> str:
    """Everything that sets the step time of ``kwargs`` (a job or a candidate), one line."""
    return describe_step(kwargs["layout"], **{k: kwargs[k] for k in STEP_OPTIONS if k in kwargs})


def _describe_apart(kwargs: dict) -> str:
    """:func:`_describe` without the rank order and placement, for a table that gives them
    in their own cells."""
    options = {k: kwargs[k] for k in STEP_OPTIONS if k in kwargs}
    rest = describe_options(placement_too=False, **options)
    return describe_layout(kwargs["layout"]) + (", " + rest if rest else "")


def _layouts_section(
    fabric, model, gpu, gpus, global_batch, seq_len, layout, budget_s, top_k, seed,
    calibration=None,
):  # fmt: skip
    started = time.monotonic()
    if layout is not None:  # compare with the given layout's batch and sequence length
        global_batch, seq_len = layout.global_batch, layout.seq_len
    search = optimize_layout(
        model,
        gpu,
        fabric,
        gpus=gpus,
        global_batch=global_batch,
        seq_len=seq_len,
        precision=layout.precision if layout is not None else "bf16",
        top_k=top_k,
        budget_s=budget_s,
        placement_seed=seed,
        calibration=calibration,
    )
    if search.stopped == "interrupted":
        # the optimizer answers Ctrl-C with its best so far; a report stops whole instead
        raise KeyboardInterrupt("the layout search was interrupted")
    rows = _top_rows(search)
    counts = search.counts
    text = (
        f"Layout optimizer over TP, CP, EP, PP (with virtual stages), DP, micro-batch, "
        f"recompute, ZeRO, rank order and placement: {counts['considered']:,} candidates "
        f"considered, {counts['infeasible']:,} infeasible (memory, divisibility), "
        f"{counts['pruned']:,} pruned by the compute-only bound, {counts['evaluated']:,} "
        f"timed with contention in {search.seconds:.1f} s; "
        + ("the search was exhaustive." if search.exhaustive else f"stopped: {search.stopped}.")
    )
    return (
        _section(
            "layouts",
            "Best layouts",
            text,
            {
                "global_batch": global_batch,
                "seq_len": seq_len,
                "budget_s": budget_s,
                "top_k": top_k,
                "seed": seed,
                "exhaustive": search.exhaustive,
            },
            started,
            tables=[
                {
                    "caption": f"Top {len(rows)} layouts by step time",
                    "columns": [
                        ("rank", "#"),
                        ("layout", "layout"),
                        ("order", "rank order"),
                        ("placement", "placement"),
                        ("step_s", "step (s)"),
                        ("mfu_pct", "MFU (%)"),
                        ("memory_gib", "GiB/GPU"),
                        ("exposed", "largest exposed comm"),
                    ],
                    "rows": rows,
                }
            ],
            figures=[
                {
                    "name": "layouts_pareto",
                    "caption": "Step time vs memory per GPU of every timed candidate",
                    "png": _png(lambda path: plot_pareto(search, path)),
                },
                {
                    "name": "layouts_top_breakdown",
                    "caption": f"Step-time breakdown of the top {len(rows)}",
                    "png": _png(lambda path: plot_breakdown_top(search, path)),
                },
            ],
            best_layout=_describe(search.best_kwargs),
            best_step_time_s=search.best.step_time_s,
        ),
        dict(search.best_kwargs),
    )


def _top_rows(search) -> list[dict]:
    """One row per answer of a :class:`~fabricflow.LayoutSearch`, best first: its layout,
    rank order, placement, step (s), MFU (%), memory (GiB per GPU) and the largest
    exposed communication (``"tp 0.012 s"``, or ``"none"``)."""
    rows = []
    for rank, (kwargs, res) in enumerate(search.top, 1):
        comm = {k: v for k, v in res.breakdown.items() if k in ("tp", "cp", "ep", "pp", "dp")}
        worst = max(comm, key=lambda k: comm[k]) if comm else None
        rows.append(
            {
                "rank": rank,
                "layout": _describe_apart(kwargs),  # order and placement have columns
                "order": kwargs["order"],
                "placement": kwargs["placement"],
                "step_s": res.step_time_s,
                "mfu_pct": 100 * res.mfu,
                "memory_gib": res.memory_gib_per_gpu,
                "exposed": f"{worst} {comm[worst]:.3g} s"
                if worst is not None and comm[worst] > 0
                else "none",
            }
        )
    return rows


def _step_kwargs(job: dict) -> dict:
    """What :func:`step_time` takes from the job: the layout and every option it carries
    (order, placement, placement seed, routing, algorithms, collective backend), and the
    calibration and interval level of the report."""
    keys = ("layout", *STEP_OPTIONS, "calibration", "interval_level")
    return {k: job[k] for k in keys if k in job}


def _interval_rows(result) -> list[dict]:
    """The step time's prediction interval as a headline row (none without one)."""
    band = result.interval
    if band is None:
        return []
    source = "the calibration" if band.method == "calibration" else "published runs"
    return [
        {
            "item": f"step time, {100 * band.level:.0f} % interval",
            "value": f"{band.low:.4g} .. {band.high:.4g} s (from {source}: {band.basis})",
        }
    ]


def _step_section(fabric, model, gpu, job, *, optimized: bool):
    started = time.monotonic()
    result = step_time(model, gpu, fabric=fabric, **_step_kwargs(job))
    total = result.step_time_s
    rows = [
        {
            "part": key,
            "seconds": result.breakdown[key],
            "share_pct": 100 * result.breakdown[key] / total,
        }
        for key in BREAKDOWN_KEYS
        if result.breakdown.get(key, 0.0) > 0
    ]
    rows.append({"part": "total", "seconds": total, "share_pct": 100.0})
    lay = job["layout"]
    mem = result.memory.as_gib()
    headline = [
        {"item": "layout", "value": _describe_apart(job)},
        {"item": "rank order, placement", "value": f"{job['order']}, {job['placement']}"},
        {"item": "step time", "value": f"{total:.4g} s ({lay.num_micro_batches} micro-batches)"},
        *_interval_rows(result),
        {"item": "MFU", "value": f"{100 * result.mfu:.1f} %"},
        {"item": "tokens/s", "value": f"{result.tokens_per_s:,.0f}"},
        {"item": "memory per GPU", "value": f"{mem['total']:.1f} GiB"},
    ]
    coupling = result.details.get("coupling") or {}
    if coupling.get("isolated_step_s"):
        headline.append(
            {
                "item": "contention between dimensions",
                "value": f"+{coupling['added_s']:.3g} s over each dimension alone",
            }
        )
    label = f"{model.name}\n{_describe(job).split(',')[0]}"
    source = "the layout optimizer's best" if optimized else "the layout given"
    return (
        _section(
            "step",
            "Step-time breakdown",
            f"Step time of {source} from the step model: per-layer compute on {gpu.name}, "
            "pipeline bubble, and the exposed time of each dimension's collectives, timed "
            "as flows on the fabric with max-min fair sharing (overlapping dimensions share "
            "links).",
            {
                "global_batch": lay.global_batch,
                "seq_len": lay.seq_len,
                "precision": lay.precision,
                "seed": job.get("placement_seed", 0),
            },
            started,
            tables=[
                {"caption": "Job", "columns": [("item", ""), ("value", "")], "rows": headline},
                {
                    "caption": "Breakdown (exposed seconds per step)",
                    "columns": [
                        ("part", "part"),
                        ("seconds", "seconds"),
                        ("share_pct", "share (%)"),
                    ],
                    "rows": rows,
                },
            ],
            figures=[
                {
                    "name": "step_breakdown",
                    "caption": "Step time by component",
                    "png": _png(lambda path: plot_breakdown([(label, result)], path)),
                }
            ],
        ),
        result,
    )


def job_collectives(model, layout) -> list[tuple[str, str, float, str]]:
    """The job's collectives as ``(group set, op, bytes, description)``, with the message
    sizes the step model uses for them (one rank's buffer, nccl-tests convention)."""
    tokens = layout.micro_batch * layout.seq_len / layout.cp
    out = []
    if layout.tp > 1:
        op = "reduce_scatter" if layout.sequence_parallel else "all_reduce"
        out.append(("tp", op, 2.0 * tokens * model.hidden_size, "tensor-parallel activations"))
    if layout.cp > 1:
        chunk = 2.0 * tokens * model.kv_width / layout.tp
        out.append(("cp", "sendrecv", chunk, "context-parallel K/V ring"))
    if model.is_moe and layout.ep > 1:
        copies = tokens / layout.tp * model.experts_per_token * model.hidden_size
        out.append(("ep", "all_to_all", 2.0 * copies * layout.moe_imbalance, "MoE dispatch"))
    if layout.pp > 1:
        size = 2.0 * tokens * model.hidden_size / layout.tp
        out.append(("pp", "sendrecv", size, "pipeline activations"))
    dense, expert = stage_parameters(model, layout)
    grad_bytes = 4.0 if layout.grad_reduce_dtype == "fp32" else 2.0
    dp_op = "all_reduce" if layout.zero == 0 else "reduce_scatter"
    if layout.dp * layout.cp > 1 and dense > 0:
        out.append(("dp", dp_op, grad_bytes * dense, "data-parallel gradients"))
    if model.is_moe and layout.expert_dp > 1 and expert > 0:
        out.append(("edp", dp_op, grad_bytes * expert, "expert data-parallel gradients"))
    return out


def collective_utilization(prepared, size: float) -> tuple[np.ndarray, str]:
    """float64 ``[L]`` peak utilization (load / payload capacity, max over phases) of the
    algorithm the collective model picks at ``size``, and that algorithm's name.

    Every link the flows cross has its load: under ``adaptive`` routing, whose routes
    list one representative link per set of equal-cost links (each carrying the same
    load), every link of the set gets its representative's
    (:func:`~fabricflow.routing.clos.adaptive_link_values`), as ``spray`` routes give it.
    """
    chosen = prepared.evaluate([size])[0]
    solved = next(s for s in prepared.solved if s.algorithm.name == chosen.algorithm)
    capacity = prepared.capacity
    peak = np.zeros(capacity.shape[0])
    usable = capacity > 0
    for phase in solved.phases:
        load = phase.link_load(capacity.shape[0])
        np.maximum(peak, np.where(usable, load / np.where(usable, capacity, 1.0), 0.0), out=peak)
    if prepared.routing == "adaptive":
        peak = adaptive_link_values(prepared.fabric, peak)
    return peak, chosen.algorithm


# (key, header) of the utilization and failure tables
_UTILIZATION_COLUMNS = [
    ("collective", "collective"),
    ("algorithm", "algorithm"),
    ("kind", "link kind"),
    ("links", "links"),
    ("used", "carrying traffic"),
    ("mean", "mean"),
    ("p99", "p99"),
    ("max", "max"),
    ("saturated", "saturated"),
]
_FAILURE_COLUMNS = [
    ("fraction_pct", "failed (%)"),
    ("failed", "cables failed"),
    ("reduced", "links at reduced capacity"),
    ("draws", "draws"),
    ("mean_s", "mean step (s)"),
    ("max_s", "worst step (s)"),
    ("slowdown_pct", "worst slowdown (%)"),
    ("errors", "draws that failed"),
]


def _utilization_section(fabric, model, job, routing_seed: int) -> dict:
    """Per-tier link utilization of the job's collectives, routed as the headline's step
    was (``routing_seed``: the step result's ``details["routing_seed"]``), so that the
    section shows the flows that step time solved."""
    started = time.monotonic()
    lay = job["layout"]
    where = place(
        lay,
        fabric.num_gpus,
        order=job["order"],
        placement=job["placement"],
        seed=job.get("placement_seed", 0),
        gpus_per_node=fabric.gpus_per_node,
        fabric=fabric,
        model=model,
    )
    # The step model's own group sets and routing: the solves are shared with step_time
    # through the process-wide structure cache, so this re-solves nothing it already did.
    routing = job.get("routing", "auto")
    cache = register_groups(
        CollectiveCache(
            fabric,
            "fabric",
            seed=routing_seed,
            algorithms=job.get("algorithms"),
            routing=routing,
        ),
        where,
        model,
        lay,
    )
    resolved = routing_for(fabric) if routing == "auto" else routing
    rows, figures = [], []
    for name, op, size, what in job_collectives(model, lay):
        prepared = cache.collective(name, op)
        if prepared is None:
            continue
        peak, algorithm = collective_utilization(prepared, size)
        groups = cache.groups[name]
        for kind, stats in tier_summary(
            peak, fabric.link_kind_id, fabric.link_kinds, fabric.link_up
        ).items():
            if stats["max"] <= 0:
                continue  # a tier this collective never touches
            rows.append(
                {
                    "collective": f"{name} {op}",
                    "algorithm": algorithm,
                    "kind": kind,
                    "links": stats["links"],
                    "used": int(((peak > 0) & (fabric.link_kind == kind)).sum()),
                    "mean": stats["mean"],
                    "p99": stats["p99"],
                    "max": stats["max"],
                    "saturated": stats["saturated"],
                }
            )
        title = (
            f"{what}: {name} {op} ({algorithm}), {groups.shape[0]:,} groups of {groups.shape[1]}, "
            f"{size / 2**20:,.1f} MiB"
        )
        figures.append(
            {
                "name": f"utilization_{name}",
                "caption": title,
                "png": _png(functools.partial(plot_utilization_by_tier, fabric, peak, title=title)),
            }
        )
    text = _utilization_text(resolved, crossing=bool(rows))
    return _section(
        "utilization",
        "Per-tier utilization under the job's collectives",
        text,
        {
            "routing": resolved + (" (auto: the fabric's transport)" if routing == "auto" else ""),
            "routing_seed": routing_seed,
        },
        started,
        tables=[
            {
                "caption": "Link utilization by tier, per collective",
                "columns": _UTILIZATION_COLUMNS,
                "rows": rows,
            }
        ],
        figures=figures,
    )


def _utilization_text(routing: str, *, crossing: bool) -> str:
    """The utilization section's text: how the figures were made under ``routing`` (the
    resolved policy), and a note when no collective of the job crosses a link."""
    text = (
        "Each collective of the job is run by all its groups at once, at the job's placement, "
        "with the algorithm the collective model picks for the message size the step model "
        "uses; its transfers are routed and their rates max-min solved. Utilization is each "
        "link's load over its payload capacity at the busiest phase of the algorithm; "
        "statistics are over all links of a kind (idle ones included, failed ones left out). "
        f"Routing {routing}: "
        + (
            "each flow is split evenly over all its equal-cost paths, so every link of a "
            "path set carries traffic and is counted."
            if routing in ("adaptive", "spray")
            else "the links counted are those the flows' paths cross."
        )
    )
    if not crossing:
        text += " The job has no collective that crosses a link (one GPU, or every group of one)."
    return text


def _failure_section(fabric, model, gpu, job, healthy, kind, fractions, seeds, seed) -> dict:
    started = time.monotonic()
    kwargs = _step_kwargs(job)
    rows, points = [], []
    cables = cables_per_kind(fabric).get(kind, 0)
    before = int(fabric.meta.get("failed_cables", 0))
    for fraction in sorted(float(f) for f in fractions):
        times, failed, reduced, errors = [], [], [], []
        for draw in range(seed, seed + seeds):
            broken = fabric.without(link_kind=kind, fraction=fraction, seed=draw)
            failed.append(int(broken.meta.get("failed_cables", 0)) - before)
            # links still up with fewer cables than built (partly failed bundles)
            reduced.append(int(broken.meta.get("reduced_links", 0)))
            try:
                result = step_time(model, gpu, fabric=broken, **kwargs)
            except FabricflowError as error:  # e.g. failures cut the job apart
                errors.append(f"seed {draw}: {type(error).__name__}: {error}")
                continue
            times.append(result.step_time_s)
            points.append((fraction, result.step_time_s))
        row = _failure_row(fraction, failed, reduced, times, errors, seeds, healthy.step_time_s)
        rows.append(row)
    slowdowns = [r["slowdown_pct"] for r in rows if r["slowdown_pct"] is not None]

    def plot(path: str) -> None:
        # slowdown against the healthy step, in %: equal times stay a flat line at 0
        # instead of an axis offset by the step time
        def slowdown(seconds):
            return 100 * (np.asarray(seconds, dtype=float) / healthy.step_time_s - 1)

        fig = new_figure(figsize=(6.5, 4.2))
        ax = fig.subplots()
        ax.axhline(
            0, color="#8c8c8c", ls="--", lw=1, label=f"no failures ({healthy.step_time_s:.4g} s)"
        )
        top = 1.0
        if points:
            xs, ys = zip(*points, strict=True)
            ax.scatter(
                100 * np.asarray(xs), slowdown(ys), s=18, color="#c44e52", label="one failure draw"
            )
            top = max(top, 1.15 * float(slowdown(ys).max()))
            means = [(r["fraction_pct"], r["mean_s"]) for r in rows if r["mean_s"] is not None]
            if means:
                mx, my = zip(*means, strict=True)
                ax.plot(mx, slowdown(my), "-", color="#4c72b0", label="mean over draws")
        ax.ticklabel_format(axis="y", useOffset=False)
        ax.set_ylim(-0.05 * top, top)
        ax.set_xlim(0, 105 * max(float(f) for f in fractions))
        ax.set_xlabel(f"failed {kind} cables (%)")
        ax.set_ylabel("step-time slowdown (%)")
        ax.set_title(f"Failure sensitivity: {kind} cables of {fabric.name}", fontsize=10)
        ax.legend(fontsize=8)
        fig.tight_layout()
        save_figure(fig, path)

    section = _section(
        "failures",
        "Failure sensitivity",
        f"Step time of the same layout, order and placement with a random fraction of the "
        f"{cables:,} physical {kind} cables failed (both directions of a cable fail together; "
        f"a bundle of parallel cables loses the capacity of its failed ones and stays up at "
        f"reduced capacity until its last one fails; routing then uses the surviving paths). "
        f"{seeds} random draw{'' if seeds == 1 else 's'} per fraction; the slowdown is "
        f"the worst draw against the healthy step of {healthy.step_time_s:.4g} s.",
        {
            "link_kind": kind,
            "fractions": [float(f) for f in fractions],
            "draws": seeds,
            "first_seed": seed,
        },
        started,
        tables=[
            {
                "caption": f"Step time with failed {kind} cables",
                "columns": _FAILURE_COLUMNS,
                "rows": rows,
            }
        ],
        figures=[
            {
                "name": "failure_sensitivity",
                "caption": "Step-time slowdown vs failed fraction",
                "png": _png(plot),
            }
        ],
        worst_slowdown=max(slowdowns) / 100 if slowdowns else None,
    )
    return section


def _failure_row(
    fraction: float,
    failed: list[int],
    reduced: list[int],
    times: list[float],
    errors: list[str],
    draws: int,
    healthy_s: float,
) -> dict:
    """The failure table's row of one failed ``fraction``: cables failed and links at
    reduced capacity (a range over the draws), mean and worst step time (s) of the draws
    that ran, the worst slowdown against the healthy step (``healthy_s``, in %), and the
    draws that failed."""
    return {
        "fraction_pct": 100 * fraction,
        "failed": f"{min(failed)}-{max(failed)}" if min(failed) != max(failed) else failed[0],
        "reduced": f"{min(reduced)}-{max(reduced)}" if min(reduced) != max(reduced) else reduced[0],
        "draws": draws,
        "mean_s": float(np.mean(times)) if times else None,
        "max_s": float(np.max(times)) if times else None,
        # rounded to 1e-6 %: float noise of re-summed identical times is no slowdown
        "slowdown_pct": round(100 * (float(np.max(times)) / healthy_s - 1), 6) if times else None,
        "errors": "; ".join(errors) if errors else "",
    }


__all__ = [
    "DEFAULT_FAIL_FRACTIONS",
    "SECTIONS",
    "build_report",
    "collective_utilization",
    "default_fail_kind",
    "job_collectives",
]
