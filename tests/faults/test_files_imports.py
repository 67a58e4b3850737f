"""Files other tools wrote, imported as fabrics (Slurm topology.conf, per-host netlists,
their companion files): every bad file refused with its file, line or key and the allowed
values, and sizes refused from an estimate before anything of that size is made."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.fabric.netlist import read_netlist
from fabricflow.fabric.slurm import read_slurm_topology

TREE = """SwitchName=leaf0 Nodes=node[01-04]
SwitchName=leaf1 Nodes=node[05-08]
SwitchName=spine0 Switches=leaf[0-1]
"""

# ----------------------------------------------------------------------- Slurm topology.conf


def test_separate_trees_are_refused_naming_their_tops(tmp_path):
    path = tmp_path / "two.conf"
    path.write_text(
        "SwitchName=leaf0 Nodes=a[1-2]\nSwitchName=leaf1 Nodes=b[1-2]\n"
        "SwitchName=spine0 Switches=leaf0\n"
    )
    with pytest.raises(ff.SpecError) as error:
        ff.load_fabric(f"slurm:{path}", gpus_per_node=8, nic_bandwidth="400Gbps")
    message = str(error.value)
    assert "2 separate trees" in message and str(path) in message
    assert "'leaf1' (line 2)" in message and "'spine0' (line 3)" in message
    # a node under two leaves joins them (rail-optimized): one tree, accepted
    path.write_text("SwitchName=rail0 Nodes=a[1-2]\nSwitchName=rail1 Nodes=a[1-2]\n")
    assert ff.load_fabric(f"slurm:{path}", gpus_per_node=2, nic_bandwidth="400Gbps").num_gpus == 4


@pytest.mark.parametrize(
    "line",
    [
        "SwitchName=le\x00af0 Nodes=a[1-2]",
        "SwitchName=leaf0 Nodes=a\x00[1-2]",
        "SwitchName=l Nodes=a\x07",
    ],
)
def test_control_characters_are_refused_with_the_line(tmp_path, line):
    path = tmp_path / "nul.conf"
    path.write_text("# header\n" + line + "\n")
    with pytest.raises(ff.SpecError, match=r"line 2: the control character"):
        read_slurm_topology(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("BlockName=b1 Nodes=a[1-2] BlockSizes=2\n", "line 1: BlockSizes= stands on a line"),
        ("BlockName=b1 Nodes=a[1-2]\nBlockSizes=2\nBlockSizes=1\n", "line 3: BlockSizes given"),
    ],
)
def test_block_sizes_are_read_once_on_their_own_line(tmp_path, text, message):
    path = tmp_path / "blocks.conf"
    path.write_text(text)
    with pytest.raises(ff.SpecError, match=message):
        read_slurm_topology(path)


@pytest.mark.parametrize("speed", ["fast", "-1", "1e3", '"100"'])
def test_a_link_speed_is_a_whole_number(tmp_path, speed):
    path = tmp_path / "speed.conf"
    path.write_text(f"SwitchName=leaf0 Nodes=a[1-2] LinkSpeed={speed}\n")
    with pytest.raises(ff.SpecError, match=r"line 1: LinkSpeed must be a whole number"):
        read_slurm_topology(path)
    path.write_text("SwitchName=leaf0 Nodes=a[1-2] LinkSpeed=100\n")
    assert read_slurm_topology(path).nodes == ["a1", "a2"]


@pytest.mark.parametrize("names", [("top_",), ("top", "top_"), ("top", "top0", "top1")])
def test_blocks_named_like_the_joining_switch(tmp_path, names):
    path = tmp_path / "blocks.conf"
    path.write_text("".join(f"BlockName={name} Nodes=n{i}[1-2]\n" for i, name in enumerate(names)))
    fabric = ff.load_fabric(f"slurm:{path}", gpus_per_node=2, nic_bandwidth="400Gbps")
    tiers = np.asarray(fabric.node_tier)
    assert fabric.num_gpus == 4 * len(names)
    assert int(np.sum(tiers == 1)) == len(names) and int(np.sum(tiers == 2)) == 1


def test_a_huge_range_is_refused_before_it_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "64MiB")
    path = tmp_path / "huge.conf"
    path.write_text("SwitchName=leaf0 Nodes=n[1-200000]\n")
    tracemalloc.start()
    try:
        with pytest.raises(ff.MemoryBudgetError) as error:
            read_slurm_topology(path, gpus_per_node=8)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "at least 200,000 nodes x 8 GPUs per node" in str(error.value)
    assert "GiB, over the memory budget of 0.06 GiB" in str(error.value)
    assert peak < 4 * 2**20  # the names were never made


def test_a_huge_gpus_per_node_is_refused_before_the_spec_is_made(tmp_path, monkeypatch):
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "64MiB")
    path = tmp_path / "t.conf"
    path.write_text(TREE)
    tracemalloc.start()
    try:
        with pytest.raises(ff.MemoryBudgetError, match="at least 4 nodes x 200,000 GPUs per node"):
            ff.load_fabric(f"slurm:{path}", gpus_per_node=200_000, nic_bandwidth="400Gbps")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20
    for per_node in (10**30, 2**20):  # at least 4 x 2**20 = 4,194,304 GPUs, over 2**21
        with pytest.raises(ff.SpecError, match="over the limit of 2,097,152"):
            ff.load_fabric(f"slurm:{path}", gpus_per_node=per_node, nic_bandwidth="400Gbps")


def test_ten_million_nodes_are_refused_before_their_names_are_made(tmp_path):
    path = tmp_path / "e7.conf"
    path.write_text("SwitchName=leaf0 Nodes=n[1-10000000]\n")
    tracemalloc.start()
    try:
        with pytest.raises(ff.SpecError, match="at least 10,000,000 nodes x 1 GPUs per node"):
            ff.load_fabric(f"slurm:{path}", gpus_per_node=1, nic_bandwidth="400Gbps")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20


# ----------------------------------------------------------------------- netlists

BAD_NETLISTS = [
    # one name at two levels: a ToR named as an aggregation or a core switch
    (
        "host,tor,agg,core\nh1,x,agg1,c\nh2,t2,x,c\n",
        "line 3: the agg 'x' has the name of the tor on line 2",
    ),
    (
        "host,tor,agg,core\nh1,t1,a1,c\nh2,c,a2,c\n",
        "line 3: the tor 'c' has the name of the core on line 2",
    ),
    ("host,tor,agg,core\nh1,t1,a1,c\nh2,a1,a2,c\n", "line 3: the tor 'a1' has the name of the agg"),
    ("host,tor,agg,core\nh1,t\x001,a1,c\n", "line 2: the control character '\\x00'"),
]


@pytest.mark.parametrize(("text", "message"), BAD_NETLISTS)
def test_bad_netlists_name_the_file_and_line(tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ff.SpecError) as error:
        read_netlist(path)
    assert str(path) in str(error.value) and message in str(error.value)


def test_a_huge_netlist_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "16MiB")
    path = tmp_path / "big.csv"
    path.write_text("host,tor,agg,core\n" + "".join(f"h{i},t{i // 32},,\n" for i in range(20_000)))
    tracemalloc.start()
    try:
        with pytest.raises(ff.MemoryBudgetError, match="20,000 nodes x 8 GPUs per node"):
            ff.load_fabric(f"netlist:{path}", gpus_per_node=8, nic_bandwidth="400Gbps")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20  # 20,000 rows of text were never read in


# ----------------------------------------------------------------------- companion files


@pytest.fixture
def site(tmp_path):
    (tmp_path / "topology.conf").write_text(TREE)
    return tmp_path


def run_json(capsys, argv: list[str]) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("scale_up: {domain_size: 8, bandwidth: 900GB/s}\n", "allowed keys"),
        ("scale_up: {domain_size: 3, bandwidth_bidirectional: 900GB/s}\n", "neither fills"),
        ("transport: ib\n", "unknown protocol 'ib'"),
        ("gpus_per_node: 0\n", "must be an integer >= 1"),
        ("sclae_up: {}\n", "did you mean 'scale_up'"),
    ],
)
def test_companion_errors_name_the_file_and_the_allowed_values(site, capsys, extra, message):
    bad = site / "bad.yaml"
    bad.write_text(
        "nic_bandwidth: 400Gbps\n"
        + ("gpus_per_node: 8\n" if "gpus_per" not in extra else "")
        + extra
    )
    code, out = run_json(
        capsys, ["fabric", f"slurm:{site / 'topology.conf'}", "--companion", str(bad)]
    )
    assert code == 2 and out["error"] == "SpecError"
    assert message in out["message"]
    assert "neither fills" in message or str(bad) in out["message"]


@pytest.mark.parametrize("companion", [5, ["site.yaml"], ""])
def test_a_companion_is_a_path(site, companion):
    with pytest.raises(ff.SpecError, match="companion: must be the path of a YAML or JSON file"):
        ff.load_fabric(f"slurm:{site / 'topology.conf'}", companion=companion)
