"""Figures of the oversubscription study (:mod:`fabricflow.study.oversubscription`)."""

from __future__ import annotations

import os

import numpy as np

from fabricflow.plots.figures import new_figure, save_figure
from fabricflow.plots.step import stack_parts

ORDER_LABELS = {
    "tp-cp-ep-dp-pp": "PP outermost (pods split the pipeline)",
    "tp-cp-ep-pp-dp": "DP outermost (gradients cross pods)",
}


def plot_step_time(data, path: str | os.PathLike, *, thumbnail: bool = False) -> None:
    """Step time (s) against the spine ratio, one panel per job, one line per rank order."""
    models = list(data.model.values)
    fig = new_figure(figsize=(4.0 * len(models), 3.4) if thumbnail else (5.0 * len(models), 4.0))
    axes = np.atleast_1d(fig.subplots(1, len(models), squeeze=False)[0])
    ratios = data.oversubscription.values
    for ax, model in zip(axes, models, strict=True):
        for order in data.order.values:
            values = data.step_time_s.sel(model=model, order=order).values
            ax.plot(ratios, values, marker="o", label=ORDER_LABELS.get(str(order), str(order)))
        name = str(data.model_name.sel(model=model).values)
        ax.set_title(f"{model}: {name}", fontsize=10)
        ax.set_xticks(ratios, [f"{r:g}:1" for r in ratios])
        ax.set_xlabel("spine-tier oversubscription")
        ax.set_ylabel("step time (s)")
        low = float(np.nanmin(data.step_time_s.sel(model=model).values))
        ax.set_ylim(bottom=0.9 * low)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"Step time vs oversubscription ({data.attrs['fabric']})", fontsize=10)
    fig.tight_layout()
    # thumbnails: 480 px wide whatever the panel count (README table)
    save_figure(fig, path, dpi=round(480 / fig.get_figwidth()) if thumbnail else 120)


def plot_breakdown(data, path: str | os.PathLike, *, order: str = "tp-cp-ep-pp-dp") -> None:
    """Stacked step-time breakdown (s) per spine ratio for one rank order, one panel per job."""
    models = list(data.model.values)
    fig = new_figure(figsize=(5.0 * len(models) + 1.2, 4.0))
    axes = np.atleast_1d(fig.subplots(1, len(models), squeeze=False)[0])
    ratios = data.oversubscription.values
    x = np.arange(len(ratios))
    for ax, model in zip(axes, models, strict=True):
        parts = data.breakdown_s.sel(model=model, order=order)
        stack_parts(ax, x, parts)
        ax.set_xticks(x, [f"{r:g}:1" for r in ratios])
        ax.set_xlabel("spine-tier oversubscription")
        ax.set_ylabel("seconds per step")
        ax.set_title(f"{model}: {str(data.model_name.sel(model=model).values)}", fontsize=10)
    axes[-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.suptitle(f"Where the time goes, {ORDER_LABELS.get(order, order)}", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)


__all__ = ["plot_breakdown", "plot_step_time"]
