"""Figures and printed tables that say what they show: axes in a readable unit, labels
that do not overlap, a bill of materials without look-alike lines, a fairness index over
the flows that compete, a collective title without "group(s)"."""

from __future__ import annotations

import contextlib
import io
import itertools
import json

import pytest

import fabricflow as ff
from fabricflow.cli import main


def test_fabric_tiers_axes_read_in_a_sensible_unit():
    """dgx-h100-superpod's NVLink totals 7.4 Pb/s: the axis reads 0-8.5 Pb/s, not 8,000
    Tb/s (nor 800,000 Tb/s on a million-GPU fabric)."""
    from fabricflow.plots.fabric import tiers_figure

    fig = tiers_figure(ff.load_fabric("dgx-h100-superpod"))
    kinds, tiers = fig.axes[:2]
    assert kinds.get_ylabel().endswith("(Pb/s)") and tiers.get_ylabel().endswith("(Tb/s)")
    _drawn(fig)
    for ax in (kinds, tiers):
        assert 1 <= ax.get_ylim()[1] < 1000
        assert ax.yaxis.get_offset_text().get_text() == ""  # no '1e7' over the axis


def test_bit_rate_unit():
    from fabricflow.units import bit_rate_unit

    assert bit_rate_unit(50e9) == ("Gb/s", 1e9 / 8)
    assert bit_rate_unit(1e14) == ("Tb/s", 1e12 / 8)  # 800 Tb/s
    assert bit_rate_unit(2e14) == ("Pb/s", 1e15 / 8)
    assert bit_rate_unit(2e18) == ("Eb/s", 1e18 / 8)
    assert bit_rate_unit(1.0) == ("Gb/s", 1e9 / 8)


def _drawn(fig):
    """``fig`` drawn on an Agg canvas (the project's figures have none until saved)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas


def _overlaps(fig, texts) -> list[tuple[str, str]]:
    renderer = _drawn(fig).get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts if t.get_text()]
    return [(a, b) for (a, p), (b, q) in itertools.combinations(boxes, 2) if p.overlaps(q)]


def test_the_cost_figure_labels_do_not_overlap(monkeypatch, tmp_path):
    from fabricflow.fabric.cost import fabric_cost
    from fabricflow.report import cost_section

    figures = []
    monkeypatch.setattr(cost_section, "save_figure", lambda fig, path: figures.append(fig))
    cost_section.plot_cost_by_tier(
        fabric_cost(ff.load_fabric("gb200-nvl72-superpod")), tmp_path / "x.png"
    )
    (fig,) = figures
    texts = [fig._suptitle, fig._supxlabel]
    for ax in fig.axes:
        texts += [ax.xaxis.label, ax.yaxis.label, ax.title, *ax.get_xticklabels()]
    assert _overlaps(fig, texts) == []


@pytest.mark.parametrize("name", ["dgx-h100-superpod", "fat-tree-k16", "alibaba-hpn-pod"])
def test_the_bom_has_one_line_per_part_and_tier(name):
    bom = ff.bill_of_materials(ff.load_fabric(name))
    keys = [(i.category, i.part, i.tier) for i in bom.items]
    assert len(keys) == len(set(keys)), [k for k in keys if keys.count(k) > 1]
    for item in bom.items:
        if item.category == "transceiver":
            assert "both ends" in item.detail or " end, " in item.detail
            assert "lower end" not in item.detail and "upper end" not in item.detail


def test_the_bom_line_of_both_ends_counts_each_end():
    """dgx-h100-superpod's leaf-spine optics: 16 twin-port modules per leaf (32 leaves)
    and 32 per spine (16 spines), one line of 1,024 saying so."""
    bom = ff.bill_of_materials(ff.load_fabric("dgx-h100-superpod"))
    (line,) = [i for i in bom.items if i.category == "transceiver" and i.tier == "leaf"]
    assert line.count == 1024
    assert "512 at the leaf end, 512 at the spine end" in line.detail


def test_cc_fairness_is_over_the_flows_that_share_the_bottleneck(capsys):
    """HPCC on a 4-to-1 incast with a victim flow on another link: the four incast flows
    get equal shares (Jain 1); the victim, at its own line rate, is no unfairness."""
    argv = ["cc", "--scenario", "incast", "--flows", "4", "--cc", "hpcc"]
    argv += ["--pfc", "on", "--duration", "2ms", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["roles"]["victim"] and out["jain_flows"] == len(out["roles"]["incast"])
    assert out["jain_fairness"] == pytest.approx(1.0, abs=1e-3)


def test_the_collective_plot_title_counts_groups_in_words(monkeypatch, tmp_path):
    from fabricflow.commands import collective  # the command's own name of the plot

    titles = []

    def capture(results, path, *, title=""):
        titles.append(title)

    monkeypatch.setattr(collective, "plot_collective", capture)
    argv = ["collective", "--fabric", "dgx-h100-superpod", "--op", "all_reduce"]
    argv += ["--gpus", "16", "-b", "1MiB", "-e", "1MiB", "--plot", str(tmp_path / "c.png")]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(argv) == 0
        assert main([*argv[:6], "8", "--group-size", "4", *argv[7:]]) == 0
    assert titles[0].startswith("all_reduce on dgx-h100-superpod: one group of 16 GPUs,")
    assert "2 groups of 4 GPUs (contiguous)" in titles[1]
    assert "(s)" not in " ".join(titles)
