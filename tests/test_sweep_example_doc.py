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


def test_the_step_tasks_seed_is_the_ecmp_hash_seed(monkeypatch):
    """What the example sweeps: the point's ``seed`` routes the step's collectives (and
    seeds the scattered placement and the failure draw), as in the collective task."""
    import fabricflow as ff
    from fabricflow.sweeps import tasks

    calls = []

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return step_time(*args, **kwargs)

    step_time = tasks.step_time
    monkeypatch.setattr(tasks, "step_time", recording)
    fabric = ff.load_fabric("dgx-a100-superpod")
    point = dict(fabric=fabric, model="llama3-8b", gpu="a100-80gb", gpus=16, tp=8)
    out = tasks.run_step(**point, micro_batch=1, global_batch=2, seq_len=2048, seed=3)
    assert calls[-1]["routing_seed"] == 3 and calls[-1]["placement_seed"] == 3
    assert out["step_time_s"] > 0
    assert "ECMP hash seed" in GUIDE
