"""Slurm topology files: hostlists, tree and block import, export, round trips, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.fabric.hostlist import (
    HostlistError,
    compress_hostlist,
    count_hostlist,
    expand_hostlist,
)
from fabricflow.fabric.slurm import read_slurm_topology, slurm_block_text, slurm_tree_text
from fabricflow.fabric.spec import load_fat_tree


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ("node[001-003,010]", ["node001", "node002", "node003", "node010"]),
        ("r[1-2]n[8-9]", ["r1n8", "r1n9", "r2n8", "r2n9"]),
        ("a, b[08-10]", ["a", "b08", "b09", "b10"]),
        ("gpu[9-11]", ["gpu9", "gpu10", "gpu11"]),
        ("single", ["single"]),
    ],
)
def test_hostlist_expands_and_compresses_back(expression, names):
    assert expand_hostlist(expression) == names
    assert expand_hostlist(compress_hostlist(names)) == names


def test_hostlist_compresses_runs():
    names = [f"node{i:03d}" for i in [*range(1, 129), 130]]
    assert compress_hostlist(names) == "node[001-128,130]"
    assert compress_hostlist(["n1", "n2", "n4", "x", "n5"]) == "n[1-2,4],x,n5"


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("node[1-", "without ']'"),
        ("node1]", "without '['"),
        ("node[3-1]", "runs backwards"),
        ("node[a-b]", "is not N or N-M"),
        ("a,,b", "empty item"),
        ("n[[1]]", "nested"),
        ("n[1-99999999999]", "more than"),
    ],
)
def test_bad_hostlists(expression, message):
    with pytest.raises(HostlistError) as error:
        expand_hostlist(expression)
    assert message in str(error.value)


TREE = """# a two-level tree: 2 leaves of 4 nodes, one spine
SwitchName=leaf0 Nodes=node[01-04]
SwitchName=leaf1 Nodes=node[05-08] LinkSpeed=100
switchname=spine0 switches=leaf[0-1]
"""


def test_tree_import_builds_the_fabric(tmp_path):
    path = tmp_path / "topology.conf"
    path.write_text(TREE)
    fabric = ff.load_fabric(f"slurm:{path}", gpus_per_node=4, nic_bandwidth="400Gbps")
    assert fabric.num_gpus == 32 and fabric.gpus_per_node == 4
    summary = fabric.summary()
    tiers = np.asarray(fabric.node_tier)
    assert np.sum(tiers == 1) == 2 and np.sum(tiers == 2) == 1
    # non-blocking by default: each leaf's uplink carries its 16 NICs (16 x 50 GB/s)
    src, dst = np.asarray(fabric.link_src), np.asarray(fabric.link_dst)
    up = (tiers[src] == 1) & (tiers[dst] == 2)
    np.testing.assert_allclose(np.asarray(fabric.capacity)[up], 16 * 50e9)
    assert summary["num_gpus"] == 32 and summary["num_network_switches"] == 3
    # 2:1 at every switch
    half = ff.load_fabric(
        f"slurm:{path}", gpus_per_node=4, nic_bandwidth="400Gbps", oversubscription=2.0
    )
    np.testing.assert_allclose(np.asarray(half.capacity)[up], 8 * 50e9)
    # written as fabric specs write it (a companion's 'oversubscription: 2:1' was refused)
    ratio = ff.load_fabric(
        f"slurm:{path}", gpus_per_node=4, nic_bandwidth="400Gbps", oversubscription="2:1"
    )
    np.testing.assert_array_equal(ratio.capacity, half.capacity)
    # a rail-optimized node under two leaves: GPU i on leaf i mod 2
    path.write_text("SwitchName=r0 Nodes=n[1-2]\nSwitchName=r1 Nodes=n[1-2]\n")
    rails = ff.load_fabric(f"slurm:{path}", gpus_per_node=2, nic_bandwidth="400Gbps")
    first_hop = np.asarray(rails.link_dst)[np.asarray(rails.link_src) == rails.gpu_node[1]]
    assert np.asarray(rails.node_kinds)[np.asarray(rails.node_kind_id)[first_hop]].tolist() == ["r"]


def test_block_import_and_companion(tmp_path):
    path = tmp_path / "blocks.conf"
    path.write_text("BlockName=b1 Nodes=dgx[01-18]\nBlockName=b2 Nodes=dgx[19-36]\nBlockSizes=18\n")
    topology = read_slurm_topology(path)
    assert topology.kind == "block" and topology.block_sizes == (18,)
    companion = tmp_path / "site.yaml"
    companion.write_text("gpus_per_node: 8\nnic_bandwidth: 400Gbps\n")
    fabric = ff.load_fabric(f"slurm:{path}", companion=str(companion))
    assert fabric.num_gpus == 36 * 8
    assert slurm_block_text(fabric).splitlines()[1:] == [
        "BlockName=block0 Nodes=dgx[01-18]",
        "BlockName=block1 Nodes=dgx[19-36]",
        "BlockSizes=18",
    ]
    companion.write_text("gpus_per_node: 8\nnic_speed: 400Gbps\n")
    with pytest.raises(ff.SpecError, match="unknown key 'nic_speed'"):
        ff.load_fabric(f"slurm:{path}", companion=str(companion))
    with pytest.raises(ff.SpecError) as error:
        ff.load_fabric(f"slurm:{path}", gpus_per_node=8)
    assert error.value.field == "nic_bandwidth"


BIG_TREES = [
    "dgx-a100-superpod",
    "gb200-nvl72-superpod",
    "fat-tree-k16",
    "fat-tree-k32",
    "meta-llama3-24k",
    "alibaba-hpn-pod",
    "xai-colossus-100k",
    "clos-100k",
]  # every other preset that maps to a tree (clos-1m: too big for a test machine)


@pytest.mark.parametrize(
    "name",
    [
        "fat-tree-k4",
        "dgx-h100-superpod",
        "dgx-b200-superpod",
        *[pytest.param(name, marks=pytest.mark.slow) for name in BIG_TREES],
    ],
)
def test_export_then_import_gives_the_same_structure(tmp_path, name):
    fabric = load_fat_tree(4) if name == "fat-tree-k4" else ff.load_fabric(name)
    for form, write in (("tree", slurm_tree_text), ("block", slurm_block_text)):
        text = write(fabric)
        path = tmp_path / f"{form}.conf"
        path.write_text(text)
        back = ff.load_fabric(
            f"slurm:{path}", gpus_per_node=fabric.gpus_per_node, nic_bandwidth="400Gbps"
        )
        assert back.num_gpus == fabric.num_gpus
        assert write(back).splitlines()[1:] == text.splitlines()[1:]
        if form == "tree":  # the same switches per tier
            for tier in range(1, int(np.max(fabric.node_tier)) + 1):
                assert np.sum(back.node_tier == tier) == np.sum(fabric.node_tier == tier)


def test_fabrics_without_a_tree_are_refused():
    for name in ("tpu-v4-pod", "frontier-dragonfly"):
        with pytest.raises(ff.SpecError) as error:
            slurm_tree_text(ff.load_fabric(name))
        assert error.value.field == "export"


BAD = [
    ("SwitchName=s0 Nodes=n[1-\n", "line 1: bad hostlist"),
    ("SwitchName=s1 Switches=s0\nSwitchName=s0 Nodes=n1\n", "line 1: switch 's0' is referenced"),
    ("SwitchName=s0 Nodes=n1\nSwitchName=s0 Nodes=n2\n", "line 2: 's0' is defined twice"),
    ("\nSwitchName=s0\n", "line 2: 's0' has neither Nodes= nor Switches="),
    ("SwitchName=s0 Nodes=n1 Color=red\n", "line 1: unknown key 'Color'"),
    ("SwitchName=s0 Nodes=n1\nBlockName=b0 Nodes=n2\n", "line 2: SwitchName and BlockName"),
    ("Nodes=n1\n", "line 1: expected SwitchName="),
    ("SwitchName=s0 Nodes=n1 stray\n", "line 1: expected KEY=VALUE"),
    ("BlockName=b0 Nodes=n1\nBlockSizes=x\n", "line 2: BlockSizes must be integers"),
    ("# only a comment\n", "no SwitchName= or BlockName= line"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_malformed_files_name_the_file_and_line(tmp_path, text, message):
    path = tmp_path / "topology.conf"
    path.write_text(text)
    with pytest.raises(ff.SpecError) as error:
        read_slurm_topology(path)
    assert str(path) in str(error.value) and message in str(error.value)


def test_cli_import_and_export(tmp_path, capsys):
    out = tmp_path / "k4.conf"
    assert main(["fabric", "fat-tree-k16", "--export", "slurm-tree", "--out", str(out)]) == 0
    capsys.readouterr()
    assert out.read_text().splitlines()[1] == "SwitchName=leaf0 Nodes=node[0000-0007]"
    argv = ["fabric", f"slurm:{out}", "--gpus-per-node", "1", "--nic-bandwidth", "400Gbps"]
    assert main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["num_gpus"] == 1024
    assert main(["fabric", f"slurm:{out}", "--json"]) == 2  # no GPUs per node given
    assert json.loads(capsys.readouterr().out)["error"] == "SpecError"
    assert main(["fabric", "fat-tree-k16", "--nic-bandwidth", "1Gbps", "--json"]) == 2
    capsys.readouterr()
    assert main(["fabric", "tpu-v4-pod", "--export", "slurm-block"]) == 2


# ----------------------------------------------------------------------- files other tools wrote


def test_cost_of_an_imported_fabric_reads_its_cables(tmp_path):
    """4 nodes of 8 GPUs per leaf: 32 x 400G down and 32 x 400G up, one 64-port switch."""
    path = tmp_path / "ok.conf"
    path.write_text(
        "SwitchName=leaf0 Nodes=dgx[01-04]\nSwitchName=leaf1 Nodes=dgx[05-08]\n"
        "SwitchName=spine0 Switches=leaf[0-1]\n"
    )
    fabric = ff.load_fabric(f"slurm:{path}", gpus_per_node=8, nic_bandwidth="400Gbps")
    cost = ff.fabric_cost(fabric)
    assert cost.bom.count(category="switch", tier="leaf") == 2
    assert cost.bom.count(category="switch", tier="spine") == 1
    assert cost.bom.count(category="nic") == 64


def test_uplinks_are_whole_cables_no_faster_than_the_nic(tmp_path):
    path = tmp_path / "t.conf"
    path.write_text(TREE)
    fabric = ff.load_fabric(
        f"slurm:{path}", gpus_per_node=4, nic_bandwidth="400Gbps", oversubscription=3
    )
    tiers = np.asarray(fabric.node_tier)
    src, dst = np.asarray(fabric.link_src), np.asarray(fabric.link_dst)
    up = (tiers[src] == 1) & (tiers[dst] == 2)
    # 16 NICs / 3 = 5.33 NICs of uplink: 6 cables of 266.7 Gb/s each, the capacity exact
    np.testing.assert_allclose(np.asarray(fabric.capacity)[up], 16 * 50e9 / 3)
    assert list(np.asarray(fabric.link_cables)[up]) == [6, 6]


ODD_NAMES = ["gpu,a", "rack[1]", 'q"uote', "h#1", "n,[0-3]", "plain7"]


@pytest.mark.parametrize("odd", ODD_NAMES)
def test_odd_host_names_survive_a_slurm_round_trip(tmp_path, odd):
    """A netlist host named with hostlist syntax comes back as one host of 8 GPUs."""
    net = tmp_path / "net.csv"
    quoted = '"' + odd.replace('"', '""') + '"'
    net.write_text(f"host,tor,agg,core\n{quoted},t0,,\nplain8,t0,,\n")
    fabric = ff.load_fabric(f"netlist:{net}", gpus_per_node=8, nic_bandwidth="400Gbps")
    conf = tmp_path / "topology.conf"
    conf.write_text(slurm_tree_text(fabric))
    back = ff.load_fabric(f"slurm:{conf}", gpus_per_node=8, nic_bandwidth="400Gbps")
    assert back.num_gpus == 16
    assert read_slurm_topology(conf).nodes == [odd, "plain8"]
    assert slurm_tree_text(back).splitlines()[1:] == conf.read_text().splitlines()[1:]


def test_odd_switch_names_survive_a_slurm_round_trip(tmp_path):
    conf = tmp_path / "odd.conf"
    conf.write_text(
        'SwitchName="sw,a[1]" Nodes="n,1",n2  # a comment\nSwitchName=top Switches="sw,a[1]"\n'
    )
    fabric = ff.load_fabric(f"slurm:{conf}", gpus_per_node=2, nic_bandwidth="400Gbps")
    assert fabric.num_gpus == 4 and "sw,a[1]" in fabric.node_kinds
    again = tmp_path / "again.conf"
    again.write_text(slurm_tree_text(fabric))
    assert read_slurm_topology(again).nodes == ["n,1", "n2"]
    assert ff.load_fabric(f"slurm:{again}", gpus_per_node=2, nic_bandwidth="400Gbps").num_gpus == 4


def test_hostlists_quote_every_odd_name():
    names = [*ODD_NAMES, "a b", "n1", "n2", "x"]
    text = compress_hostlist(names)
    assert expand_hostlist(text) == names
    assert count_hostlist(text) == len(names)
