"""Figures of the DCQCN parameter map (:mod:`fabricflow.study.dcqcn_map`)."""

from __future__ import annotations

import numpy as np
import xarray as xr

from fabricflow.plots.figures import new_figure

# (variable, scale, label, colormap) per heat-map row
_ROWS = (
    ("queue_p99_bytes", 1e-3, "bottleneck queue p99 (KB)", "viridis"),
    ("utilization", 1.0, "bottleneck utilization", "magma"),
    ("victim_share", 1.0, "victim rate / line rate", "cividis"),
)


def _rate_label(rate_ai_Bps: float) -> str:
    return f"R_AI = {rate_ai_Bps * 8 / 1e6:g} Mb/s"


def plot_map(ds: xr.Dataset):
    """Heat maps ``kmin x kmax``, one column per ``R_AI``: bottleneck queue p99, bottleneck
    utilization and the victim's share of its line rate, with the values written in."""
    ds = ds.assign(victim_share=ds.victim_throughput_Bps / ds.attrs["bandwidth_Bps"])
    columns = ds.sizes["rate_ai_Bps"]
    fig = new_figure(figsize=(3.3 * columns + 0.8, 8.2))
    axes = np.atleast_2d(fig.subplots(len(_ROWS), columns, squeeze=False))
    kmin = ds.kmin_bytes.values / 1e3
    kmax = ds.kmax_bytes.values / 1e3
    for row, (name, scale, label, cmap) in enumerate(_ROWS):
        values = ds[name].values * scale
        low, high = np.nanmin(values), np.nanmax(values)
        for col in range(columns):
            ax = axes[row, col]
            grid = values[:, :, col]
            image = ax.imshow(grid, origin="lower", cmap=cmap, vmin=low, vmax=high, aspect="auto")
            for (i, j), value in np.ndenumerate(grid):
                if np.isfinite(value):
                    text = f"{value:.0f}" if scale != 1.0 else f"{value:.2f}"
                    light = (value - low) / (high - low) > 0.6 if high > low else False
                    color = "k" if light else "w"  # readable on light and dark cells
                    ax.text(j, i, text, ha="center", va="center", fontsize=7, color=color)
            ax.set_xticks(range(kmax.size), [f"{v:g}" for v in kmax], fontsize=8)
            ax.set_yticks(range(kmin.size), [f"{v:g}" for v in kmin], fontsize=8)
            if row == len(_ROWS) - 1:
                ax.set_xlabel("K_max (KB)")
            if col == 0:
                ax.set_ylabel("K_min (KB)")
            if row == 0:
                ax.set_title(_rate_label(float(ds.rate_ai_Bps[col])), fontsize=10)
        fig.colorbar(image, ax=list(axes[row]), label=label, shrink=0.9)
    fig.suptitle(
        f"DCQCN: {ds.attrs['scenario']}, "
        f"{ds.attrs['bandwidth_Bps'] * 8 / 1e9:g} Gb/s, PFC {ds.attrs['pfc']}",
        fontsize=10,
    )
    return fig


def plot_tradeoff(ds: xr.Dataset):
    """Utilization against the bottleneck's p99 queue, one marker series per ``R_AI``."""
    fig = new_figure(figsize=(5.5, 4))
    ax = fig.subplots()
    for k, rate in enumerate(ds.rate_ai_Bps.values):
        sel = ds.isel(rate_ai_Bps=k)
        ax.scatter(
            sel.queue_p99_bytes.values.ravel() / 1e3,
            sel.utilization.values.ravel(),
            label=_rate_label(float(rate)),
            s=22,
        )
    ax.set_xlabel("bottleneck queue p99 (KB)")
    ax.set_ylabel("bottleneck utilization")
    ax.set_title("Every (K_min, K_max) point: queue against throughput")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


__all__ = ["plot_map", "plot_tradeoff"]
