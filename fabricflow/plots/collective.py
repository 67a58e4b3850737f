"""Bus bandwidth and time of a collective against the message size, per algorithm.

From one size sweep (:func:`fabricflow.collective.size_sweep.collective_sweep`): every
:class:`~fabricflow.collective.CollectiveResult` carries the time of each candidate
``algorithm/protocol`` (``candidates``), so each algorithm's curve (its best protocol at
each size) costs no extra solve. The algorithm the model picks at each size is drawn as
a wide grey band under the lines.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fabricflow.collective.ops import busbw_factor
from fabricflow.plots.figures import new_figure, save_figure
from fabricflow.units import format_size


def algorithm_curves(results) -> dict[str, np.ndarray]:
    """``{algorithm: float64 [S] seconds}``: each candidate algorithm's time at each of
    the ``S`` sizes of ``results``, the best of its protocols (``nan`` where it was not
    a candidate)."""
    names = sorted({label.split("/")[0] for r in results for label in r.candidates})
    curves = {name: np.full(len(results), np.nan) for name in names}
    for k, result in enumerate(results):
        for label, seconds in result.candidates.items():
            name = label.split("/")[0]
            curves[name][k] = np.fmin(curves[name][k], seconds)
    return curves


def plot_collective(results, path: str | Path, *, title: str = "") -> Path:
    """Two panels against the message size (log2): bus bandwidth (GB/s, nccl-tests
    convention, linear) and time (us, log), one line per algorithm, the chosen one (per
    size) as a grey band beneath them."""
    sizes = np.array([r.size for r in results], np.float64)
    op, n = results[0].op, results[0].group_size
    factor = busbw_factor(op, n)
    curves = algorithm_curves(results)
    chosen = [r.algorithm for r in results]
    fig = new_figure(figsize=(11, 4.2))
    bw_ax, time_ax = fig.subplots(1, 2)
    for name, seconds in curves.items():
        with np.errstate(divide="ignore", invalid="ignore"):
            busbw = sizes / seconds * factor / 1e9
        bw_ax.plot(sizes, busbw, ".-", lw=1.4, ms=4, label=name, zorder=2)
        time_ax.plot(sizes, seconds * 1e6, ".-", lw=1.4, ms=4, label=name, zorder=2)
    best = np.array([r.time_s for r in results])
    picked = f"chosen ({', '.join(dict.fromkeys(chosen))})"
    # a wide band under the algorithms' lines, so the chosen one stays visible on it
    band = {"color": "0.2", "alpha": 0.25, "lw": 7, "zorder": 1, "label": picked}
    bw_ax.plot(sizes, sizes / best * factor / 1e9, **band)
    time_ax.plot(sizes, best * 1e6, **band)
    for ax in (bw_ax, time_ax):
        ax.set_xscale("log", base=2)
        ticks = sizes[:: max(1, int(np.ceil(sizes.size / 8)))]
        ax.set_xticks(ticks)
        ax.set_xticklabels([format_size(s) for s in ticks], rotation=30, fontsize=8)
        ax.set_xlabel("message size")
        ax.grid(alpha=0.3)
    bw_ax.set_ylabel(f"bus bandwidth (GB/s; algbw x {factor:.3g})")
    bw_ax.set_ylim(bottom=0)
    time_ax.set_yscale("log")
    time_ax.set_ylabel("time of the slowest group (us)")
    bw_ax.legend(fontsize=8)
    fig.suptitle(title or f"{op}, groups of {n}", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, Path(path))


__all__ = ["algorithm_curves", "plot_collective"]
