"""Imported fabrics (slurm:PATH, netlist:PATH) on every command that takes a fabric: one
reader, the same import flags, a companion's scale-up domain and transport, sweeps, and
the YAML export that reads back to the same fabric."""

from __future__ import annotations

import dataclasses
import json
import shlex

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.cli import _subparsers, build_parser, main
from fabricflow.collective.timing import prepare_collective
from fabricflow.commands import COMMANDS
from fabricflow.design.space import design_spec
from fabricflow.fabric.spec import build_fabric, load_fat_tree, spec_yaml_text
from fabricflow.sweeps.overrides import check_paths, resolved_spec

TOPOLOGY = """# two leaves of four 8-GPU nodes, one spine
SwitchName=leaf0 Nodes=dgx[001-004]
SwitchName=leaf1 Nodes=dgx[005-008]
SwitchName=spine0 Switches=leaf[0-1]
"""

SITE = """gpus_per_node: 8
nic_bandwidth: 400Gbps
transport: infiniband
scale_up:            # an HGX H100 baseboard: NVLink4, 900 GB/s per GPU both ways
  domain_size: 8
  bandwidth_bidirectional: 900GB/s
  latency: 0.5us
  nvls: true
"""

IMPORT_FLAGS = {"--gpus-per-node", "--nic-bandwidth", "--companion"}


@pytest.fixture
def site(tmp_path):
    (tmp_path / "topology.conf").write_text(TOPOLOGY)
    (tmp_path / "site.yaml").write_text(SITE)
    return tmp_path


def test_every_command_that_takes_a_fabric_takes_the_import_flags():
    takes = set()
    for name, command in _subparsers(build_parser(*COMMANDS)).items():
        actions = {action.dest: action for action in command._actions}
        if "fabric" not in actions:
            continue
        takes.add(name)
        flags = {flag for action in command._actions for flag in action.option_strings}
        assert IMPORT_FLAGS <= flags, name
        assert "slurm:PATH" in actions["fabric"].help, name
    assert {"fabric", "collective", "step", "optimize", "report", "cluster", "demo"} <= takes


def run_json(capsys, argv: list[str]) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_an_imported_node_all_reduces_over_its_scale_up_domain(site, capsys):
    """8 GPUs of one node: over NVLink with NVLS above 400 GB/s bus bandwidth; without
    the scale_up section the same GPUs talk through their 400G NICs (below 50 GB/s)."""
    argv = ["collective", "--fabric", f"slurm:{site / 'topology.conf'}", "--op", "all_reduce"]
    argv += ["--gpus", "8", "-b", "1GiB", "-e", "1GiB"]
    code, out = run_json(capsys, [*argv, "--companion", str(site / "site.yaml")])
    assert code == 0
    assert out["transport"]["protocol"] == "infiniband"
    (row,) = out["rows"]
    assert row["busbw_GBps"] > 400 and row["bottleneck"] == "nvlink"
    code, out = run_json(capsys, [*argv, "--gpus-per-node", "8", "--nic-bandwidth", "400Gbps"])
    assert code == 0 and out["rows"][0]["busbw_GBps"] < 50
    assert out["transport"]["protocol"] == "rocev2"


def test_import_flags_on_a_preset_are_refused(capsys):
    code, out = run_json(
        capsys,
        [
            "collective",
            "--fabric",
            "fat-tree-k4",
            "--op",
            "all_reduce",
            "--gpus",
            "8",
            "--gpus-per-node",
            "4",
        ],
    )
    assert code == 2 and "--gpus-per-node applies to slurm:PATH and netlist:PATH" in out["message"]


def test_the_step_a_report_prints_reads_the_same_imported_fabric(site, capsys, tmp_path):
    """The report on an imported fabric prints a step command with the import flags it
    was given (it used to print '--fabric slurm:PATH' alone, which 'step' refuses for
    want of --gpus-per-node), and that command gives the report's step time."""
    fabric = ["--fabric", f"slurm:{site / 'topology.conf'}"]
    flags = ["--companion", str(site / "site.yaml"), "--nic-bandwidth", "200Gbps"]
    job = ["--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "16", "--tp", "8"]
    argv = ["report", *fabric, *flags, *job, "--budget", "0", "--fail-fractions", "0.5"]
    code, report = run_json(capsys, [*argv, "--fail-seeds", "1", "--out", str(tmp_path)])
    assert code == 0
    words = shlex.split(report["step_command"])
    assert words[:4] == ["fabricflow", "step", *fabric]
    code, step = run_json(capsys, words[1:])
    assert code == 0
    assert step["step_time_s"] == report["step_time_s"]


def test_a_sweep_takes_an_import_and_its_options(site):
    fabric = f"slurm:{site / 'topology.conf'}"
    spec = resolved_spec(
        fabric, {"fabric.gpus_per_node": 4, "fabric.companion": str(site / "site.yaml")}
    )
    assert spec["gpus"] == 32 and spec["scale_up"]["domain_size"] == 8
    assert spec["transport"] == "infiniband"
    deeper = resolved_spec(
        fabric,
        {
            "fabric.companion": str(site / "site.yaml"),
            "fabric.scale_up.bandwidth_bidirectional": "1800GB/s",
        },
    )
    assert build_fabric(deeper).meta["scale_up_domain_size"] == 8
    with pytest.raises(ff.SpecError, match="gpus_per_node"):
        resolved_spec(fabric, {})
    # a grid over one option is checked beside the fixed others (the companion)
    check_paths(
        [fabric],
        {"fabric.gpus_per_node": [4, 8], "fabric.companion": [str(site / "site.yaml")]},
    )


def same(a, b) -> bool:
    """Deep equality of fabrics' fields: arrays by value, dataclasses field by field."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(
            same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    return a == b


def test_yaml_export_reads_back_to_the_same_fabric(site, tmp_path, capsys):
    imported = ff.load_fabric(
        f"slurm:{site / 'topology.conf'}", companion=str(site / "site.yaml"), oversubscription=3
    )
    designed = build_fabric(design_spec("2t/3:1/rail/1p/400G/su8/ib", 256))
    fabrics = (imported, designed, ff.load_fabric("dgx-h100-superpod"), load_fat_tree(4))
    for index, fabric in enumerate(fabrics):
        path = tmp_path / f"fabric{index}.yaml"
        path.write_text(spec_yaml_text(fabric))
        back = ff.load_fabric(str(path))
        assert same(back, fabric), fabric.name
    out = tmp_path / "cli.yaml"
    code = main(
        [
            "fabric",
            f"slurm:{site / 'topology.conf'}",
            "--companion",
            str(site / "site.yaml"),
            "--export",
            "yaml",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    capsys.readouterr()
    back = ff.load_fabric(str(out))
    assert back.num_gpus == 64 and back.meta["scale_up_domain_size"] == 8
    with pytest.raises(ff.SpecError, match="failed cables"):
        spec_yaml_text(imported.without(link_kind="leaf", fraction=0.5, seed=1))


@pytest.mark.parametrize("flags", [["--bom"], ["--cost"], ["--cost-file", "prices.yaml"]])
def test_export_refuses_the_summary_flags_it_would_drop(capsys, flags):
    """'--export yaml --bom' used to write the spec and drop --bom without a word."""
    argv = ["fabric", "fat-tree-k16", "--export", "yaml", *flags]
    code, out = run_json(capsys, argv)
    assert code == 2
    assert out["message"].startswith(f"{flags[0].lstrip('-')}:") and "--export" in out["message"]


def test_an_imported_transport_sets_the_routing(site):
    """InfiniBand's adaptive routing on an imported tree is the generic router's even
    split (spray): 8 pairs across two leaves, 8:1 oversubscribed under two spines, are not
    hashed onto fewer uplinks as RoCEv2's per-flow ECMP does."""
    conf = site / "two-spines.conf"
    conf.write_text(TOPOLOGY + "SwitchName=spine1 Switches=leaf[0-1]\n")
    ib = ff.load_fabric(f"slurm:{conf}", companion=str(site / "site.yaml"), oversubscription=8)
    roce = ff.load_fabric(
        f"slurm:{conf}", companion=str(site / "site.yaml"), oversubscription=8, transport="rocev2"
    )
    groups = np.array([[i, 32 + i] for i in range(0, 32, 4)])
    size = 2.0**28
    assert prepare_collective(ib, "all_to_all", groups).routing == "spray"
    assert prepare_collective(roce, "all_to_all", groups).routing == "ecmp"
    adaptive = ff.collective_time(ib, "all_to_all", groups, size)
    hashed = ff.collective_time(roce, "all_to_all", groups, size)
    assert adaptive.time_s == pytest.approx(
        ff.collective_time(ib, "all_to_all", groups, size, routing="spray").time_s, rel=1e-9
    )
    assert (
        hashed.time_s == ff.collective_time(ib, "all_to_all", groups, size, routing="ecmp").time_s
    )
    assert hashed.time_s > 1.1 * adaptive.time_s
