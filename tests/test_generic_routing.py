"""Generic shortest-path ECMP router: minimal valid walks, no GPU transit, failures, limits,
and an independent cross-check of the Clos router's hop counts."""

import dataclasses

import numpy as np
import pytest
from fabric_specs import fat_tree_spec
from routing_checks import assert_valid_walks, networkx_hops, random_pairs

import fabricflow as ff
from fabricflow.errors import RoutingError, SpecError
from fabricflow.fabric.spec import build_fabric
from fabricflow.routing import generic


def unstructured(fabric):
    """The same fabric routed by the generic fallback."""
    return dataclasses.replace(fabric, structure=None)


def test_clos_router_hop_counts_match_the_generic_router(small_rail_fabric):
    # An independent check of the Clos router: both give minimal hop counts.
    src, dst = random_pairs(small_rail_fabric.num_gpus, 3000, seed=1)
    clos = ff.route(small_rail_fabric, src, dst, policy="ecmp", seed=2)
    plain = unstructured(small_rail_fabric)
    routes = ff.route(plain, src, dst, seed=2)
    assert_valid_walks(plain, routes, src, dst)
    assert np.array_equal(routes.hop_count, clos.hop_count)


def test_clos_router_matches_generic_after_failures():
    fabric = build_fabric(fat_tree_spec(8, tiers=3)).without(
        link_kind="leaf", fraction=0.05, seed=4
    )
    src, dst = random_pairs(fabric.num_gpus, 1500, seed=3)
    clos = ff.route(fabric, src, dst)
    routes = ff.route(unstructured(fabric), src, dst)
    assert_valid_walks(fabric, routes, src, dst)
    # While one up/down path of the lowest common level survives it is minimal overall,
    # so both routers give the networkx minimum.
    assert np.array_equal(routes.hop_count, clos.hop_count)
    assert np.array_equal(routes.hop_count, networkx_hops(fabric, src, dst, gpu_transit=False))


def test_generic_router_finds_detours_longer_than_up_down_paths():
    # With a leaf's uplinks mostly failed, some pairs keep only non-minimal detours; the
    # generic router still finds the shortest surviving one.
    fabric = build_fabric(fat_tree_spec(8, tiers=3)).without(link_kind="leaf", fraction=0.2, seed=4)
    plain = unstructured(fabric)
    src, dst = random_pairs(fabric.num_gpus, 1500, seed=3)
    routes = ff.route(plain, src, dst)
    assert_valid_walks(plain, routes, src, dst)
    assert np.array_equal(routes.hop_count, networkx_hops(fabric, src, dst, gpu_transit=False))


def test_generic_routes_are_minimal_and_never_transit_gpus(small_rail_fabric):
    fabric = unstructured(small_rail_fabric)
    src, dst = random_pairs(fabric.num_gpus, 400, seed=5)
    routes = ff.route(fabric, src, dst, seed=1)
    assert_valid_walks(fabric, routes, src, dst)
    assert np.array_equal(routes.hop_count, networkx_hops(fabric, src, dst, gpu_transit=False))
    links = routes.links
    inner = links[:, 1:] >= 0
    assert np.all(fabric.node_tier[fabric.link_src[links[:, 1:]][inner]] != 0)


def test_ecmp_hash_spread_over_spines_is_near_uniform():
    # 2-tier leaf-spine, k = 8: 4 spines; cross-leaf flows pick a spine at the leaf.
    fabric = unstructured(build_fabric(fat_tree_spec(8, tiers=2)))
    leaf_of = np.arange(fabric.num_gpus) // 4
    src, dst = random_pairs(fabric.num_gpus, 8000, seed=6)
    cross = leaf_of[src] != leaf_of[dst]
    routes = ff.route(fabric, src[cross], dst[cross], seed=0)
    spine_node = fabric.link_dst[routes.links[:, 1]]
    counts = np.bincount(spine_node)[np.unique(spine_node)]
    assert counts.size == 4
    expected = cross.sum() / 4
    # 5 standard deviations of a binomial count: fails only if the hash is biased.
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected * 0.75))


def test_seed_determinism():
    fabric = unstructured(build_fabric(fat_tree_spec(4)))
    src, dst = random_pairs(fabric.num_gpus, 200, seed=7)
    a = ff.route(fabric, src, dst, seed=3).links
    assert np.array_equal(a, ff.route(fabric, src, dst, seed=3).links)
    assert not np.array_equal(a, ff.route(fabric, src, dst, seed=4).links)


def test_unreachable_pairs_get_count_and_example():
    fabric = unstructured(build_fabric(fat_tree_spec(4)))
    cut = fabric.without(links=np.flatnonzero(fabric.link_src == fabric.gpu_node[0]))
    with pytest.raises(
        RoutingError, match=r"2 flow\(s\) unreachable.*e\.g\. flow 0: GPU 0 -> GPU 5"
    ):
        ff.route(cut, np.array([0, 3, 0]), np.array([5, 4, 9]))


def test_size_limit_refuses_with_routing_error(monkeypatch):
    # a limit on search steps (time), not on memory: RoutingError, not MemoryBudgetError
    fabric = unstructured(build_fabric(fat_tree_spec(4)))
    monkeypatch.setattr(generic, "GENERIC_MAX_WORK", 100)
    with pytest.raises(RoutingError, match="destination nodes.*structured generator") as error:
        ff.route(fabric, np.array([0, 1]), np.array([2, 3]))
    assert not isinstance(error.value, MemoryError)


def test_small_blocks_give_the_same_routes(monkeypatch):
    fabric = unstructured(build_fabric(fat_tree_spec(4)))
    src, dst = random_pairs(fabric.num_gpus, 300, seed=8)
    reference = ff.route(fabric, src, dst).links
    monkeypatch.setattr(generic, "DIST_BLOCK_ENTRIES", 2 * fabric.num_nodes)
    monkeypatch.setattr(generic, "WALK_BLOCK_ENTRIES", 7)
    assert np.array_equal(ff.route(fabric, src, dst).links, reference)


def test_unknown_policy_and_empty_flows():
    fabric = unstructured(build_fabric(fat_tree_spec(4)))
    with pytest.raises(SpecError, match="policy.*'ecmp'"):
        ff.route(fabric, np.array([0]), np.array([1]), policy="valiant")
    empty = ff.route(fabric, np.array([], np.int64), np.array([], np.int64))
    assert empty.num_flows == 0


def test_routing_matrix_of_generic_routes():
    fabric = unstructured(build_fabric(fat_tree_spec(4)))
    src, dst = random_pairs(fabric.num_gpus, 100, seed=9)
    routes = ff.route(fabric, src, dst)
    rates = np.random.default_rng(1).random(100)
    matrix = routes.matrix()
    assert matrix.shape == (fabric.num_links, 100)
    assert np.allclose(
        np.asarray(matrix @ rates.astype(np.float32)), routes.link_load(rates), rtol=1e-5
    )


@pytest.mark.parametrize("tiers", [2, 3])
def test_generic_spray_splits_as_the_clos_spray_does(tiers):
    """On a symmetric fat tree an even split at every hop is the even split over paths:
    the generic router's spray gives the Clos router's link loads and latencies."""
    fabric = build_fabric(fat_tree_spec(8, tiers=tiers))
    src, dst = random_pairs(fabric.num_gpus, 1500, seed=7)
    clos = ff.route(fabric, src, dst, policy="spray")
    plain = ff.route(unstructured(fabric), src, dst, policy="adaptive")
    assert plain.policy == "spray" and plain.coef is not None
    np.testing.assert_allclose(plain.link_load(), clos.link_load(), atol=1e-5)
    np.testing.assert_allclose(
        plain.path_latency(fabric.latency), clos.path_latency(fabric.latency), rtol=1e-6
    )
    # every hop level's shares sum to one: a flow's shares add up to its hop count
    np.testing.assert_allclose(plain.coef.sum(axis=1), clos.coef.sum(axis=1), rtol=1e-6)


def test_generic_spray_on_an_irregular_tree_by_hand():
    """Two leaves under two spines, one of them reached by a second leaf only: leaf0 ->
    leaf1 splits over both spines, half each; leaf0 -> leaf2 has one way."""
    spec = {
        "name": "irregular",
        "gpus": 3,
        "gpus_per_node": 1,
        "topology": {
            "type": "graph",
            "defaults": {"bandwidth": "400Gbps", "latency": "1us"},
            "nodes": [{"name": f"leaf{i}", "kind": "leaf", "tier": 1} for i in range(3)]
            + [{"name": f"spine{i}", "kind": "spine", "tier": 2} for i in range(2)],
            "gpus": ["g0", "g1", "g2"],
            "links": [{"a": f"g{i}", "b": f"leaf{i}", "kind": "nic"} for i in range(3)]
            + [
                {"a": "leaf0", "b": "spine0", "kind": "leaf"},
                {"a": "leaf0", "b": "spine1", "kind": "leaf"},
                {"a": "leaf1", "b": "spine0", "kind": "leaf"},
                {"a": "leaf1", "b": "spine1", "kind": "leaf"},
                {"a": "leaf2", "b": "spine1", "kind": "leaf"},
            ],
        },
    }
    fabric = build_fabric(spec)
    routes = ff.route(fabric, np.array([0, 0]), np.array([1, 2]), policy="spray")
    load = routes.link_load(np.array([1.0, 0.0]))
    up = (fabric.node_tier[fabric.link_src] == 1) & (fabric.node_tier[fabric.link_dst] == 2)
    assert sorted(load[up & (load > 0)]) == [0.5, 0.5]
    to_leaf2 = routes.link_load(np.array([0.0, 1.0]))
    assert sorted(to_leaf2[to_leaf2 > 0]) == [1.0, 1.0, 1.0, 1.0]  # nic, up, down, nic
