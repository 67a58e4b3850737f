"""Figures of the routing study (:mod:`fabricflow.study.routing_study`)."""

from __future__ import annotations

import numpy as np
import xarray as xr

from fabricflow.plots.figures import new_figure


def plot_completion(ds: xr.Dataset):
    """Completion time under max-min sharing, grouped bars per oversubscription, one
    panel per pattern, relative to the best routing of that point (lower is better)."""
    patterns = list(ds.pattern.values)
    fig = new_figure(figsize=(5.2 * len(patterns), 3.8))
    axes = np.atleast_1d(fig.subplots(1, len(patterns)))
    x = np.arange(ds.sizes["oversubscription"])
    width = 0.8 / ds.sizes["routing"]
    for ax, pattern in zip(axes, patterns, strict=True):
        values = ds.completion_s.sel(pattern=pattern)
        best = values.min("routing")
        for r, routing in enumerate(ds.routing.values):
            ax.bar(
                x + (r - (ds.sizes["routing"] - 1) / 2) * width,
                (values.sel(routing=routing) / best).values,
                width,
                label=str(routing),
            )
        ax.set_xticks(x, [f"{v:g}:1" for v in ds.oversubscription.values])
        ax.set_xlabel("leaf oversubscription")
        ax.set_ylabel("completion / best routing")
        ax.set_title(f"{pattern}")
        ax.axhline(1.0, color="k", lw=0.5)
        ax.legend(fontsize=8)
    fig.suptitle(f"Routing on a {ds.attrs['fabric']}", fontsize=9)
    fig.tight_layout()
    return fig


def plot_tiers(ds: xr.Dataset, *, oversubscription: float | None = None):
    """Per-tier link utilization over the completion (bar: mean, whisker: max), one
    panel per pattern, at one oversubscription (default: the largest)."""
    over = float(ds.oversubscription.max()) if oversubscription is None else oversubscription
    sel = ds.sel(oversubscription=over)
    patterns = list(ds.pattern.values)
    fig = new_figure(figsize=(5.2 * len(patterns), 3.8))
    axes = np.atleast_1d(fig.subplots(1, len(patterns)))
    x = np.arange(ds.sizes["tier"])
    width = 0.8 / ds.sizes["routing"]
    for ax, pattern in zip(axes, patterns, strict=True):
        for r, routing in enumerate(ds.routing.values):
            point = sel.sel(pattern=pattern, routing=routing)
            mean = point.tier_mean_utilization.values
            top = point.tier_max_utilization.values
            ax.bar(
                x + (r - (ds.sizes["routing"] - 1) / 2) * width,
                mean,
                width,
                yerr=[np.zeros_like(mean), np.maximum(top - mean, 0.0)],
                capsize=2,
                label=str(routing),
            )
        ax.set_xticks(x, [str(t).replace("_", " ") for t in ds.tier.values])
        ax.set_ylabel("link utilization over the completion")
        ax.set_ylim(0, 1.15)
        ax.set_title(f"{pattern}, {over:g}:1 leaves (bar mean, whisker max)")
        ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return fig


__all__ = ["plot_completion", "plot_tiers"]
