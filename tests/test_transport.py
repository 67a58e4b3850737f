"""Transport semantics: the ``transport`` key, preset defaults, routing="auto", the CLI."""

import json

import numpy as np
import pytest
from fabric_specs import fat_tree_spec

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.collective.model import collective_time, prepare_collective
from fabricflow.errors import SpecError
from fabricflow.fabric.spec import build_fabric, read_spec
from fabricflow.fabric.transport import PROTOCOLS, Transport, parse_transport, routing_for


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
        "dgx-a100-superpod": ("infiniband", True, "spray"),
        "dgx-h100-superpod": ("infiniband", True, "spray"),
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
    assert prepare_collective(ib, "all_to_all", groups).routing == "spray"
    assert prepare_collective(roce, "all_to_all", groups).routing == "ecmp"
    ib_auto = collective_time(ib, "all_to_all", groups, size)
    roce_auto = collective_time(roce, "all_to_all", groups, size)
    assert ib_auto.time_s == collective_time(ib, "all_to_all", groups, size, routing="spray").time_s
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
        collective_time(ib, "all_to_all", groups, size, routing="adaptive")


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
    assert data["routing"] == "spray" and data["transport"]["adaptive_routing"] is True
    assert main([*args, *sizes, "--routing", "ecmp", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["routing"] == "ecmp"
    assert main([*args, *sizes]) == 0
    assert "routing spray (auto: infiniband, adaptive routing)" in capsys.readouterr().out
