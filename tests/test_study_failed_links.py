"""The failed-links study (``studies/failed_links.py``): fast run, dims and physical
invariants."""

from __future__ import annotations

import numpy as np
import pytest
from study_scripts import run_fast

from fabricflow.errors import SpecError
from fabricflow.study.failed_links import cables_of_kind, failure_sets, three_tier_clos


def test_failure_sets_are_nested_and_sized_by_the_fraction():
    fabric = three_tier_clos(256)
    cables = cables_of_kind(fabric, "spine")
    sets = failure_sets(fabric, "spine", (0.0, 0.05, 0.2), seeds=(0, 1))
    for seed in (0, 1):
        small, large = set(sets[(0.05, seed)]), set(sets[(0.2, seed)])
        assert len(small) == round(0.05 * cables.size) and len(large) == round(0.2 * cables.size)
        assert small <= large
        assert sets[(0.0, seed)].size == 0
    assert set(sets[(0.2, 0)]) != set(sets[(0.2, 1)])
    with pytest.raises(SpecError, match="kinds"):
        failure_sets(fabric, "core", (0.1,), seeds=(0,))


def test_failed_links_fast_run_degrades_with_the_failed_fraction(tmp_path):
    ds, _ = run_fast("failed_links", tmp_path)
    assert ds.permutation_throughput_Bps.dims == ("link_kind", "fraction", "seed", "routing")
    assert ds.step_time_s.dims == ("link_kind", "fraction", "seed")
    assert list(ds.fraction.values) == [0.0, 0.05, 0.2]
    healthy = ds.isel(fraction=0)
    # Fraction 0 is the same healthy fabric for every kind and seed.
    for name in ("permutation_throughput_Bps", "allreduce_busbw_Bps", "step_time_s"):
        assert np.ptp(healthy[name].values) == 0
    # Cutting cables never adds capacity: the bisection permutation's max-min throughput
    # falls (strictly at 20 %), median over seeds non-increasing in the fraction.
    median = ds.permutation_throughput_Bps.median("seed")
    assert np.all(median.diff("fraction") <= 1e-6 * median.isel(fraction=0))
    assert np.all(ds.permutation_throughput_Bps.isel(fraction=-1) < median.isel(fraction=0))
    # ... and a step on a fabric with 20 % of its leaf uplinks cut is not faster.
    step = ds.step_time_s.median("seed")
    assert np.all(step.isel(fraction=-1) >= step.isel(fraction=0) * (1 - 1e-9))
    assert int(ds.failed_cables.isel(fraction=-1).min()) > 0
