"""Figures of :func:`fabricflow.simulate_cluster` runs.

- :func:`plot_gantt`: one bar per job from start to end, coloured by state (running,
  restarting, queued), failures marked.
- :func:`plot_utilization`: busy, down and spare GPUs over time (and per-tier link
  utilization when the run modelled interference).
- :func:`plot_slowdown_cdf`: CDF of per-job slowdown, one curve per scheduler.
- :func:`plot_goodput_map`: expected goodput over MTBF x checkpoint interval, with the
  Young/Daly optimum drawn over it (and simulated points when given).

Each returns the saved path; figures are built with :func:`~.figures.new_figure`.
"""

from __future__ import annotations

import numpy as np

from .figures import new_figure, save_figure

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
    """Busy / down / spare GPU fraction over time; below, per link kind, the running jobs'
    collective traffic over the kind's capacity.

    That lower panel adds up every collective of every job at the rate it gets while it
    runs (the timeline's ``tier_utilization``). A job's collectives take turns within its
    step (tensor-parallel, then data-parallel traffic, ...), so the sum can exceed 1
    without any job being slowed: it is the load if they all ran at once, an upper bound
    on the time-averaged utilization, and the panel says so."""
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
        low.set_ylabel("collective rates / capacity")
        low.set_title(
            "each job's collectives at their own rates, added up: they take turns within a "
            "step, so above 1 is not congestion (slowdowns show that)",
            fontsize=8,
        )
        low.grid(alpha=0.3)
        if low.get_legend_handles_labels()[0]:
            low.legend(fontsize=8)
        low.set_xlabel("time (h)")
    else:
        ax.set_xlabel("time (h)")
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


def plot_goodput_map(path, *, write_s: float, restart_s: float, mtbf_s, interval_s, simulated=None):
    """Expected goodput over job MTBF (x) and checkpoint interval (y), Young/Daly marked.

    Args:
        write_s, restart_s: checkpoint write and restart times (s).
        mtbf_s, interval_s: the grid axes (s, log-spaced is best).
        simulated: optional list of ``(mtbf_s, interval_s, goodput)`` drawn as labelled dots.
    """
    from ..cluster.failures import expected_goodput, young_daly_interval

    mtbf = np.asarray(mtbf_s, dtype=np.float64)
    tau = np.asarray(interval_s, dtype=np.float64)
    grid = np.array([[expected_goodput(t, write_s, restart_s, m) for m in mtbf] for t in tau])
    fig = new_figure(figsize=(7, 5))
    ax = fig.add_subplot()
    mesh = ax.pcolormesh(mtbf / 3600, tau / 60, grid, shading="nearest", vmin=0, vmax=1)
    fig.colorbar(mesh, ax=ax, label="expected goodput")
    levels = ax.contour(
        mtbf / 3600,
        tau / 60,
        grid,
        levels=[0.5, 0.7, 0.8, 0.9, 0.95],
        colors="white",
        linewidths=0.7,
    )
    ax.clabel(levels, fontsize=7)
    daly = np.array([young_daly_interval(write_s, m) for m in mtbf])
    young = np.array([young_daly_interval(write_s, m, method="young") for m in mtbf])
    ax.plot(mtbf / 3600, daly / 60, "r-", label="Daly optimum")
    ax.plot(mtbf / 3600, young / 60, "r--", label="Young sqrt(2 delta M)")
    for m, t, g in simulated or ():
        ax.plot(m / 3600, t / 60, "ko", ms=4)
        ax.annotate(
            f"{g:.2f}", (m / 3600, t / 60), fontsize=7, xytext=(3, 3), textcoords="offset points"
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("job MTBF (h)")
    ax.set_ylabel("checkpoint interval (min)")
    ax.set_title(f"goodput: write {write_s:g} s, restart {restart_s:g} s")
    ax.legend(fontsize=8, loc="lower right")
    return save_figure(fig, path)
