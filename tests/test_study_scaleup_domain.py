"""The scale-up domain study (``studies/scaleup_domain.py``): its fast run and the physics its
numbers obey, and the builders' refusals."""

from __future__ import annotations

import numpy as np
import pytest
from study_scripts import breakdown_sums, run_main

from fabricflow.errors import SpecError
from fabricflow.study.scaleup_domain import domain_fabric, job_placement, moe_layout


def test_scaleup_domain_study(tmp_path, capsys):
    data, numbers = run_main("scaleup_domain", tmp_path, capsys)
    assert data.step_time_s.dims == ("domain_size", "placement", "ep")
    assert list(data.domain_size.values) == [8, 72, 576]
    assert list(data.ep.values) == [8, 64]
    breakdown_sums(data)
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


def test_scaleup_domain_builders_refuse_bad_input():
    with pytest.raises(SpecError, match="domain_size"):
        domain_fabric(10)
    with pytest.raises(SpecError, match="1152"):
        domain_fabric(72, gpus=1024)
    fabric = domain_fabric(72)
    with pytest.raises(SpecError, match="placement"):
        job_placement(fabric, moe_layout(512, 8), "scattered")
