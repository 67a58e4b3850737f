"""Dragonfly generator and minimal / ECMP / Valiant routing: counts, the round-robin global
arrangement, valid walks with the right hop structure, hash spread, bisection vs max-flow,
failures, spec errors and the frontier-dragonfly preset."""

import networkx as nx
import numpy as np
import pytest
from routing_checks import assert_valid_walks, networkx_hops, random_pairs

import fabricflow as ff
from fabricflow.errors import RoutingError, SpecError
from fabricflow.fabric.spec import build_fabric, load_fabric
from fabricflow.fabric.summary import max_flow_between


def dragonfly_spec(
    groups=5,
    switches=4,
    per_switch=2,
    copies=2,
    *,
    nic="400Gbps",
    local="400Gbps",
    glob="100Gbps",
    scale_up=None,
    gpus_per_node=2,
    **extra,
):
    spec = {
        "name": "df",
        "gpus": groups * switches * per_switch,
        "gpus_per_node": gpus_per_node,
        "topology": {
            "type": "dragonfly",
            "groups": groups,
            "switches_per_group": switches,
            "gpus_per_switch": per_switch,
            "nic_bandwidth": nic,
            "local_bandwidth": local,
            "global_bandwidth": glob,
            "global_links_per_group_pair": copies,
            **extra,
        },
    }
    if scale_up:
        spec["scale_up"] = scale_up
    return spec


def kind_mask(fabric, kind):
    return fabric.link_kind_id == fabric.link_kinds.index(kind)


def hops_of_kind(fabric, routes, kind):
    links = routes.links
    return ((links >= 0) & kind_mask(fabric, kind)[np.maximum(links, 0)]).sum(axis=1)


@pytest.mark.parametrize(
    "groups, switches, per_switch, copies", [(5, 4, 2, 2), (4, 3, 1, 5), (2, 2, 3, 1), (7, 4, 2, 1)]
)
def test_counts_and_round_robin_global_arrangement(groups, switches, per_switch, copies):
    fabric = build_fabric(dragonfly_spec(groups, switches, per_switch, copies))
    assert fabric.num_gpus == groups * switches * per_switch
    assert fabric.num_switches == groups * switches
    nic, local, glob = (kind_mask(fabric, k) for k in ("nic", "local", "global"))
    assert nic.sum() == 2 * fabric.num_gpus
    assert local.sum() == groups * switches * (switches - 1)
    group = fabric.node_group
    src, dst = fabric.link_src[glob], fabric.link_dst[glob]
    # Every ordered group pair carries `copies` x bandwidth over its global links.
    capacity = np.zeros((groups, groups))
    np.add.at(capacity, (group[src], group[dst]), fabric.capacity[glob])
    expected = copies * 100e9 / 8 * (1 - np.eye(groups))
    assert np.allclose(capacity, expected)
    # Round robin: every switch carries floor or ceil of (groups - 1) * copies / a cables.
    per_switch_cables = np.bincount(
        src - fabric.num_gpus,
        minlength=fabric.num_switches,
        weights=fabric.capacity[glob] / (100e9 / 8),
    )
    share = (groups - 1) * copies / switches
    assert np.all((per_switch_cables >= np.floor(share)) & (per_switch_cables <= np.ceil(share)))
    # Local links join every switch pair of a group exactly once, inside the group.
    assert np.all(group[fabric.link_src[local]] == group[fabric.link_dst[local]])
    pairs = set(zip(fabric.link_src[local].tolist(), fabric.link_dst[local].tolist(), strict=True))
    assert len(pairs) == local.sum()
    # GPUs carry their group in node_group.
    assert np.array_equal(
        group[fabric.gpu_node], np.arange(fabric.num_gpus) // (switches * per_switch)
    )


def one_global_hop_distance(fabric, src, dst):
    """Independent shortest path using only the two groups involved (networkx), which is
    the shortest path with a single global hop."""
    graph = nx.DiGraph()
    up = fabric.link_up
    graph.add_edges_from(
        zip(fabric.link_src[up].tolist(), fabric.link_dst[up].tolist(), strict=True)
    )
    group = fabric.node_group
    out = []
    for s, d in zip(fabric.gpu_node[src].tolist(), fabric.gpu_node[dst].tolist(), strict=True):
        keep = {group[s], group[d]}
        view = nx.subgraph_view(
            graph,
            filter_node=lambda n, keep=keep, s=s, d=d: (
                n in (s, d) or (fabric.node_tier[n] == 1 and group[n] in keep)
            ),
        )
        out.append(nx.shortest_path_length(view, s, d))
    return np.asarray(out)


@pytest.mark.parametrize("policy", ["minimal", "ecmp", "valiant"])
def test_routes_are_valid_walks_with_the_policy_structure(policy):
    fabric = build_fabric(dragonfly_spec(6, 4, 2, 2))
    src, dst = random_pairs(fabric.num_gpus, 1500, seed=1)
    routes = ff.route(fabric, src, dst, policy=policy, seed=3)
    assert routes.links.dtype == np.int32 and routes.coef is None
    assert_valid_walks(fabric, routes, src, dst)
    group_of = fabric.node_group[fabric.gpu_node]
    same = group_of[src] == group_of[dst]
    global_hops = hops_of_kind(fabric, routes, "global")
    assert np.all(global_hops[same] == 0)
    assert np.all(hops_of_kind(fabric, routes, "local")[same] <= 1)
    assert np.all(global_hops[~same] == (2 if policy == "valiant" else 1))
    shortest = networkx_hops(fabric, src, dst, gpu_transit=False)
    assert np.all(routes.hop_count >= shortest)
    if policy == "ecmp":
        assert np.array_equal(routes.hop_count, one_global_hop_distance(fabric, src, dst))
    if policy == "valiant":
        # the intermediate group is neither the source's nor the destination's
        links = routes.links[~same]
        is_global = kind_mask(fabric, "global")[np.maximum(links, 0)] & (links >= 0)
        first_global = links[np.arange(len(links)), np.argmax(is_global, axis=1)]
        middle = fabric.node_group[fabric.link_dst[first_global]]
        assert np.all((middle != group_of[src[~same]]) & (middle != group_of[dst[~same]]))


def test_minimal_spreads_over_the_copies_and_valiant_over_groups():
    fabric = build_fabric(dragonfly_spec(6, 4, 2, 4))
    count = 6000
    src = np.zeros(count, np.int64)
    dst = np.full(count, fabric.num_gpus - 1)  # group 0 -> group 5, many parallel flows
    routes = ff.route(fabric, src, dst, policy="minimal")
    glob = kind_mask(fabric, "global")
    used = routes.links[glob[np.maximum(routes.links, 0)] & (routes.links >= 0)]
    counts = np.unique(used, return_counts=True)[1]
    assert counts.size == 4
    assert np.all(np.abs(counts - count / 4) < 5 * np.sqrt(count / 4 * 0.75))
    valiant = ff.route(fabric, src, dst, policy="valiant")
    links = valiant.links
    first = links[np.arange(count), np.argmax(glob[np.maximum(links, 0)] & (links >= 0), axis=1)]
    middle = np.bincount(fabric.node_group[fabric.link_dst[first]], minlength=6)
    assert middle[0] == middle[5] == 0
    assert np.all(np.abs(middle[1:5] - count / 4) < 5 * np.sqrt(count / 4 * 0.75))


def test_scale_up_traffic_stays_in_the_domain():
    fabric = build_fabric(
        dragonfly_spec(
            3,
            2,
            4,
            1,
            gpus_per_node=4,
            scale_up={"domain_size": 4, "bandwidth_per_direction": "50GB/s"},
        )
    )
    src = np.arange(0, fabric.num_gpus, 4)
    routes = ff.route(fabric, src, src + 3, policy="valiant")
    assert_valid_walks(fabric, routes, src, src + 3)
    assert np.all(routes.hop_count == 2)
    assert set(fabric.link_kind[routes.links.ravel()].tolist()) == {"nvlink"}
    domain_switches = fabric.node_tier == -1
    assert np.array_equal(fabric.node_group[domain_switches], np.arange(6) // 2)


@pytest.mark.parametrize(
    "glob, nic", [("100Gbps", "400Gbps"), ("800Gbps", "100Gbps"), ("200Gbps", "200Gbps")]
)
@pytest.mark.parametrize("groups", [4, 6])
def test_bisection_matches_max_flow(glob, nic, groups):
    fabric = build_fabric(dragonfly_spec(groups, 4, 2, 2, nic=nic, local="800Gbps", glob=glob))
    lower = fabric.node_group[fabric.gpu_node] < groups // 2
    flow = max_flow_between(fabric, lower, ~lower)
    assert fabric.summary()["bisection_bandwidth_Bps"] == pytest.approx(flow)


def test_valiant_on_two_groups_is_minimal():
    fabric = build_fabric(dragonfly_spec(2, 4, 2, 3))
    src, dst = random_pairs(fabric.num_gpus, 500, seed=12)
    valiant = ff.route(fabric, src, dst, policy="valiant", seed=1)
    assert np.array_equal(valiant.links, ff.route(fabric, src, dst, policy="minimal", seed=1).links)


def test_bisection_is_a_cut_when_local_links_are_thinner():
    # Documented: an upper bound on the min cut; here local links bind, so it is above.
    fabric = build_fabric(dragonfly_spec(4, 4, 2, 2, nic="400Gbps", local="10Gbps", glob="400Gbps"))
    lower = fabric.node_group[fabric.gpu_node] < 2
    assert fabric.summary()["bisection_bandwidth_Bps"] >= max_flow_between(fabric, lower, ~lower)


def test_failed_global_links_are_avoided():
    fabric = build_fabric(dragonfly_spec(5, 4, 2, 2))
    glob = np.flatnonzero(kind_mask(fabric, "global"))
    group = fabric.node_group
    # Fail every global cable between groups 0 and 1, and a few others.
    between = glob[(group[fabric.link_src[glob]] == 0) & (group[fabric.link_dst[glob]] == 1)]
    failed = fabric.without(links=np.concatenate([between, glob[::7]]))
    src, dst = random_pairs(fabric.num_gpus, 1500, seed=4)
    for policy in ("minimal", "ecmp", "valiant"):
        routes = ff.route(failed, src, dst, policy=policy)
        assert_valid_walks(failed, routes, src, dst)
    g0_to_g1 = (group[fabric.gpu_node[src]] == 0) & (group[fabric.gpu_node[dst]] == 1)
    routes = ff.route(failed, src, dst, policy="minimal")
    # Cut off from their direct cables, these flows take the shortest working detour.
    assert g0_to_g1.any() and np.all(hops_of_kind(failed, routes, "global")[g0_to_g1] >= 2)
    shortest = networkx_hops(failed, src[g0_to_g1], dst[g0_to_g1], gpu_transit=False)
    assert np.array_equal(routes.hop_count[g0_to_g1], shortest)


def test_isolated_switch_gives_unreachable_error():
    fabric = build_fabric(dragonfly_spec(3, 2, 2, 1))
    switch = int(fabric.gpu_node.size)  # the first switch holds GPUs 0 and 1
    cut = fabric.without(
        links=np.flatnonzero((fabric.link_src == switch) & (fabric.node_tier[fabric.link_dst] == 1))
    )
    with pytest.raises(
        RoutingError, match=r"2 flow\(s\) unreachable.*dragonfly.*e\.g\. flow 1: GPU 0"
    ):
        ff.route(cut, np.array([0, 0, 1, 2]), np.array([1, 5, 6, 7]))


def test_routing_matrix_and_policy_errors():
    fabric = build_fabric(dragonfly_spec())
    src, dst = random_pairs(fabric.num_gpus, 300, seed=5)
    routes = ff.route(fabric, src, dst, policy="valiant")
    assert np.allclose(np.asarray(routes.matrix() @ np.ones(300, np.float32)), routes.link_load())
    with pytest.raises(SpecError, match=r"policy.*\['minimal', 'ecmp', 'valiant'\]"):
        ff.route(fabric, src, dst, policy="dor")
    assert ff.route(fabric, np.array([], np.int64), np.array([], np.int64)).num_flows == 0


@pytest.mark.parametrize(
    "change, field, message",
    [
        ({"gpus": 38}, "gpus", "5 x 4 x 2 = 40"),
        ({"topology": {"nodes_per_switch": 1}}, "topology.gpus_per_switch", "exactly one"),
        ({"topology": {"groups": 1}, "gpus": 8}, "topology.groups", "at least 2"),
        (
            {"topology": {"global_links_per_group_pair": 0}},
            "topology.global_links_per_group_pair",
            "positive integer",
        ),
        ({"topology": {"nic_bandwidth": "-4Gbps"}}, "topology.nic_bandwidth", "> 0"),
        ({"topology": {"global_links": 2}}, "topology", "allowed keys"),
    ],
)
def test_spec_errors_name_the_field(change, field, message):
    spec = dragonfly_spec()
    for key, value in change.items():
        if key == "topology":
            spec["topology"] = {**spec["topology"], **value}
        else:
            spec[key] = value
    with pytest.raises(SpecError, match=message) as info:
        build_fabric(spec)
    assert info.value.field == field


def test_nodes_per_switch_uses_gpus_per_node():
    spec = dragonfly_spec(3, 2, 4, 1, gpus_per_node=2)
    del spec["topology"]["gpus_per_switch"]
    spec["topology"]["nodes_per_switch"] = 2
    fabric = build_fabric(spec)
    assert fabric.structure.gpus_per_switch == 4


def test_frontier_preset():
    fabric = load_fabric("frontier-dragonfly")
    assert fabric.num_gpus == 74 * 128 * 4
    assert fabric.num_switches - fabric.num_domains == 74 * 32  # Slingshot + scale-up switches
    summary = fabric.summary()
    assert summary["links_per_kind"]["global"] == 74 * 73 * 4
    assert summary["links_per_kind"]["local"] == 74 * 32 * 31
    # 37 x 37 group pairs x 4 cables x 200 Gb/s cross the group halving
    assert summary["bisection_bandwidth_Bps"] == pytest.approx(37 * 37 * 4 * 25e9)
    # Each switch: 16 NIC ports + 31 local + its global cables fit the 64 ports.
    glob = kind_mask(fabric, "global")
    per_switch = np.bincount(fabric.link_src[glob], minlength=fabric.num_nodes)
    switches = fabric.node_tier == 1
    assert per_switch[switches].max() + 16 + 31 <= 64
    assert fabric.meta["sources"] and fabric.meta["assumptions"]
    src, dst = random_pairs(fabric.num_gpus, 20000, seed=6)
    for policy in ("minimal", "valiant"):
        routes = ff.route(fabric, src, dst, policy=policy)
        assert_valid_walks(fabric, routes, src, dst)
