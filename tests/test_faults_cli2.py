"""Fault injection for the CLI, file reader and unit parsers: bad input gets a clear error."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fabricflow.errors import SpecError
from fabricflow.units import parse_bandwidth, parse_size, parse_time


@pytest.mark.parametrize("text", ["1b", "1kb", "8Mb", "400kb", "1Gb", "1kib", "2 Tb"])
def test_sizes_in_bits_are_refused_with_a_bytes_hint(text):
    with pytest.raises(SpecError, match=r"x: .*sizes are in bytes: write e\.g\. 8MB or 8MiB"):
        parse_size(text, "x")


def test_bandwidths_still_take_bits():
    assert parse_bandwidth("400Gbps") == 50e9
    assert parse_bandwidth("8Mb/s") == 1e6


@pytest.mark.parametrize("text", ["８MiB", "١٢٣", "1٢", "８", "1\u00a0MB", "１e3"])
def test_non_ascii_digits_and_spaces_are_refused(text):
    with pytest.raises(SpecError, match="cannot read"):
        parse_size(text, "x")
    with pytest.raises(SpecError, match="cannot read"):
        parse_time(text, "x")


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


def _cli_json(capsys, *argv):
    from fabricflow.cli import main

    code = main(list(argv))
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    assert len(lines) == 1, captured.out
    assert "Traceback" not in captured.err
    return code, json.loads(lines[0])


@pytest.mark.parametrize(
    "argv",
    [
        [
            "collective",
            "--fabric",
            "dgx-h100-superpod",
            "--op",
            "all-reduce",
            "--gpus",
            "16",
            "-b",
            "8Mb",
        ],
        [
            "collective",
            "--fabric",
            "dgx-h100-superpod",
            "--op",
            "all-reduce",
            "--gpus",
            "16",
            "-b",
            "８MiB",
        ],
        ["cc", "--scenario", "dumbbell", "--set", "kmax=400kb"],
    ],
)
def test_cli_refuses_bit_sizes_and_non_ascii_digits(capsys, argv):
    code, out = _cli_json(capsys, *argv, "--json")
    assert code == 2 and out["error"] == "SpecError", out


LONG = "a" * 5000


@pytest.mark.parametrize("name", [LONG + ".yaml", LONG, "/tmp/" + LONG + ".yml"])
def test_fabric_path_too_long_is_a_spec_error(capsys, name):
    from fabricflow.fabric.spec import load_fabric

    with pytest.raises(SpecError, match=r"^fabric: .*\(50\d\d characters\).*too long"):
        load_fabric(name)
    code, out = _cli_json(capsys, "fabric", "--json", name)
    assert code == 2 and out["error"] == "SpecError" and len(out["message"]) < 300


@pytest.mark.parametrize("name", ["/tmp/" + "a" * 300 + ".json", "a" * 300])
def test_model_path_too_long_is_a_spec_error(name):
    from fabricflow.workload.model_spec import load_model

    with pytest.raises(SpecError, match=r"^model: .*too long"):
        load_model(name)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize(
    "argv",
    [
        ["presets", "--json"],
        ["presets"],
        ["fabric", "--json", "dgx-h100-superpod"],
    ],
)
def test_full_disk_on_stdout_is_one_line_and_exit_1(argv):
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "fabricflow.cli", *argv],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "fabricflow: error: cannot write the output to stdout: No space left on device"
    ], done.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["cc", "--scenario", "dumbbell", "--out", ""],
        ["demo", "--fabric", "dgx-h100-superpod", "--out", " "],
        [
            *"step --fabric dgx-h100-superpod --gpu h100-sxm --model llama3-8b --gpus 8".split(),
            *"--tp 8 --micro-batch 1 --global-batch 8 --seq 128 --plot".split(),
            "",
        ],
    ],
)
def test_empty_output_paths_are_usage_errors(capsys, argv):
    code, out = _cli_json(capsys, *argv, "--json")
    assert code == 2 and out["error"] == "UsageError" and "an empty path" in out["message"]


@pytest.mark.parametrize(
    ("sets", "key"),
    [
        (["kmax=400KB", "kmax=500KB"], "kmax"),
        (["kmax=400KB", " kmax = 4MB"], "kmax"),
        (["pfc.xoff=50KB", "pfc.xoff=60KB"], "pfc.xoff"),
    ],
)
def test_cc_set_twice_is_refused_naming_the_key(capsys, sets, key):
    from fabricflow.solve.parameters import parse_overrides

    with pytest.raises(SpecError, match=rf"^--set {key}: given twice"):
        parse_overrides(sets)
    assert parse_overrides(["kmax=400KB", "pfc.kmax=1KB"]) == (
        {"kmax": "400KB"},
        {"kmax": "1KB"},
    )
    argv = ["cc", "--scenario", "dumbbell", "--json"]
    code, out = _cli_json(capsys, *argv, *(f"--set={item}" for item in sets))
    assert code == 2 and out["message"].startswith(f"--set {key}: given twice")


def _graph_spec(tmp_path, gpus: int) -> str:
    names = [f"g{i}" for i in range(gpus)]
    links = ", ".join(f"{{a: {name}, b: s1}}" for name in names)
    path = tmp_path / f"g{gpus}.yaml"
    path.write_text(
        f"{{name: g{gpus}, gpus: {gpus}, gpus_per_node: 1, topology: {{type: graph, "
        f"defaults: {{bandwidth: 100Gbps}}, nodes: [{{name: s1}}], gpus: [{', '.join(names)}], "
        f"links: [{links}]}}}}\n"
    )
    return str(path)


def test_demo_group_size_must_divide_the_gpu_count(capsys, tmp_path):
    argv = ["demo", "--fabric", "dgx-h100-superpod", "--out", str(tmp_path / "o"), "--json"]
    code, out = _cli_json(capsys, *argv, "--group-size", "3")
    assert code == 2 and out["message"] == "group_size: must divide the GPU count 1024, got 3"
    assert not (tmp_path / "o").exists()


def test_demo_default_group_size_adapts_to_small_fabrics(capsys, tmp_path):
    from fabricflow.commands.demo import _group_size
    from fabricflow.fabric.spec import load_fabric

    sizes = {n: _group_size(load_fabric(_graph_spec(tmp_path, n)), None) for n in (2, 6, 7, 12)}
    assert sizes == {2: 2, 6: 6, 7: 7, 12: 6}
    code, out = _cli_json(
        capsys, "demo", "--fabric", _graph_spec(tmp_path, 2), "--out", str(tmp_path / "o"), "--json"
    )
    assert code == 0 and out["alltoall_flows"] == 2


@pytest.mark.parametrize("command", ["demo", "collective"])
def test_one_gpu_fabric_is_refused_by_name(capsys, tmp_path, command):
    argv = [command, "--fabric", _graph_spec(tmp_path, 1), "--json"]
    if command == "collective":
        argv += ["--op", "all-reduce", "--gpus", "2"]
    else:
        argv += ["--out", str(tmp_path / "o")]
    code, out = _cli_json(capsys, *argv)
    assert code == 2 and out["message"].startswith("fabric: ") and "g1 has 1" in out["message"]
    assert "2..1" not in out["message"]


def test_alltoall_groups_on_one_gpu_names_the_gpu_count():
    from fabricflow.traffic.patterns import alltoall_groups

    with pytest.raises(SpecError, match=r"^num_gpus: groups need at least 2 GPUs, got 1$"):
        alltoall_groups(1, 2)
