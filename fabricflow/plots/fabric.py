"""Design-review plots of a fabric and of routed traffic (matplotlib figures, no pyplot).

* :func:`plot_tiers`: capacity per link kind and, per switch tier, the capacity down and
  up (its oversubscription) with the ports in use, on linear axes (equal tiers look
  equal), numbers formatted as the ``fabricflow fabric`` command prints them;
* :func:`plot_topology_sketch`: the tiers as rows, a few switches of each drawn with the
  links between them, each row labelled with its counts;
* :func:`plot_link_values_by_kind`: a histogram per link kind of a per-link value (flows
  per link, utilization), every link counted, idle ones included.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fabricflow.fabric.summary import port_usage_text
from fabricflow.plots.figures import new_figure, save_figure
from fabricflow.units import bit_rate_unit, format_bandwidth

# Switches (or GPUs) drawn per row of the sketch.
SKETCH_NODES = 16


def fabric_title(fabric, summary: dict) -> str:
    """Two lines: GPUs and switches, then the bisection as the CLI words it."""
    tiers = ", ".join(
        f"{t['switches']:,} {t['name']}"
        + (f" ({t['oversubscription']:.3g}:1)" if t["oversubscription"] else "")
        for t in summary["tiers"]
    )
    ratio = summary["bisection_ratio"]
    return (
        f"{fabric.name}: {fabric.num_gpus:,} GPUs; network switches: {tiers or 'none'}\n"
        f"bisection {format_bandwidth(summary['bisection_bandwidth_Bps'])} one way, "
        f"{format_bandwidth(summary['bisection_per_gpu_Bps'])} per GPU of one half"
        + (f" ({100 * ratio:.3g} % of full bisection)" if ratio is not None else "")
    )


def plot_tiers(fabric, path: str | Path) -> Path:
    """:func:`tiers_figure` saved to ``path``."""
    return save_figure(tiers_figure(fabric), Path(path))


def tiers_figure(fabric):
    """Left: total capacity per link kind (both directions; cable counts on the bars).
    Right: per switch tier, the capacity of its down- and uplinks with the
    oversubscription and the ports used per switch. Linear axes, each in the bit-rate unit
    (Gb/s, Tb/s, Pb/s, Eb/s) in which its largest bar reads 1 to 1,000."""
    summary = fabric.summary()
    kinds = list(summary["links_per_kind"])
    capacity = np.array([summary["capacity_per_kind_Bps"][k] for k in kinds])
    # each axis in the bit-rate unit of its largest bar (Gb/s .. Eb/s): no 1e7 offsets
    unit, scale = bit_rate_unit(capacity.max(initial=0.0))
    capacity = capacity / scale
    tiers = summary["tiers"]
    fig = new_figure(figsize=(11, 4.4))
    axes = fig.subplots(1, 2 if tiers else 1, squeeze=False)[0]
    ax = axes[0]
    bars = ax.bar(kinds, capacity, color="tab:blue")
    for bar, kind in zip(bars, kinds, strict=True):
        ax.annotate(
            f"{summary['cables_per_kind'].get(kind, 0):,} cables",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_ylabel(f"total capacity, both directions ({unit})")
    ax.set_xlabel("link kind")
    ax.set_ylim(0, capacity.max(initial=1.0) * 1.15)
    ax.set_title("capacity per link kind", fontsize=9)
    if tiers:
        ax = axes[1]
        x = np.arange(len(tiers))
        down = np.array([t["down_capacity_Bps"] for t in tiers])
        upper = np.array([t["up_capacity_Bps"] for t in tiers])
        unit, scale = bit_rate_unit(max(down.max(initial=0.0), upper.max(initial=0.0)))
        down, upper = down / scale, upper / scale
        ax.bar(x - 0.2, down, 0.4, label="down (towards the GPUs)", color="tab:green")
        ax.bar(x + 0.2, upper, 0.4, label="up (towards the top tier)", color="tab:orange")
        for i, t in enumerate(tiers):
            ratio = (
                "top tier" if t["oversubscription"] is None else f"{t['oversubscription']:.3g}:1"
            )
            ax.annotate(
                f"{ratio}\nports {port_usage_text(t)}",
                (i, max(down[i], upper[i])),
                ha="center",
                va="bottom",
                fontsize=8,
            )
        ax.set_xticks(x)
        ax.set_xticklabels([f"{t['name']}\n({t['switches']:,} switches)" for t in tiers])
        ax.set_ylabel(f"capacity out of the tier's switches ({unit})")
        ax.set_ylim(0, max(down.max(initial=0), upper.max(initial=0), 1e-9) * 1.45)
        ax.legend(fontsize=8, loc="upper center", ncol=2)
        ax.set_title("switch tiers: down vs up (oversubscription)", fontsize=9)
    fig.suptitle(fabric_title(fabric, summary), fontsize=10)
    fig.tight_layout()
    return fig


def _rows(fabric) -> list[tuple[str, np.ndarray]]:
    """``(label, node ids)`` per row of the sketch, bottom up: scale-up switches (inside
    the servers, under their GPUs), GPUs, then each scale-out tier."""
    tier = fabric.node_tier
    rows = []
    if np.any(tier < 0):
        rows.append((f"{fabric.scale_up_link_kind} domain switches", np.flatnonzero(tier < 0)))
    rows.append(("GPUs", np.flatnonzero(tier == 0)))
    for level in sorted(set(tier[tier >= 1].tolist())):
        nodes = np.flatnonzero(tier == level)
        rows.append((str(fabric.node_kind[nodes[0]]), nodes))
    return rows


def plot_topology_sketch(fabric, path: str | Path) -> Path:
    """:func:`topology_figure` saved to ``path``."""
    return save_figure(topology_figure(fabric), Path(path))


def topology_figure(fabric):
    """A schematic of the fabric: one row per tier (GPUs at the bottom), the first
    :data:`SKETCH_NODES` nodes of each row drawn with the working links among the drawn
    nodes, and each row labelled with its node count; each band between rows with the
    cables and capacity of the link kinds that join them."""
    summary = fabric.summary()
    rows = _rows(fabric)
    fig = new_figure(figsize=(10, 1.4 + 1.3 * len(rows)))
    ax = fig.subplots()
    position = np.full((fabric.num_nodes, 2), np.nan)
    for level, (label, nodes) in enumerate(rows):
        shown = nodes[:SKETCH_NODES]
        xs = np.linspace(0.08, 0.92, shown.size) if shown.size > 1 else np.array([0.5])
        position[shown] = np.column_stack([xs, np.full(shown.size, float(level))])
        more = "" if nodes.size <= shown.size else f" (first {shown.size} drawn)"
        gpus = label == "GPUs"
        ax.scatter(xs, np.full(shown.size, level), s=30 if gpus else 90, marker="s", zorder=3)
        ax.text(-0.02, level, f"{label}\n{nodes.size:,}{more}", ha="right", va="center", fontsize=8)
    drawn = np.isfinite(position[fabric.link_src, 0]) & np.isfinite(position[fabric.link_dst, 0])
    drawn &= fabric.link_up & (fabric.link_src < fabric.link_dst)
    bend = np.sin(np.linspace(0.0, np.pi, 21))
    for link in np.flatnonzero(drawn):
        a, b = position[fabric.link_src[link]], position[fabric.link_dst[link]]
        if a[1] == b[1]:  # a link inside a row (dragonfly local links): an arc above it
            xs = np.linspace(a[0], b[0], bend.size)
            ax.plot(xs, a[1] + 0.35 * abs(b[0] - a[0]) * bend, color="0.6", lw=0.5, zorder=1)
        else:
            ax.plot([a[0], b[0]], [a[1], b[1]], color="0.6", lw=0.6, zorder=1)
    band = _band_labels(fabric, summary, rows)
    for height, text in band.items():
        ax.text(1.0, height, text, ha="left", va="center", fontsize=8, color="0.25")
    ax.set_xlim(-0.3, 1.35)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.axis("off")
    ax.set_title(fabric_title(fabric, summary), fontsize=10)
    fig.tight_layout()
    return fig


def _band_labels(fabric, summary: dict, rows) -> dict[float, str]:
    """Text per gap between rows ``i`` and ``i + 1``: the link kinds joining them, with
    their cables and capacity per cable."""
    row_of = np.full(fabric.num_nodes, -1)
    for level, (_, nodes) in enumerate(rows):
        row_of[nodes] = level
    low = np.minimum(row_of[fabric.link_src], row_of[fabric.link_dst])
    high = np.maximum(row_of[fabric.link_src], row_of[fabric.link_dst])
    out: dict[float, str] = {}
    kinds = np.asarray(fabric.link_kinds, dtype=object)[fabric.link_kind_id]
    for kind in summary["cables_per_kind"]:
        mask = (kinds == kind) & fabric.link_up
        levels = set(zip(low[mask].tolist(), high[mask].tolist(), strict=True))
        cables = summary["cables_per_kind"][kind]
        per_cable = fabric.capacity[mask].sum() / max(2 * cables, 1)
        text = f"{kind}: {cables:,} cables x {format_bandwidth(per_cable)}"
        for a, b in levels:
            key = float(a) + 0.5 if a != b else float(a) + 0.3  # inside a row: its arcs
            out[key] = (out[key] + "\n" if key in out else "") + text
    return out


def plot_link_values_by_kind(
    fabric, values: np.ndarray, path: str | Path, *, xlabel: str, title: str, kinds=None
) -> Path:
    """:func:`link_values_figure` saved to ``path``."""
    return save_figure(
        link_values_figure(fabric, values, xlabel=xlabel, title=title, kinds=kinds), Path(path)
    )


def link_values_figure(fabric, values: np.ndarray, *, xlabel: str, title: str, kinds=None):
    """Histogram of a per-link value (flows per link, utilization) for each link kind,
    over every working link of the kind: links at 0 are counted (in the first bin) and
    the legend says how many there are. Integer values (flows per link) get one bin per
    integer while they span at most 60, integer-wide bins beyond, so no bin is empty by
    construction."""
    kinds = kinds or [k for k in fabric.link_kinds if (fabric.link_kind == k).any()]
    values = np.asarray(values, np.float64)
    fig = new_figure(figsize=(7.5, 4.2))
    ax = fig.subplots()
    working = fabric.link_up
    chosen = [
        (kind, values[fabric.links_of_kind(kind)][working[fabric.links_of_kind(kind)]])
        for kind in kinds
    ]
    chosen = [(kind, data) for kind, data in chosen if data.size]
    every = np.concatenate([data for _, data in chosen]) if chosen else np.zeros(1)
    bins = _bins(every)
    for kind, data in chosen:
        idle = int(np.count_nonzero(data == 0))
        label = f"{kind}: {data.size:,} links" + (f", {idle:,} carry none" if idle else "")
        ax.hist(data, bins=bins, histtype="step", linewidth=1.5, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("links (log scale)")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def _bins(values: np.ndarray) -> np.ndarray:
    """Bin edges: integer-aligned for integer data (no empty bins between integers),
    50 even bins from 0 otherwise."""
    top = float(values.max(initial=0.0))
    if np.all(values == np.round(values)):
        width = max(1, int(np.ceil((top + 1) / 60)))
        return np.arange(-0.5, top + width + 0.5, width)
    return np.linspace(0.0, max(top, 1e-12), 51)


__all__ = [
    "fabric_title",
    "link_values_figure",
    "plot_link_values_by_kind",
    "plot_tiers",
    "plot_topology_sketch",
    "tiers_figure",
    "topology_figure",
]
