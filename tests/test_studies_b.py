"""The routing, failed-links and DCQCN-map studies: fast runs, dims and physical invariants."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from fabricflow.errors import SpecError
from fabricflow.study.dcqcn_map import dcqcn_map
from fabricflow.study.failed_links import cables_of_kind, failure_sets, three_tier_clos
from fabricflow.study.routing_study import routing_study

STUDIES = Path(__file__).parent.parent / "studies"


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"study_{name}", STUDIES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_fast(name: str, out: Path) -> tuple[xr.Dataset, dict]:
    numbers = load_script(name).run(out, fast=True)
    with xr.open_dataset(out / f"{name}.nc") as ds:
        ds = ds.load()
    assert json.loads((out / f"{name}.json").read_text()) == numbers
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return ds, numbers


# ---- DCQCN parameter map -------------------------------------------------------------


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


# ---- failed links ------------------------------------------------------------------


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


# ---- routing -----------------------------------------------------------------------


def test_routing_hash_vs_spray_on_a_small_clos():
    ds = routing_study(
        gpus=32, leaf_up=(16, 4), patterns=("permutation",), routings=("ecmp", "spray")
    )
    assert dict(ds.sizes) == {"oversubscription": 2, "pattern": 1, "routing": 2, "tier": 4}
    m = ds.makespan_s
    assert np.all(m.sel(routing="spray") <= m.sel(routing="ecmp") * (1 + 1e-6))
    assert np.all(m.sel(routing="spray").diff("oversubscription") > 0)
    assert np.all(ds.completion_s >= m * (1 - 1e-5))
    assert np.all(ds.tier_max_utilization <= 1 + 1e-5)
    # A permutation across the bisection loads every leaf uplink equally under spray:
    # at 4:1 each GPU's flow gets a quarter of its NIC, so the uplinks are the busy tier.
    spray = ds.sel(routing="spray", pattern="permutation", oversubscription=4.0)
    np.testing.assert_allclose(spray.tier_mean_utilization.sel(tier="leaf_up"), 1.0, rtol=1e-5)
    np.testing.assert_allclose(spray.tier_mean_utilization.sel(tier="nic_up"), 0.25, rtol=1e-5)
    with pytest.raises(SpecError, match="routings"):
        routing_study(gpus=32, leaf_up=(16,), routings=("hash",))


@pytest.mark.slow  # compiles the routing optimizer twice: ~20 s idle, minutes on a loaded machine
def test_routing_fast_run_orders_the_routings(tmp_path):
    ds, numbers = run_fast("routing", tmp_path)
    assert ds.makespan_s.dims == ("oversubscription", "pattern", "routing")
    assert ds.tier_max_utilization.dims == ("oversubscription", "pattern", "routing", "tier")
    assert list(ds.routing.values) == ["ecmp", "pinned", "spray", "optimized"]
    assert {p.name for p in tmp_path.glob("*.png")} == {"routing.png", "routing_tiers.png"}
    m = ds.makespan_s
    # On a Clos, spraying evens every leaf's uplinks, so it never loses to a hash; the
    # fractional optimum never loses to one path per flow or to spray's even split.
    assert np.all(m.sel(routing="spray") <= m.sel(routing="ecmp") * (1 + 1e-6))
    assert np.all(m.sel(routing="optimized") <= m.sel(routing="pinned") * (1 + 1e-6))
    assert np.all(m.sel(routing="optimized") <= m.sel(routing="spray") * (1 + 1e-3))
    throughput = ds.throughput_Bps
    assert np.all(throughput.sel(routing="spray") >= throughput.sel(routing="ecmp") * (1 - 1e-6))
    # The makespan is a lower bound on the completion; no link is busy over 100 %.
    assert np.all(ds.completion_s >= m * (1 - 1e-5))
    assert np.all(ds.tier_max_utilization <= 1 + 1e-5)
    assert np.all(ds.tier_mean_utilization <= ds.tier_max_utilization + 1e-9)
    # Fewer uplinks never speed up the balanced routings.
    for routing in ("spray", "optimized"):
        assert np.all(m.sel(routing=routing).diff("oversubscription") >= 0)
    assert numbers["completion_vs_optimized"]
