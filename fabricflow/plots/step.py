"""Stacked-bar plot of a step-time breakdown, for design reviews."""

from __future__ import annotations

import numpy as np

from fabricflow.plots.figures import new_figure, save_figure
from fabricflow.workload.step import BREAKDOWN_KEYS, StepResult

COLORS = {
    "compute": "#4c72b0",
    "bubble": "#dd8452",
    "tp": "#55a868",
    "cp": "#8172b3",
    "ep": "#c44e52",
    "pp": "#937860",
    "dp": "#da8bc3",
    "optimizer": "#8c8c8c",
    "offload": "#ccb974",
}


def stack_parts(ax, x, parts) -> None:
    """Stack the breakdown ``parts`` (a DataArray with a ``part`` dimension and one value
    per bar at ``x``, seconds) as bars in the :data:`COLORS` of each part; a part that is
    zero in every bar is left out of the stack and the legend."""
    bottom = np.zeros(len(x))
    for part in parts.part.values:
        values = parts.sel(part=part).values
        if not np.any(values > 0):
            continue
        ax.bar(x, values, bottom=bottom, label=str(part), color=COLORS.get(str(part)))
        bottom += values


def plot_breakdown(results: list[tuple[str, StepResult]], path: str) -> None:
    """Write a stacked bar per ``(label, result)`` (seconds by component, the step time's
    prediction interval as an error bar) to ``path`` (atomically;
    :class:`~fabricflow.errors.OutputError` if it cannot be written)."""
    fig = new_figure(figsize=(max(6.5, 1.6 * len(results) + 4.0), 4.8))
    ax = fig.subplots()
    labels = [label for label, _ in results]
    bottom = [0.0] * len(results)
    for key in BREAKDOWN_KEYS:
        values = [result.breakdown[key] for _, result in results]
        if not any(values):
            continue
        ax.bar(labels, values, bottom=bottom, label=key, color=COLORS[key])
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    top = list(bottom)
    for i, (_, result) in enumerate(results):
        band = getattr(result, "interval", None)
        if band is not None:  # the step time's prediction interval as an error bar
            ax.errorbar(
                i,
                result.step_time_s,
                yerr=[[result.step_time_s - band.low], [band.high - result.step_time_s]],
                color="black",
                capsize=4,
                linewidth=1,
                label=f"{100 * band.level:.0f}% interval" if i == 0 else None,
            )
            top[i] = max(top[i], band.high)
        ax.text(
            i,
            top[i],
            f"{result.step_time_s:.3g} s\nMFU {100 * result.mfu:.1f}%",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_ylabel("seconds per step")
    ax.set_ylim(0, max(top) * 1.2 if max(top) > 0 else 1)
    ax.set_title("Step time breakdown (exposed comm)", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
