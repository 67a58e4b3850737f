"""Torus generator and DOR/ECMP routing: counts, minimal valid walks, dimension order,
tie spread, bisection vs max-flow, failures, spec errors and the tpu-v4-pod preset."""

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from routing_checks import assert_valid_walks, networkx_hops, random_pairs

import fabricflow as ff
from fabricflow.errors import RoutingError, SpecError
from fabricflow.fabric.spec import build_fabric, load_fabric
from fabricflow.fabric.summary import max_flow_between


def torus_spec(dims, *, wrap=True, bandwidth="50GB/s", gpus_per_node=1, **extra):
    spec = {
        "name": "torus",
        "gpus": int(np.prod(dims)),
        "gpus_per_node": gpus_per_node,
        "topology": {
            "type": "torus",
            "dims": list(dims),
            "wraparound": wrap,
            "link_bandwidth": bandwidth,
            **extra,
        },
    }
    return spec


def link_dimension(fabric, links):
    """Dimension each link moves along (from the coordinates of its ends)."""
    coords = fabric.structure.coords
    diff = coords[fabric.link_dst[links]] != coords[fabric.link_src[links]]
    return np.argmax(diff, axis=-1)


def ring_distance(fabric, src, dst):
    st = fabric.structure
    delta = np.abs(st.coords[src] - st.coords[dst])
    return np.where(st.ring, np.minimum(delta, st.dims - delta), delta).sum(axis=1)


@pytest.mark.parametrize(
    "dims, wrap, links",
    [
        ((4, 4, 4), True, 2 * 3 * 64),
        ((3, 4), False, 2 * (2 * 4 + 3 * 3)),
        ((2, 2, 2), True, 2 * 3 * 4),  # size-2 rings: one cable per pair, no duplicate
        ((5, 1), True, 2 * 5),
    ],
)
def test_link_counts_and_degrees(dims, wrap, links):
    fabric = build_fabric(torus_spec(dims, wrap=wrap))
    assert fabric.num_gpus == fabric.num_nodes == int(np.prod(dims))
    assert fabric.num_links == links and fabric.num_switches == 0
    assert set(fabric.link_kinds[k] for k in np.unique(fabric.link_kind_id)) == {"ici"}
    pairs = set(zip(fabric.link_src.tolist(), fabric.link_dst.tolist(), strict=True))
    assert len(pairs) == fabric.num_links  # no parallel links
    if wrap and min(dims) >= 3:
        assert np.all(np.bincount(fabric.link_src) == 2 * len(dims))


@pytest.mark.parametrize(
    "dims, wrap", [((4, 4, 4), True), ((3, 5), True), ((3, 4), False), ((2, 3, 4), True)]
)
@pytest.mark.parametrize("policy", ["dor", "ecmp"])
def test_routes_are_minimal_valid_walks(dims, wrap, policy):
    fabric = build_fabric(torus_spec(dims, wrap=wrap))
    src, dst = random_pairs(fabric.num_gpus, 600, seed=1)
    routes = ff.route(fabric, src, dst, policy=policy, seed=2)
    assert routes.links.dtype == np.int32 and routes.coef is None
    assert routes.max_hops <= fabric.structure.max_hops
    assert_valid_walks(fabric, routes, src, dst)
    assert np.array_equal(routes.hop_count, ring_distance(fabric, src, dst))
    assert np.array_equal(routes.hop_count, networkx_hops(fabric, src, dst, gpu_transit=True))


@settings(max_examples=25, deadline=None)
@given(
    dims=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    wrap=st.booleans(),
    seed=st.integers(0, 2**31),
    policy=st.sampled_from(["dor", "ecmp"]),
)
def test_property_minimal_walks_on_random_tori(dims, wrap, seed, policy):
    fabric = build_fabric(torus_spec(dims, wrap=wrap))
    if fabric.num_gpus < 2:
        return
    src, dst = random_pairs(fabric.num_gpus, 50, seed=seed % 1000)
    routes = ff.route(fabric, src, dst, policy=policy, seed=seed)
    assert_valid_walks(fabric, routes, src, dst)
    assert np.array_equal(routes.hop_count, ring_distance(fabric, src, dst))


def test_dor_goes_x_then_y_then_z_and_ecmp_varies_the_order():
    fabric = build_fabric(torus_spec((4, 4, 4)))
    src, dst = random_pairs(fabric.num_gpus, 2000, seed=3)
    orders = {}
    for policy in ("dor", "ecmp"):
        links = ff.route(fabric, src, dst, policy=policy).links
        dims = np.where(links >= 0, link_dimension(fabric, np.maximum(links, 0)), 99)
        changes = np.diff(dims, axis=1)
        orders[policy] = {tuple(dict.fromkeys(row[row < 99].tolist())) for row in dims}
        if policy == "dor":
            assert np.all(changes >= 0)  # dimensions never decrease along a DOR path
    assert all(order == tuple(sorted(order)) for order in orders["dor"])
    # ECMP draws all 6 dimension orders for flows that move in all three dimensions.
    assert set(itertools.permutations(range(3))) <= orders["ecmp"]


def test_tie_direction_spread_is_near_uniform():
    fabric = build_fabric(torus_spec((8,)))
    src = np.zeros(4000, np.int64)
    dst = np.full(4000, 4)  # exactly half-way round: both ways are minimal
    routes = ff.route(fabric, src, dst, policy="dor", seed=5)
    first_hop = fabric.link_dst[routes.links[:, 0]]
    plus = np.mean(first_hop == 1)
    assert set(first_hop.tolist()) == {1, 7}
    assert abs(plus - 0.5) < 5 * np.sqrt(0.25 / 4000)


def test_seed_determinism():
    fabric = build_fabric(torus_spec((4, 4)))
    src, dst = random_pairs(fabric.num_gpus, 300, seed=6)
    a = ff.route(fabric, src, dst, seed=1).links
    assert np.array_equal(a, ff.route(fabric, src, dst, seed=1).links)
    assert not np.array_equal(a, ff.route(fabric, src, dst, seed=2).links)


@pytest.mark.parametrize(
    "dims, wrap", [((4, 4, 6), True), ((3, 4), False), ((4, 5), True), ((2, 2, 4), True)]
)
def test_bisection_matches_max_flow(dims, wrap):
    fabric = build_fabric(torus_spec(dims, wrap=wrap, bandwidth="100Gbps"))
    st = fabric.structure
    d = st.cut_dimension()
    lower = st.coords[fabric.gpu_node, d] < st.dims[d] // 2
    flow = max_flow_between(fabric, lower, ~lower)
    assert fabric.summary()["bisection_bandwidth_Bps"] == pytest.approx(flow)
    other = int(np.prod(dims)) // dims[d]
    per_ring = 2 if (wrap and dims[d] >= 3) else 1
    assert flow == pytest.approx(per_ring * other * 100e9 / 8)


def test_bisection_drops_with_failed_links():
    fabric = build_fabric(torus_spec((4, 4)))
    st = fabric.structure
    lower = st.coords[:, 1] < 2
    crossing = np.flatnonzero(lower[fabric.link_src] & ~lower[fabric.link_dst])
    failed = fabric.without(links=crossing[:2])
    assert failed.summary()["bisection_bandwidth_Bps"] == pytest.approx(
        max_flow_between(failed, lower, ~lower)
    )
    assert failed.summary()["bisection_bandwidth_Bps"] < fabric.summary()["bisection_bandwidth_Bps"]


@pytest.mark.parametrize("policy", ["dor", "ecmp"])
def test_failures_are_avoided_with_shortest_surviving_paths(policy):
    fabric = build_fabric(torus_spec((4, 4, 4)))
    failed = fabric.without(link_kind="ici", fraction=0.1, seed=7)
    src, dst = random_pairs(fabric.num_gpus, 1500, seed=8)
    routes = ff.route(failed, src, dst, policy=policy)
    assert_valid_walks(failed, routes, src, dst)
    shortest = networkx_hops(failed, src, dst, gpu_transit=True)
    assert np.all(routes.hop_count >= shortest)
    # Flows with a surviving minimal DOR-type path keep minimal length; the detours of
    # the rest are shortest surviving paths, so no route exceeds the shortest by much.
    healthy = ring_distance(fabric, src, dst)
    assert np.mean(routes.hop_count == healthy) > 0.8
    detoured = routes.hop_count > healthy
    assert np.array_equal(routes.hop_count[detoured], shortest[detoured])


def test_isolated_chip_is_unreachable_with_count_and_example():
    fabric = build_fabric(torus_spec((4, 4)))
    cut = fabric.without(links=np.flatnonzero(fabric.link_src == 5))
    with pytest.raises(
        RoutingError, match=r"2 flow\(s\) unreachable.*torus.*e\.g\. flow 1: GPU 0 -> GPU 5"
    ):
        ff.route(cut, np.array([0, 0, 5]), np.array([1, 5, 3]))


def test_generic_router_agrees_on_hop_counts():
    fabric = build_fabric(torus_spec((4, 3, 5)))
    src, dst = random_pairs(fabric.num_gpus, 800, seed=9)
    plain = dataclasses.replace(fabric, structure=None)
    generic = ff.route(plain, src, dst)  # chips forward: meta gpu_transit is True
    assert_valid_walks(plain, generic, src, dst)
    assert np.array_equal(generic.hop_count, ff.route(fabric, src, dst).hop_count)


def test_routing_matrix_and_policy_errors():
    fabric = build_fabric(torus_spec((4, 4)))
    src, dst = random_pairs(fabric.num_gpus, 200, seed=10)
    routes = ff.route(fabric, src, dst, policy="dor")
    matrix = routes.matrix()
    assert matrix.shape == (fabric.num_links, 200)
    assert np.allclose(np.asarray(matrix @ np.ones(200, np.float32)), routes.link_load())
    with pytest.raises(SpecError, match=r"policy.*\['dor', 'ecmp'\]"):
        ff.route(fabric, src, dst, policy="valiant")
    assert ff.route(fabric, np.array([], np.int64), np.array([], np.int64)).num_flows == 0


@pytest.mark.parametrize(
    "change, field, message",
    [
        ({"gpus": 60}, "gpus", "product of dims"),
        ({"topology": {"dims": []}}, "topology.dims", "list of 1 to 6"),
        ({"topology": {"dims": [4, 0]}}, "topology.dims[1]", "positive integer"),
        ({"topology": {"link_bandwidth": ["1GB/s"]}}, "topology.link_bandwidth", "list of 3"),
        ({"topology": {"link_bandwidth": None}}, "topology.link_bandwidth", "is required"),
        ({"topology": {"wraparound": "yes"}}, "topology.wraparound", "true or false"),
        ({"topology": {"latency": "3 parsecs"}}, "topology.latency", "time"),
        ({"topology": {"dimz": [4]}}, "topology", "allowed keys"),
        ({"scale_up": {"domain_size": 4, "bandwidth_per_direction": "1GB/s"}}, "scale_up", "torus"),
    ],
)
def test_spec_errors_name_the_field(change, field, message):
    spec = torus_spec((4, 4, 4))
    for key, value in change.items():
        if key == "topology":
            spec["topology"] = {**spec["topology"], **value}
        else:
            spec[key] = value
    with pytest.raises(SpecError, match=message) as info:
        build_fabric(spec)
    assert info.value.field == field


def test_per_dimension_bandwidth_and_mesh_flags():
    fabric = build_fabric(
        torus_spec((4, 4, 2), wrap=[True, False, True], bandwidth=["10GB/s", "20GB/s", "30GB/s"])
    )
    dims = link_dimension(fabric, np.arange(fabric.num_links))
    for d, bandwidth in enumerate((10e9, 20e9, 30e9)):
        assert np.all(fabric.capacity[dims == d] == bandwidth)
    assert np.sum(dims == 1) == 2 * 3 * 4 * 2  # y is a mesh line: 3 cables per line


def test_tpu_v4_pod_preset():
    fabric = load_fabric("tpu-v4-pod")
    assert fabric.num_gpus == 4096 and fabric.num_switches == 0
    assert np.all(np.bincount(fabric.link_src) == 6)  # 6 ICI links per chip
    summary = fabric.summary()
    assert summary["bisection_bandwidth_Bps"] == pytest.approx(2 * 16 * 16 * 50e9)
    assert fabric.meta["sources"] and fabric.meta["assumptions"]
    src, dst = random_pairs(4096, 20000, seed=11)
    routes = ff.route(fabric, src, dst, policy="dor")
    assert routes.max_hops <= 24
    assert_valid_walks(fabric, routes, src, dst)
    assert np.array_equal(routes.hop_count, ring_distance(fabric, src, dst))
