"""Figures of the congestion-control comparison (:mod:`fabricflow.study.cc_compare`): one
figure per metric family (queues, throughput, fairness, PFC, convergence), each with one
panel per scenario and one bar (group) per rate law, values written on the bars."""

from __future__ import annotations

import numpy as np
import xarray as xr

from fabricflow.plots.figures import new_figure

#: family -> [(variable, scale, label)], one bar series per variable.
FAMILIES = {
    "queues": [
        ("queue_p50_bytes", 1e-3, "p50"),
        ("queue_p99_bytes", 1e-3, "p99"),
        ("queue_max_bytes", 1e-3, "max (whole run)"),
    ],
    "throughput": [("utilization", 1.0, "bottleneck utilization")],
    "fairness": [
        ("jain_fairness", 1.0, "Jain index of rate / max-min"),
        ("min_share", 1.0, "worst rate / max-min"),
    ],
    "pfc": [("pause_fraction", 1.0, "most-paused link"), ("victim_flows", 1.0, "victim flows")],
    "convergence": [("convergence_time_s", 1e3, "settled after")],
}
UNITS = {
    "queues": "egress queue at the bottleneck (KB)",
    "throughput": "fraction of capacity",
    "fairness": "fraction (1: fair)",
    "pfc": "fraction of the run / flows",
    "convergence": "ms (blank: never settled)",
}


def plot_family(ds: xr.Dataset, family: str):
    """One figure: panels per scenario, bars per law (and per variable of ``family``)."""
    rows = FAMILIES[family]
    laws = [str(cc) for cc in ds.cc.values]
    scenarios = [str(sc) for sc in ds.scenario.values]
    fig = new_figure(figsize=(3.6 * len(scenarios) + 0.6, 3.8))
    axes = np.atleast_1d(fig.subplots(1, len(scenarios), squeeze=False)[0])
    width = 0.8 / len(rows)
    positions = np.arange(len(laws))
    for ax, scenario in zip(axes, scenarios, strict=True):
        for k, (name, scale, label) in enumerate(rows):
            values = ds[name].sel(scenario=scenario).values * scale
            bars = ax.bar(
                positions + (k - (len(rows) - 1) / 2) * width,
                np.nan_to_num(values),
                width,
                label=label,
            )
            for bar, value in zip(bars, values, strict=True):
                text = "never" if not np.isfinite(value) else _short(value)
                ax.annotate(
                    text,
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center",
                    va="bottom",
                    fontsize=6,
                    rotation=90,
                )
        ax.set_xticks(positions, laws, rotation=30, fontsize=8)
        ax.set_title(scenario, fontsize=10)
        ax.margins(y=0.25)
    axes[0].set_ylabel(UNITS[family])
    if len(rows) > 1:
        axes[-1].legend(fontsize=7, loc="upper right")
    fig.suptitle(
        f"{family}: {ds.attrs.get('scenarios', '')}, PFC {ds.attrs.get('pfc', '')}", fontsize=9
    )
    fig.tight_layout()
    return fig


def _short(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def plot_all(ds: xr.Dataset) -> dict:
    """``{"cc_<family>": figure}`` for every family of :data:`FAMILIES`."""
    return {f"cc_{family}": plot_family(ds, family) for family in FAMILIES}


__all__ = ["FAMILIES", "plot_all", "plot_family"]
