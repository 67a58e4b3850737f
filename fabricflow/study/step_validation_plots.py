"""Figure of the step-model validation (:mod:`fabricflow.study.step_validation`)."""

from __future__ import annotations

import json
import os

import numpy as np

from fabricflow.plots.figures import new_figure, save_figure

SYSTEM_COLORS = {
    "DGX-A100 (Selene)": "#4c72b0",
    "DGX-H100": "#dd8452",
    "DGX-B200": "#55a868",
    "DGX-GB200": "#c44e52",
    "Meta H100 (RoCE)": "#8172b3",
    "DeepSeek H800 (IB)": "#937860",
}


# left-to-right order of the GPU generations in the error panel
ERA_ORDER = {"ampere": 0, "hopper": 1, "blackwell": 2}


def plot_validation(data, path: str | os.PathLike, *, thumbnail: bool = False) -> None:
    """Predicted against measured step time (log-log; circles dense, triangles MoE, one
    colour per system; the diagonal and +-10 % band), and the signed error of every run by
    class with the class mean (refused runs counted per class)."""
    fig = new_figure(figsize=(8.0, 3.4) if thumbnail else (12.0, 5.0))
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.6]})
    measured = data.measured_step_s.values
    predicted = data.predicted_step_s.values
    low, high = np.nanmin(measured) / 1.5, np.nanmax(measured) * 1.5
    line = np.array([low, high])
    left.plot(line, line, color="black", linewidth=0.8)
    left.fill_between(line, 0.9 * line, 1.1 * line, color="grey", alpha=0.2, label="+-10 %")
    for system, color in SYSTEM_COLORS.items():
        for moe, marker in ((False, "o"), (True, "^")):
            pick = (data.system.values == system) & (data.moe.values == moe)
            pick &= ~data.refused.values
            if pick.any():
                kind = "MoE" if moe else "dense"
                left.scatter(
                    measured[pick],
                    predicted[pick],
                    color=color,
                    marker=marker,
                    s=22,
                    label=f"{system}, {kind}",
                )
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlim(low, high)
    left.set_ylim(low, high)
    left.set_xlabel("published step time (s)")
    left.set_ylabel("predicted step time (s)")
    left.legend(fontsize=6)
    left.grid(alpha=0.3, which="both")
    # the signed error of every run, one column per class (generation, dense/MoE,
    # precision), with the class mean; refused runs counted under their column
    classes = [str(c) for c in data["class"].values]
    names = sorted(set(classes), key=lambda c: (ERA_ORDER.get(c.split()[0], 9), c))
    colors = [SYSTEM_COLORS.get(str(s), "grey") for s in data.system.values]
    error = 100 * data.error.values
    refused = data.refused.values
    rng = np.random.default_rng(0)
    for i, name in enumerate(names):
        pick = np.flatnonzero((np.asarray(classes) == name) & ~refused)
        jitter = rng.uniform(-0.25, 0.25, pick.size)
        right.scatter(i + jitter, error[pick], s=10, c=[colors[j] for j in pick], alpha=0.8)
        if pick.size:
            right.plot([i - 0.35, i + 0.35], [np.mean(error[pick])] * 2, color="black")
        lost = int(np.sum((np.asarray(classes) == name) & refused))
        if lost:
            right.annotate(
                f"{lost}\nrefused", (i, 0.02), xycoords=("data", "axes fraction"),
                fontsize=6, ha="center",
            )  # fmt: skip
    right.axhline(0, color="black", linewidth=0.8)
    for bound in (-10, 10):
        right.axhline(bound, color="grey", linestyle="--", linewidth=0.8)
    right.set_xticks(np.arange(len(names)), [] if thumbnail else names, rotation=90, fontsize=6)
    right.set_xlabel("class (GPU generation, dense / MoE, precision); bar: class mean")
    right.set_ylabel("step-time error (%)")
    right.grid(alpha=0.3, axis="y")
    summary = json.loads(data.attrs["summary"])
    title = ", ".join(
        f"{era}: MAPE {100 * summary[era]['mape']:.1f} %, {100 * summary[era]['refused']:.0f} % refused"
        for era in ("a100", "modern")
        if era in summary and summary[era]["cases"]
    )
    fig.suptitle(f"Step model against published runs ({title})", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)


__all__ = ["plot_validation"]
