"""Figures of each rate law against its paper (:mod:`fabricflow.study.cc_laws`): time
series of queues, rates or delays with the analytic steady state drawn beside them."""

from __future__ import annotations

import numpy as np

from fabricflow.plots.figures import new_figure


def _throughput(result, flows) -> np.ndarray:
    """bytes/s of ``flows`` together between consecutive records ``[R - 1]``."""
    delivered = result.delivered[:, flows].astype(np.float64).sum(axis=1)
    return np.diff(delivered) / np.diff(result.time)


def _incast_ids(part) -> list:
    return part.roles["incast"]


def plot_queue_and_utilization(result, scenario, expected, *, title: str, target_key: str):
    """Two panels: the bottleneck queue of each part (KB) and its incast flows'
    utilization, over time (ms), with the analytic steady state dashed."""
    fig = new_figure(figsize=(8, 5.5))
    top, bottom = fig.subplots(2, 1, sharex=True)
    time_ms = result.time * 1e3
    capacity = float(result.capacity[scenario.parts[0].bottleneck])
    for k, (part, rest) in enumerate(zip(scenario.parts, expected, strict=True)):
        colour = f"C{k}"
        label = f"{len(_incast_ids(part))}-to-1"
        top.plot(time_ms, result.queue[:, part.bottleneck] / 1e3, color=colour, lw=1, label=label)
        top.axhline(rest["queue_bytes"] / 1e3, color=colour, ls="--", lw=0.8)
        share = _throughput(result, _incast_ids(part)) / capacity
        bottom.plot(time_ms[1:], share, color=colour, lw=1, label=label)
        bottom.axhline(rest[target_key], color=colour, ls="--", lw=0.8)
    top.set_ylabel("bottleneck queue (KB)")
    top.set_yscale("symlog", linthresh=1.0)
    top.legend(fontsize=8, title="dashed: analytic", title_fontsize=7)
    bottom.set_ylabel("bottleneck utilization")
    bottom.set_ylim(0.8, 1.02)
    bottom.set_xlabel("time (ms)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_hpcc(result, scenario, expected):
    """HPCC: near-zero queues and utilization just above ``eta`` on both incasts."""
    return plot_queue_and_utilization(
        result,
        scenario,
        expected,
        target_key="utilization",
        title="HPCC (eta = 0.95): queue near zero, utilization eta + N W_AI / (C T)",
    )


def plot_predictive(result, scenario, expected):
    """The predictive controller: its target queue at full utilization."""
    return plot_queue_and_utilization(
        result,
        scenario,
        expected,
        target_key="utilization",
        title="Predictive (MPC): queue at d_ref x C, utilization 1",
    )


def plot_timely(result, scenario, starts):
    """TIMELY (left) and patched TIMELY (right): each pair's two rates over time (Gb/s)."""
    fig = new_figure(figsize=(9, 4.2))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, entry, name in zip(axes, (0, 1), ("TIMELY", "patched TIMELY"), strict=True):
        one = result.batch_item(entry)
        time_ms = one.time[1:] * 1e3
        for k, (part, start) in enumerate(zip(scenario.parts, starts, strict=True)):
            for j, flow in enumerate(np.arange(one.num_flows)[part.flows]):
                rate = _throughput(one, [flow]) * 8 / 1e9
                label = f"start {start[0]:g}:{start[1]:g}" if j == 0 else None
                ax.plot(
                    time_ms, rate, color=f"C{k}", lw=0.8, ls="-" if j == 0 else ":", label=label
                )
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("time (ms)")
    axes[0].set_ylabel("throughput (Gb/s)")
    axes[0].legend(fontsize=8)
    fig.suptitle("Two flows on 10 Gb/s: TIMELY's rates depend on where they start", fontsize=10)
    fig.tight_layout()
    return fig


def plot_swift(result, scenario, expected):
    """Swift: the fabric queueing delay of each incast against its target."""
    fig = new_figure(figsize=(8, 3.8))
    ax = fig.subplots()
    time_ms = result.time * 1e3
    capacity = float(result.capacity[scenario.parts[0].bottleneck])
    base_rtt = 2 * 4e-6
    for k, (part, rest) in enumerate(zip(scenario.parts, expected, strict=True)):
        delay_us = result.queue[:, part.bottleneck] / capacity * 1e6
        label = f"{len(_incast_ids(part))}-to-1"
        ax.plot(time_ms, delay_us, color=f"C{k}", lw=1, label=label)
        ax.axhline((rest["target_s"] - base_rtt) * 1e6, color=f"C{k}", ls="--", lw=0.8)
    ax.set_ylabel("queueing delay at the bottleneck (us)")
    ax.set_xlabel("time (ms)")
    ax.set_ylim(0, None)
    ax.legend(fontsize=8, title="dashed: target - base RTT", title_fontsize=7)
    ax.set_title("Swift holds its target delay (flow scaling raises it for 16 flows)", fontsize=10)
    fig.tight_layout()
    return fig


__all__ = [
    "plot_hpcc",
    "plot_predictive",
    "plot_queue_and_utilization",
    "plot_swift",
    "plot_timely",
]
