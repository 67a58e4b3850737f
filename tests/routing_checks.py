"""Route checks shared by the routing tests (importable as `routing_checks`)."""

from __future__ import annotations

import networkx as nx
import numpy as np


def random_pairs(num_gpus, count, seed=0):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, num_gpus, count)
    dst = (src + rng.integers(1, num_gpus, count)) % num_gpus
    return src, dst


def assert_valid_walks(fabric, routes, src, dst):
    """Every row is a connected walk from the source GPU's node to the destination GPU's
    node over existing, working links, with padding only at the end."""
    links = routes.links
    valid = links >= 0
    assert np.all(valid[:, :-1] | ~valid[:, 1:])
    assert np.all(links[valid] < fabric.num_links)
    hops = valid.sum(axis=1)
    assert np.all(hops >= 1)
    first = links[:, 0]
    last = links[np.arange(len(links)), hops - 1]
    assert np.all(fabric.link_src[first] == fabric.gpu_node[src])
    assert np.all(fabric.link_dst[last] == fabric.gpu_node[dst])
    inner = valid[:, 1:]
    assert np.all(fabric.link_dst[links[:, :-1]][inner] == fabric.link_src[links[:, 1:]][inner])
    assert np.all(fabric.link_up[links[valid]])


def networkx_hops(fabric, src, dst, *, gpu_transit):
    """Independent minimal hop counts (networkx BFS) over working links; without GPU
    transit, GPUs other than the endpoints are removed from the graph per flow."""
    graph = nx.DiGraph()
    up = fabric.link_up
    graph.add_nodes_from(range(fabric.num_nodes))
    graph.add_edges_from(
        zip(fabric.link_src[up].tolist(), fabric.link_dst[up].tolist(), strict=True)
    )
    gpu_nodes = set(fabric.gpu_node.tolist())
    out = []
    for s, d in zip(fabric.gpu_node[src].tolist(), fabric.gpu_node[dst].tolist(), strict=True):
        view = (
            graph
            if gpu_transit
            else nx.subgraph_view(
                graph, filter_node=lambda n, s=s, d=d: n in (s, d) or n not in gpu_nodes
            )
        )
        out.append(nx.shortest_path_length(view, s, d))
    return np.asarray(out)
