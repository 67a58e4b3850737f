"""Plots of congestion-control/PFC runs: rates and queues over time, and where pauses spread.

Matplotlib figures built without pyplot (no backend switch, no global state). Each
function returns the figure and, given ``path``, saves it there atomically.
"""

from __future__ import annotations

import numpy as np

from fabricflow.dynamics.summaries import select_flows
from fabricflow.plots.figures import new_figure, save_figure


def plot_rates_and_queues(
    result, *, roles=None, links=None, flows=None, path=None, max_flows: int = 16
):
    """Two panels: sending rate per flow (Gb/s) and egress queues (KB) over time (ms).

    ``roles`` (role -> flow ids, as a scenario's): flows are coloured by role and every
    role is shown (:func:`~fabricflow.dynamics.summaries.select_flows` picks at most
    ``max_flows``, small roles whole). ``flows``: explicit flow ids instead. ``links``
    default: the 4 links with the largest peak queue.
    """
    roles = roles or {"flows": list(range(result.num_flows))}
    if flows is None:
        flows = select_flows(roles, result.num_flows, max_flows)
    role_of = {int(f): role for role, ids in roles.items() for f in ids}
    if links is None:
        links = np.argsort(result.queue.max(axis=0))[::-1][:4]
    fig = new_figure(figsize=(8, 6))
    (top, bottom) = fig.subplots(2, 1, sharex=True)
    time_ms = result.time * 1e3
    # Show the rate only while a flow is active (it keeps its last value after finishing).
    active = (result.time[:, None] >= result.start[None, :]) & (
        result.time[:, None] <= result.finish_time[None, :]
    )
    rate = np.where(active, result.rate, np.nan)
    colours = {role: f"C{index % 10}" for index, role in enumerate(roles)}
    labelled: set[str] = set()
    for f in flows:
        role = role_of.get(int(f), "flows")
        label = None
        if role not in labelled:
            count = len(roles.get(role, []))
            label = f"{role} ({count} flow{'s' if count != 1 else ''})"
            labelled.add(role)
        top.plot(time_ms, rate[:, f] * 8 / 1e9, lw=1, color=colours.get(role, "C0"), label=label)
    top.set_ylabel("sending rate (Gb/s)")
    shown = f"{len(flows)} of {result.num_flows} flows" if len(flows) < result.num_flows else ""
    top.set_title(f"{result.cc}, PFC {result.pfc_mode}" + (f" ({shown})" if shown else ""))
    top.legend(fontsize=7, loc="upper right")
    for link in links:
        bottom.plot(time_ms, result.queue[:, link] / 1e3, lw=1, label=f"link {link}")
    bottom.set_ylabel("egress queue (KB)")
    bottom.set_xlabel("time (ms)")
    bottom.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path)
    return fig


def plot_pause_spread(result, fabric, *, path=None):
    """The fabric as a graph, links coloured by the fraction of time they were paused.

    Meant for small fabrics (uses networkx layout by tier: GPUs at the bottom).
    """
    import networkx as nx
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    graph = nx.DiGraph()
    tiers = np.asarray(fabric.node_tier)
    for node in range(fabric.num_nodes):
        graph.add_node(node, subset=int(max(tiers[node], 0)))
    fraction = result.pause_time / result.duration
    for link in range(fabric.num_links):
        graph.add_edge(
            int(fabric.link_src[link]), int(fabric.link_dst[link]), pause=float(fraction[link])
        )
    pos = nx.multipartite_layout(graph, subset_key="subset", align="horizontal")
    fig = new_figure(figsize=(8, 5))
    ax = fig.subplots()
    colors = [graph.edges[e]["pause"] for e in graph.edges]
    nx.draw_networkx_nodes(
        graph,
        pos,
        ax=ax,
        node_size=120,
        node_color=["tab:blue" if tiers[n] == 0 else "tab:gray" for n in graph],
    )
    drawn = nx.draw_networkx_edges(
        graph,
        pos,
        ax=ax,
        edge_color=colors,
        edge_cmap=colormaps["Reds"],
        edge_vmin=0.0,
        edge_vmax=max(1e-9, max(colors)),
        connectionstyle="arc3,rad=0.1",
        arrows=True,
        width=2,
    )
    mappable = ScalarMappable(cmap=colormaps["Reds"], norm=Normalize(0.0, max(1e-9, max(colors))))
    fig.colorbar(mappable, ax=ax, label="fraction of time paused")
    ax.set_title(f"PFC pause spread ({fabric.name})")
    ax.axis("off")
    del drawn
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path)
    return fig
