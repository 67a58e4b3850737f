"""Spec and config files (YAML, JSON) read by ``read_structured``: bad encodings, deep
nesting, alias bombs, duplicate keys, YAML 1.1 numbers, absurd values; each refused naming
the file, line or field, and plain data round-trips."""

from __future__ import annotations

import codecs
import json
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricflow.errors import SpecError
from fabricflow.fabric.spec import load_fabric, read_spec
from fabricflow.files import MAX_ALIASES, MAX_DEPTH, MAX_FILE_BYTES, read_structured
from fabricflow.workload.model_spec import load_model


def _yaml(text):
    from fabricflow.files import parse_structured

    return parse_structured(text, what="fabric", source="spec.yaml")


def test_yaml_base60_numbers_stay_strings():
    assert _yaml("oversubscription: 3:1\ngpus: 1:00\nt: 190:20:30.5") == {
        "oversubscription": "3:1",
        "gpus": "1:00",
        "t": "190:20:30.5",
    }
    assert _yaml("a: [0, -5, +7, 1.5, 0.5, .5, 1.0e+3, 1e6]") == {
        "a": [0, -5, 7, 1.5, 0.5, 0.5, 1000.0, "1e6"]
    }


@pytest.mark.parametrize("number", ["0x10", "0o10", "010", "0b10", "1_000", "1_000.5", "-0x1"])
def test_yaml_non_decimal_numbers_are_refused_naming_the_field(number):
    with pytest.raises(SpecError, match=rf"^topology\.tiers\[1\]\.radix: '{number}' in spec"):
        _yaml(f"topology:\n  tiers:\n  - {{radix: 4}}\n  - {{radix: {number}}}\n")
    assert _yaml(f"name: '{number}'") == {"name": number}  # quoted: text


def test_unquoted_oversubscription_ratio_builds_the_fabric(tmp_path):
    from fabricflow.fabric.spec import load_fabric

    spec = tmp_path / "o.yaml"
    spec.write_text(
        "name: o\ngpus: 12\ngpus_per_node: 1\ntopology:\n  type: clos\n"
        "  nic_bandwidth: 400Gbps\n  tiers:\n  - {radix: 8, oversubscription: 3:1}\n"
        "  - {radix: 8}\n"
    )
    fabric = load_fabric(str(spec))
    assert fabric.num_gpus == 12


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


def test_summary_of_a_maximal_bandwidth_fabric_stays_finite(tmp_path):
    path = tmp_path / "fast.yaml"
    path.write_text(_spec_text(nic_bandwidth="1e15"))
    summary = load_fabric(path).summary()
    assert np.isfinite(summary["bisection_bandwidth_Bps"])


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
