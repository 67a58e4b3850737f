"""The routing study (``studies/routing.py``): ECMP hashing against packet spraying, fast
run, dims and physical invariants."""

from __future__ import annotations

import numpy as np
import pytest
from study_scripts import run_fast

from fabricflow.errors import SpecError
from fabricflow.study.routing_study import routing_study


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
