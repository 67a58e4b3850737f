"""Bad inputs to fabrics and routing (``load_fabric``, Clos tiers, fabric changes, ``route``,
``Routes``): a named error that names the field."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from fabric_specs import fat_tree_spec
from fault_helpers import raises_named as _raises_named

import fabricflow as ff
from fabricflow.errors import SpecError
from fabricflow.fabric.spec import build_fabric, load_fabric
from fabricflow.routing.route import route, routers
from fabricflow.routing.routes import Routes


def test_route_refuses_a_string_pxn():
    fabric = ff.load_fabric("dgx-h100-superpod")
    with pytest.raises(SpecError) as info:
        ff.route(fabric, [0], [9], pxn="no")
    assert info.value.field == "pxn"
    ff.route(fabric, [0], [9], pxn=np.bool_(True))  # numpy bools are fine


# ------------------------------------------------------------------ Clos tier names


def _clos(tiers, gpus=8):
    return {
        "name": "t",
        "gpus": gpus,
        "gpus_per_node": 1,
        "topology": {"type": "clos", "nic_bandwidth": "100Gbps", "tiers": tiers},
    }


@pytest.mark.parametrize("reserved", ["nic", "nvlink"])
def test_clos_tier_cannot_take_a_builtin_link_kind(reserved):
    from fabricflow.fabric.spec import build_fabric

    with pytest.raises(SpecError, match=reserved) as info:
        build_fabric(_clos([{"radix": 2, "name": reserved}, {"radix": 4}]))
    assert info.value.field.endswith("tiers[0].name")


def test_clos_tier_names_must_differ():
    from fabricflow.fabric.spec import build_fabric

    with pytest.raises(SpecError, match="already used") as info:
        build_fabric(_clos([{"radix": 4, "name": "a"}, {"radix": 4, "name": "a"}]))
    assert info.value.field.endswith("tiers[1].name")
    fabric = build_fabric(_clos([{"radix": 4, "name": "a"}, {"radix": 4, "name": "b"}]))
    assert fabric.num_gpus == 8


@pytest.mark.parametrize("key", ["uplink_bandwidth", "uplink_bundle", "up_ports"])
def test_top_tier_uplink_error_names_the_given_key(key):
    from fabricflow.fabric.spec import build_fabric

    value = "400Gbps" if key == "uplink_bandwidth" else 2
    top = {"down_ports": 4, key: value} if key == "up_ports" else {"radix": 4, key: value}
    with pytest.raises(SpecError, match="no uplinks") as info:
        build_fabric(_clos([{"radix": 4}, top]))
    assert info.value.field.endswith(f"tiers[1].{key}")


def test_clos_gpu_count_hint_names_distinct_multiples():
    from fabricflow.fabric.spec import build_fabric

    spec = {
        "name": "x",
        "gpus_per_node": 1,
        "topology": {"type": "clos", "nic_bandwidth": "400Gbps", "tiers": [{"radix": 8}] * 2},
    }
    with pytest.raises(SpecError, match=r"multiple of 4 \(e\.g\. 4\)$"):
        build_fabric({**spec, "gpus": 2})
    with pytest.raises(SpecError, match=r"multiple of 4 \(e\.g\. 4 or 8\)$"):
        build_fabric({**spec, "gpus": 6})


FABRIC = "dgx-h100-superpod"


# ---------------------------------------------------------------- routing, fabric


@pytest.mark.parametrize(
    ("src", "dst", "options", "field"),
    [
        ([1024], [0], {}, "src"),
        ([-1], [0], {}, "src"),
        ([0.5], [1], {}, "src"),
        (["a"], [1], {}, "src"),
        ([True], [False], {}, "src"),
        ([[0, 1], [2]], [1], {}, "src"),
        ([0], [[1, 2], [3]], {}, "dst"),
        ([0, 1], [2], {}, "dst"),
        ([0], [0], {}, "dst"),
        ([0], [1], {"policy": "magic"}, "policy"),
        ([0], [1], {"seed": -1}, "seed"),
        ([0], [1], {"seed": True}, "seed"),
        ([0], [1], {"seed": 2**70}, "seed"),
        ([0], [1], {"foo": 1}, "foo"),
        ([0], [1], {"policy": "multipath", "k": -1}, "k"),
    ],
)
def test_route_bad_inputs(fabric, src, dst, options, field):
    _raises_named(lambda: ff.route(fabric, src, dst, **options), field, SpecError)


@pytest.mark.parametrize("spec", ["nope", "", "/dev/null", 5, None, ["dgx-h100-superpod"]])
def test_load_fabric_bad_names(spec):
    _raises_named(lambda: ff.load_fabric(spec), "fabric", SpecError)


def test_load_fabric_bad_files(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1, 2\n")
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    for path in (broken, listing, tmp_path):
        _raises_named(lambda path=path: ff.load_fabric(str(path)), "fabric", SpecError)
    _raises_named(lambda: ff.load_fabric(FABRIC, foo=1), "foo", SpecError)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"gpus": 0}, "gpus"),
        ({"gpus": 7}, "gpus"),
        ({"gpus": 10**12}, "gpus"),
        ({"gpus": True}, "gpus"),
        ({"gpus": "1024"}, "gpus"),
        ({"gpus_per_node": 2.5}, "gpus_per_node"),
        ({"topology": {"type": "hypercube"}}, "topology.type"),
        ({"scale_up": {"domain_size": 3}}, "scale_up.domain_size"),
    ],
)
def test_load_fabric_bad_overrides(overrides, field):
    _raises_named(lambda: ff.load_fabric(FABRIC, **overrides), field, SpecError)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda f: f.with_capacity(["a"] * f.num_links), "capacity"),
        (lambda f: f.with_capacity(np.full(f.num_links, np.nan)), "capacity"),
        (lambda f: f.with_capacity([1.0]), "capacity"),
        (lambda f: f.without(link_kind="leaf", fraction=2), "fraction"),
        (lambda f: f.without(links=[10**9]), "links"),
    ],
)
def test_fabric_changes_bad_inputs(fabric, change, field):
    _raises_named(lambda: change(fabric), field, SpecError)


def test_route_needs_a_fabric_object():
    _raises_named(lambda: ff.route(FABRIC, [0], [1]), "fabric", SpecError)


# ----------------------------------------------------------------- Routes and route()


def test_routes_shape_errors_are_spec_errors():
    with pytest.raises(SpecError, match="coef"):
        Routes(np.zeros((2, 3)), np.zeros((2, 2)), np.zeros(2), np.ones(2), 4)
    with pytest.raises(SpecError, match="links"):
        Routes(np.zeros(3), None, np.zeros(3), np.ones(3), 4)


def test_routes_refuses_link_ids_outside_the_fabric():
    with pytest.raises(SpecError, match=r"0\.\.3"):
        Routes(np.array([[0, 4]]), None, np.zeros(1), np.ones(1), 4)
    with pytest.raises(SpecError, match="links"):
        Routes(np.array([[0, -2]]), None, np.zeros(1), np.ones(1), 4)


def test_unknown_routing_option_names_the_option_and_the_accepted_ones():
    fabric = build_fabric(fat_tree_spec(4))
    with pytest.raises(SpecError, match=r"\['bogus'\].*accepted: \['k', 'pxn'\]") as info:
        route(fabric, [0], [5], bogus=1)
    assert info.value.field == "bogus"
    assert route(fabric, [0], [5], policy="multipath", k=2).num_flows == 1


def test_router_table_is_explicit():
    table = routers()
    assert None in table
    assert all(callable(e.route) and isinstance(e.options, tuple) for e in table.values())
    # the memory estimate's route width comes from the same row as the router
    clos = load_fabric("dgx-h100-superpod")
    entry = table[type(clos.structure)]
    ecmp_width, _ = entry.width(clos.structure, "ecmp", {})
    assert ecmp_width == 2 * clos.structure.levels
    assert entry.width(clos.structure, "multipath", {"k": 4})[0] == 4 * ecmp_width
    assert table[None].width(None, "ecmp", {})[0] > 0


def test_fabric_whose_capacity_sum_overflows_is_refused():
    fabric = build_fabric(fat_tree_spec(4))
    with pytest.raises(SpecError, match="sum beyond float64") as info:
        dataclasses.replace(fabric, capacity=np.full(fabric.num_links, 1e308), link_up=None)
    assert info.value.field == "capacity"
