"""Step model: traffic of different dimensions that overlaps in time shares the fabric."""

from __future__ import annotations

import json

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.collective.comm import CollectiveCache
from fabricflow.collective.coupling import coupled_seconds
from fabricflow.errors import SpecError
from fabricflow.workload.layout import Layout
from fabricflow.workload.step import BREAKDOWN_KEYS, step_time


@pytest.fixture(scope="module")
def a100():
    return ff.load_fabric("dgx-a100-superpod")


@pytest.fixture(scope="module")
def h100():
    return ff.load_fabric("dgx-h100-superpod")


MIXTRAL = dict(tp=2, ep=8, dp=16, pp=2, micro_batch=1, global_batch=128, seq_len=4096)


@pytest.mark.parametrize(
    "layout",
    [
        Layout(dp=32, micro_batch=2, global_batch=64, seq_len=2048),
        Layout(tp=8, micro_batch=2, global_batch=8, seq_len=2048),
        Layout(pp=4, micro_batch=1, global_batch=16, seq_len=2048, recompute="full"),
    ],
    ids=["dp-only", "tp-only", "pp-only"],
)
def test_one_dimension_alone_is_the_isolated_model(a100, layout):
    result = step_time("megatron-1.7b", "a100-80gb", layout, a100, check_memory=False)
    coupling = result.details["coupling"]
    assert coupling["added_s"] == 0.0
    assert result.step_time_s == coupling["isolated_step_s"] == coupling["coupled_step_s"]
    methods = {m["method"] for w in coupling["windows"].values() for m in w["members"]}
    assert methods <= {"alone"}


def test_contention_never_speeds_a_step_up_and_is_reported_per_part(h100):
    result = step_time("mixtral-8x7b", "h100-sxm", Layout(**MIXTRAL), h100, check_memory=False)
    coupling = result.details["coupling"]
    assert result.step_time_s == pytest.approx(coupling["coupled_step_s"])
    assert sum(result.breakdown.values()) == pytest.approx(result.step_time_s)
    assert coupling["coupled_step_s"] >= coupling["isolated_step_s"]
    by_part = coupling["added_s_by_part"]
    assert set(by_part) == set(BREAKDOWN_KEYS)
    assert all(v >= 0 for v in by_part.values())
    assert sum(by_part.values()) == pytest.approx(coupling["added_s"])
    # Dense and expert gradient reductions run at once over the same NICs: both slow down.
    tail = {m["dimension"]: m for m in coupling["windows"]["backward_tail"]["members"]}
    assert tail["dp"]["coupled_s"] > 1.5 * tail["dp"]["isolated_s"]
    assert tail["edp"]["coupled_s"] > tail["edp"]["isolated_s"]
    assert by_part["dp"] > 0
    for window in coupling["windows"].values():
        for member in window["members"]:
            assert member["coupled_s"] >= member["isolated_s"]
            assert member["snapshot_s"] >= member["isolated_s"]
    # coupling=False is the isolated model the coupled one is compared with.
    off = step_time(
        "mixtral-8x7b", "h100-sxm", Layout(**MIXTRAL), h100, check_memory=False, coupling=False
    )
    assert off.step_time_s == coupling["isolated_step_s"] < result.step_time_s
    assert off.details["coupling"]["added_s"] == 0.0
    with pytest.raises(SpecError, match="coupling"):
        step_time("mixtral-8x7b", "h100-sxm", Layout(**MIXTRAL), h100, coupling="no")
    # Without DP overlap the gradient reduction runs alone: no tail/head windows.
    alone = step_time(
        "mixtral-8x7b", "h100-sxm", Layout(dp_overlap=False, **MIXTRAL), h100, check_memory=False
    )
    assert set(alone.details["coupling"]["windows"]) == {"steady"}
    assert alone.details["coupling"]["added_s_by_part"]["dp"] == 0.0


def _two_sets(a100):
    """Two group sets on the same 16 GPUs (two DGX nodes): their rings share the NICs."""
    cache = CollectiveCache(a100)
    groups = np.arange(16).reshape(1, 16)
    cache.add("a", groups)
    cache.add("b", groups)
    return cache


def test_identical_traffic_halves_the_bandwidth(a100):
    cache = _two_sets(a100)
    size = 2.0**30
    alone = cache.slowest("a", "all_reduce", size)
    both = coupled_seconds(cache, ("a", "all_reduce", size), [("b", "all_reduce", size)])
    # Same flows twice: every flow gets half its rate; they finish together (no release).
    assert both.method == "snapshot"
    assert both.isolated_s == alone
    assert 1.9 * alone < both.coupled_s <= 2.0 * alone


def test_background_that_finishes_first_releases_its_bandwidth(a100):
    cache = _two_sets(a100)
    size = 2.0**30
    alone = cache.slowest("a", "all_reduce", size)
    both = coupled_seconds(cache, ("a", "all_reduce", size), [("b", "all_reduce", size / 10)])
    # Held rates: half the bandwidth throughout (~2x). Fluid: both run at half rate until
    # b has sent its tenth (a has sent a tenth too, in 2/10 of its time alone), then a
    # sends the remaining 9/10 alone: ~1.1x.
    assert both.method == "completion"
    assert both.snapshot_s > 1.9 * alone
    assert both.coupled_s == pytest.approx(1.1 * alone, rel=0.02)


def test_alpha_beta_backend_has_no_coupling(a100):
    layout = Layout(tp=8, pp=2, dp=4, micro_batch=1, global_batch=32, seq_len=2048)
    result = step_time(
        "megatron-18.4b", "a100-80gb", layout, a100, collectives="alpha-beta", check_memory=False
    )
    coupling = result.details["coupling"]
    assert coupling["added_s"] == 0.0 and coupling["windows"] == {}
    assert "alpha-beta" in coupling["model"]


def test_routing_seeds_report_spread_and_seed_zero_result(h100):
    layout = Layout(**MIXTRAL)
    one = step_time("mixtral-8x7b", "h100-sxm", layout, h100, check_memory=False)
    many = step_time("mixtral-8x7b", "h100-sxm", layout, h100, check_memory=False, routing_seeds=3)
    var = many.details["variability"]
    assert var["routing_seeds"] == 3 and len(var["step_time_s_per_seed"]) == 3
    assert var["step_time_s_per_seed"][0] == one.step_time_s == many.step_time_s
    assert min(var["step_time_s_per_seed"]) <= var["p50_s"] <= var["p99_s"] <= var["max_s"]
    assert var["max_s"] == max(var["step_time_s_per_seed"])
    assert "variability" not in one.details
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(SpecError, match="routing_seeds"):
            step_time(
                "mixtral-8x7b", "h100-sxm", layout, h100, check_memory=False, routing_seeds=bad
            )


def test_routing_seed_is_the_steps_hash_seed_and_shifts_the_seeds(h100):
    layout = Layout(**MIXTRAL)
    kwargs = dict(check_memory=False, routing="ecmp")
    many = step_time("mixtral-8x7b", "h100-sxm", layout, h100, routing_seeds=3, **kwargs)
    shifted = step_time(
        "mixtral-8x7b", "h100-sxm", layout, h100, routing_seed=1, routing_seeds=2, **kwargs
    )
    per_seed = many.details["variability"]["step_time_s_per_seed"]
    assert shifted.details["routing_seed"] == 1 and many.details["routing_seed"] == 0
    assert shifted.step_time_s == per_seed[1]
    assert shifted.details["variability"]["step_time_s_per_seed"] == per_seed[1:]
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(SpecError, match="routing_seed"):
            step_time("mixtral-8x7b", "h100-sxm", layout, h100, routing_seed=bad, **kwargs)


def test_route_seed_reaches_the_collective_model():
    # All-to-all of 32 GPUs on 32 nodes: ECMP hashes the flows over the spines, and which
    # ones collide depends on the seed. The preset runs InfiniBand adaptive routing (no
    # hashing, no seed): the same wires under RoCEv2 hash every flow onto one path.
    a100 = ff.load_fabric("dgx-a100-superpod", transport="rocev2")
    groups = np.arange(0, 1024, 8).reshape(-1, 32)
    times = set()
    for seed in range(4):
        cache = CollectiveCache(a100, seed=seed)
        cache.add("g", groups)
        times.add(cache.slowest("g", "all_to_all", 2.0**26))
    assert len(times) > 1
    with pytest.raises(SpecError, match="seed"):
        CollectiveCache(a100, seed=-1)


def test_cli_routing_seeds_and_failures(capsys):
    from cli_args import STEP

    from fabricflow.cli import main

    args = [*STEP, "--pp", "2", "--tp", "4"]  # PP and DP cross the nodes: a tail window
    assert main([*args, "--routing-seeds", "2", "--fail", "leaf:0.05", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["variability"]["routing_seeds"] == 2
    assert data["failed_links"] > 0
    assert data["coupling"]["coupled_step_s"] == data["step_time_s"]
    assert main([*args, "--routing-seeds", "2"]) == 0
    text = capsys.readouterr().out
    assert "over 2 routing seeds: p50" in text and "coupling" in text
    for flag, value in (("--routing-seeds", "0"), ("--fail", "leaf"), ("--fail", "leaf:x")):
        assert main([*args, flag, value, "--json"]) == 2
        assert flag in json.loads(capsys.readouterr().out)["message"]


def test_zero3_gathers_and_scatters_share_the_steady_window(h100):
    layout = Layout(zero=3, **MIXTRAL)
    result = step_time("mixtral-8x7b", "h100-sxm", layout, h100, check_memory=False)
    coupling = result.details["coupling"]
    # Every micro-batch gathers parameters and scatters gradients: no separate DP windows.
    assert set(coupling["windows"]) == {"steady"}
    steady = coupling["windows"]["steady"]
    assert {"dp", "edp"} <= {m["dimension"] for m in steady["members"]}
    assert {"dp", "edp"} <= {b["dimension"] for b in steady["background"]}
    assert all(m["coupled_s"] >= m["isolated_s"] for m in steady["members"])
    assert coupling["added_s_by_part"]["dp"] > 0


def test_a_joint_solve_over_the_memory_budget_leaves_its_member_alone(h100, monkeypatch):
    """A window whose joint solve would not fit the memory budget times that member alone
    and says so, instead of failing the whole step."""
    from fabricflow.collective import coupling as coupling_module
    from fabricflow.collective import structure_cache
    from fabricflow.errors import MemoryBudgetError

    def refuse(nbytes, what, **_):
        raise MemoryBudgetError(f"{what} needs {nbytes:.0f} bytes (test budget)")

    structure_cache.clear()  # joint solves of the coupled runs above are cached
    monkeypatch.setattr(coupling_module, "check_memory", refuse)
    result = step_time("mixtral-8x7b", "h100-sxm", Layout(**MIXTRAL), h100, check_memory=False)
    members = [
        m for window in result.details["coupling"]["windows"].values() for m in window["members"]
    ]
    refused = [m for m in members if m["method"].startswith("alone: joint max-min solve")]
    assert refused  # the contended members of this layout were refused, and named
    assert result.details["coupling"]["added_s"] == pytest.approx(0.0, abs=1e-12)
    monkeypatch.undo()
    structure_cache.clear()
    coupled = step_time("mixtral-8x7b", "h100-sxm", Layout(**MIXTRAL), h100, check_memory=False)
    assert coupled.details["coupling"]["added_s"] > 0  # the same layout, coupled normally
    assert coupled.step_time_s >= result.step_time_s
