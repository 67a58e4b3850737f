"""The oversubscription study (``studies/oversubscription.py``): its fast run and the physics
its numbers obey, and the builder's refusals."""

from __future__ import annotations

import numpy as np
import pytest
from study_scripts import breakdown_sums, run_main

from fabricflow.errors import SpecError
from fabricflow.study.oversubscription import oversubscribed_clos


def test_oversubscription_study(tmp_path, capsys):
    data, numbers = run_main("oversubscription", tmp_path, capsys)
    assert data.step_time_s.dims == ("oversubscription", "model", "order")
    assert data.breakdown_s.dims == ("oversubscription", "model", "order", "part")
    assert list(data.oversubscription.values) == [1.0, 7.0]
    assert list(data.model.values) == ["dense", "moe"]
    assert {p.name for p in tmp_path.glob("*.png")} == {
        "oversubscription_step_time.png",
        "oversubscription_breakdown.png",
    }
    # the fabric really has the ratio asked for, and the cut between pods shrinks with it
    np.testing.assert_allclose(data.spine_ratio.values, [1.0, 7.0], rtol=1e-6)
    bisection = data.bisection_Bps.values
    assert bisection[1] == pytest.approx(bisection[0] / 7, rel=1e-6)
    breakdown_sums(data)
    step = data.step_time_s
    # less spine capacity never speeds a step up ...
    assert np.all(step.sel(oversubscription=7.0) >= step.sel(oversubscription=1.0) * (1 - 1e-9))
    # ... nor changes what the GPUs compute
    compute = data.breakdown_s.sel(part="compute")
    np.testing.assert_allclose(
        compute.sel(oversubscription=7.0).values, compute.sel(oversubscription=1.0).values
    )
    # with data parallelism outermost the gradient reduction crosses pods: it grows
    dp = data.breakdown_s.sel(part="dp", order="tp-cp-ep-pp-dp")
    assert np.all(dp.sel(oversubscription=7.0).values > 1.2 * dp.sel(oversubscription=1.0).values)
    assert numbers["dense tp-cp-ep-pp-dp"]["slowdown"] > 1.0


def test_oversubscription_builder_refuses_bad_input():
    with pytest.raises(SpecError, match="oversubscription"):
        oversubscribed_clos(0.5, 1024)
    with pytest.raises(SpecError, match="oversubscription"):
        oversubscribed_clos(float("nan"), 1024)
    with pytest.raises(SpecError, match="pods"):
        oversubscribed_clos(2.0, 512, pod_gpus=512)  # one pod: nothing crosses the spine tier
