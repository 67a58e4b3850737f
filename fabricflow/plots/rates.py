"""Design-review plots of max-min solutions: utilization by tier, flow completion CDF."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fabricflow.plots.figures import new_figure, save_figure
from fabricflow.solve.maxmin.link_views import tier_summary


def plot_utilization_by_tier(fabric, utilization, path: str | Path, *, title: str = "") -> Path:
    """One histogram per link kind of link utilization (load / capacity), saved as PNG.

    Args:
        fabric: the :class:`~fabricflow.Fabric` the links belong to.
        utilization: ``[L]`` from :func:`fabricflow.solve.maxmin.link_views.link_utilization`.
        path: output file (PNG/SVG/PDF by suffix).
    """
    utilization = np.asarray(utilization, np.float64)
    summary = tier_summary(utilization, fabric.link_kind_id, fabric.link_kinds, fabric.link_up)
    kinds = list(summary)
    fig = new_figure(figsize=(3.2 * max(len(kinds), 1), 3.2))
    axes = fig.subplots(1, max(len(kinds), 1), squeeze=False)
    bins = np.linspace(0, 1, 41)
    for ax, kind in zip(axes[0], kinds, strict=False):
        chosen = (fabric.link_kind_id == fabric.link_kinds.index(kind)) & fabric.link_up
        ax.hist(np.clip(utilization[chosen], 0, 1), bins=bins, color="tab:blue")
        stats = summary[kind]
        ax.set_title(
            f"{kind}: {stats['links']:,} links\nmean {stats['mean']:.2f}, "
            f"p99 {stats['p99']:.2f}, saturated {stats['saturated']:,}",
            fontsize=8,
        )
        ax.set_xlabel("utilization (load / capacity)")
        ax.set_yscale("log")
    axes[0][0].set_ylabel("links")
    fig.suptitle(title or f"{fabric.name}: link utilization by tier", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    save_figure(fig, path)
    return path


def plot_fct_cdf(fct_s: dict | np.ndarray, path: str | Path, *, title: str = "") -> Path:
    """Empirical CDF of flow completion times (seconds, log x axis), one curve per label.

    Args:
        fct_s: ``[F]`` completion times, or ``{label: [F]}`` to compare scenarios.
        path: output file.
    """
    curves = fct_s if isinstance(fct_s, dict) else {"flows": fct_s}
    fig = new_figure(figsize=(5, 3.5))
    ax = fig.subplots()
    for label, values in curves.items():
        values = np.sort(np.asarray(values, np.float64))
        values = values[np.isfinite(values)]
        if values.size:
            ax.step(
                values * 1e3,
                np.arange(1, values.size + 1) / values.size,
                where="post",
                label=f"{label} (p99 {np.percentile(values, 99) * 1e3:.3g} ms)",
            )
    ax.set_xscale("log")
    ax.set_xlabel("flow completion time (ms)")
    ax.set_ylabel("fraction of flows")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "flow completion time CDF", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    save_figure(fig, path)
    return path
