"""The sweep guide's example SPEC is valid and sweeps the ECMP seed, so that a reader
sees the hash spread beside the oversubscription it compares (two close ratios can come
out in either order on one seed)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from fabricflow.sweeps.grid_spec import read_sweep_spec

GUIDE = (Path(__file__).resolve().parents[1] / "docs" / "sweeps.md").read_text()


def test_the_example_spec_reads_and_sweeps_the_seed():
    block = re.search(r"```yaml\n(task: step.*?)```", GUIDE, re.S).group(1)
    spec = read_sweep_spec(yaml.safe_load(block))
    grid = dict(spec.grid)
    assert "fabric.topology.tiers.0.oversubscription" in grid
    assert len(grid["seed"]) >= 3
    assert 'step_time_s.median("seed")' in GUIDE and "hash noise" in GUIDE
