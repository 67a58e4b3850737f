"""The cluster's utilization figure: the per-link-kind panel is a utilization in [0, 1]
(every running job's collectives in flight together, max-min shared) with a caption that
says what it is and what it is not (the time mean)."""

from __future__ import annotations

import contextlib
import io
from types import SimpleNamespace

import numpy as np
import xarray as xr

from fabricflow.cli import main
from fabricflow.plots import cluster


def test_the_link_panel_is_a_utilization_with_a_caption(monkeypatch, tmp_path):
    times = np.array([0.0, 3600.0, 7200.0])
    timeline = xr.Dataset(
        {
            "gpu_busy": ("time", [8.0, 8.0, 0.0]),
            "gpu_down": ("time", [0.0, 0.0, 0.0]),
            "gpu_spare": ("time", [0.0, 0.0, 8.0]),
            "tier_utilization": (("time", "tier"), [[0.9, 0.4], [0.9, 0.4], [0.0, 0.0]]),
        },
        coords={"time": times, "tier": ["nic", "leaf"]},
        attrs={"gpus_total": 8},
    )
    run = SimpleNamespace(timeline=timeline, cluster={"utilization": 0.67})
    figures = []
    monkeypatch.setattr(cluster, "save_figure", lambda fig, path: figures.append(fig))
    cluster.plot_utilization(run, tmp_path / "utilization.png")
    (fig,) = figures
    low = fig.axes[1]
    assert low.get_ylabel() == "link utilization"
    assert low.get_ylim() == (0, 1.02)
    caption = " ".join(t.get_text() for t in fig.texts)
    assert "max-min" in caption and "time mean is lower" in caption
    assert min(t.get_fontsize() for t in fig.texts) >= 9


def test_a_cluster_run_keeps_link_utilization_within_capacity(tmp_path):
    """20 synthetic jobs on dgx-h100-superpod: the NIC links reached 1.88 when each job's
    collectives were added up at their rates alone; in flight together they fit."""
    argv = ["cluster", "--fabric", "dgx-h100-superpod", "--synthetic", "20"]
    argv += ["--horizon", "2d", "--out", str(tmp_path), "--json"]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(argv) == 0
    with xr.open_dataset(tmp_path / "timeline.nc") as timeline:
        utilization = timeline.tier_utilization.values
    assert np.nanmax(utilization) <= 1 + 1e-9
    assert np.nanmax(utilization) > 0.5  # the jobs do load the NICs
