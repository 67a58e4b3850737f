"""Design-review figures of a fabric and of a collective: linear axes where the values
are comparable, the CLI's number formats, every link counted, and the commands that
write them (``fabric --out``, ``collective --plot``)."""

from __future__ import annotations

import json

import numpy as np

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.plots.fabric import (
    _bins,
    link_values_figure,
    tiers_figure,
    topology_figure,
)
from fabricflow.units import format_bandwidth


def test_tier_figure_has_linear_axes_and_the_cli_number_format():
    fabric = ff.load_fabric("dgx-h100-superpod")
    fig = tiers_figure(fabric)
    kinds, tiers = fig.axes
    assert kinds.get_yscale() == "linear" and tiers.get_yscale() == "linear"
    # NIC and leaf capacities are equal, so their bars are too
    heights = {
        t.get_text(): b.get_height()
        for t, b in zip(kinds.get_xticklabels(), kinds.patches, strict=False)
    }
    assert heights["nic"] == heights["leaf"]
    title = fig._suptitle.get_text()
    assert format_bandwidth(fabric.summary()["bisection_bandwidth_Bps"]) in title  # "204.8 Tb/s"
    assert "100 % of full bisection" in title


def test_link_histogram_counts_idle_links_and_leaves_no_gaps_between_integers():
    fabric = ff.load_fabric("fat-tree-k16")
    flows = np.zeros(fabric.num_links)
    leaf = fabric.links_of_kind("leaf")
    flows[leaf[: leaf.size // 2]] = np.arange(leaf.size // 2) % 5  # 0..4 flows, some idle
    fig = link_values_figure(fabric, flows, xlabel="flows per link", title="t", kinds=["leaf"])
    (label,) = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    idle = int(np.count_nonzero(flows[leaf] == 0))
    assert label == f"leaf: {leaf.size:,} links, {idle:,} carry none"
    edges = _bins(flows[leaf])
    np.testing.assert_array_equal(edges, np.arange(-0.5, 5.5, 1.0))  # one bin per integer
    assert _bins(np.arange(1000.0)).size < 62  # wide ranges: integer-wide bins, ~60 of them


def test_topology_sketch_draws_one_row_per_tier():
    fig = topology_figure(ff.load_fabric("dgx-h100-superpod"))
    labels = " ".join(t.get_text() for t in fig.axes[0].texts)
    for row in ("GPUs\n1,024", "leaf\n32", "spine\n16", "nvlink domain switches\n128"):
        assert row in labels
    assert "leaf: 1,024 cables x 400 Gb/s" in labels


def test_fabric_out_writes_the_summary_and_figures(tmp_path, capsys):
    out = tmp_path / "new" / "dir"
    assert main(["fabric", "dgx-h100-superpod", "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert sorted(p.name for p in out.iterdir()) == [
        "fabric_tiers.png",
        "summary.json",
        "topology.png",
    ]
    stored = json.loads((out / "summary.json").read_text())
    assert stored["cables_per_kind"] == result["cables_per_kind"]
    assert main(["fabric", "dgx-h100-superpod"]) == 0
    text = capsys.readouterr().out
    assert "switches 48 network (32 leaf, 16 spine) + 128 scale-up" in text
    assert "leaf" in text and "1,024 cables in 512 bundles" in text
    assert "400 Gb/s per GPU over the 512 GPUs of one half, 100 % of full bisection" in text


def test_collective_plot_and_size_messages(tmp_path, capsys):
    plot = tmp_path / "busbw.png"
    args = ["collective", "--fabric", "dgx-h100-superpod", "--op", "all_reduce", "--gpus", "16"]
    assert main([*args, "-b", "1MiB", "-e", "64MiB", "-f", "4", "--plot", str(plot), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["plot"] == str(plot) and plot.stat().st_size > 10_000
    assert main([*args, "-b", "8GiB", "-e", "8MiB", "--json"]) == 2
    message = json.loads(capsys.readouterr().out)["message"]
    assert "(8 GiB), got 8 MiB" in message and "e+0" not in message
