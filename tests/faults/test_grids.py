"""Sweep grids that are huge or name one point twice.

The rule checked: a grid of 10^7 points runs in bounded memory (a few bytes per point) and
starts computing within seconds, as does one of 2x10^5; one whose bookkeeping would not
fit the memory budget is refused up front with the size it needs; values that are equal
(``1`` and ``1.0``) are refused, naming them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from fault_helpers import ENV, ROOT, one_json

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.errors import MemoryBudgetError, SpecError
from fabricflow.sweeps.grid_spec import read_sweep_spec


@pytest.mark.parametrize(
    ("values", "shown"),
    [
        ([1, 1.0], "1 and 1.0 are equal values"),
        ([2, 3, 2], "2 and 2 are repeated"),
        ([[1, 2], [1.0, 2.0]], "[1, 2] and [1.0, 2.0] are equal values"),
        ([{"a": 1}, {"a": 1.0}], "are equal values"),
        ([0, False], "0 and false are equal values"),
        (["a", "b", "a"], '"a" and "a" are repeated'),
    ],
)
def test_a_grid_that_names_one_point_twice_is_refused(tmp_path, values, shown):
    with pytest.raises(SpecError, match="grid.x: values must be distinct") as caught:
        ff.sweep("sweep_tasks:quad", {"x": values}, store=tmp_path / "s", workers=0)
    assert shown in str(caught.value)
    assert not (tmp_path / "s").exists()


def test_distinct_values_of_several_types_make_one_dimension(tmp_path):
    ds = ff.sweep("sweep_tasks:quad", {"x": [0, 1, 2.5]}, store=tmp_path / "s", workers=0)
    assert ds.value.values.tolist() == [0.0, 1.0, 6.25]
    assert ds.x.values.tolist() == [0.0, 1.0, 2.5]


def interrupted_run(tmp_path, grid: dict, after: int, *extra: str) -> tuple[dict, float, int]:
    """``fabricflow sweep`` of ``grid`` (inline), stopped by SIGINT at the ``after``-th
    point: (its JSON object, wall seconds, peak RSS in bytes when it was stopped)."""
    report = tmp_path / "peak"
    spec = tmp_path / "spec.json"
    fixed = {"after": after, "report": str(report)}
    spec.write_text(json.dumps({"task": "sweep_tasks:interrupts", "fixed": fixed, "grid": grid}))
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "fabricflow.cli", "sweep", str(spec), "--out",
         str(tmp_path / "s.zarr"), "--workers", "0", "--json", *extra],
        capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=300,
    )  # fmt: skip
    seconds = time.monotonic() - started
    assert done.returncode == 130, done.stderr
    return one_json(done.stdout), seconds, int(report.read_text()) * 1024


@pytest.mark.parametrize(
    ("grid", "points"),
    [
        ({"x": list(range(200_000))}, 200_000),
        ({"x": list(range(10_000)), "y": list(range(1_000))}, 10_000_000),
    ],
    ids=["2e5-points", "1e7-points"],
)
def test_a_huge_grid_starts_at_once_in_bounded_memory(tmp_path, grid, points):
    report, seconds, peak = interrupted_run(tmp_path, grid, 200, "--max-points", str(points))
    assert report["error"] == "Interrupted" and report["points"] == points
    assert report["done"] >= 199 and report["pending"] == points - report["done"]
    assert seconds < 120  # start-up, a store, 200 points; 10^7 points were killed at 6 GiB
    assert peak < 1.5 * 2**30, f"peak RSS {peak / 2**30:.2f} GiB"


def test_a_grid_whose_bookkeeping_exceeds_the_memory_budget_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "64MiB")
    grid = {"x": list(range(10_000)), "y": list(range(1_000))}
    with pytest.raises(MemoryBudgetError, match="a sweep of 10,000,000 grid points needs about"):
        ff.sweep("sweep_tasks:quad", grid, store=tmp_path / "s", workers=0, max_points=10**7)
    assert not (tmp_path / "s").exists()


def test_a_grid_over_the_point_limit_is_refused_unless_allowed(tmp_path, capsys):
    """A 10^7-point grid ran for hours by default: it is refused at once, naming its size,
    the limit and how to allow it; the CLI says the same with exit code 2."""
    grid = {"x": list(range(10_000)), "y": list(range(1_000))}
    started = time.process_time()
    with pytest.raises(SpecError, match=r"^grid: the grid holds 10,000,000 points, over"):
        ff.sweep("sweep_tasks:quad", grid, store=tmp_path / "s", workers=0)
    assert time.process_time() - started < 10 and not (tmp_path / "s").exists()
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"task": "sweep_tasks:quad", "grid": {"x": [1, 2, 3]}}))
    argv = ["sweep", str(spec), "--out", str(tmp_path / "t"), "--workers", "0", "--json"]
    assert main([*argv, "--max-points", "2"]) == 2
    message = json.loads(capsys.readouterr().out)["message"]
    assert "holds 3 points, over the limit of 2" in message and "--max-points 3" in message
    assert main(argv) == 0


def test_a_misspelled_spec_key_gets_the_closest_name(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("task: sweep_tasks:quad\ngrid: {x: [1]}\nfixd: {y: 1}\n")
    with pytest.raises(SpecError, match=r"unknown key\(s\) \['fixd'\].*did you mean 'fixed'\?"):
        read_sweep_spec(path)
