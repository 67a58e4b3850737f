"""The congestion-control comparison study: a fast run writes its outputs, and the
metrics obey the fluid's physics (``slow``: it compiles the fluid for two laws); its
figures from a dataset alone (fast)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from fabricflow.study.cc_compare import METRICS
from fabricflow.study.cc_compare_plots import FAMILIES, plot_all

STUDIES = Path(__file__).parent.parent / "studies"


def test_every_metric_has_a_figure_and_never_settled_is_written():
    plotted = {name for rows in FAMILIES.values() for name, _, _ in rows}
    assert plotted <= set(METRICS)
    # Shown elsewhere: throughput in bytes/s beside utilization, pause time beside its
    # fraction of the run.
    assert set(METRICS) - plotted == {"throughput_Bps", "pause_time_s"}
    laws, scenarios = ["dcqcn", "hpcc"], ["incast", "ring"]
    values = np.arange(4.0).reshape(2, 2) / 4
    ds = xr.Dataset(
        {name: (("cc", "scenario"), values) for name in METRICS},
        coords={"cc": laws, "scenario": scenarios},
        attrs={"scenarios": "test", "pfc": "static"},
    )
    ds["convergence_time_s"][0, 1] = np.nan
    figures = plot_all(ds)
    assert set(figures) == {f"cc_{family}" for family in FAMILIES}
    convergence = figures["cc_convergence"]
    texts = [t.get_text() for ax in convergence.axes for t in ax.texts]
    assert "never" in texts
    assert len(convergence.axes) == len(scenarios)


@pytest.mark.slow  # compiles and runs the fluid for two laws (~10 s each on 2 cores)
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
