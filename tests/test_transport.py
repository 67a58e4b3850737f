"""Transport semantics: the ``transport`` key, preset defaults, routing="auto", the CLI."""

import json

import numpy as np
import pytest
from fabric_specs import fat_tree_spec
from reference_solvers import progressive_filling

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.collective.timing import collective_time, prepare_collective
from fabricflow.errors import SpecError
from fabricflow.fabric.spec import build_fabric, read_spec
from fabricflow.fabric.transport import PROTOCOLS, Transport, parse_transport
from fabricflow.routing.transport_policy import routing_for


def _fat_tree(transport=None):
    """32 hosts, 8 leaves of 4 down / 4 up, 4 spines: 4 equal-cost paths between leaves."""
    spec = fat_tree_spec(8, tiers=2)
    if transport is not None:
        spec["transport"] = transport
    return build_fabric(spec)


def test_short_and_long_forms_and_protocol_defaults():
    assert parse_transport("infiniband") == Transport("infiniband", True)
    assert parse_transport("rocev2") == Transport("rocev2", False)
    assert parse_transport({"protocol": "rocev2", "adaptive_routing": True}).adaptive_routing
    assert not parse_transport(
        {"protocol": "infiniband", "adaptive_routing": False}
    ).adaptive_routing
    # No transport key: RoCEv2 with per-flow ECMP, one path per flow.
    assert parse_transport(None) == Transport("rocev2", False)
    assert _fat_tree().transport == Transport("rocev2", False)
    assert _fat_tree("infiniband").transport == Transport("infiniband", True)


@pytest.mark.parametrize(
    ("value", "field", "text"),
    [
        ("ethernet", "transport.protocol", "'infiniband', 'rocev2'"),
        ({"protocol": "IB"}, "transport.protocol", "'slingshot', 'ici'"),
        ({"adaptive_routing": True}, "transport.protocol", "is required"),
        ({"protocol": "rocev2", "adaptive_routing": "yes"}, "transport.adaptive_routing", "true"),
        ({"protocol": "rocev2", "ar": True}, "transport", "allowed keys"),
        (7, "transport", "protocol name"),
    ],
)
def test_bad_transport_names_the_field(value, field, text):
    spec = fat_tree_spec(8, tiers=2)
    spec["transport"] = value
    with pytest.raises(SpecError) as info:
        build_fabric(spec)
    assert info.value.field == field and text in str(info.value)


def test_presets_carry_the_transport_of_the_real_system():
    expected = {
        "dgx-a100-superpod": ("infiniband", True, "adaptive"),
        "dgx-h100-superpod": ("infiniband", True, "adaptive"),
        "meta-llama3-24k": ("rocev2", False, "ecmp"),
        "tpu-v4-pod": ("ici", False, "ecmp"),
        "frontier-dragonfly": ("slingshot", True, "ecmp"),  # no adaptive split on a dragonfly
    }
    for name, (protocol, adaptive, routing) in expected.items():
        fabric = ff.load_fabric(name)
        assert (fabric.transport.protocol, fabric.transport.adaptive_routing) == (
            protocol,
            adaptive,
        )
        assert routing_for(fabric) == routing
    for preset in ff.list_presets():  # every preset states its transport explicitly
        spec = read_spec(preset["name"])
        assert spec["transport"]["protocol"] in PROTOCOLS


def test_transport_survives_failures_and_overrides():
    fabric = ff.load_fabric("dgx-h100-superpod")
    assert fabric.without(link_kind="leaf", fraction=0.1).transport == fabric.transport
    roce = ff.load_fabric("dgx-h100-superpod", transport="rocev2")
    assert roce.transport == Transport("rocev2", False) and routing_for(roce) == "ecmp"


def test_auto_routing_follows_the_transport_and_explicit_routing_overrides():
    # All-to-all inside 4 groups of 8 GPUs that span two leaves: per-flow ECMP hashes
    # several flows onto one uplink, adaptive routing (spray) spreads them evenly.
    groups = np.arange(32).reshape(4, 8)
    size = 2.0**26
    ib, roce = _fat_tree("infiniband"), _fat_tree("rocev2")
    assert prepare_collective(ib, "all_to_all", groups).routing == "adaptive"
    assert prepare_collective(roce, "all_to_all", groups).routing == "ecmp"
    ib_auto = collective_time(ib, "all_to_all", groups, size)
    roce_auto = collective_time(roce, "all_to_all", groups, size)
    sprayed = collective_time(ib, "all_to_all", groups, size, routing="spray")
    assert ib_auto.time_s == pytest.approx(sprayed.time_s, rel=1e-6)
    assert (
        roce_auto.time_s == collective_time(roce, "all_to_all", groups, size, routing="ecmp").time_s
    )
    # Same wires, different transport: collisions cost RoCEv2/ECMP bandwidth, and spraying
    # leaves the NIC as the only bottleneck.
    assert ib_auto.busbw_Bps > 1.05 * roce_auto.busbw_Bps
    assert set(ib_auto.bottleneck_kinds) == {"nic"}
    overridden = collective_time(ib, "all_to_all", groups, size, routing="ecmp")
    assert overridden.time_s == roce_auto.time_s
    with pytest.raises(SpecError, match="'auto', 'ecmp'"):
        collective_time(ib, "all_to_all", groups, size, routing="per-packet")


def test_fabric_command_shows_the_transport(capsys):
    assert main(["fabric", "meta-llama3-24k", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["transport"]["protocol"] == "rocev2"
    assert data["transport"]["load_balancing"] == "per-flow hash"
    assert main(["fabric", "dgx-h100-superpod"]) == 0
    out = capsys.readouterr().out
    assert "transport infiniband" in out and "per-packet adaptive" in out


def test_collective_command_names_the_resolved_routing(capsys):
    args = ["collective", "--fabric", "dgx-h100-superpod", "--op", "all_to_all", "--gpus", "16"]
    sizes = ["-b", "1MiB", "-e", "1MiB"]
    assert main([*args, *sizes, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["routing"] == "adaptive" and data["transport"]["adaptive_routing"] is True
    assert main([*args, *sizes, "--routing", "ecmp", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["routing"] == "ecmp"
    assert main([*args, *sizes]) == 0
    assert "routing adaptive (auto: infiniband, adaptive routing)" in capsys.readouterr().out


RAIL_3_TIER = {
    "name": "rail-3-tier",
    "gpus": 64,
    "gpus_per_node": 4,
    "scale_up": {"domain_size": 4, "bandwidth_bidirectional": "900GB/s"},
    "topology": {
        "type": "clos",
        "attachment": "rail",
        "planes": 2,
        "nic_bandwidth": "200Gbps",
        "tiers": [
            {"down_ports": 4, "up_ports": 2},  # 2:1 at the leaf
            {"down_ports": 4, "up_ports": 2},
            {"down_ports": 16},
        ],
    },
}


@pytest.mark.parametrize(
    "spec", [fat_tree_spec(8, tiers=3), fat_tree_spec(8, tiers=2, planes=2), RAIL_3_TIER]
)
def test_adaptive_gives_spray_rates_with_one_link_per_hop_level(spec):
    fabric = build_fabric(spec)
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, fabric.num_gpus, (2, 2000))
    src, dst = src[src != dst], dst[src != dst]
    spray = ff.route(fabric, src, dst, policy="spray")
    adaptive = ff.route(fabric, src, dst, policy="adaptive")
    assert adaptive.policy == "adaptive"
    assert adaptive.max_hops <= 2 * fabric.structure.levels < spray.max_hops
    # the float64 textbook filling; float32 route coefficients bound the match
    rates_spray = progressive_filling(spray.links, fabric.capacity, coef=spray.coef)
    rates = progressive_filling(adaptive.links, fabric.capacity, coef=adaptive.coef)
    np.testing.assert_allclose(rates, rates_spray, rtol=1e-5)
    # A representative carries the load every link of its set carries under spray.
    used = np.unique(adaptive.links[adaptive.links >= 0])
    np.testing.assert_allclose(
        adaptive.link_load(rates)[used], spray.link_load(rates_spray)[used], rtol=1e-5
    )
    np.testing.assert_allclose(
        adaptive.path_latency(fabric.latency), spray.path_latency(fabric.latency), rtol=1e-6
    )


def test_adaptive_lists_every_path_where_sets_are_not_uniform():
    fabric = build_fabric(fat_tree_spec(8, tiers=3))
    src, dst = np.arange(0, 32), np.arange(32, 64)
    failed = fabric.without(link_kind="leaf", fraction=0.1, seed=2)
    capacity = fabric.capacity.copy()
    capacity[fabric.links_of_kind("spine")[0]] *= 2
    for changed in (failed, fabric.with_capacity(capacity)):
        routes = ff.route(changed, src, dst, policy="adaptive")
        spray = ff.route(changed, src, dst, policy="spray")
        assert routes.policy == "spray"
        assert np.array_equal(routes.links, spray.links)
