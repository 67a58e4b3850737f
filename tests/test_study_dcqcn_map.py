"""The DCQCN parameter-map study (``studies/dcqcn_map.py``): fast run, dims and physical
invariants."""

from __future__ import annotations

import numpy as np
import pytest
from study_scripts import run_fast

from fabricflow.errors import SpecError
from fabricflow.study.dcqcn_map import dcqcn_map


def test_dcqcn_map_fast_run_writes_its_outputs(tmp_path):
    ds, numbers = run_fast("dcqcn_map", tmp_path)
    assert dict(ds.sizes) == {"kmin_bytes": 2, "kmax_bytes": 2, "rate_ai_Bps": 2}
    assert {p.name for p in tmp_path.glob("*.png")} == {"dcqcn_map.png", "dcqcn_tradeoff.png"}
    assert numbers["points"] == 8
    # Fluid-model physics: no link carries more than its capacity, the victim never
    # beats its line rate, a p99 is at least the mean.
    line = ds.attrs["bandwidth_Bps"]
    assert np.all(ds.utilization <= 1 + 1e-3)
    assert np.all(ds.victim_throughput_Bps <= line * (1 + 1e-3))
    assert np.all(ds.queue_p99_bytes >= ds.queue_mean_bytes - 1e-6)
    assert np.all((ds.pause_fraction >= 0) & (ds.pause_fraction <= 1))


def test_dcqcn_map_queue_follows_the_marking_thresholds():
    ds = dcqcn_map(
        kmin=(5e3, 50e3, 300e3), kmax=(200e3, 800e3), rate_ai=(160e6 / 8,), duration=0.005
    )
    # kmin >= kmax is no RED ramp: left NaN, never a number.
    assert np.all(np.isnan(ds.utilization.sel(kmin_bytes=300e3, kmax_bytes=200e3)))
    assert np.isfinite(ds.utilization.sel(kmin_bytes=300e3, kmax_bytes=800e3)).all()
    # The analytic fixed point q* = Kmin + (p*/Pmax)(Kmax - Kmin) grows with both.
    fixed = ds.fixed_point_queue_bytes.isel(rate_ai_Bps=0)
    assert np.all(np.diff(fixed.sel(kmin_bytes=[5e3, 50e3]).values, axis=0) > 0)
    assert np.all(np.diff(fixed.sel(kmin_bytes=[5e3, 50e3]).values, axis=1) > 0)
    # With a fast additive increase the bottleneck stays full, and the simulated queue
    # rises with either threshold as the fixed point says.
    sim = ds.queue_mean_bytes.isel(rate_ai_Bps=0).sel(kmin_bytes=[5e3, 50e3])
    assert np.all(ds.utilization.isel(rate_ai_Bps=0).sel(kmin_bytes=[5e3, 50e3]) > 0.95)
    assert np.all(np.diff(sim.values, axis=0) > 0)
    assert np.all(np.diff(sim.values, axis=1) > 0)


def test_dcqcn_map_bad_axes_name_the_field():
    with pytest.raises(SpecError, match="rate_ai"):
        dcqcn_map(rate_ai=(0.0,), duration=1e-3)
    with pytest.raises(SpecError, match="kmin"):
        dcqcn_map(kmin=(float("nan"),), duration=1e-3)
    with pytest.raises(SpecError, match="kmin"):
        dcqcn_map(kmin=(900e3,), kmax=(200e3,), duration=1e-3)
