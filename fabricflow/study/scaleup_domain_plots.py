"""Figures of the scale-up domain study (:mod:`fabricflow.study.scaleup_domain`)."""

from __future__ import annotations

import os

import numpy as np

from fabricflow.plots.figures import new_figure, save_figure
from fabricflow.plots.step import stack_parts

DOMAIN_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3")


def plot_step_time(data, path: str | os.PathLike, *, thumbnail: bool = False) -> None:
    """Step time (s, left) and all-to-all share of the step (right) against the EP size:
    one colour per domain size, solid = contiguous, dashed = domain-aligned placement."""
    fig = new_figure(figsize=(8.0, 3.3) if thumbnail else (11.0, 4.2))
    left, right = fig.subplots(1, 2)
    ep = data.ep.values
    for i, domain_size in enumerate(data.domain_size.values):
        color = DOMAIN_COLORS[i % len(DOMAIN_COLORS)]
        for kind in data.placement.values:
            row = data.sel(domain_size=domain_size, placement=kind)
            style = "-" if kind == "contiguous" else "--"
            label = f"NVL{int(domain_size)}, {kind}"
            left.plot(ep, row.step_time_s.values, style, color=color, marker="o", label=label)
            right.plot(ep, 100 * row.all_to_all_share.values, style, color=color, marker="o")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ep, [str(int(e)) for e in ep])
        ax.set_xlabel("expert-parallel size (EP)")
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
    left.set_ylabel("step time (s)")
    right.set_ylabel("exposed all-to-all (% of step)")
    left.legend(fontsize=7)
    fig.suptitle(
        f"{data.attrs['model']} on {data.attrs['job_gpus']} {data.attrs['gpu']}: "
        "scale-up domain size vs step time",
        fontsize=10,
    )
    fig.tight_layout()
    # thumbnails: 480 px wide whatever the panel count (README table)
    save_figure(fig, path, dpi=round(480 / fig.get_figwidth()) if thumbnail else 120)


def plot_breakdown(data, path: str | os.PathLike, *, placement: str = "contiguous") -> None:
    """Stacked breakdown (s) per EP size, one panel per domain size, for one placement."""
    domains = list(data.domain_size.values)
    fig = new_figure(figsize=(4.2 * len(domains) + 1.2, 3.8))
    axes = np.atleast_1d(fig.subplots(1, len(domains), squeeze=False)[0])
    ep = data.ep.values
    x = np.arange(len(ep))
    top = float(np.nanmax(data.step_time_s.sel(placement=placement).values))
    for ax, domain_size in zip(axes, domains, strict=True):
        parts = data.breakdown_s.sel(domain_size=domain_size, placement=placement)
        stack_parts(ax, x, parts)
        ax.set_xticks(x, [str(int(e)) for e in ep])
        ax.set_xlabel("EP size")
        ax.set_ylim(0, 1.05 * top)
        ax.set_title(f"NVL{int(domain_size)}", fontsize=10)
    axes[0].set_ylabel("seconds per step")
    axes[-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.suptitle(f"Where the time goes ({placement} placement)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)


__all__ = ["plot_breakdown", "plot_step_time"]
