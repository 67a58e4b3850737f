"""YAML spec validation: every bad input names its field; presets load from package data."""

import json
import subprocess
import sys

import pytest
import yaml
from fabric_specs import fat_tree_spec

import fabricflow as ff
from fabricflow.errors import SpecError
from fabricflow.fabric.spec import build_fabric


def spec_with(change):
    spec = fat_tree_spec(8)
    change(spec)
    return spec


@pytest.mark.parametrize(
    "change, field, message",
    [
        (lambda s: s["topology"].update(raddix=3), "topology", "unknown key"),
        (lambda s: s.update(gpu=3), "", "unknown key"),
        (lambda s: s["topology"].update(nic_bandwidth="-400Gbps"), "topology.nic_bandwidth", "> 0"),
        (lambda s: s["topology"].update(nic_bandwidth="0Gbps"), "topology.nic_bandwidth", "> 0"),
        (
            lambda s: s["topology"]["tiers"][0].update(oversubscription=0.5),
            "tiers[0].oversubscription",
            ">= 1",
        ),
        (
            lambda s: s["topology"]["tiers"][0].update(oversubscription=5),
            "tiers[0].oversubscription",
            "cannot be split",
        ),
        (lambda s: s.update(gpus=4096), "tiers[2].radix", "radix too small"),
        (lambda s: s.update(gpus=100), "gpus", "multiple of"),
        (lambda s: s["topology"].update(type="hypercube"), "topology.type", "one of"),
        (lambda s: s["topology"].update(attachment="side"), "topology.attachment", "rail"),
        (
            lambda s: s["topology"]["tiers"][2].update(oversubscription=2),
            "oversubscription",
            "top tier",
        ),
        (lambda s: s["topology"].update(tiers=[{"radix": 8}] * 5), "topology.tiers", "at most 4"),
        (
            lambda s: s["topology"]["tiers"][0].update(down_ports=4),
            "tiers[0].radix",
            "either radix",
        ),
        (lambda s: s["topology"].update(planes=0), "topology.planes", "positive integer"),
        (lambda s: s.update(scale_up={"domain_size": 8}), "scale_up", "exactly one of"),
        (
            lambda s: s.update(scale_up={"domain_size": 3, "bandwidth_per_direction": "1GB/s"}),
            "scale_up.domain_size",
            "not a multiple",
        ),
        (lambda s: s.pop("name"), "name", "required"),
    ],
)
def test_bad_specs_name_the_field(change, field, message):
    with pytest.raises(SpecError) as error:
        build_fabric(spec_with(change))
    assert field in str(error.value) and message in str(error.value)


def test_unknown_preset_lists_presets():
    with pytest.raises(SpecError, match="dgx-h100-superpod"):
        ff.load_fabric("no-such-preset")


def test_yaml_file_round_trip(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(fat_tree_spec(4)))
    assert ff.load_fabric(path).num_gpus == 16
    with pytest.raises(SpecError, match="file not found"):
        ff.load_fabric(tmp_path / "missing.yaml")


def test_presets_ship_as_package_data():
    from importlib import resources

    files = {p.name for p in (resources.files("fabricflow") / "topologies").iterdir()}
    assert "clos-100k.yaml" in files


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "fabricflow.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_cli_fabric_json_is_one_object_with_contract_keys():
    result = run_cli("fabric", "dgx-h100-superpod", "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    for key in (
        "name",
        "num_gpus",
        "num_switches",
        "num_links",
        "tiers",
        "bisection_bandwidth_Bps",
    ):
        assert key in summary
    assert {"name", "switches", "oversubscription"} <= set(summary["tiers"][0])
    assert summary["bisection_bandwidth_Bps"] == pytest.approx(1024 * 50e9 / 2)


def test_cli_presets_and_errors():
    result = run_cli("presets")
    assert result.returncode == 0 and "clos-100k" in result.stdout
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == len(ff.list_presets())
    bad = run_cli("fabric", "nope", "--json")
    assert bad.returncode == 2 and "unknown preset" in json.loads(bad.stdout)["message"]


def test_demo_runs_and_writes_figures(tmp_path):
    result = run_cli("demo", "--fabric", "dgx-h100-superpod", "--out", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["alltoall_flows"] == 1024 * 7
    # the NIC is the bottleneck of a non-blocking fabric: no flow beats the NIC line rate
    assert report["alltoall_rate_Bps"]["max"] <= 50e9 * (1 + 1e-6)
    assert report["alltoall_aggregate_Bps"] <= 1024 * 50e9 * (1 + 1e-6)
    for figure in report["figures"]:
        assert (tmp_path / figure.split("/")[-1]).stat().st_size > 10_000
