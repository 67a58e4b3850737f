"""Clos routing: valid minimal walks, hash spread, multipath/spray coefficients, failures."""

import numpy as np
import pytest
from fabric_specs import fat_tree_spec
from routing_checks import assert_valid_walks, networkx_hops, random_pairs

import fabricflow as ff
from fabricflow.errors import MemoryBudgetError, RoutingError, SpecError
from fabricflow.fabric.spec import build_fabric


def hop_distances(fabric, src, dst):
    """Minimal hop counts in which GPUs are endpoints only (GPUs do not forward packets)."""
    return networkx_hops(fabric, src, dst, gpu_transit=False)


def test_ecmp_routes_are_minimal_valid_walks(small_rail_fabric):
    fabric = small_rail_fabric
    src, dst = random_pairs(fabric.num_gpus, 2000)
    routes = ff.route(fabric, src, dst, policy="ecmp", seed=3)
    assert routes.links.dtype == np.int32 and routes.coef is None
    assert_valid_walks(fabric, routes, src, dst)
    assert np.array_equal(routes.hop_count, hop_distances(fabric, src, dst))


def test_scale_up_traffic_stays_on_nvlink(small_rail_fabric):
    fabric = small_rail_fabric
    src = np.arange(0, 128, 4)
    dst = src + 1  # same 4-GPU domain
    routes = ff.route(fabric, src, dst)
    assert np.all(routes.hop_count == 2)
    kinds = fabric.link_kind[routes.links[:, :2]]
    assert np.all(kinds == "nvlink")


def test_same_rail_traffic_stays_on_the_rail_leaf(small_rail_fabric):
    fabric = small_rail_fabric
    # GPU r of nodes 0..3 share rail leaf r in a rail group of 4 hosts
    src, dst = np.array([0, 1, 2]), np.array([4, 9, 14])
    routes = ff.route(fabric, src, dst)
    assert np.all(routes.hop_count == 2)
    assert np.all(fabric.link_kind[routes.links[:, :2]] == "nic")


def test_same_seed_same_routes_other_seed_other_routes(small_rail_fabric):
    src, dst = random_pairs(small_rail_fabric.num_gpus, 500)
    a = ff.route(small_rail_fabric, src, dst, seed=1).links
    b = ff.route(small_rail_fabric, src, dst, seed=1).links
    c = ff.route(small_rail_fabric, src, dst, seed=2).links
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_ecmp_hash_spread_is_near_uniform():
    fabric = build_fabric(fat_tree_spec(16, tiers=2))  # 128 hosts, 16 leaves x 8 spines
    src, dst = random_pairs(fabric.num_gpus, 200_000, seed=5)
    routes = ff.route(fabric, src, dst)
    load = routes.link_load()
    uplinks = fabric.links_of_kind("leaf")
    uplinks = uplinks[fabric.node_tier[fabric.link_src[uplinks]] == 1]
    per_leaf = load[uplinks].reshape(16, 8)  # leaf-major numbering: leaf * w + choice
    expected = per_leaf.sum(axis=1, keepdims=True) / 8
    chi2 = ((per_leaf - expected) ** 2 / expected).sum()
    dof = 16 * 7
    assert chi2 < dof + 5 * np.sqrt(2 * dof)  # a biased hash would blow far past this


def test_parallel_flows_of_one_pair_hash_independently():
    fabric = build_fabric(fat_tree_spec(16, tiers=2))
    src, dst = np.zeros(64, np.int64), np.full(64, 100)
    routes = ff.route(fabric, src, dst)
    assert len({tuple(row) for row in routes.links.tolist()}) > 4


def test_multipath_coefficients(small_rail_fabric):
    src, dst = random_pairs(small_rail_fabric.num_gpus, 300)
    routes = ff.route(small_rail_fabric, src, dst, policy="multipath", k=4)
    ecmp = ff.route(small_rail_fabric, src, dst)
    assert routes.coef is not None and routes.coef.shape == routes.links.shape
    # Fractions of each hop level sum to one: total = path length
    assert np.allclose(routes.coef.sum(axis=1), ecmp.hop_count, atol=1e-6)
    assert np.all(routes.coef[routes.links < 0] == 0)
    # each row lists a link once
    for row in routes.links[:50]:
        row = row[row >= 0]
        assert len(set(row.tolist())) == len(row)


def test_spray_splits_evenly_over_all_paths():
    fabric = build_fabric(fat_tree_spec(8))
    src, dst = np.array([0]), np.array([fabric.num_gpus - 1])  # different pods: 16 paths
    routes = ff.route(fabric, src, dst, policy="spray")
    coef = routes.coef[0][routes.links[0] >= 0]
    links = routes.links[0][routes.links[0] >= 0]
    kinds = fabric.link_kind[links]
    assert np.allclose(coef[kinds == "nic"], 1.0)
    assert np.allclose(coef[kinds == "leaf"], 1 / 4)  # 4 leaf uplinks and 4 downlinks
    assert np.allclose(coef[kinds == "spine"], 1 / 16)  # 16 core paths
    assert (kinds == "spine").sum() == 32


def test_spray_refuses_oversized_requests(monkeypatch):
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "16GiB")  # the same on any machine
    fabric = ff.load_fabric("clos-100k")
    src, dst = random_pairs(fabric.num_gpus, 200_000)
    with pytest.raises(MemoryBudgetError, match="route entries"):
        ff.route(fabric, src, dst, policy="spray")


def test_routing_avoids_failed_links():
    fabric = build_fabric(fat_tree_spec(8))
    src, dst = random_pairs(fabric.num_gpus, 3000, seed=2)
    failed = fabric.without(link_kind="leaf", fraction=0.1, seed=4)
    for policy in ("ecmp", "multipath", "spray"):
        routes = ff.route(failed, src, dst, policy=policy)
        used = routes.links[routes.links >= 0]
        assert np.all(failed.link_up[used]), policy
    routes = ff.route(failed, src, dst)
    assert_valid_walks(failed, routes, src, dst)
    assert np.array_equal(routes.hop_count, hop_distances(failed, src, dst))


def test_failed_spine_switch_is_avoided():
    fabric = build_fabric(fat_tree_spec(8))
    spine = int(np.flatnonzero(fabric.node_tier == 2)[0])
    failed = fabric.without(switches=[spine])
    src, dst = random_pairs(fabric.num_gpus, 2000)
    routes = ff.route(failed, src, dst)
    touched = np.concatenate(
        [
            failed.link_src[routes.links[routes.links >= 0]],
            failed.link_dst[routes.links[routes.links >= 0]],
        ]
    )
    assert spine not in set(touched.tolist())


def test_unreachable_pairs_get_count_and_example():
    fabric = build_fabric(fat_tree_spec(4))
    leaf = int(np.flatnonzero(fabric.node_tier == 1)[0])
    uplinks = np.flatnonzero((fabric.link_src == leaf) & (fabric.node_tier[fabric.link_dst] == 2))
    failed = fabric.without(links=uplinks)
    with pytest.raises(RoutingError, match=r"\d+ flow\(s\) unreachable.*e\.g\. flow"):
        ff.route(failed, np.array([0, 5]), np.array([8, 9]))


def test_bad_endpoints_are_rejected(small_rail_fabric):
    with pytest.raises(SpecError, match="src"):
        ff.route(small_rail_fabric, np.array([-1]), np.array([3]))
    with pytest.raises(SpecError, match="dst"):
        ff.route(small_rail_fabric, np.array([1]), np.array([128]))
    with pytest.raises(SpecError, match="src == dst"):
        ff.route(small_rail_fabric, np.array([1, 2]), np.array([1, 3]))
    with pytest.raises(SpecError, match="policy"):
        ff.route(small_rail_fabric, np.array([1]), np.array([3]), policy="teleport")
    with pytest.raises(SpecError, match="shape"):
        ff.route(small_rail_fabric, np.array([1, 2]), np.array([3]))


def test_routing_matrix_bcoo_matches_link_load(small_rail_fabric):
    src, dst = random_pairs(small_rail_fabric.num_gpus, 400)
    routes = ff.route(small_rail_fabric, src, dst, policy="multipath", k=3)
    rates = np.random.default_rng(0).random(400)
    matrix = routes.matrix()
    assert matrix.shape == (small_rail_fabric.num_links, 400)
    load = np.asarray(matrix @ rates.astype(np.float32))
    assert np.allclose(load, routes.link_load(rates), rtol=1e-5)


def test_empty_flow_list(small_rail_fabric):
    routes = ff.route(small_rail_fabric, np.array([], np.int64), np.array([], np.int64))
    assert routes.num_flows == 0


def test_pxn_keeps_cross_rail_traffic_on_the_destination_rail(small_rail_fabric):
    fabric = small_rail_fabric
    src, dst = random_pairs(fabric.num_gpus, 1000, seed=9)
    routes = ff.route(fabric, src, dst, pxn=True)
    assert_valid_walks(fabric, routes, src, dst)
    cross = (src % 4 != dst % 4) & (src // 4 != dst // 4)
    kinds = fabric.link_kind[np.maximum(routes.links, 0)]
    assert np.all(kinds[cross, 0] == "nvlink") and np.all(kinds[cross, 1] == "nvlink")
    # after the relay the flow rides the destination rail: its NIC uplink leaves the proxy
    proxy = src - src % 4 + dst % 4
    assert np.all(fabric.link_src[routes.links[cross, 2]] == fabric.gpu_node[proxy[cross]])
    plain = ff.route(fabric, src, dst)
    assert np.array_equal(routes.hop_count[~cross], plain.hop_count[~cross])
    assert np.array_equal(
        routes.hop_count[cross], 2 + hop_distances(fabric, proxy[cross], dst[cross])
    )


def test_pxn_does_not_relay_over_a_failed_nvlink(small_rail_fabric):
    fabric = small_rail_fabric
    src, dst = np.array([0]), np.array([9])  # node 0 rail 0 -> node 2 rail 1
    relayed = ff.route(fabric, src, dst, pxn=True)
    assert fabric.link_kind[relayed.links[0, 0]] == "nvlink"
    failed = fabric.without(links=[relayed.links[0, 0]])
    direct = ff.route(failed, src, dst, pxn=True)
    assert np.all(failed.link_up[direct.links[direct.links >= 0]])
    assert fabric.link_kind[direct.links[0, 0]] == "nic"


def test_routing_arguments_are_validated(small_rail_fabric):
    src, dst = np.array([0]), np.array([9])
    for seed in (-1, 1.5, 2**70):
        with pytest.raises(SpecError, match="seed"):
            ff.route(small_rail_fabric, src, dst, seed=seed)
    with pytest.raises(SpecError, match="unknown routing option"):
        ff.route(small_rail_fabric, src, dst, foo=1)
    tor = build_fabric(
        fat_tree_spec(
            8,
            gpus_per_node=4,
            attachment="tor",
            scale_up={"domain_size": 4, "bandwidth_per_direction": "1GB/s"},
        )
    )
    with pytest.raises(SpecError, match="pxn"):
        ff.route(tor, src, dst, pxn=True)
    empty = np.array([], np.int64)
    assert ff.route(small_rail_fabric, empty, empty, policy="spray").num_flows == 0
