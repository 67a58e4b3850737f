"""Rail-only Clos fabrics (``attachment: rail-only``): one tree per rail, cross-rail
traffic relayed over the scale-up domain."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from reference_solvers import progressive_filling
from scipy.sparse.csgraph import connected_components

import fabricflow as ff
from fabricflow.fabric.summary import max_flow_between
from fabricflow.routing.candidates import candidate_paths


def rail_only_spec(gpus=256, tiers=2, radix=8, oversubscription=1, scale_up=True) -> dict:
    layers = [{"name": "leaf", "radix": radix}]
    if tiers == 2:
        layers[0]["oversubscription"] = oversubscription
        layers.append({"name": "spine", "radix": radix})
    spec = {
        "name": "rail-only-test",
        "gpus": gpus,
        "gpus_per_node": 8,
        "topology": {
            "type": "clos",
            "attachment": "rail-only",
            "nic_bandwidth": "400Gbps",
            "tiers": layers,
        },
    }
    if scale_up:
        spec["scale_up"] = {"domain_size": 8, "bandwidth_bidirectional": "900GB/s"}
    return spec


@pytest.fixture(scope="module")
def fabric():
    return ff.build_fabric(rail_only_spec())


def walk(fabric, links_row, start_node) -> int:
    node = start_node
    for link in links_row[links_row >= 0]:
        assert fabric.link_src[link] == node, "route is not a connected walk"
        node = fabric.link_dst[link]
    return node


def test_rails_are_separate_networks(fabric):
    """Without NVLink, the scale-out graph falls apart into one component per rail, and
    each component holds exactly the GPUs of that rail."""
    scale_out = np.flatnonzero(fabric.link_kind != "nvlink")
    graph = sp.coo_matrix(
        (
            np.ones(scale_out.size),
            (fabric.link_src[scale_out], fabric.link_dst[scale_out]),
        ),
        shape=(fabric.num_nodes, fabric.num_nodes),
    )
    _, label = connected_components(graph, directed=False)
    gpu_label = label[fabric.gpu_node]
    rail = np.arange(fabric.num_gpus) % 8
    assert len(np.unique(gpu_label)) == 8
    for r in range(8):
        assert len(np.unique(gpu_label[rail == r])) == 1
    # switch count: per rail 32 GPUs on radix-8 leaves split 4/4: 8 leaves, 4 spines
    tiers = {t["name"]: t["switches"] for t in fabric.summary()["tiers"]}
    assert tiers == {"leaf": 64, "spine": 32}


@pytest.mark.parametrize("policy", ["ecmp", "adaptive", "spray", "multipath"])
def test_every_route_is_a_walk_and_cross_rail_flows_relay_over_nvlink(fabric, policy):
    rng = np.random.default_rng(3)
    src = rng.integers(0, fabric.num_gpus, 400)
    dst = rng.integers(0, fabric.num_gpus, 400)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    routes = ff.route(fabric, src, dst, policy=policy)
    kind = fabric.link_kind
    if routes.coef is None:
        for i in range(src.size):
            assert walk(fabric, routes.links[i], fabric.gpu_node[src[i]]) == fabric.gpu_node[dst[i]]
    same_domain = fabric.gpu_domain[src] == fabric.gpu_domain[dst]
    cross_rail = (src % 8 != dst % 8) & ~same_domain
    first = routes.links[:, 0]
    # a flow between rails of different nodes starts on NVLink, then uses the network
    assert np.all(kind[first[cross_rail]] == "nvlink")
    used = np.where(routes.links >= 0, routes.links, 0)
    network = ((kind[used] != "nvlink") & (routes.links >= 0)).any(axis=1)
    assert np.all(network[cross_rail])
    # same-rail flows between nodes never touch NVLink; same-domain flows only NVLink
    same_rail = (src % 8 == dst % 8) & ~same_domain
    nvlink_used = ((kind[used] == "nvlink") & (routes.links >= 0)).any(axis=1)
    assert not nvlink_used[same_rail].any()
    assert not network[same_domain].any()


def test_cross_rail_traffic_loads_the_destination_rail_only(fabric):
    """GPU 0 (rail 0) to GPU 13 (rail 5, node 1): the network links used all belong to
    rail 5's tree, whose GPUs are the only ones it reaches."""
    routes = ff.route(fabric, np.array([0]), np.array([13]))
    links = routes.links[0][routes.links[0] >= 0]
    relay = fabric.link_dst[links[1]]
    assert relay == fabric.gpu_node[5]  # GPU 5: node 0's GPU on rail 5
    assert walk(fabric, routes.links[0], fabric.gpu_node[0]) == fabric.gpu_node[13]


def test_failed_nvlink_on_the_relay_is_an_unreachable_flow(fabric):
    nvlink_up = fabric.structure.scale_up.up
    broken = fabric.without(links=[int(nvlink_up[0])])
    with pytest.raises(ff.RoutingError, match="rail-only"):
        ff.route(broken, np.array([0]), np.array([13]))
    # same-rail traffic from GPU 0 still routes
    ff.route(broken, np.array([0]), np.array([8]))


def test_max_min_rates_of_an_all_to_all_are_feasible(fabric):
    # 2 nodes x 8 GPUs plus 2 GPUs of a far node: same-domain, same-rail and relayed flows
    g = np.r_[np.arange(16), 200, 205]
    src, dst = np.meshgrid(g, g, indexing="ij")
    keep = src != dst
    src, dst = src[keep], dst[keep]
    routes = ff.route(fabric, src, dst, policy="adaptive")
    # the float64 numpy reference (the jitted solver's compile would cost ~20 s here)
    rates = progressive_filling(routes.links, fabric.capacity, coef=routes.coef)
    load = routes.link_load(rates)
    assert np.all(load <= fabric.capacity * (1 + 1e-5))
    assert np.all(rates > 0)


def test_bisection_is_the_sum_of_the_rails_bisections():
    full = ff.build_fabric(rail_only_spec())
    # non-blocking: half of all NIC capacity (256 GPUs x 50 GB/s / 2)
    assert full.summary()["bisection_bandwidth_Bps"] == pytest.approx(128 * 50e9)
    over = ff.build_fabric(rail_only_spec(gpus=384, oversubscription=3))
    # leaves 6 down / 2 up: a third of the NIC capacity climbs
    assert over.summary()["bisection_bandwidth_Bps"] == pytest.approx(192 * 50e9 / 3)
    # an exact max-flow between the same halves (whole nodes of every rail) agrees
    st = full.structure
    half = st.slot_of_gpu % (st.slots // st.rails) < st.slots // st.rails // 2
    assert max_flow_between(full, half, ~half) == pytest.approx(128 * 50e9)
    failed = full.without(links=[int(full.links_of_kind("leaf")[0])])
    assert failed.summary()["bisection_bandwidth_Bps"] < 128 * 50e9


def test_one_tier_rail_only_is_one_switch_per_rail():
    fabric = ff.build_fabric(rail_only_spec(gpus=128, tiers=1, radix=16))
    assert fabric.summary()["tiers"][0]["switches"] == 8
    routes = ff.route(fabric, np.array([0, 0]), np.array([9, 8]))
    assert fabric.link_kind[routes.links[0, 0]] == "nvlink"
    assert walk(fabric, routes.links[1], fabric.gpu_node[0]) == fabric.gpu_node[8]


def test_bad_rail_only_specs_name_the_field():
    with pytest.raises(ff.SpecError, match="scale_up") as error:
        ff.build_fabric(rail_only_spec(scale_up=False))
    assert error.value.field == "topology.attachment"
    spec = rail_only_spec()
    spec["scale_up"]["domain_size"] = 4
    with pytest.raises(ff.SpecError, match="multiple of gpus_per_node"):
        ff.build_fabric(spec)
    spec = rail_only_spec()
    spec["gpus_per_node"] = 1
    with pytest.raises(ff.SpecError, match="several GPUs per node"):
        ff.build_fabric(spec)
    with pytest.raises(ff.SpecError, match="per rail"):
        ff.build_fabric(rail_only_spec(gpus=512))  # 64 GPUs per rail; the trees hold 32


def test_routing_optimizer_candidates_refuse_cross_rail_flows(fabric):
    with pytest.raises(ff.SpecError, match="rail-only"):
        candidate_paths(fabric, np.array([0]), np.array([13]), k=2)
    paths = candidate_paths(fabric, np.array([0]), np.array([8]), k=2)
    assert paths.shape[0] == 1


def test_step_time_runs_on_a_rail_only_fabric(fabric):
    layout = ff.Layout(tp=8, pp=1, dp=32, micro_batch=1, global_batch=64, seq_len=2048)
    result = ff.step_time("llama3-8b", "h100-sxm", layout, fabric)
    spec = rail_only_spec()
    spec["topology"]["attachment"] = "rail"
    spec["topology"]["tiers"] = [
        {"name": "leaf", "down_ports": 4, "up_ports": 4},
        {"name": "spine", "down_ports": 64},
    ]
    rail = ff.build_fabric(spec)  # rail-optimized, non-blocking, same leaves
    reference = ff.step_time("llama3-8b", "h100-sxm", layout, rail)
    # DP rings stay on their rails: rail-only costs this layout nothing
    assert result.step_time_s == pytest.approx(reference.step_time_s, rel=0.02)
