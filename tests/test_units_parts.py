"""A part's bandwidth or latency far from any real part: a unit left out is refused or
warned about, naming the field and the unit to write (CLI flags and YAML alike)."""

from __future__ import annotations

import warnings

import pytest

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.errors import SpecError, UnitWarning
from fabricflow.fabric.spec import build_fabric
from fabricflow.units import parse_bandwidth, parse_time

TREE = "SwitchName=leaf0 Nodes=node[01-04]\nSwitchName=leaf1 Nodes=node[05-08]\n"
TREE += "SwitchName=spine0 Switches=leaf[0-1]\n"


def _spec(**topology) -> dict:
    return {
        "name": "t",
        "gpus": 8,
        "gpus_per_node": 1,
        "topology": {"type": "clos", "tiers": [{"radix": 4}, {"radix": 4}], **topology},
    }


def test_a_plain_nic_bandwidth_of_400_is_refused_with_the_unit_to_write():
    with pytest.raises(SpecError, match=r"400 bytes/s.*'400Gbps'") as info:
        build_fabric(_spec(nic_bandwidth=400))
    assert info.value.field == "topology.nic_bandwidth"


def test_an_import_option_of_400_is_refused_on_the_command_line(tmp_path, capsys):
    path = tmp_path / "topology.conf"
    path.write_text(TREE)
    argv = ["fabric", f"slurm:{path}", "--gpus-per-node", "4", "--nic-bandwidth", "400"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "nic_bandwidth" in err and "'400Gbps'" in err
    assert main([*argv[:-1], "400Gbps"]) == 0


@pytest.mark.parametrize(
    ("topology", "field"),
    [
        ({"nic_bandwidth": 4e7}, "topology.nic_bandwidth"),  # 320 Mb/s, no unit
        ({"nic_bandwidth": "100Mbps"}, "topology.nic_bandwidth"),  # a unit, still too slow
        ({"nic_bandwidth": "400Gbps", "nic_latency": 0.05}, "topology.nic_latency"),
        ({"nic_bandwidth": "400Gbps", "nic_latency": "50ms"}, "topology.nic_latency"),
    ],
)
def test_values_far_from_real_parts_warn_naming_the_field(topology, field):
    with pytest.warns(UnitWarning, match=field):
        build_fabric(_spec(**topology))


def test_a_plain_latency_of_600_is_refused():
    with pytest.raises(SpecError, match=r"600 s.*'600ns'") as info:
        build_fabric(_spec(nic_bandwidth="400Gbps", nic_latency=600))
    assert info.value.field == "topology.nic_latency"


def test_real_parts_and_other_quantities_stay_silent():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_fabric(_spec(nic_bandwidth="400Gbps", nic_latency="600ns"))
        build_fabric(_spec(nic_bandwidth=50e9, nic_latency=6e-7))  # plain SI, real values
        ff.load_fabric("gb200-nvl72-superpod")
        # not a part: a congestion-control rate step or a run's duration
        assert parse_bandwidth("5Mbps", "rai") == 625e3
        assert parse_bandwidth(400, "rate") == 400.0
        assert parse_time(600, "--duration") == 600.0
        assert parse_bandwidth(0, "x", allow_zero=True, part=True) == 0.0


def test_the_command_line_prints_a_warning_line(tmp_path, capsys):
    path = tmp_path / "slow.yaml"
    path.write_text(
        "name: slow\ngpus: 8\ngpus_per_node: 1\ntopology:\n  type: clos\n"
        "  nic_bandwidth: 40000000\n  tiers: [{radix: 4}, {radix: 4}]\n"
    )
    assert main(["fabric", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("fabricflow: warning: topology.nic_bandwidth: the plain number")
    assert "Gbps" in captured.err
