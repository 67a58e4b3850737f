"""Run a script of ``studies/`` in fast mode for the study tests: load it from its file,
run it into a folder and read back its dataset, after checking the figures it wrote."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

xr = pytest.importorskip("xarray")

STUDIES = Path(__file__).resolve().parents[1] / "studies"


def load_script(name: str):
    """The module of ``studies/<name>.py``, loaded from its file."""
    spec = importlib.util.spec_from_file_location(f"study_{name}", STUDIES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_main(name: str, out: Path, capsys) -> tuple[object, dict]:
    """``main([out, "--fast"])`` of the script: its dataset and the numbers it prints
    (JSON on stdout); every PNG it wrote is a real, non-trivial PNG."""
    module = load_script(name)
    capsys.readouterr()
    assert module.main([str(out), "--fast"]) == 0
    numbers = json.loads(capsys.readouterr().out)
    with xr.open_dataset(out / f"{name}.nc") as data:
        data = data.load()
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert png.stat().st_size > 5000
    return data, numbers


def run_fast(name: str, out: Path) -> tuple[xr.Dataset, dict]:
    """``run(out, fast=True)`` of the script: its dataset and the numbers it returns (the
    same as the JSON file it writes); every PNG it wrote is a PNG."""
    numbers = load_script(name).run(out, fast=True)
    with xr.open_dataset(out / f"{name}.nc") as ds:
        ds = ds.load()
    assert json.loads((out / f"{name}.json").read_text()) == numbers
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return ds, numbers


def breakdown_sums(data) -> None:
    """The parts of each step's breakdown add up to its step time."""
    total = data.breakdown_s.sum("part")
    np.testing.assert_allclose(total.values, data.step_time_s.values, rtol=1e-9)
