"""Per-host netlists (host,tor,agg,core CSV) -> fabrics: tiers, repeated names, errors."""

from __future__ import annotations

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.fabric.netlist import read_netlist
from fabricflow.fabric.slurm import slurm_tree_text

PODS = [(4, 48), (3, 40), (5, 32), (2, 64), (6, 24), (2, 40)]  # (ToRs, hosts per ToR)


def write_clos(path) -> int:
    """A 3-tier tree of 824 hosts in 6 uneven pods; ToR names t0.. repeat in every pod."""
    rows, host = ["host,tor,agg,core"], 0
    for pod, (tors, per) in enumerate(PODS):
        for tor in range(tors):
            for _ in range(per):
                rows.append(f"h{host:04d},t{tor},agg{pod},core0")
                host += 1
    path.write_text("\n".join(rows) + "\n")
    return host


def test_uneven_three_tier_netlist(tmp_path):
    path = tmp_path / "net.csv"
    hosts = write_clos(path)
    assert hosts == 824
    fabric = ff.load_fabric(f"netlist:{path}", gpus_per_node=1, nic_bandwidth="400Gbps")
    assert fabric.num_gpus == 824
    tiers = np.asarray(fabric.node_tier)
    # the ToR names repeat under every aggregation switch: 22 ToRs, not 6
    assert [int(np.sum(tiers == t)) for t in (1, 2, 3)] == [22, 6, 1]
    kinds = set(np.asarray(fabric.node_kinds)[np.asarray(fabric.node_kind_id)[tiers >= 1]])
    assert kinds == {"tor", "agg", "core"}
    summary = fabric.summary()
    assert summary["bisection_per_gpu_Bps"] == pytest.approx(50e9)  # non-blocking
    # 2:1 at the ToRs and again at the aggregation switches: at most a quarter between pods
    half = ff.load_fabric(
        f"netlist:{path}", gpus_per_node=1, nic_bandwidth="400Gbps", oversubscription=2.0
    )
    assert 50e9 / 4 <= half.summary()["bisection_per_gpu_Bps"] < 50e9 / 2
    routes = ff.route(fabric, [0, 0], [823, 1])  # across pods, within a ToR
    assert [int((row >= 0).sum()) for row in routes.links] == [6, 2]
    assert read_netlist(path).switches["t0@agg0@core0"][1][:2] == ["h0000", "h0001"]
    # a netlist fabric exports as a Slurm tree like any fabric
    text = slurm_tree_text(fabric)
    assert "SwitchName=core0 Switches=agg[0-5]" in text


BAD = [
    ("host,switch\n", "line 1: expected the header host,tor,agg,core"),
    ("host,tor,agg,core\nh1,t1,a1,c1\nh1,t2,a1,c1\n", "line 3: host 'h1' is listed twice"),
    ("host,tor,agg,core\nh1,,a1,c1\n", "line 2: host 'h1' has no ToR"),
    ("host,tor,agg,core\nh1,t1,,c1\n", "line 2: core 'c1' above an empty agg"),
    ("host,tor,agg,core\nh1,t1,a1,c1\nh2,t1,a1,\n", "line 3: 2 switch level(s)"),
    ("host,tor,agg,core\nh1,t1,a1,\nh2,t2,a2,\n", "2 separate trees"),
    ("host,tor,agg,core\nh 1,t1,a1,c1\n", "line 2: a blank"),
    ("host,tor,agg,core\nh1,t1\n", "line 2: 2 fields"),
    ("host,tor,agg,core\n", "no host rows"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_malformed_netlists_name_the_file_and_line(tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ff.SpecError) as error:
        read_netlist(path)
    assert str(path) in str(error.value) and message in str(error.value)


def test_options_are_required(tmp_path):
    path = tmp_path / "net.csv"
    path.write_text("host,tor,agg,core\nh1,t1,,\nh2,t1,,\n")
    with pytest.raises(ff.SpecError) as error:
        ff.load_fabric(f"netlist:{path}", nic_bandwidth="400Gbps")
    assert error.value.field == "gpus_per_node"
    one_tier = ff.load_fabric(f"netlist:{path}", gpus_per_node=1, nic_bandwidth="100Gbps")
    assert one_tier.num_gpus == 2 and int(np.max(one_tier.node_tier)) == 1
