"""Routing optimizer: optimality against the multicommodity LP (HiGHS), plan invariants,
integral mode, integration with the collective model, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from fabric_specs import fat_tree_spec
from lp_oracle import lp_makespan
from routing_checks import random_pairs

import fabricflow as ff
from fabricflow.errors import RoutingError, SpecError
from fabricflow.fabric.spec import build_fabric
from fabricflow.routing_optimizer import fractional


def core_bound_fat_tree(seed: int, *, failed: float = 0.0, radix: int = 8):
    """k=8 fat-tree (128 GPUs) with random switch-link capacities (20-100% of 400G) and
    fast NICs, so the bottlenecks are inside the fabric where routing matters."""
    fabric = build_fabric(fat_tree_spec(radix, nic="400Gbps"))
    rng = np.random.default_rng(seed)
    capacity = fabric.capacity * rng.uniform(0.2, 1.0, fabric.num_links)
    nic = fabric.link_kind == "nic"
    capacity[nic] = fabric.capacity[nic] * 4
    fabric = fabric.with_capacity(capacity)
    if failed:
        fabric = fabric.without(link_kind="spine", fraction=failed, seed=seed)
    return fabric


def drain_max(load, capacity):
    """Seconds until the busiest loaded link drains (failed links carry nothing)."""
    used = load > 0
    assert np.all(capacity[used] > 0)
    return float((load[used] / capacity[used]).max())


def check_plan_invariants(plan, fabric):
    paths, split = plan.paths, plan.split
    valid = (paths >= 0).any(axis=2)
    assert paths.dtype == np.int32 and paths.ndim == 3
    assert np.all(split >= 0)
    np.testing.assert_allclose(split.sum(axis=1), 1.0, rtol=1e-9)
    assert np.all(split[~valid] == 0)
    # padded (all -1) rows come after the real ones, and every real path works
    assert np.all(valid[:, :-1] | ~valid[:, 1:])
    assert np.all(fabric.link_up[paths[paths >= 0]])
    # the paths of one flow are distinct
    flat = np.where(paths >= 0, paths, -1)
    same = np.all(flat[:, :, None, :] == flat[:, None, :, :], axis=3)
    both = valid[:, :, None] & valid[:, None, :]
    assert not np.any(same & both & ~np.eye(paths.shape[1], dtype=bool))
    # routes() carries exactly the planned bytes on every link
    routes = plan.routes()
    np.testing.assert_allclose(
        routes.link_load(plan.size), plan.link_times() * fabric.capacity, rtol=1e-5, atol=1e-3
    )
    np.testing.assert_allclose(plan.makespan_s, plan.link_times().max(), rtol=1e-12)


@pytest.mark.parametrize(
    "seed, k, failed, sizes",
    [(0, 8, 0.0, "equal"), (1, 4, 0.0, "mixed"), (2, 8, 0.15, "mixed"), (3, 2, 0.15, "equal")],
)
def test_fractional_makespan_within_2_percent_of_the_lp(seed, k, failed, sizes):
    fabric = core_bound_fat_tree(seed, failed=failed)
    src, dst = random_pairs(fabric.num_gpus, 2000, seed=seed)
    rng = np.random.default_rng(seed)
    size = np.full(2000, 1e7) if sizes == "equal" else rng.uniform(1e6, 1e8, 2000)
    plan = ff.optimize_routing(fabric, src, dst, size=size, k=k, seed=seed)
    check_plan_invariants(plan, fabric)
    optimum = lp_makespan(plan.paths, plan.size, fabric.capacity)
    assert optimum <= plan.makespan_s * (1 + 1e-9)  # the LP is a lower bound
    assert plan.lower_bound_s <= optimum * (1 + 1e-9)  # and so is the forced-load bound
    assert plan.makespan_s <= 1.02 * optimum
    # and the plan beats ECMP's hash on the same flows
    ecmp = ff.route(fabric, src, dst, policy="ecmp", seed=seed).link_load(size)
    assert plan.makespan_s < drain_max(ecmp, fabric.capacity)


def test_integral_plan_is_one_path_per_flow_within_10_percent_of_the_lp():
    fabric = core_bound_fat_tree(4, failed=0.1)
    src, dst = random_pairs(fabric.num_gpus, 1000, seed=4)
    size = np.random.default_rng(4).uniform(1e6, 1e8, 1000)
    plan = ff.optimize_routing(fabric, src, dst, size=size, k=8, integral=True, seed=4)
    check_plan_invariants(plan, fabric)
    assert np.all(np.count_nonzero(plan.split, axis=1) == 1)
    assert plan.routes().coef is not None and np.all(
        plan.routes().coef[plan.routes().links >= 0] == 1
    )
    optimum = lp_makespan(plan.paths, plan.size, fabric.capacity)
    assert optimum <= plan.makespan_s <= 1.10 * optimum
    assert plan.fractional_makespan_s <= plan.makespan_s * (1 + 1e-9)


def test_torus_and_dragonfly_candidates_are_shortest_or_near_shortest_and_optimal():
    torus = build_fabric(
        {
            "name": "torus",
            "gpus": 64,
            "topology": {"type": "torus", "dims": [4, 4, 4], "link_bandwidth": "50GB/s"},
        }
    )
    src, dst = random_pairs(64, 600, seed=5)
    plan = ff.optimize_routing(torus, src, dst, size=1e6, k=4)
    check_plan_invariants(plan, torus)
    hops = (plan.paths >= 0).sum(axis=2)
    dor = ff.route(torus, src, dst, policy="dor").hop_count
    # torus candidates are minimal (the routers' DOR / random dimension orders)
    assert np.all((hops == dor[:, None]) | (hops == 0))
    assert np.mean((hops > 0).sum(axis=1)) > 2  # most flows get several paths
    assert plan.makespan_s <= 1.02 * lp_makespan(plan.paths, plan.size, torus.capacity)

    dragonfly = build_fabric(
        {
            "name": "df",
            "gpus": 40,
            "gpus_per_node": 2,
            "topology": {
                "type": "dragonfly",
                "groups": 5,
                "switches_per_group": 4,
                "gpus_per_switch": 2,
                "nic_bandwidth": "400Gbps",
                "local_bandwidth": "400Gbps",
                "global_bandwidth": "100Gbps",
                "global_links_per_group_pair": 1,
            },
        }
    )
    src, dst = random_pairs(40, 400, seed=6)
    plan = ff.optimize_routing(dragonfly, src, dst, size=1e6, k=6)
    check_plan_invariants(plan, dragonfly)
    minimal = ff.route(dragonfly, src, dst, policy="minimal").hop_count
    hops = (plan.paths >= 0).sum(axis=2)
    assert np.all(hops[:, 0] == minimal)  # the first candidate is a minimal path
    assert np.any(hops > minimal[:, None])  # Valiant detours are offered too
    assert plan.makespan_s <= 1.02 * lp_makespan(plan.paths, plan.size, dragonfly.capacity)
    # minimal routing overloads the single global cable of busy group pairs
    load = ff.route(dragonfly, src, dst, policy="minimal").link_load(np.full(400, 1e6))
    assert plan.makespan_s < 0.9 * drain_max(load, dragonfly.capacity)


def test_second_call_with_the_same_shapes_does_not_recompile():
    fabric = core_bound_fat_tree(7)
    src, dst = random_pairs(fabric.num_gpus, 300, seed=7)
    ff.optimize_routing(fabric, src, dst, size=1e6, k=4, steps=50)
    before = fractional._run._cache_size()
    ff.optimize_routing(fabric, src, dst, size=2e6, k=4, steps=50, learning_rate=0.2)
    assert fractional._run._cache_size() == before


def test_summary_compares_ecmp_spray_and_optimized():
    fabric = core_bound_fat_tree(8, radix=4)  # 16 GPUs: spray rows stay narrow
    src, dst = random_pairs(fabric.num_gpus, 60, seed=8)
    plan = ff.optimize_routing(fabric, src, dst, size=1e7, k=4)
    summary = plan.summary(completion_mode="exact")
    for name in ("ecmp", "spray", "optimized"):
        figures = summary[name]
        # the busiest link drains no earlier than its bytes / capacity
        assert figures["completion_s"] >= figures["makespan_s"] * (1 - 1e-5)
        assert 0 < figures["max_utilization"] <= 1 + 1e-5
        assert figures["throughput_Bps"] > 0
    assert summary["optimized"]["makespan_s"] == pytest.approx(plan.makespan_s, rel=1e-6)
    assert summary["optimized"]["makespan_s"] < summary["ecmp"]["makespan_s"]
    assert summary["gain"]["makespan_vs_ecmp"] > 1


def test_collective_and_step_accept_optimized_routing():
    fabric = build_fabric(fat_tree_spec(4, gpus_per_node=2, nic="400Gbps"))
    groups = np.arange(16).reshape(1, 16)
    ecmp = ff.collective_time(fabric, "all_to_all", groups, 1e8, routing="ecmp")
    best = ff.collective_time(fabric, "all_to_all", groups, 1e8, routing="optimized")
    spray = ff.collective_time(fabric, "all_to_all", groups, 1e8, routing="spray")
    assert best.time_s <= ecmp.time_s * (1 + 1e-6)
    assert best.time_s == pytest.approx(spray.time_s, rel=0.05)
    layout = ff.Layout(tp=2, dp=8, micro_batch=1, global_batch=16, seq_len=2048)
    step = {
        routing: ff.step_time("llama3-8b", "h100-sxm", layout, fabric, routing=routing)
        for routing in ("ecmp", "optimized")
    }
    assert step["optimized"].step_time_s <= step["ecmp"].step_time_s * (1 + 1e-6)
    with pytest.raises(SpecError, match="routing"):
        ff.step_time("llama3-8b", "h100-sxm", layout, fabric, routing="no-such-policy")


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"k": 0}, "k"),
        ({"k": 2.5}, "k"),
        ({"size": np.nan}, "size"),
        ({"size": -1.0}, "size"),
        ({"size": np.ones(3)}, "size"),
        ({"objective": "latency"}, "objective"),
        ({"steps": 0}, "steps"),
        ({"learning_rate": float("nan")}, "learning_rate"),
        ({"integral": "yes"}, "integral"),
    ],
)
def test_bad_input_names_the_field(kwargs, field):
    fabric = build_fabric(fat_tree_spec(4))
    src, dst = random_pairs(fabric.num_gpus, 10, seed=0)
    args = {"size": 1e6, **kwargs}
    with pytest.raises(SpecError) as info:
        ff.optimize_routing(fabric, src, dst, **args)
    assert info.value.field == field


def test_flows_whose_every_path_is_failed_raise_routing_error():
    fabric = build_fabric(fat_tree_spec(4))
    # every spine-level cable fails: cross-pod flows have no equal-cost path left
    cut = fabric.without(link_kind="spine", fraction=1.0)
    src, dst = np.array([0, 0]), np.array([1, fabric.num_gpus - 1])
    with pytest.raises(RoutingError, match="unreachable"):
        ff.optimize_routing(cut, src, dst, size=1e6, k=4)
    # a GPU whose NIC cable is cut has no path at all
    nic = fabric.links_of_kind("nic")[:1]
    isolated = fabric.without(links=nic)
    gpu = int(np.flatnonzero(fabric.gpu_node == fabric.link_src[nic[0]])[0])
    other = (gpu + fabric.num_gpus // 2) % fabric.num_gpus
    with pytest.raises(RoutingError):
        ff.optimize_routing(isolated, np.array([gpu]), np.array([other]), size=1e6)


def test_capacity_sensitivity_matches_finite_differences():
    import jax

    from fabricflow.routing_optimizer.sensitivity import smooth_makespan

    rng = np.random.default_rng(9)
    for trial in range(3):
        fabric = core_bound_fat_tree(10 + trial)
        src, dst = random_pairs(fabric.num_gpus, 200, seed=trial)
        size = rng.uniform(1e6, 1e8, 200)
        routes = ff.route(fabric, src, dst, policy="multipath", k=2, seed=trial)
        sens = ff.capacity_sensitivity(fabric, routes, size)
        capacity = fabric.capacity.astype(np.float64)
        load = routes.link_load(size)
        loaded = np.flatnonzero(load > 0)
        # (1) the surrogate's gradient vs central differences of the surrogate, float64
        with jax.enable_x64(True):

            def surrogate(c, loaded=loaded, load=load, sens=sens):
                return float(smooth_makespan(c[loaded], load[loaded], sens.makespan_s, sens.beta))

            picks = loaded[np.argsort(sens.per_link[loaded])[:5]]  # the largest gradients
            for link in picks:
                h = capacity[link] * 1e-6
                up, down = capacity.copy(), capacity.copy()
                up[link] += h
                down[link] -= h
                numeric = (surrogate(up) - surrogate(down)) / (2 * h)
                assert sens.per_link[link] == pytest.approx(numeric, rel=1e-3)
        # (2) vs central differences of the exact makespan at its (unique) bottleneck
        times = np.where(load > 0, load / capacity, 0.0)
        order = np.argsort(times)[::-1]
        if times[order[1]] < times[order[0]] * 0.98:
            link = order[0]
            h = capacity[link] * 1e-6
            exact = (load[link] / (capacity[link] + h) - load[link] / (capacity[link] - h)) / (
                2 * h
            )
            assert sens.per_link[link] == pytest.approx(exact, rel=1e-3)
            assert sum(sens.by_kind.values()) == pytest.approx(exact, rel=1e-3)
        assert np.all(sens.per_link <= 0)
        assert sens.makespan_s <= sens.surrogate_s


def test_capacity_sensitivity_bad_input():
    fabric = build_fabric(fat_tree_spec(4))
    src, dst = random_pairs(fabric.num_gpus, 10, seed=0)
    routes = ff.route(fabric, src, dst)
    with pytest.raises(SpecError, match="size"):
        ff.capacity_sensitivity(fabric, routes, np.nan)
    with pytest.raises(SpecError, match="beta"):
        ff.capacity_sensitivity(fabric, routes, 1e6, beta=-1.0)
    other = build_fabric(fat_tree_spec(8))
    with pytest.raises(SpecError, match="routes"):
        ff.capacity_sensitivity(other, routes, 1e6)


def test_even_split_meeting_the_forced_load_bound_is_returned_without_iterating():
    # Uniform all-to-all on a non-blocking fat-tree: every NIC link carries its GPU's
    # bytes whatever the split, and the even split spreads the rest below that.
    fabric = build_fabric(fat_tree_spec(4, nic="100Gbps"))
    gpus = np.arange(fabric.num_gpus)
    src, dst = np.repeat(gpus, 15), np.concatenate([np.delete(gpus, g) for g in gpus])
    plan = ff.optimize_routing(fabric, src, dst, size=1e6, k=4)
    assert plan.steps == 0
    assert plan.makespan_s == pytest.approx(
        15 * 1e6 / fabric.capacity[fabric.links_of_kind("nic")][0]
    )
    assert plan.makespan_s == pytest.approx(plan.lower_bound_s, rel=1e-9)


def test_cli_collective_accepts_routing_optimized(capsys):
    import json

    from fabricflow.cli import main

    argv = ["collective", "--fabric", "dgx-h100-superpod", "--op", "all_to_all", "--gpus"]
    argv += ["32", "--minbytes", "16MiB", "--maxbytes", "16MiB", "--routing", "optimized"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["routing"] == "optimized" and out["rows"][0]["time_s"] > 0
