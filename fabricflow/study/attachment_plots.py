"""Figures of the attachment study (:mod:`fabricflow.study.attachment`)."""

from __future__ import annotations

import os

import numpy as np

from fabricflow.plots.figures import new_figure, save_figure

STYLE = {"rail": ("#4c72b0", "o"), "tor": ("#dd8452", "s")}
OP_TITLES = {
    "all_reduce": "ring all-reduce",
    "all_to_all": "all-to-all",
}


def plot_busbw(data, path: str | os.PathLike, *, thumbnail: bool = False) -> None:
    """Bus bandwidth (GB/s) vs message size: rows = op, columns = leaf ratio, lines =
    attachment (colour) x PXN (solid on, dashed off); dotted: NCCL's automatic choice.
    ``thumbnail``: the most oversubscribed leaf ratio only, 480 px wide."""
    ops = list(data.op.values)
    ratios = list(data.leaf_oversubscription.values)
    if thumbnail:  # the most oversubscribed leaves only: where attachment matters
        ratios = ratios[-1:]
    size = (6.4, 2.8) if thumbnail else (5.0 * len(ratios), 3.6 * len(ops))
    fig = new_figure(figsize=size)
    axes = fig.subplots(len(ops), len(ratios), squeeze=False)
    if thumbnail:  # one row: op side by side
        fig.clear()
        axes = fig.subplots(1, len(ops), squeeze=False).T
    mib = data["size"].values / 2**20
    for r, op in enumerate(ops):
        for c, ratio in enumerate(ratios):
            ax = axes[r, c]
            for attachment in data.attachment.values:
                color, marker = STYLE.get(str(attachment), (None, "o"))
                for pxn in data.pxn.values:
                    values = data.busbw_Bps.sel(
                        attachment=attachment, leaf_oversubscription=ratio, op=op, pxn=pxn
                    ).values
                    ax.plot(
                        mib,
                        values / 1e9,
                        color=color,
                        marker=marker,
                        markersize=4,
                        linestyle="-" if pxn else "--",
                        label=f"{attachment}, PXN {'on' if pxn else 'off'}",
                    )
                if "busbw_auto_Bps" in data:
                    values = data.busbw_auto_Bps.sel(
                        attachment=attachment, leaf_oversubscription=ratio, op=op
                    ).values
                    ax.plot(
                        mib,
                        values / 1e9,
                        color=color,
                        linestyle=":",
                        linewidth=1.2,
                        label=f"{attachment}, automatic algorithm",
                    )
            ax.set_xscale("log", base=2)
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.set_title(f"{OP_TITLES.get(str(op), str(op))}, leaves {ratio:g}:1", fontsize=9)
            if r == len(ops) - 1:
                ax.set_xlabel("message size (MiB)")
            if c == 0:
                ax.set_ylabel("busbw (GB/s)")
    axes[0, 0].legend(fontsize=7)
    if thumbnail:
        fig.suptitle("Rail-optimized vs ToR attachment, 64-GPU groups", fontsize=9)
    else:
        fig.suptitle(
            f"Rail-optimized vs ToR attachment, groups of {data.attrs['groups']}\n"
            f"({data.attrs['fabric']})",
            fontsize=9,
        )
    fig.tight_layout()
    # thumbnails: 480 px wide whatever the panel count (README table)
    save_figure(fig, path, dpi=round(480 / fig.get_figwidth()) if thumbnail else 120)


def plot_step(data, path: str | os.PathLike) -> None:
    """Step time (s) per job: bars for attachment x PXN, grouped by leaf ratio."""
    models = list(data.model.values)
    ratios = list(data.leaf_oversubscription.values)
    fig = new_figure(figsize=(5.0 * len(models), 3.8))
    axes = np.atleast_1d(fig.subplots(1, len(models), squeeze=False)[0])
    combos = [(a, p) for a in data.attachment.values for p in data.pxn.values]
    width = 0.8 / len(combos)
    x = np.arange(len(ratios))
    for ax, model in zip(axes, models, strict=True):
        for i, (attachment, pxn) in enumerate(combos):
            color, _ = STYLE.get(str(attachment), (None, "o"))
            values = data.step_time_s.sel(attachment=attachment, model=model, pxn=pxn).values
            ax.bar(
                x + (i - (len(combos) - 1) / 2) * width,
                values,
                width,
                color=color,
                alpha=1.0 if pxn else 0.55,
                hatch="" if pxn else "//",
                label=f"{attachment}, PXN {'on' if pxn else 'off'}",
            )
        ax.set_xticks(x, [f"leaves {r:g}:1" for r in ratios])
        ax.set_ylabel("step time (s)")
        ax.set_title(f"{model}: {str(data.model_name.sel(model=model).values)}", fontsize=10)
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle(
        "Step time, rail vs ToR (PXN: hierarchical MoE all-to-all; the dense job has none)",
        fontsize=10,
    )
    fig.tight_layout()
    save_figure(fig, path)


__all__ = ["plot_busbw", "plot_step"]
