"""Fault injection for fabric specs, routing inputs, spec files and the build memory guard."""

from __future__ import annotations

import codecs
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from fabric_specs import fat_tree_spec
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricflow.errors import MemoryBudgetError, SpecError
from fabricflow.fabric.spec import build_fabric, load_fabric, read_spec
from fabricflow.files import MAX_ALIASES, MAX_DEPTH, MAX_FILE_BYTES, read_structured
from fabricflow.routing.route import route, routers
from fabricflow.routing.routes import Routes
from fabricflow.units import parse_bandwidth, parse_size, parse_time
from fabricflow.workload.model_spec import load_model

REPO = Path(__file__).resolve().parents[1]

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


# ----------------------------------------------------------------- spec and config files


def _spec_text(**topology) -> str:
    fields = {"nic_bandwidth": "100Gbps", **topology}
    lines = "".join(f"  {key}: {value}\n" for key, value in fields.items())
    return (
        "name: t\ngpus: 16\ngpus_per_node: 1\ntopology:\n  type: clos\n  attachment: tor\n"
        + lines
        + "  tiers:\n    - {radix: 8}\n    - {radix: 8}\n"
    )


def test_valid_spec_file_reads_as_before(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(_spec_text())
    assert load_fabric(path).num_gpus == 16
    # UTF-8 with a byte-order mark and UTF-16 with one read the same.
    (tmp_path / "bom.yaml").write_bytes(codecs.BOM_UTF8 + _spec_text().encode())
    (tmp_path / "utf16.yaml").write_bytes(_spec_text().encode("utf-16"))
    assert read_spec(tmp_path / "bom.yaml") == read_spec(path) == read_spec(tmp_path / "utf16.yaml")


def test_integer_beyond_int64_names_the_field(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text(_spec_text().replace("gpus: 16", "gpus: 18446744073709551616"))
    with pytest.raises(SpecError, match=r"64-bit.*") as info:
        load_fabric(path)
    assert info.value.field == "gpus" and "big.yaml" in str(info.value)
    path.write_text(_spec_text().replace("radix: 8}\n", "radix: 4611686018427387904}\n", 1))
    with pytest.raises(SpecError, match=r"at most 2,147,483,647") as info:
        load_fabric(path)
    assert info.value.field == "topology.tiers[0].radix"
    path.write_text(_spec_text().replace("gpus: 16", "gpus: " + "9" * 5000))
    with pytest.raises(SpecError, match="4300 digits"):
        load_fabric(path)


@pytest.mark.parametrize("encoding", ["latin-1", "cp1252"])
def test_non_utf8_file_names_the_byte_and_line(tmp_path, encoding):
    path = tmp_path / "latin.yaml"
    path.write_bytes(_spec_text().replace("name: t", "name: caf\xe9").encode(encoding))
    with pytest.raises(SpecError, match=r"not UTF-8 text: byte 0xe9 at line 1") as info:
        read_spec(path)
    assert info.value.field == "fabric"


@pytest.mark.parametrize("opening, closing", [("[", "]"), ("{a: ", "}")])
def test_deep_nesting_is_refused_without_recursion_error(tmp_path, opening, closing):
    path = tmp_path / "deep.yaml"
    path.write_text("name: " + opening * 50_000 + "1" + closing * 50_000 + "\n")
    with pytest.raises(SpecError, match=f"deeper than {MAX_DEPTH}"):
        read_spec(path)
    path.write_text("name: " + opening * 100 + "1" + closing * 100 + "\n")  # under libyaml's
    with pytest.raises(SpecError, match=f"line 1: nested deeper than {MAX_DEPTH}"):
        read_spec(path)
    json_path = tmp_path / "deep.json"
    json_path.write_text('{"a": ' + "[" * 50_000 + "]" * 50_000 + "}")
    with pytest.raises(SpecError, match="nested too deeply"):
        read_structured(json_path, what="model")
    json_path.write_text('{"a": ' + "[" * 100 + "]" * 100 + "}")  # under Python's limit
    with pytest.raises(SpecError, match=f"deeper than {MAX_DEPTH}"):
        read_structured(json_path, what="model")


def test_yaml_alias_bomb_is_refused_fast(tmp_path):
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    start = time.perf_counter()
    with pytest.raises(SpecError, match="aliases expand"):
        read_spec(path)
    assert time.perf_counter() - start < 0.5
    path.write_text("a: &a [1, *a]\n")
    with pytest.raises(SpecError, match="recursive"):
        read_spec(path)
    path.write_text("x: &x 1\nitems: [" + ", ".join(["*x"] * (MAX_ALIASES + 1)) + "]\n")
    with pytest.raises(SpecError, match=f"more than {MAX_ALIASES} YAML aliases"):
        read_spec(path)
    # A few aliases and merge keys, the way people share defaults, still work.
    path.write_text("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\n")
    assert read_spec(path)["other"] == {"x": 1, "y": 3}


def test_duplicate_keys_are_refused_with_the_line(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text(_spec_text() + "gpus: 32\n")
    with pytest.raises(SpecError, match=r"line 11: duplicate key 'gpus' \(first at line 2\)"):
        read_spec(path)
    json_path = tmp_path / "config.json"
    json_path.write_text('{"hidden_size": 4096, "hidden_size": 8192}')
    with pytest.raises(SpecError, match="duplicate key 'hidden_size'"):
        load_model(str(json_path))


def test_oversized_file_is_refused_before_parsing(tmp_path):
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as handle:
        handle.truncate(MAX_FILE_BYTES + 1)  # sparse: no 16 MiB written
    with pytest.raises(SpecError, match="over the limit of 16 MiB"):
        read_spec(path)


def test_json_nan_and_infinity_are_refused(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"hidden_size": NaN}')
    with pytest.raises(SpecError, match="NaN is not a JSON number"):
        load_model(str(path))


@pytest.mark.parametrize("value", ["1.0e308", "1e400Gbps", "2e15", "10Pbps"])
def test_absurd_bandwidth_is_refused_naming_the_field(tmp_path, value):
    path = tmp_path / "nic.yaml"
    path.write_text(_spec_text(nic_bandwidth=value))
    with pytest.raises(SpecError, match="ceiling of 1e\\+15 bytes/s") as info:
        load_fabric(path)
    assert info.value.field == "topology.nic_bandwidth"


@pytest.mark.parametrize(
    "parse, value, message",
    [
        (parse_bandwidth, "1e400Gbps", "ceiling"),
        (parse_bandwidth, "nanGB/s", "cannot read"),
        (parse_bandwidth, float("nan"), "must be a number"),
        (parse_bandwidth, 10**400, "ceiling"),
        (parse_time, "-5us", "'-5us'"),
        (parse_time, "1e308min", "ceiling"),
        (parse_size, float("inf"), "ceiling"),
        (parse_size, 2**90, "ceiling"),
    ],
)
def test_unit_parsing_refuses_non_finite_negative_and_overflowing(parse, value, message):
    with pytest.raises(SpecError, match=message) as info:
        parse(value, "x")
    assert info.value.field == "x"


def test_summary_of_a_maximal_bandwidth_fabric_stays_finite(tmp_path):
    path = tmp_path / "fast.yaml"
    path.write_text(_spec_text(nic_bandwidth="1e15"))
    summary = load_fabric(path).summary()
    assert np.isfinite(summary["bisection_bandwidth_Bps"])


# ----------------------------------------------------------------- memory guard

_DRAGONFLY_10M = """name: df-10m
gpus: 10000000
gpus_per_node: 4
topology:
  type: dragonfly
  groups: 100
  switches_per_group: 100
  nodes_per_switch: 250
  nic_bandwidth: 200Gbps
"""
_CLOS_1M = """name: clos-1m
gpus: 1048576
gpus_per_node: 8
scale_up: {domain_size: 8, bandwidth_per_direction: 450GB/s}
topology:
  type: clos
  attachment: rail
  nic_bandwidth: 400Gbps
  tiers: [{radix: 128}, {radix: 128}, {radix: 128}, {radix: 128}]
"""


# `ulimit -v 1048576` set inside the child before anything is imported (a preexec_fn would
# fork this JAX-threaded test process, which can deadlock).
_UNDER_1GIB = (
    "import resource, runpy, sys; "
    "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
    "sys.argv = ['fabricflow', *sys.argv[1:]]; "
    "runpy.run_module('fabricflow.cli', run_name='__main__', alter_sys=True)"
)


@pytest.mark.parametrize("text", [_DRAGONFLY_10M, _CLOS_1M], ids=["dragonfly-10M", "clos-1M"])
def test_cli_under_1gib_address_space_refuses_with_memory_budget_error(tmp_path, text):
    # Both fabrics got past the old fixed 8 GiB guard and died in numpy under `ulimit -v`.
    path = tmp_path / "big.yaml"
    path.write_text(text)
    env = {key: value for key, value in os.environ.items() if key != "FABRICFLOW_MEMORY_BUDGET"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["JAX_PLATFORMS"] = "cpu"
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _UNDER_1GIB, "fabric", str(path), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    answer = json.loads(done.stdout)
    assert answer["error"] == "MemoryBudgetError"
    assert "GiB" in answer["message"] and "RLIMIT_AS" in answer["message"]
    assert time.perf_counter() - start < 30


def test_build_and_route_follow_the_memory_budget(monkeypatch):
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "64KiB")
    with pytest.raises(MemoryBudgetError, match=r"nodes.*directed links.*FABRICFLOW_MEMORY_BUDGET"):
        build_fabric(fat_tree_spec(8))
    monkeypatch.delenv("FABRICFLOW_MEMORY_BUDGET")
    fabric = build_fabric(fat_tree_spec(8))
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "1MiB")
    src = np.zeros(10_000, np.int64)
    with pytest.raises(MemoryBudgetError, match="routing 10,000 flows"):
        route(fabric, src, src + 1)
    assert route(fabric, src[:10], src[:10] + 1).num_flows == 10


def test_raw_memory_errors_become_named_memory_budget_errors(monkeypatch):
    from fabricflow.fabric import assemble
    from fabricflow.routing import clos

    fabric = build_fabric(fat_tree_spec(4))

    def out_of_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 76.3 MiB")

    monkeypatch.setattr(clos, "_single_paths", out_of_memory)
    with pytest.raises(MemoryBudgetError, match=r"routing 1 flows.*ran out of memory.*76\.3 MiB"):
        route(fabric, [0], [5])
    monkeypatch.setattr(assemble.Assembler, "build", out_of_memory)
    with pytest.raises(MemoryBudgetError, match="building fabric 'fat-tree-k4' ran out of memory"):
        build_fabric(fat_tree_spec(4))
    with pytest.raises(MemoryBudgetError, match="ran out of memory"):
        load_fabric("dgx-h100-superpod")


def test_fabric_whose_capacity_sum_overflows_is_refused():
    fabric = build_fabric(fat_tree_spec(4))
    with pytest.raises(SpecError, match="sum beyond float64") as info:
        dataclasses.replace(fabric, capacity=np.full(fabric.num_links, 1e308), link_up=None)
    assert info.value.field == "capacity"


_PLAIN = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None)
@given(data=_PLAIN)
def test_plain_data_round_trips_through_yaml_and_json(tmp_path_factory, data):
    import yaml

    folder = tmp_path_factory.mktemp("round")
    # Escaped non-ASCII: PyYAML's own dumper writes U+0085 raw, which YAML reads as a break.
    (folder / "a.yaml").write_text(yaml.safe_dump({"data": data}), encoding="utf-8")
    (folder / "a.json").write_text(json.dumps({"data": data}), encoding="utf-8")
    assert read_structured(folder / "a.yaml", what="x") == {"data": data}
    assert read_structured(folder / "a.json", what="x") == {"data": data}
