"""Per-link/tier outputs and design-review plots of a solve, on a small Clos fabric."""

from __future__ import annotations

import argparse

import numpy as np

import fabricflow as ff
from fabricflow.plots.rates import plot_fct_cdf, plot_utilization_by_tier
from fabricflow.solve.maxmin.link_views import bottleneck_summary, link_utilization, tier_summary
from fabricflow.traffic.patterns import alltoall_groups


def test_utilization_tiers_bottlenecks_and_plots(small_rail_fabric, tmp_path):
    fabric = small_rail_fabric
    src, dst = alltoall_groups(fabric.num_gpus, 8)
    routes = ff.route(fabric, src, dst, policy="ecmp", seed=0)
    solution = ff.max_min_solution(routes.links, fabric.capacity)
    utilization = link_utilization(routes.links, fabric.capacity, solution.rates)
    np.testing.assert_allclose(
        utilization * fabric.capacity, routes.link_load(solution.rates), rtol=1e-9
    )
    assert utilization.max() <= 1 + 1e-5
    summary = tier_summary(utilization, fabric.link_kind_id, fabric.link_kinds, fabric.link_up)
    assert set(summary) <= set(fabric.link_kinds)
    assert sum(s["saturated"] for s in summary.values()) >= 1
    for stats in summary.values():
        assert 0 <= stats["mean"] <= stats["p99"] <= stats["max"] <= 1 + 1e-5
    counts = bottleneck_summary(solution.bottleneck, fabric.link_kind_id, fabric.link_kinds)
    assert sum(counts.values()) == routes.num_flows
    # Every bottleneck link is saturated.
    limited = solution.bottleneck >= 0
    assert np.all(utilization[solution.bottleneck[limited]] >= 1 - 1e-5)

    size = np.full(routes.num_flows, 1e6)
    fct = ff.max_min_completion(routes.links, fabric.capacity, size, mode="batched").finish_time
    assert np.all(np.isfinite(fct))
    assert plot_utilization_by_tier(fabric, utilization, tmp_path / "util.png").stat().st_size > 0
    assert plot_fct_cdf({"ecmp": fct}, tmp_path / "fct.png").stat().st_size > 0


def test_failure_scenarios_in_one_batched_call(small_rail_fabric):
    fabric = small_rail_fabric
    src, dst = alltoall_groups(fabric.num_gpus, 8)
    routes = ff.route(fabric, src, dst, policy="ecmp", seed=0)
    capacities = np.stack(
        [fabric.without(link_kind="leaf", fraction=0.1, seed=s).capacity for s in range(4)]
    )
    rates = ff.max_min_rates(routes.links, capacities)
    assert rates.shape == (4, routes.num_flows)
    for scenario in range(4):
        np.testing.assert_allclose(
            rates[scenario], ff.max_min_rates(routes.links, capacities[scenario]), rtol=1e-6
        )


def test_bench_section_quick():
    from fabricflow.bench import maxmin

    result = maxmin.run(argparse.Namespace(quick=True, gpu=True))
    assert result["moe"]["status"] == 0 and result["ring16"]["status"] == 0
    assert result["moe"]["max_relative_difference"] <= 1e-5  # the two backends agree
    assert result["batch_layouts"]["fastest"] in ("jax_block", "jax_vmap", "numpy")
    assert isinstance(result["gpu"], (str, dict))
