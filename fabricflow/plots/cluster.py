"""Figures of :func:`fabricflow.simulate_cluster` runs.

- :func:`plot_gantt`: one bar per job from start to end, coloured by state (running,
  restarting, queued), failures marked.
- :func:`plot_utilization`: busy, down and spare GPUs over time (and per-tier link
  utilization when the run modelled interference).
- :func:`plot_slowdown_cdf`: CDF of per-job slowdown, one curve per scheduler.
- :func:`plot_goodput_map`: expected goodput over MTBF x checkpoint interval, with the
  Young/Daly optimum drawn over it (and simulated points when given);
  :func:`goodput_map_axes` picks its axes around a run's jobs.
- :func:`plot_prediction_gain`: goodput gain of failure prediction over reactive restart
  against recall, per lead time (expectation and simulations).

Each returns the saved path; figures are built with :func:`~.figures.new_figure`.
"""

from __future__ import annotations

import numpy as np

from fabricflow.cluster.failures import expected_goodput, young_daly_interval
from fabricflow.cluster.prediction import expected_goodput_with_prediction
from fabricflow.plots.figures import new_figure, save_figure

_COLOURS = {1: "#d9d9d9", 2: "#2b8cbe", 3: "#e34a33"}  # queued, running, restarting


def plot_gantt(run, path, *, max_jobs: int = 200):
    """Gantt chart of ``run.timeline``: a row per job (first ``max_jobs``), time in hours."""
    timeline = run.timeline
    times = np.asarray(timeline["time"]) / 3600.0
    state = np.asarray(timeline["state"])[:, :max_jobs]
    labels = [str(v) for v in np.asarray(timeline["job"])[:max_jobs]]
    height = max(3.0, min(14.0, 0.18 * len(labels) + 1.5))
    fig = new_figure(figsize=(9, height))
    ax = fig.add_subplot()
    ends = np.append(times[1:], times[-1])
    for column in range(state.shape[1]):
        for code, colour in _COLOURS.items():
            mask = state[:-1, column] == code if times.size > 1 else np.zeros(0, bool)
            if not mask.any():
                continue
            starts = times[:-1][mask]
            widths = ends[:-1][mask] - starts
            ax.broken_barh(
                list(zip(starts, widths, strict=True)), (column - 0.4, 0.8), color=colour
            )
    for code, name in ((1, "queued"), (2, "running"), (3, "restarting")):
        ax.bar(0, 0, color=_COLOURS[code], label=name)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels if len(labels) <= 40 else [""] * len(labels), fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (h)")
    ax.set_title(
        f"jobs on {timeline.attrs.get('fabric', '')} ({timeline.attrs.get('scheduler', '')})"
    )
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_utilization(run, path):
    """Busy / down / spare GPU fraction over time; below, per link kind, the utilization
    of its links while the running jobs communicate (the timeline's ``tier_utilization``):
    every running job's collectives in flight together, max-min shared, over the kind's
    capacity, in [0, 1]. A job's collectives take turns within its step, so the links
    idle between them and the time mean is lower; the caption says so."""
    timeline = run.timeline
    hours = np.asarray(timeline["time"]) / 3600.0
    total = float(timeline.attrs.get("gpus_total", 1))
    tiers = np.asarray(timeline["tier_utilization"])
    has_tiers = bool(np.nan_to_num(tiers).max(initial=0.0) > 0)  # a network model ran
    fig = new_figure(figsize=(8, 6 if has_tiers else 3.5))
    ax = fig.add_subplot(2 if has_tiers else 1, 1, 1)
    for name, label in (("gpu_busy", "busy"), ("gpu_down", "down"), ("gpu_spare", "spare")):
        ax.step(hours, np.asarray(timeline[name]) / total, where="post", label=label)
    ax.set_ylabel("fraction of GPUs")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"cluster utilization {run.cluster['utilization']:.3f} (time mean)")
    if has_tiers:
        low = fig.add_subplot(2, 1, 2, sharex=ax)
        for column, name in enumerate(np.asarray(timeline["tier"])):
            if np.isfinite(tiers[:, column]).any() and np.nanmax(tiers[:, column]) > 0:
                low.step(hours, tiers[:, column], where="post", label=str(name))
        low.set_ylabel("link utilization")
        low.set_ylim(0, 1.02)
        low.set_title("link utilization per link kind while the jobs communicate", fontsize=10)
        low.grid(alpha=0.3)
        if low.get_legend_handles_labels()[0]:
            low.legend(fontsize=8)
        low.set_xlabel("time (h)")
        fig.tight_layout(rect=(0, 0.07, 1, 1))
        fig.text(
            0.01,
            0.01,
            "Link utilization: the load on the links of each kind over their capacity, with "
            "every running job's collectives\nin flight at once and sharing the links at "
            "max-min fair rates. Collectives take turns within a step, so links idle\n"
            "between them and the time mean is lower; job slowdowns show the contention.",
            fontsize=9,
            va="bottom",
        )
    else:
        ax.set_xlabel("time (h)")
        fig.tight_layout()
    return save_figure(fig, path)


def plot_slowdown_cdf(runs: dict, path):
    """CDF of per-job slowdown (mean step / standalone), one curve per ``{name: run}``."""
    fig = new_figure(figsize=(6, 4))
    ax = fig.add_subplot()
    for name, run in runs.items():
        values = np.sort([j["slowdown"] for j in run.jobs if j["slowdown"] is not None])
        if values.size == 0:
            continue
        ax.step(
            values,
            np.arange(1, values.size + 1) / values.size,
            where="post",
            label=f"{name} (mean {values.mean():.3f})",
        )
    ax.set_xlabel("slowdown (mean step time / standalone)")
    ax.set_ylabel("fraction of jobs")
    ax.grid(alpha=0.3)
    if ax.get_lines():
        ax.legend(fontsize=8)
    else:  # no job ran (a horizon before the first start): say so instead of a warning
        ax.text(0.5, 0.5, "no job ran", ha="center", va="center", transform=ax.transAxes)
    ax.set_title("job slowdown by scheduler")
    return save_figure(fig, path)


def goodput_map_axes(
    write_s: float, mtbfs_s, intervals_s=(), points: int = 60
) -> tuple[np.ndarray, np.ndarray]:
    """``(MTBF grid, interval grid)`` (s, log-spaced) for :func:`plot_goodput_map` around
    the jobs' MTBFs ``mtbfs_s``: MTBF from half the smallest to twice the largest, the
    interval from a tenth of the smallest job's Young optimum to ten times the largest's
    (widened to hold ``intervals_s``, the intervals simulated), so that the optima cross
    the middle of the map and its contours are readable."""
    mtbfs = np.asarray([m for m in mtbfs_s if m is not None and np.isfinite(m)], dtype=float)
    if not mtbfs.size:
        raise ValueError("no finite MTBF to draw a goodput map for")
    low, high = float(mtbfs.min()) / 2, float(mtbfs.max()) * 2
    if high / low < 10:  # at least a decade of MTBF
        middle = np.sqrt(low * high)
        low, high = middle / np.sqrt(10), middle * np.sqrt(10)
    young_low = young_daly_interval(write_s, low, method="young")
    young_high = young_daly_interval(write_s, high, method="young")
    shown = [float(t) for t in intervals_s if t is not None and np.isfinite(t)]
    bottom = min([max(write_s / 2, young_low / 10)] + [t / 2 for t in shown])
    top = max([young_high * 10] + [t * 2 for t in shown])
    return np.geomspace(low, high, points), np.geomspace(bottom, top, points)


def plot_goodput_map(path, *, write_s: float, restart_s: float, mtbf_s, interval_s, simulated=None):
    """Expected goodput over job MTBF (x, hours) and checkpoint interval (y), with the
    Young and Daly optima drawn over it (and simulated points when given).

    Args:
        write_s, restart_s: checkpoint write and restart times (s).
        mtbf_s, interval_s: the grid axes (s, log-spaced; :func:`goodput_map_axes` picks
            them around a run's jobs).
        simulated: optional list of ``(mtbf_s, interval_s, goodput)`` drawn as labelled dots.
    """
    mtbf = np.asarray(mtbf_s, dtype=np.float64)
    tau = np.asarray(interval_s, dtype=np.float64)
    grid = np.array([[expected_goodput(t, write_s, restart_s, m) for m in mtbf] for t in tau])
    # the interval axis in minutes, or hours when it reaches past a day
    unit, scale = ("h", 3600.0) if tau.max() > 86400 else ("min", 60.0)
    fig = new_figure(figsize=(7.5, 5))
    ax = fig.add_subplot()
    mesh = ax.pcolormesh(
        mtbf / 3600, tau / scale, grid, shading="nearest", vmin=0, vmax=1, cmap="viridis"
    )
    fig.colorbar(mesh, ax=ax, label="expected goodput")
    levels = ax.contour(
        mtbf / 3600,
        tau / scale,
        grid,
        levels=[0.5, 0.7, 0.8, 0.9, 0.95, 0.99],
        colors="white",
        linewidths=0.6,
        alpha=0.8,
    )
    ax.clabel(levels, fontsize=7, fmt="%.2f")
    daly = np.array([young_daly_interval(write_s, m) for m in mtbf])
    young = np.array([young_daly_interval(write_s, m, method="young") for m in mtbf])
    # Young and Daly nearly coincide: Daly thick and solid, Young thin, dashed, on top
    ax.plot(mtbf / 3600, daly / scale, color="#d62728", lw=3.0, label="Daly optimum")
    ax.plot(
        mtbf / 3600,
        young / scale,
        color="#ffbf00",
        lw=1.5,
        ls=(0, (4, 3)),
        label="Young sqrt(2 delta M)",
    )
    for m, t, g in simulated or ():
        ax.plot(m / 3600, t / scale, "o", color="black", mec="white", ms=5)
        ax.annotate(
            f"{g:.2f}",
            (m / 3600, t / scale),
            fontsize=7,
            color="white",
            xytext=(4, 3),
            textcoords="offset points",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(mtbf.min() / 3600, mtbf.max() / 3600)
    ax.set_ylim(tau.min() / scale, tau.max() / scale)
    ax.set_xlabel("job MTBF (h)")
    ax.set_ylabel(f"checkpoint interval ({unit})")
    ax.set_title(f"expected goodput: write {write_s:g} s, restart {restart_s:g} s")
    ax.legend(fontsize=8, loc="upper left", framealpha=0.9)
    return save_figure(fig, path)


def plot_prediction_gain(
    path, rows, *, interval_s: float, restart_s: float, mtbf_s: float, precision: float
):
    """Goodput gain of failure prediction over reactive restart (points) against recall,
    one panel per checkpoint write time: the renewal-theory expectation as a curve per
    lead time, the simulations as points with their seed spread.

    Args:
        rows: the study's rows (``write_s``, ``recall``, ``lead_s``, ``gain_points``,
            ``gain_points_spread``; the reactive rows have ``recall`` None).
        interval_s, restart_s, mtbf_s, precision: the expectation's parameters.
    """
    writes = sorted({row["write_s"] for row in rows})
    leads = sorted({row["lead_s"] for row in rows if row["lead_s"] is not None})
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    styles = ["-", "--", "-.", ":"]  # curves that coincide (leads past the write) both show
    fig = new_figure(figsize=(5 * len(writes), 4))
    recalls = np.linspace(0.0, 1.0, 41)
    axes: list = []
    for column, write in enumerate(writes):
        ax = fig.add_subplot(1, len(writes), column + 1, sharey=axes[0] if axes else None)
        axes.append(ax)

        def expected(recall, lead, write=write):
            return expected_goodput_with_prediction(
                interval_s,
                write,
                restart_s,
                mtbf_s,
                recall=recall,
                precision=precision,
                lead_s=lead,
            )["goodput"]

        base = expected(0.0, 0.0)
        for colour, style, lead in zip(colours, styles, leads, strict=False):
            curve = [100 * (expected(r, lead) - base) for r in recalls]
            ax.plot(
                recalls,
                curve,
                color=colour,
                ls=style,
                lw=1.5,
                label=f"lead {lead / 60:g} min (expected)",
            )
            points = [r for r in rows if r["write_s"] == write and r["lead_s"] == lead]
            for row in points:
                low, high = row["gain_points_spread"]
                ax.errorbar(
                    row["recall"],
                    row["gain_points"],
                    yerr=[[row["gain_points"] - low], [high - row["gain_points"]]],
                    fmt="o",
                    color=colour,
                    ms=5,
                    capsize=3,
                )
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_xlabel("recall (share of failures predicted)")
        ax.set_title(f"checkpoint write {write / 60:g} min, precision {precision:g}")
        ax.grid(alpha=0.3)
        ax.set_xlim(0, 1)
    axes[0].set_ylabel("goodput gain over reactive restart (points)")
    axes[0].plot([], [], "o", color="black", label="simulated (seed spread)")
    axes[0].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return save_figure(fig, path)
