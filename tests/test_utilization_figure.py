"""The cluster's utilization figure: the per-link-kind panel adds up every running job's
collectives at their own rates, which can exceed 1 with no job slowed; the figure says
what it draws instead of calling it offered load."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import xarray as xr

from fabricflow.study import cluster_plots


def test_the_link_panel_names_what_it_adds_up(monkeypatch, tmp_path):
    times = np.array([0.0, 3600.0, 7200.0])
    timeline = xr.Dataset(
        {
            "gpu_busy": ("time", [8.0, 8.0, 0.0]),
            "gpu_down": ("time", [0.0, 0.0, 0.0]),
            "gpu_spare": ("time", [0.0, 0.0, 8.0]),
            "tier_utilization": (("time", "tier"), [[1.9, 0.4], [1.9, 0.4], [0.0, 0.0]]),
        },
        coords={"time": times, "tier": ["nic", "leaf"]},
        attrs={"gpus_total": 8},
    )
    run = SimpleNamespace(timeline=timeline, cluster={"utilization": 0.67})
    figures = []
    monkeypatch.setattr(cluster_plots, "save_figure", lambda fig, path: figures.append(fig))
    cluster_plots.plot_utilization(run, tmp_path / "utilization.png")
    (fig,) = figures
    low = fig.axes[1]
    assert "offered load" not in low.get_ylabel()
    assert low.get_ylabel() == "collective rates / capacity"
    assert "above 1 is not congestion" in low.get_title()
