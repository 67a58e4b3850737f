"""The congestion-control comparison study: a fast run writes its outputs, and the
metrics obey the fluid's physics."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import xarray as xr

from fabricflow.study.cc_compare_plots import FAMILIES

STUDIES = Path(__file__).parent.parent / "studies"


def test_cc_compare_fast_run(tmp_path):
    spec = importlib.util.spec_from_file_location("study_cc_compare", STUDIES / "cc_compare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    numbers = module.run(tmp_path, fast=True)
    assert json.loads((tmp_path / "cc_compare.json").read_text()) == numbers
    with xr.open_dataset(tmp_path / "cc_compare.nc") as ds:
        ds = ds.load()
    assert list(ds.cc.values) == ["dcqcn", "predictive"]
    assert list(ds.scenario.values) == ["incast", "alltoall", "ring"]
    assert {p.name for p in tmp_path.glob("*.png")} == {f"cc_{f}.png" for f in FAMILIES}
    # Physics: no link runs above capacity, a p99 is at least the median, fractions are
    # fractions, Jain's index lies in (0, 1].
    assert np.all(ds.utilization.values <= 1.0 + 1e-3)
    assert np.all(ds.queue_p99_bytes.values >= ds.queue_p50_bytes.values)
    assert np.all(ds.queue_max_bytes.values >= ds.queue_p99_bytes.values)
    assert np.all((ds.pause_fraction.values >= 0) & (ds.pause_fraction.values <= 1))
    assert np.all((ds.jain_fairness.values > 0) & (ds.jain_fairness.values <= 1 + 1e-9))
    # The predictive controller fills the incast's bottleneck with a small queue.
    incast = ds.sel(cc="predictive", scenario="incast")
    assert float(incast.utilization) > 0.98
    assert float(incast.queue_p99_bytes) < 20e3
