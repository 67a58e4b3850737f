"""Messages at the command line: negative values, missing values, bare unit prefixes, paths
too long or empty, settings given twice, fabrics too small for the command: one clear
message, exit 2."""

from __future__ import annotations

import json

import pytest
from fault_helpers import one_json as _one_json

from fabricflow.cli import main
from fabricflow.errors import SpecError


# ------------------------------------------------------------------ messages
@pytest.mark.parametrize("flag", ["--duration", "--dur"])
def test_negative_value_reaches_the_command(capsys, flag):
    assert main(["cc", "--scenario", "dumbbell", flag, "-1ms", "--json"]) == 2
    data = _one_json(capsys.readouterr().out)
    assert data["error"] == "SpecError"
    assert data["message"].startswith("--duration:") and "> 0" in data["message"]


def test_only_the_running_commands_value_flags_take_negative_values():
    from fabricflow.cli import _attach_negative_values, build_parser

    parser = build_parser("step", "bench", "collective")  # the parsers of these commands
    # --gpu takes a value in `step` but is a switch in `bench`
    assert _attach_negative_values(["step", "--gpu", "-1"], parser) == ["step", "--gpu=-1"]
    assert _attach_negative_values(["bench", "--gpu", "-1"], parser) == ["bench", "--gpu", "-1"]
    assert _attach_negative_values(["collective", "-b", "-8M", "--out", "-x"], parser) == [
        "collective",
        "-b=-8M",
        "--out",
        "-x",
    ]


def test_missing_value_is_still_a_usage_error(capsys):
    assert main(["cc", "--scenario", "dumbbell", "--out", "--json"]) == 2
    data = _one_json(capsys.readouterr().out)
    assert data["error"] == "UsageError" and "--out" in data["message"]


def test_collective_bare_unit_prefix_suggests_bytes(capsys):
    assert (
        main(
            [
                "collective",
                "--fabric",
                "dgx-h100-superpod",
                "--op",
                "all_reduce",
                "--gpus",
                "8",
                "-b",
                "8M",
                "--json",
            ]
        )
        == 2
    )
    message = _one_json(capsys.readouterr().out)["message"]
    assert message.startswith("minbytes:") and "8MiB" in message and "8MB" in message


def test_demo_bad_fabric_creates_no_out_folder(tmp_path, capsys):
    out_dir = tmp_path / "demo"
    assert main(["demo", "--fabric", "no-such-preset", "--out", str(out_dir), "--json"]) == 2
    assert _one_json(capsys.readouterr().out)["error"] == "SpecError"
    assert not out_dir.exists()


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
        argv += ["--op", "all_reduce", "--gpus", "2"]
    else:
        argv += ["--out", str(tmp_path / "o")]
    code, out = _cli_json(capsys, *argv)
    assert code == 2 and out["message"].startswith("fabric: ") and "g1 has 1" in out["message"]
    assert "2..1" not in out["message"]
