"""The collective figure: one line per algorithm, and the chosen one marked beneath them
(a band), so the algorithm the model picks stays visible instead of being drawn over."""

from __future__ import annotations

from types import SimpleNamespace

from fabricflow.plots import collective


def test_the_chosen_algorithm_is_a_band_under_every_algorithm_line(monkeypatch, tmp_path):
    results = [
        SimpleNamespace(
            op="all_reduce",
            group_size=8,
            size=size,
            algorithm="ring",
            time_s=size / 1e11,
            candidates={"ring/Simple": size / 1e11, "tree/LL": size / 5e10},
        )
        for size in (2.0**20, 2.0**24, 2.0**28)
    ]
    figures = []
    monkeypatch.setattr(collective, "save_figure", lambda fig, path: figures.append(fig))
    collective.plot_collective(results, tmp_path / "c.png")
    for ax in figures[0].axes:
        lines = {line.get_label(): line for line in ax.get_lines()}
        band = lines.pop("chosen (ring)")
        assert sorted(lines) == ["ring", "tree"]
        assert all(band.get_zorder() < line.get_zorder() for line in lines.values())
        assert band.get_alpha() < 1
