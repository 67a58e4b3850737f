"""Integral (one path per flow) routing: never worse than ECMP, near the LP bound on
oversubscribed leaf-spine fabrics with failed cables, at the integral optimum (MILP) on
tiny instances, and exact on the bisection permutation of a non-blocking Clos."""

from __future__ import annotations

import numpy as np
import pytest
from fabric_specs import leaf_spine_spec
from lp_oracle import lp_makespan, milp_makespan
from routing_checks import random_pairs

import fabricflow as ff
from fabricflow.errors import SpecError
from fabricflow.fabric.spec import build_fabric


def leaf_spine(gpus: int, up: int, *, failed: float = 0.0, seed: int = 0):
    """2-tier ToR Clos of 8-GPU servers, 400G NICs, leaves of 16 GPU ports and ``up``
    uplinks (16 / up : 1), with a fraction of the leaf-spine cables failed."""
    fabric = build_fabric(leaf_spine_spec(gpus, up))
    return fabric.without(link_kind="leaf", fraction=failed, seed=seed) if failed else fabric


def makespan_of(routes, size, capacity) -> float:
    """Seconds until the busiest link drains (independent of the optimizer's code)."""
    load = routes.link_load(size)
    used = load > 0
    return float((load[used] / capacity[used]).max())


def check_one_path_per_flow(plan):
    assert np.all(np.count_nonzero(plan.split, axis=1) == 1)
    chosen = plan.split.argmax(axis=1)
    assert np.all((plan.paths[np.arange(plan.num_flows), chosen] >= 0).any(axis=1))
    routes = plan.routes()
    assert np.all(routes.coef[routes.links >= 0] == 1)


@pytest.mark.parametrize("seed, up", [(0, 4), (1, 4), (3, 4)])
def test_pinned_beats_ecmp_and_reaches_the_lp_within_10_percent(seed, up):
    fabric = leaf_spine(64, up, failed=0.15, seed=seed)
    src, dst = random_pairs(64, 400, seed=seed)
    size = np.random.default_rng(seed).uniform(1e6, 1e8, src.size)
    plan = ff.optimize_routing(fabric, src, dst, size=size, k=8, integral=True, seed=seed)
    check_one_path_per_flow(plan)
    ecmp = makespan_of(ff.route(fabric, src, dst, policy="ecmp", seed=seed), size, fabric.capacity)
    optimum = lp_makespan(plan.paths, plan.size, fabric.capacity)
    assert plan.makespan_s <= ecmp * (1 + 1e-12)
    assert optimum * (1 - 1e-9) <= plan.makespan_s <= 1.10 * optimum
    np.testing.assert_allclose(plan.ecmp_makespan_s, ecmp, rtol=1e-12)
    # the bound it reports is a true lower bound, below the LP's
    assert plan.integral_lower_bound_s <= optimum * (1 + 1e-6)
    np.testing.assert_allclose(
        plan.makespan_s, makespan_of(plan.routes(), size, fabric.capacity), rtol=1e-12
    )


def test_ecmp_path_is_the_first_candidate_and_no_mode_is_worse_than_ecmp():
    fabric = leaf_spine(64, 4, failed=0.2, seed=7)
    src, dst = random_pairs(64, 400, seed=7)
    size = np.random.default_rng(7).uniform(1e6, 1e8, src.size)
    ecmp = ff.route(fabric, src, dst, policy="ecmp", seed=7)
    for k, integral in ((1, False), (8, False), (8, True)):
        plan = ff.optimize_routing(fabric, src, dst, size=size, k=k, seed=7, integral=integral)
        first = plan.paths[:, 0, :]
        width = max(first.shape[1], ecmp.links.shape[1])
        a, b = np.full((src.size, width), -1), np.full((src.size, width), -1)
        a[:, : first.shape[1]], b[:, : ecmp.links.shape[1]] = first, ecmp.links
        np.testing.assert_array_equal(a, b)
        assert plan.makespan_s <= makespan_of(ecmp, size, fabric.capacity) * (1 + 1e-12)
        if k == 1:  # ECMP's path is all there is
            np.testing.assert_allclose(plan.makespan_s, plan.ecmp_makespan_s, rtol=1e-12)


@pytest.mark.parametrize("seed", [1, 4, 6])
def test_pinned_reaches_the_integral_optimum_of_tiny_instances(seed):
    """100 equal flows on a 4:1 fabric: whole flows do not divide evenly over the
    uplinks, so one-path routing cannot reach the LP (the optimum is 4-5 % above it); the
    oracle is the exact MILP."""
    fabric = leaf_spine(64, 4, failed=0.15, seed=seed)
    src, dst = random_pairs(64, 100, seed=seed)
    size = np.full(100, 1e7)
    plan = ff.optimize_routing(fabric, src, dst, size=size, k=8, integral=True, seed=seed)
    check_one_path_per_flow(plan)
    optimum = milp_makespan(plan.paths, plan.size, fabric.capacity)
    assert optimum > 1.03 * lp_makespan(plan.paths, plan.size, fabric.capacity)
    assert optimum * (1 - 1e-6) <= plan.makespan_s <= optimum * 1.011  # HiGHS's 1 % gap
    assert plan.integral_method == "milp optimal"
    assert plan.integral_lower_bound_s <= optimum * (1 + 1e-6)


def test_pinned_bisection_permutation_is_exact_on_a_non_blocking_clos():
    """GPU i -> i + N/2 on a 1:1 ToR Clos: every leaf sends 16 flows over 16 uplinks, so
    the optimum pins one flow per uplink (the NIC-bound makespan), where ECMP's hash
    collides (and the former local search stopped at 2x)."""
    fabric = leaf_spine(128, 16)
    gpus = np.arange(fabric.num_gpus)
    src, dst = gpus, (gpus + fabric.num_gpus // 2) % fabric.num_gpus
    size = np.full(src.size, 2.0**26)
    plan = ff.optimize_routing(fabric, src, dst, size=size, k=8, integral=True)
    check_one_path_per_flow(plan)
    nic_bound = 2.0**26 / (400e9 / 8)
    np.testing.assert_allclose(plan.makespan_s, nic_bound, rtol=1e-9)
    assert plan.ecmp_makespan_s >= 2 * nic_bound


def test_milp_time_limit_is_checked_and_zero_skips_the_program():
    fabric = leaf_spine(64, 4, failed=0.15, seed=2)
    src, dst = random_pairs(64, 400, seed=2)
    size = np.random.default_rng(2).uniform(1e6, 1e8, src.size)
    plan = ff.optimize_routing(fabric, src, dst, size=size, integral=True, milp_time_limit_s=0)
    assert plan.integral_method == "local search"
    assert plan.makespan_s <= plan.ecmp_makespan_s
    for bad in (-1, float("nan"), "10", True):
        with pytest.raises(SpecError, match="milp_time_limit_s"):
            ff.optimize_routing(fabric, src, dst, size=size, integral=True, milp_time_limit_s=bad)
