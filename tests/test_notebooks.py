"""Execute the capacity-planning notebooks in fast mode (code cells in one namespace)."""

import json
from pathlib import Path

import numpy as np
import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


def run_notebook(path: Path) -> dict:
    namespace: dict = {}
    for number, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell["cell_type"] == "code":
            source = "".join(cell["source"])
            exec(compile(source, f"{path.name}[cell {number}]", "exec"), namespace)  # noqa: S102
    return namespace


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_in_fast_mode(path, monkeypatch, capsys):
    monkeypatch.setenv("FABRICFLOW_FAST", "1")
    namespace = run_notebook(path)
    if path.name == "capacity_planning.ipynb":
        assert namespace["certificate"].max_min
        # ideal spraying never loses to hashing on an oversubscribed fabric
        throughput = namespace["throughput"]
        assert throughput["spray"] >= throughput["ecmp"] * (1 - 1e-6)
        assert np.all(namespace["relative"] <= 1 + 1e-5)
        assert "stalled flows" in capsys.readouterr().out
    if path.name == "sweep.ipynb":
        ds = namespace["ds"]
        assert (ds["status"].values == 1).all() and ds["step_time_s"].shape == (2, 2)
        assert namespace["first"]["computed"] == 4 and namespace["rerun"]["reused"] == 4
        assert namespace["rerun"]["computed"] == 0
        # fewer leaf uplinks never speed the step up, at every pipeline depth
        assert (namespace["slowdown"].values >= 1 - 1e-9).all()
