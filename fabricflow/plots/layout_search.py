"""Figures of a layout search: Pareto front, top-K breakdown, and the GPU-count sweep."""

from __future__ import annotations

import numpy as np

from fabricflow.layout_search.layout_codes import candidate_of, describe
from fabricflow.plots.figures import new_figure, save_figure
from fabricflow.plots.step import COLORS
from fabricflow.workload.step import BREAKDOWN_KEYS


def pareto_front(step_s: np.ndarray, memory: np.ndarray) -> np.ndarray:
    """Indices of the candidates no other beats on both step time and memory, by memory."""
    order = np.lexsort((step_s, memory))
    best = np.inf
    keep = []
    for i in order:  # one pass over the evaluated candidates (at most a few thousand)
        if step_s[i] < best:
            keep.append(i)
            best = step_s[i]
    return np.asarray(keep, dtype=np.int64)


def plot_pareto(search, path: str) -> str:
    """Step time vs memory per GPU of every timed candidate, the Pareto front joined."""
    ds = search.candidates
    step = np.asarray(ds["step_time_s"].values, dtype=float)
    memory = np.asarray(ds["memory_gib_per_gpu"].values, dtype=float)
    fig = new_figure(figsize=(6.5, 4.5))
    ax = fig.subplots()
    ax.scatter(memory, step, s=8, alpha=0.4, color="#8c8c8c", label="timed candidates")
    front = pareto_front(step, memory)
    if front.size:
        ax.plot(memory[front], step[front], "o-", color="#c44e52", ms=4, label="Pareto front")
    ax.scatter(
        [search.best.memory_gib_per_gpu], [search.best.step_time_s], marker="*", s=120,
        color="#4c72b0", zorder=3, label="best",
    )  # fmt: skip
    ax.set_xlabel("memory per GPU (GiB)")
    ax.set_ylabel("step time (s)")
    ax.set_title("Layout search: step time vs memory per GPU", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    return path


def plot_breakdown_top(search, path: str) -> str:
    """Stacked breakdown bars of the top K candidates, best first."""
    top = search.top
    fig = new_figure(figsize=(max(6.5, 0.8 * len(top) + 4.0), 4.8))
    ax = fig.subplots()
    x = np.arange(len(top))
    bottom = np.zeros(len(top))
    for key in BREAKDOWN_KEYS:
        values = np.asarray([r.breakdown.get(key, 0.0) for _, r in top])
        if not values.any():
            continue
        ax.bar(x, values, bottom=bottom, label=key, color=COLORS.get(key))
        bottom += values
    labels = [describe(candidate_of(kwargs), wrap=True) for kwargs, _ in top]
    ax.set_xticks(x, labels, fontsize=6)
    ax.set_ylabel("seconds per step")
    ax.set_title(f"Top {len(top)} candidates: step time breakdown", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    return path


def plot_sweep(sweep, path: str) -> str:
    """Best step time and its MFU against the GPU count (capacity planning)."""
    gpus = np.asarray(sweep["gpus"].values)
    fig = new_figure(figsize=(6.5, 4.5))
    ax = fig.subplots()
    ax.plot(gpus, sweep["step_time_s"].values, "o-", color="#4c72b0", label="step time")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("best step time (s)", color="#4c72b0")
    twin = ax.twinx()
    twin.plot(gpus, 100 * np.asarray(sweep["mfu"].values), "s--", color="#c44e52", label="MFU")
    twin.set_ylabel("MFU (%)", color="#c44e52")
    ax.set_title("How many GPUs for this batch: best step time and MFU", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)
    return path
