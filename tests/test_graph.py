"""Generic graph fabrics from YAML: building, bundling, GPU transit, routing and spec errors."""

import copy

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from routing_checks import assert_valid_walks, networkx_hops, random_pairs

import fabricflow as ff
from fabricflow.errors import RoutingError, SpecError
from fabricflow.fabric.spec import build_fabric, load_fabric
from fabricflow.fabric.summary import max_flow_between

LEAF_SPINE_YAML = """
name: lab-leaf-spine
description: two leaves, two spines, 8 GPUs
gpus: 8
gpus_per_node: 2
topology:
  type: graph
  defaults: {bandwidth: 100Gbps, latency: 0.5us, kind: leaf}
  nodes:
    - {name: leaf0, kind: leaf, tier: 1, group: 0}
    - {name: leaf1, kind: leaf, tier: 1, group: 1}
    - {name: spine0, kind: spine, tier: 2}
    - {name: spine1, kind: spine, tier: 2}
  gpus: [g0, g1, g2, g3, {name: g4, group: 1}, g5, g6, g7]
  links:
    - {a: g0, b: leaf0, kind: nic, bandwidth: 400Gbps}
    - {a: g1, b: leaf0, kind: nic, bandwidth: 400Gbps}
    - {a: g2, b: leaf0, kind: nic, bandwidth: 400Gbps}
    - {a: g3, b: leaf0, kind: nic, bandwidth: 400Gbps}
    - {a: g4, b: leaf1, kind: nic, bandwidth: 400Gbps}
    - {a: g5, b: leaf1, kind: nic, bandwidth: 400Gbps}
    - {a: g6, b: leaf1, kind: nic, bandwidth: 400Gbps}
    - {a: g7, b: leaf1, kind: nic, bandwidth: 400Gbps}
    - {a: leaf0, b: spine0, count: 4}
    - {a: leaf0, b: spine1, count: 4}
    - {a: leaf1, b: spine0, count: 4}
    - {a: leaf1, b: spine1, count: 2, latency: 2us}
"""


@pytest.fixture
def leaf_spine_spec():
    return yaml.safe_load(LEAF_SPINE_YAML)


def test_build_from_yaml_file(tmp_path, leaf_spine_spec):
    path = tmp_path / "lab.yaml"
    path.write_text(LEAF_SPINE_YAML)
    fabric = load_fabric(path)
    assert (fabric.num_gpus, fabric.num_nodes, fabric.num_links) == (8, 12, 24)
    assert fabric.structure is None
    assert list(fabric.node_kind[8:]) == ["leaf", "leaf", "spine", "spine"]
    assert list(fabric.node_tier) == [0] * 8 + [1, 1, 2, 2]
    assert fabric.node_group[4] == 1 and fabric.node_group[9] == 1 and fabric.node_group[0] == -1
    # count: 4 cables of 100 Gb/s bundled into one link each way
    leaf_up = (fabric.link_src == 8) & (fabric.link_dst == 10)
    assert fabric.capacity[leaf_up].tolist() == [4 * 100e9 / 8]
    slow = (fabric.link_src == 11) & (fabric.link_dst == 9)
    assert fabric.latency[slow].tolist() == [2e-6]
    summary = fabric.summary()
    assert summary["links_per_kind"] == {"nic": 16, "leaf": 8}
    assert summary["tiers"][0]["oversubscription"] == pytest.approx(8 * 50e9 / (14 * 12.5e9))
    # Bisection by max-flow: leaf1's uplinks (4 + 2 cables of 100G) are the cut.
    assert summary["bisection_bandwidth_Bps"] == pytest.approx(6 * 100e9 / 8)


def test_routes_are_minimal_and_spread(leaf_spine_spec):
    fabric = build_fabric(leaf_spine_spec)
    src, dst = random_pairs(8, 4000, seed=1)
    routes = ff.route(fabric, src, dst, seed=2)
    assert_valid_walks(fabric, routes, src, dst)
    assert np.array_equal(routes.hop_count, networkx_hops(fabric, src, dst, gpu_transit=False))
    cross = routes.hop_count == 4
    spines = fabric.link_dst[routes.links[cross, 1]]
    share = np.mean(spines == 10)
    assert abs(share - 0.5) < 5 * np.sqrt(0.25 / cross.sum())


def test_failures_and_unreachable(leaf_spine_spec):
    fabric = build_fabric(leaf_spine_spec)
    spine0 = fabric.without(switches=[10])
    src, dst = random_pairs(8, 300, seed=3)
    routes = ff.route(spine0, src, dst)
    assert_valid_walks(spine0, routes, src, dst)
    assert not np.isin(routes.links, np.flatnonzero(~spine0.link_up)).any()
    both = fabric.without(switches=[10, 11])
    with pytest.raises(RoutingError, match=r"unreachable.*e\.g\. flow 1: GPU 0 -> GPU 4"):
        ff.route(both, np.array([0, 0]), np.array([1, 4]))


def ring_spec(transit):
    names = [f"chip{i}" for i in range(6)]
    links = [{"a": names[i], "b": names[(i + 1) % 6]} for i in range(6)]
    return {
        "name": "ring",
        "gpus": 6,
        "gpus_per_node": 1,
        "topology": {
            "type": "graph",
            "gpu_transit": transit,
            "gpus": names,
            "defaults": {"bandwidth": "50GB/s", "kind": "ici"},
            "links": links,
        },
    }


def test_gpu_transit_controls_forwarding():
    fabric = build_fabric(ring_spec(True))
    routes = ff.route(fabric, np.array([0, 0]), np.array([3, 2]))
    assert routes.hop_count.tolist() == [3, 2]
    assert max_flow_between(fabric, np.arange(6) < 3, np.arange(6) >= 3) == pytest.approx(2 * 50e9)
    closed = build_fabric(ring_spec(False))
    assert ff.route(closed, np.array([0]), np.array([1])).hop_count.tolist() == [1]
    with pytest.raises(RoutingError, match="1 flow"):
        ff.route(closed, np.array([0, 0]), np.array([1, 2]))


def test_scale_up_domains_on_a_graph(leaf_spine_spec):
    leaf_spine_spec["scale_up"] = {"domain_size": 2, "bandwidth_bidirectional": "200GB/s"}
    fabric = build_fabric(leaf_spine_spec)
    routes = ff.route(fabric, np.array([0, 2]), np.array([1, 3]))
    # NIC paths are equally short; traffic inside a domain still stays on its switch.
    assert set(fabric.link_kind[routes.links.ravel()].tolist()) == {"nvlink"}
    assert fabric.num_domains == 4
    broken = fabric.without(links=[int(routes.links[0, 0])])
    detour = ff.route(broken, np.array([0]), np.array([1]))
    assert set(fabric.link_kind[detour.links.ravel()].tolist()) == {"nic"}


def _edit(spec, path, value):
    target = spec["topology"]
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value


_DELETE = object()


@pytest.mark.parametrize(
    "path, value, field, message",
    [
        (("links", 0, "b"), "leaf9", "topology.links[0].b", "unknown node 'leaf9'"),
        (("links", 0, "b"), "g0", "topology.links[0].b", "to itself"),
        (("links", 9), {"a": "spine0", "b": "leaf0"}, "topology.links[9].b", "duplicates.*count"),
        (("nodes", 1, "name"), "leaf0", "topology.nodes[1].name", "duplicate name"),
        (("nodes", 1, "name"), "g3", "topology.nodes[1].name", "duplicate name"),
        (("nodes", 0, "tier"), 0, "topology.nodes[0].tier", "tier 0 is for GPUs"),
        (("nodes", 0, "kind"), "gpu", "topology.nodes[0].kind", "topology.gpus"),
        (("gpus",), ["g0"], "topology.gpus", "lists 1 GPUs but the top-level gpus is 8"),
        (("links", 0, "count"), 0, "topology.links[0].count", "positive integer"),
        (("links", 0, "colour"), "red", "topology.links[0]", "allowed keys"),
        (("defaults",), _DELETE, "topology.links[8].bandwidth", "is required"),
        (("gpu_transit",), "no", "topology.gpu_transit", "true or false"),
    ],
)
def test_spec_errors_name_the_field(leaf_spine_spec, path, value, field, message):
    spec = copy.deepcopy(leaf_spine_spec)
    _edit(spec, path, value)
    with pytest.raises(SpecError, match=message) as info:
        build_fabric(spec)
    assert info.value.field == field


@settings(max_examples=20, deadline=None)
@given(
    switches=st.integers(2, 12),
    gpus=st.integers(2, 10),
    extra=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**31),
)
def test_property_random_graphs_route_minimally(switches, gpus, extra, seed):
    """Random connected switch graphs (a random tree plus extra edges) with GPUs on
    random switches: generic routes are minimal valid walks through switches only."""
    rng = np.random.default_rng(seed)
    edges = {(int(rng.integers(i)), i) for i in range(1, switches)}  # a random tree
    for _ in range(int(extra * switches)):
        a, b = sorted(rng.choice(switches, 2, replace=False).tolist())
        edges.add((a, b))
    spec = {
        "name": "random",
        "gpus": gpus,
        "gpus_per_node": 1,
        "topology": {
            "type": "graph",
            "defaults": {"bandwidth": "100Gbps"},
            "nodes": [{"name": f"s{i}"} for i in range(switches)],
            "gpus": [f"g{i}" for i in range(gpus)],
            "links": (
                [{"a": f"s{a}", "b": f"s{b}"} for a, b in sorted(edges)]
                + [
                    {"a": f"g{i}", "b": f"s{int(rng.integers(switches))}", "kind": "nic"}
                    for i in range(gpus)
                ]
            ),
        },
    }
    fabric = build_fabric(spec)
    src, dst = random_pairs(gpus, 40, seed=seed % 1000)
    routes = ff.route(fabric, src, dst, seed=seed)
    assert_valid_walks(fabric, routes, src, dst)
    assert np.array_equal(routes.hop_count, networkx_hops(fabric, src, dst, gpu_transit=False))
