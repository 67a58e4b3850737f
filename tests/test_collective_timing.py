"""Collective times on fabrics: calibration against measured NCCL numbers, the effects
users come for (ECMP collisions, rail vs ToR, failures, shared jobs), the CLI and errors.

Calibration targets (docs/references.md §4, maintainer answers in NVIDIA/nccl(-tests) issues),
each within 10%, from the same physical parameters for every case (link payload
efficiency per technology, NCCL protocol efficiency and latencies, NVLS efficiency).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from reference_solvers import progressive_filling

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.collective import collective_sweep, collective_time, make_groups
from fabricflow.collective.flow_rates import solve_phase
from fabricflow.errors import SpecError
from fabricflow.study.collective_effects import (
    alltoall_attachment,
    attachment_comparison,
    ecmp_vs_spray,
    failed_link_effect,
    interleaved_jobs,
    shared_jobs,
    small_clos,
)

LARGE = 8 * 2**30


@pytest.fixture(scope="module")
def h100():
    return ff.load_fabric("dgx-h100-superpod")


@pytest.fixture(scope="module")
def a100():
    return ff.load_fabric("dgx-a100-superpod")


# ------------------------------------------------------------------ calibration


def test_h100_node_ring_allreduce_about_370(h100):
    result = collective_time(h100, "all_reduce", np.arange(8), LARGE, algorithm="ring")
    assert result.busbw_Bps / 1e9 == pytest.approx(370, rel=0.10)
    assert set(result.bottleneck_kinds) == {"nvlink"}


def test_h100_node_nvls_allreduce_about_480(h100):
    result = collective_time(h100, "all_reduce", np.arange(8), LARGE, algorithm="nvls")
    assert result.busbw_Bps / 1e9 == pytest.approx(480, rel=0.10)
    auto = collective_time(h100, "all_reduce", np.arange(8), LARGE)
    assert auto.algorithm == "nvls"


@pytest.mark.parametrize("op", ["sendrecv", "all_reduce"])
def test_one_400g_nic_about_47(h100, op):
    result = collective_time(h100, op, [0, 8], LARGE)  # two nodes, one GPU each
    assert 46e9 * 0.95 <= result.busbw_Bps <= 48e9 * 1.05
    assert "nic" in result.bottleneck_kinds


@pytest.mark.parametrize("nodes, algorithm", [(2, "ring"), (4, "auto"), (8, "auto")])
def test_multinode_dgx_a100_allreduce_about_192(a100, nodes, algorithm):
    result = collective_time(a100, "all_reduce", np.arange(8 * nodes), LARGE, algorithm=algorithm)
    assert result.busbw_Bps / 1e9 == pytest.approx(192, rel=0.10)


# ------------------------------------------------------------------ model behaviour


def test_auto_is_the_fastest_option_at_every_size_and_latency_dominates_small(h100):
    sizes = [1024, 2**20, 2**30]
    results = collective_sweep(h100, "all_reduce", np.arange(16), sizes)
    for result in results:
        assert result.time_s == pytest.approx(min(result.candidates.values()))
    times = [r.time_s for r in results]
    assert times == sorted(times)
    assert results[0].protocol != "Simple"  # LL/LL128 win small messages
    assert results[0].bottleneck_links.size >= 0
    assert results[0].busbw_Bps < 0.05 * results[-1].busbw_Bps


def test_project_solver_matches_the_float64_reference_on_collective_flows(h100):
    from fabricflow.collective.algorithms import ALGORITHMS, Context
    from fabricflow.collective.flow_rates import effective_capacity

    solver = getattr(ff, "max_min_rates", None)
    if solver is None:
        solver = pytest.importorskip("fabricflow.solve.maxmin.checked").max_min_rates
    groups = make_groups(64, 8, layout="strided")
    grid = groups[:, :, None]  # one member per node: D = 8 domains of k = 1
    ctx = Context("all_reduce", groups, groups, grid, 2)
    (phase,) = ALGORITHMS["ring"].build(ctx)
    capacity = effective_capacity(h100, ff.collective.DEFAULT_COST)
    ours = solve_phase(h100, phase, capacity, solver=solver)
    ref = solve_phase(h100, phase, capacity, solver=progressive_filling)
    np.testing.assert_allclose(ours.rate, ref.rate, rtol=1e-4)


def test_concurrent_groups_contend_on_shared_links():
    fabric = small_clos(attachment="tor", leaf_down=16, leaf_up=4)
    jobs = interleaved_jobs(256, 2, 16)
    out = shared_jobs(fabric, jobs, routing="spray")
    # Two interleaved jobs share every leaf uplink of a 4:1 fabric: each gets half.
    np.testing.assert_allclose(out["together_Bps"], out["alone_Bps"] / 2, rtol=0.02)


def test_ecmp_collisions_lower_busbw_versus_spray():
    fabric = small_clos(attachment="tor", leaf_down=16, leaf_up=4)
    out = ecmp_vs_spray(fabric, make_groups(256, 32), seeds=(0, 1, 2))
    assert np.all(out["ecmp_Bps"] < 0.8 * out["spray_Bps"])


def test_rail_optimized_versus_tor_for_cross_rail_traffic():
    fabrics = {
        "rail": small_clos(attachment="rail", leaf_down=16, leaf_up=4),
        "tor": small_clos(attachment="tor", leaf_down=16, leaf_up=4),
    }
    out = attachment_comparison(fabrics)
    # Same rail: both stay under one leaf, NIC-bound.
    assert out["rail"][0] == pytest.approx(out["tor"][0], rel=1e-6)
    # Cross rail: the rail fabric sends it over the 4:1 leaf uplinks, ToR keeps it local.
    assert out["rail"][1] == pytest.approx(out["tor"][1] / 4, rel=0.02)


def test_pxn_all_to_all_keeps_rail_fabric_traffic_on_the_rail():
    fabrics = {
        "rail": small_clos(attachment="rail", leaf_down=16, leaf_up=4),
        "tor": small_clos(attachment="tor", leaf_down=16, leaf_up=4),
    }
    out = alltoall_attachment(fabrics, group_size=64)
    # Rail leaves hold GPU j of 16 nodes: aggregated rail flows never leave the leaf.
    assert out["rail"]["hierarchical"] > 2.5 * out["rail"]["direct"]
    assert out["tor"]["hierarchical"] < 1.2 * out["tor"]["direct"]


def test_failed_spine_link_lowers_busbw_and_is_avoided():
    fabric = small_clos(attachment="tor", leaf_down=16, leaf_up=8)
    out = failed_link_effect(fabric, make_groups(256, 32, layout="strided"), max_failed=1)
    healthy, degraded = out["busbw_Bps"]
    assert degraded == pytest.approx(healthy * 7 / 8, rel=0.02)  # 8 -> 7 uplinks
    broken = fabric.without(links=out["failed_links"])
    result = collective_time(
        broken,
        "all_reduce",
        make_groups(256, 32, layout="strided"),
        2**30,
        algorithm="ring",
        routing="ecmp",
    )
    assert np.isfinite(result.time_s)
    assert not set(result.bottleneck_links.tolist()) & set(out["failed_links"])


def test_per_group_times_and_bottleneck_report():
    fabric = small_clos(attachment="tor", leaf_down=16, leaf_up=4)
    groups = make_groups(256, 32)
    result = collective_time(fabric, "all_reduce", groups, 2**30, algorithm="ring")
    assert result.group_time_s.shape == (8,)
    assert result.time_s == result.group_time_s.max()
    assert result.slowest_group == int(np.argmax(result.group_time_s))
    assert set(result.bottleneck_kinds) <= {"leaf", "nic", "nvlink"}
    assert np.all(result.bottleneck_utilization >= 1 - 1e-3)
    summary = result.to_dict()
    assert summary["busbw_GBps"] == pytest.approx(result.busbw_Bps / 1e9)


# ------------------------------------------------------------------ CLI and errors


def test_cli_json_rows(capsys):
    code = main(
        [
            "collective",
            "--fabric",
            "dgx-h100-superpod",
            "--op",
            "all_reduce",
            "--gpus",
            "16",
            "--minbytes",
            "1MiB",
            "--maxbytes",
            "64MiB",
            "--stepfactor",
            "8",
            "--json",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert [row["bytes"] for row in out["rows"]] == [2**20, 2**23, 2**26]
    for row in out["rows"]:
        assert set(row) >= {"bytes", "time_s", "algbw_GBps", "busbw_GBps", "algorithm"}
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * 2 * 15 / 16)


def test_cli_table_and_error(capsys):
    assert (
        main(
            [
                "collective",
                "--fabric",
                "dgx-h100-superpod",
                "--op",
                "all_to_all",
                "--gpus",
                "16",
                "--group-size",
                "8",
                "-b",
                "1MiB",
                "-e",
                "1MiB",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "busbw(GB/s)" in text and "1048576" in text
    assert (
        main(
            [
                "collective",
                "--fabric",
                "dgx-h100-superpod",
                "--op",
                "allreduse",
                "--gpus",
                "8",
                "--json",
            ]
        )
        == 2
    )
    assert "one of" in json.loads(capsys.readouterr().out)["message"]


def test_bad_inputs_name_the_field(h100):
    with pytest.raises(SpecError, match="algorithm"):
        collective_time(h100, "all_to_all", np.arange(8), 1e6, algorithm="tree")
    with pytest.raises(SpecError, match="routing"):
        collective_time(h100, "all_reduce", np.arange(8), 1e6, routing="random")
    with pytest.raises(SpecError, match="size"):
        collective_time(h100, "all_reduce", np.arange(8), float("nan"))
    with pytest.raises(SpecError, match="protocol"):
        collective_time(h100, "all_reduce", np.arange(8), 1e6, protocol="LL64")
    with pytest.raises(SpecError, match="power-of-two"):
        collective_time(h100, "all_reduce", np.arange(6), 1e6, algorithm="halving_doubling")


def _study(name):
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "studies" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_effects_study_writes_figures(tmp_path, capsys):
    assert _study("collective_effects").main([str(tmp_path), "--gpus", "256"]) == 0
    numbers = json.loads((tmp_path / "collective_effects.json").read_text())
    for name in ("ecmp_vs_spray", "rail_vs_tor", "failed_links", "shared_jobs"):
        assert (tmp_path / f"collective_{name}.png").stat().st_size > 1000
    jobs = numbers["shared_jobs"]["job0_busbw_GBps"]
    assert jobs[-1] < jobs[0]


def test_calibration_study_matches_measurements(tmp_path, capsys):
    assert _study("collective_calibration").main([str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "collective_calibration.json").read_text())["rows"]
    for row in rows:
        if row["measured_busbw_GBps"]:
            assert row["busbw_GBps"][-1] == pytest.approx(row["measured_busbw_GBps"], rel=0.10)


def test_huge_all_to_all_is_refused_before_allocating(monkeypatch):
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "16GiB")  # the same on any machine
    fabric = ff.load_fabric("clos-100k", gpus=16384)
    with pytest.raises(ff.MemoryBudgetError, match="flow hops"):
        collective_time(fabric, "all_to_all", np.arange(16384), 2**30, algorithm="direct")


def test_cli_fail_option(capsys):
    assert (
        main(
            [
                "collective",
                "--fabric",
                "dgx-h100-superpod",
                "--op",
                "all_reduce",
                "--gpus",
                "64",
                "--group-size",
                "8",
                "--layout",
                "strided",
                "-b",
                "1GiB",
                "-e",
                "1GiB",
                "--fail",
                "leaf:0.1",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["failed_links"] > 0 and out["rows"][0]["busbw_GBps"] > 0
    assert (
        main(
            [
                "collective",
                "--fabric",
                "dgx-h100-superpod",
                "--op",
                "all_reduce",
                "--gpus",
                "8",
                "--fail",
                "leaf",
                "--json",
            ]
        )
        == 2
    )
    assert "KIND:FRACTION" in json.loads(capsys.readouterr().out)["message"]
