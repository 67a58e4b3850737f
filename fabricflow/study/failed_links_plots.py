"""Figures of the failed-links study (:mod:`fabricflow.study.failed_links`)."""

from __future__ import annotations

import numpy as np
import xarray as xr

from fabricflow.plots.figures import new_figure

_PANELS = (
    ("permutation_throughput_Bps", 1e-12, "permutation throughput (TB/s)"),
    ("allreduce_busbw_Bps", 1e-9, "AllReduce busbw (GB/s)"),
    ("step_time_s", 1.0, "step time (s)"),
)

_KIND_LABEL = {"leaf": "leaf-spine cables", "spine": "spine-core cables"}


def plot_failed_links(ds: xr.Dataset):
    """One panel per metric against the failed fraction (%): the median over seeds as a
    line, the min..max over seeds as a band, one color per (cable kind, routing)."""
    panels = [p for p in _PANELS if p[0] in ds]
    fig = new_figure(figsize=(4.2 * len(panels), 3.8))
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    x = ds.fraction.values * 100
    keys = [(str(k), str(r)) for k in ds.link_kind.values for r in ds.routing.values]
    for ax, (name, scale, label) in zip(axes, panels, strict=True):
        var = ds[name] * scale
        routings = list(ds.routing.values) if "routing" in var.dims else ["ecmp"]
        for kind in ds.link_kind.values:
            for routing in routings:
                sel = var.sel(link_kind=kind)
                if "routing" in var.dims:
                    sel = sel.sel(routing=routing)
                # One color per (kind, routing) in every panel.
                color = f"C{keys.index((str(kind), str(routing)))}"
                text = f"{_KIND_LABEL.get(str(kind), kind)}, {routing}"
                ax.plot(x, sel.median("seed").values, marker="o", ms=3, color=color, label=text)
                ax.fill_between(
                    x, sel.min("seed").values, sel.max("seed").values, color=color, alpha=0.2
                )
        ax.set_xlabel("failed cables (%)")
        ax.set_ylabel(label)
        ax.set_xscale("symlog", linthresh=0.5)
        ax.set_xticks(x, [f"{v:g}" for v in x])
        ax.legend(fontsize=7)
    fig.suptitle(
        f"Failed cables on {ds.attrs['fabric']} ({ds.attrs['num_gpus']} GPUs): "
        f"median and range over {ds.sizes['seed']} seeds, routes recomputed",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


__all__ = ["plot_failed_links"]
