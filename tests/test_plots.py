"""Figures (:mod:`fabricflow.plots`): written in the format of their extension, through
``save_figure``."""

from __future__ import annotations

import pytest
from small_cases import small_figure as _figure


def test_save_figure_writes_the_format_of_the_extension(tmp_path):
    from fabricflow.plots.figures import save_figure

    assert save_figure(_figure(), tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"
    assert save_figure(_figure(), tmp_path / "a.svg").read_text().lstrip().startswith("<?xml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "a.svg"]


def test_save_figure_refuses_an_unknown_format_before_writing(tmp_path):
    from fabricflow.errors import SpecError
    from fabricflow.plots.figures import save_figure

    with pytest.raises(SpecError, match="png"):
        save_figure(_figure(), tmp_path / "a.docx")
    assert list(tmp_path.iterdir()) == []


def test_step_plot_goes_through_save_figure(tmp_path, monkeypatch):
    from fabricflow.plots import step

    saved = []
    monkeypatch.setattr(step, "save_figure", lambda fig, path: saved.append(path))
    result = type(
        "R",
        (),
        {
            "breakdown": dict.fromkeys(step.BREAKDOWN_KEYS, 1.0),
            "step_time_s": 8.0,
            "mfu": 0.4,
        },
    )()
    step.plot_breakdown([("a", result)], tmp_path / "b.png")
    assert saved == [tmp_path / "b.png"]
