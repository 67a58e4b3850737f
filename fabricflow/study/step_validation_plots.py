"""Figure of the step-model validation (:mod:`fabricflow.study.step_validation`)."""

from __future__ import annotations

import json
import os

import numpy as np

from .figures import new_figure, save_figure

SYSTEM_COLORS = {
    "DGX-A100 (Selene)": "#4c72b0",
    "DGX-H100": "#dd8452",
    "DGX-B200": "#55a868",
    "DGX-GB200": "#c44e52",
}


def plot_validation(data, path: str | os.PathLike, *, thumbnail: bool = False) -> None:
    """Predicted against measured step time (log-log; circles dense, triangles MoE, one
    colour per system; the diagonal and +-10 % band), and the signed error of each run
    (refused runs marked with a cross at 0)."""
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
    x = np.arange(data.sizes["run"])
    colors = [SYSTEM_COLORS.get(str(s), "grey") for s in data.system.values]
    error = np.where(data.refused.values, 0.0, 100 * data.error.values)
    right.bar(x, error, color=colors)
    refused = np.flatnonzero(data.refused.values)
    right.scatter(refused, np.zeros(refused.size), marker="x", color="black", label="refused")
    right.axhline(0, color="black", linewidth=0.8)
    for bound in (-10, 10):
        right.axhline(bound, color="grey", linestyle="--", linewidth=0.8)
    if thumbnail:
        right.set_xticks([])
        right.set_xlabel("published runs (A100 era, then H100, B200, GB200)")
    else:
        right.set_xticks(x, [str(r) for r in data.run.values], rotation=90, fontsize=5)
    right.set_ylabel("step-time error (%)")
    right.grid(alpha=0.3, axis="y")
    if refused.size:
        right.legend(fontsize=7)
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
