"""Design-review plots of a fabric and of routed traffic (matplotlib figures, no pyplot)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .figures import new_figure, save_figure


def plot_tiers(fabric, path: str | Path) -> Path:
    """Bar charts: directed links per kind and total capacity per kind (Tb/s)."""
    summary = fabric.summary()
    kinds = list(summary["links_per_kind"])
    counts = [summary["links_per_kind"][k] for k in kinds]
    capacity = [summary["capacity_per_kind_Bps"][k] * 8 / 1e12 for k in kinds]
    fig = new_figure(figsize=(10, 4))
    axes = fig.subplots(1, 2)
    axes[0].bar(kinds, counts, color="tab:blue")
    axes[0].set_ylabel("directed links")
    axes[0].set_yscale("log")
    axes[1].bar(kinds, capacity, color="tab:orange")
    axes[1].set_ylabel("total capacity (Tb/s)")
    axes[1].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("link kind")
    tiers = ", ".join(
        f"{t['name']} {t['switches']}"
        + (f" ({t['oversubscription']:.3g}:1)" if t["oversubscription"] else "")
        for t in summary["tiers"]
    )
    fig.suptitle(
        f"{fabric.name}: {fabric.num_gpus:,} GPUs; switches {tiers}\n"
        f"bisection {summary['bisection_bandwidth_Bps'] * 8 / 1e12:,.0f} Tb/s one way",
        fontsize=10,
    )
    fig.tight_layout()
    path = Path(path)
    save_figure(fig, path)
    return path


def plot_link_values_by_kind(
    fabric, values: np.ndarray, path: str | Path, *, xlabel: str, title: str, kinds=None
) -> Path:
    """Histogram of a per-link value (flows per link, utilization...) for each link kind,
    over the links that carry anything."""
    kinds = kinds or [k for k in fabric.link_kinds if (fabric.link_kind == k).any()]
    fig = new_figure(figsize=(7, 4))
    ax = fig.subplots()
    for kind in kinds:
        ids = fabric.links_of_kind(kind)
        data = values[ids]
        data = data[data > 0]
        if data.size:
            ax.hist(
                data, bins=50, histtype="step", linewidth=1.5, label=f"{kind} ({data.size:,} links)"
            )
    ax.set_xlabel(xlabel)
    ax.set_ylabel("links")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    save_figure(fig, path)
    return path
