"""Figures of cluster runs: the goodput map's axes stay around the jobs' optima (a map up
to 10^6 minutes showed nothing), and the prediction-gain figure draws from a study's rows."""

from __future__ import annotations

import numpy as np

from fabricflow.cluster.failures import young_daly_interval
from fabricflow.plots.cluster import (
    goodput_map_axes,
    plot_goodput_map,
    plot_prediction_gain,
)


def test_goodput_map_axes_frame_the_optima(tmp_path):
    write = 60.0
    mtbfs = [4 * 3600.0, 4e6 * 3600.0]  # a 16k-GPU job and a 1-GPU job
    mtbf, interval = goodput_map_axes(write, mtbfs, [1800.0])
    assert mtbf.min() == 2 * 3600.0 and mtbf.max() == 8e6 * 3600.0
    young = [young_daly_interval(write, m, method="young") for m in (mtbf.min(), mtbf.max())]
    assert interval.min() >= young[0] / 10 - 1e-9 and interval.max() <= young[1] * 10 + 1e-6
    assert interval.min() <= 900.0 <= 3600.0 <= interval.max()  # the simulated interval shows
    # one job: a decade of MTBF around it
    mtbf, interval = goodput_map_axes(write, [3600.0])
    assert np.isclose(mtbf.max() / mtbf.min(), 10.0)
    path = plot_goodput_map(
        tmp_path / "map.png",
        write_s=write,
        restart_s=600.0,
        mtbf_s=mtbf,
        interval_s=interval,
        simulated=[(3600.0, 1800.0, 0.8)],
    )
    assert (tmp_path / "map.png").stat().st_size > 10_000 and str(path).endswith("map.png")


def test_prediction_gain_figure(tmp_path):
    rows = [
        {
            "write_s": w,
            "recall": r,
            "lead_s": lead,
            "gain_points": g,
            "gain_points_spread": [g - 1, g + 1],
        }
        for w in (60.0, 600.0)
        for r, lead, g in ((None, None, 0.0), (0.5, 300.0, 2.0), (0.8, 1800.0, 3.0))
    ]
    plot_prediction_gain(
        tmp_path / "gain.png",
        rows,
        interval_s=1800.0,
        restart_s=600.0,
        mtbf_s=4 * 3600.0,
        precision=0.85,
    )
    assert (tmp_path / "gain.png").stat().st_size > 10_000
