"""The oversubscription, attachment and scale-up domain studies, in fast mode: each script
writes its dataset and figures, and the numbers obey what the physics requires."""

from __future__ import annotations

import importlib.util
import json
import pathlib

import numpy as np
import pytest

xr = pytest.importorskip("xarray")

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run_study(name: str, out: pathlib.Path, capsys) -> tuple[object, dict]:
    path = ROOT / "studies" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"study_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    capsys.readouterr()
    assert module.main([str(out), "--fast"]) == 0
    numbers = json.loads(capsys.readouterr().out)
    with xr.open_dataset(out / f"{name}.nc") as data:
        data = data.load()
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert png.stat().st_size > 5000
    return data, numbers


def _breakdown_sums(data):
    total = data.breakdown_s.sum("part")
    np.testing.assert_allclose(total.values, data.step_time_s.values, rtol=1e-9)


def test_oversubscription_study(tmp_path, capsys):
    data, numbers = _run_study("oversubscription", tmp_path, capsys)
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
    _breakdown_sums(data)
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


def test_attachment_study(tmp_path, capsys):
    data, numbers = _run_study("attachment", tmp_path, capsys)
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


def test_scaleup_domain_study(tmp_path, capsys):
    data, numbers = _run_study("scaleup_domain", tmp_path, capsys)
    assert data.step_time_s.dims == ("domain_size", "placement", "ep")
    assert list(data.domain_size.values) == [8, 72, 576]
    assert list(data.ep.values) == [8, 64]
    _breakdown_sums(data)
    inside = data.ep_groups_inside_domain
    # EP groups of 64 consecutive GPUs 64g..64g+63 against 72-GPU racks, computed here
    start = 64 * np.arange(data.attrs["job_gpus"] // 64)
    expected = np.mean(start // 72 == (start + 63) // 72)
    assert float(inside.sel(domain_size=72, placement="contiguous", ep=64)) == expected
    assert float(inside.sel(domain_size=72, placement="domain-aligned", ep=64)) == 1.0
    assert np.all(inside.sel(domain_size=8, ep=64).values == 0)
    assert np.all(inside.sel(domain_size=576).values == 1)
    assert np.all(inside.sel(ep=8).values == 1)
    # for 8- and 576-GPU domains both placements use the same GPUs
    for size in (8, 576):
        row = data.step_time_s.sel(domain_size=size)
        np.testing.assert_array_equal(
            row.sel(placement="contiguous"), row.sel(placement="domain-aligned")
        )
    # EP 64 on NVLink beats EP 64 over the network, and exposes less all-to-all
    ep64 = data.sel(ep=64, placement="contiguous")
    assert float(ep64.step_time_s.sel(domain_size=576)) < float(ep64.step_time_s.sel(domain_size=8))
    share = ep64.all_to_all_share
    assert float(share.sel(domain_size=576)) < float(share.sel(domain_size=8))
    # aligned racks turn NVL72's straddling groups into NVLink-only groups
    nvl72 = data.step_time_s.sel(domain_size=72, ep=64)
    assert float(nvl72.sel(placement="domain-aligned")) < float(nvl72.sel(placement="contiguous"))
    assert set(numbers) >= {"nvl8 contiguous", "nvl72 domain-aligned", "nvl576 contiguous"}


def test_study_builders_refuse_bad_input():
    from fabricflow.errors import SpecError
    from fabricflow.study.attachment import attachment_fabric
    from fabricflow.study.oversubscription import oversubscribed_clos
    from fabricflow.study.scaleup_domain import domain_fabric, job_placement, moe_layout

    with pytest.raises(SpecError, match="oversubscription"):
        oversubscribed_clos(0.5, 1024)
    with pytest.raises(SpecError, match="oversubscription"):
        oversubscribed_clos(float("nan"), 1024)
    with pytest.raises(SpecError, match="pods"):
        oversubscribed_clos(2.0, 512, pod_gpus=512)  # one pod: nothing crosses the spine tier
    with pytest.raises(SpecError, match="attachment"):
        attachment_fabric("spine", 256, 4)
    with pytest.raises(SpecError, match="domain_size"):
        domain_fabric(10)
    with pytest.raises(SpecError, match="1152"):
        domain_fabric(72, gpus=1024)
    fabric = domain_fabric(72)
    with pytest.raises(SpecError, match="placement"):
        job_placement(fabric, moe_layout(512, 8), "scattered")
