"""The NIC attachment study (``studies/attachment.py``): its fast run and the physics its
numbers obey, and the builder's refusal."""

from __future__ import annotations

import numpy as np
import pytest
from study_scripts import run_main

from fabricflow.errors import SpecError
from fabricflow.study.attachment import attachment_fabric


def test_attachment_study(tmp_path, capsys):
    data, numbers = run_main("attachment", tmp_path, capsys)
    assert data.busbw_Bps.dims == ("attachment", "leaf_oversubscription", "op", "pxn", "size")
    assert data.step_time_s.dims == ("attachment", "leaf_oversubscription", "model", "pxn")
    assert list(data.attachment.values) == ["rail", "tor"]
    assert list(data.leaf_oversubscription.values) == [1.0, 4.0]
    # equal switch count: only where the NICs plug in differs
    assert np.all(data.switches.sel(attachment="rail") == data.switches.sel(attachment="tor"))
    busbw = data.busbw_Bps
    assert np.all(np.isfinite(busbw.values)) and np.all(busbw.values > 0)
    # rail-optimized + PXN keeps every network byte on the group's rail leaves (whole-node
    # groups inside one rail group): thinner leaf uplinks cannot matter
    rail_pxn = busbw.sel(attachment="rail", pxn=True)
    np.testing.assert_allclose(
        rail_pxn.sel(leaf_oversubscription=4.0).values,
        rail_pxn.sel(leaf_oversubscription=1.0).values,
        rtol=1e-9,
    )
    # direct all-to-all on ToR leaves crosses the leaf uplinks: 4:1 costs bandwidth
    tor = busbw.sel(attachment="tor", op="all_to_all", pxn=False).isel(size=-1)
    assert float(tor.sel(leaf_oversubscription=4.0)) < 0.8 * float(
        tor.sel(leaf_oversubscription=1.0)
    )
    big = busbw.sel(leaf_oversubscription=4.0).isel(size=-1)
    for op in ("all_reduce", "all_to_all"):
        assert float(big.sel(attachment="rail", op=op, pxn=True)) > 1.5 * float(
            big.sel(attachment="rail", op=op, pxn=False)
        )
    step = data.step_time_s
    # the dense job has no all-to-all: PXN of the EP collective changes nothing there
    dense = step.sel(model="dense")
    np.testing.assert_array_equal(dense.sel(pxn=True).values, dense.sel(pxn=False).values)
    assert np.all(data.ep_s.sel(model="dense").values == 0)
    assert np.all(data.ep_s.sel(model="moe").values > 0)
    assert np.all(
        step.sel(leaf_oversubscription=4.0).values
        >= step.sel(leaf_oversubscription=1.0).values * (1 - 1e-9)
    )
    assert numbers["leaf_oversubscription"] == 4.0


def test_attachment_builder_refuses_bad_input():
    with pytest.raises(SpecError, match="attachment"):
        attachment_fabric("spine", 256, 4)
