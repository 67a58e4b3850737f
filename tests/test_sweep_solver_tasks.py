"""The ``maxmin`` and ``cc`` sweep tasks: batches equal per-point runs; semantics; errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from reference_solvers import progressive_filling

from fabricflow.errors import RoutingError, SpecError
from fabricflow.fabric.spec import load_fat_tree
from fabricflow.routing.route import route
from fabricflow.solve.cc.dcqcn import DCQCNParams
from fabricflow.sweeps import solver_tasks as ss
from fabricflow.traffic.patterns import alltoall_groups


@pytest.fixture(scope="module")
def fabric():
    return load_fat_tree(8)  # 128 hosts, 400 Gb/s links


VARYING = [
    {},
    {"fail_kind": "leaf", "fail_fraction": 0.05, "fail_seed": 0},
    {"fail_kind": "leaf", "fail_fraction": 0.05, "fail_seed": 1},
    {"fail_kind": "spine", "fail_fraction": 0.1, "fail_seed": 2},
    {"capacity_scale": {"spine": 0.5}},
    {"capacity_scale": 0.25, "demand": "100Gbps"},
]


def _close(batch: dict, point: dict) -> None:
    assert batch.keys() == point.keys()
    for key, value in point.items():
        if np.isnan(value):
            assert np.isnan(batch[key]), key
        else:
            assert batch[key] == pytest.approx(value, rel=2e-6, abs=1e-9), key


@pytest.mark.parametrize("reroute", [True, False])
def test_maxmin_batch_equals_points(fabric, reroute):
    common = {"fabric": fabric, "traffic": "alltoall", "group_size": 8, "reroute": reroute}
    batch = ss.maxmin_batch(common, VARYING)
    points = [ss.maxmin_point(**common, **entry) for entry in VARYING]
    for b, p in zip(batch, points, strict=True):
        _close(b, p)
    assert set(ss.MAXMIN_METRICS) <= set(points[0])
    # failures lower the total; halving the spine tier or capping flows changes rates
    intact = points[0]["total_throughput_Bps"]
    assert all(p["total_throughput_Bps"] < intact for p in points[1:4])
    assert points[5]["total_throughput_Bps"] < intact


def test_maxmin_point_matches_float64_reference(fabric):
    src, dst = alltoall_groups(fabric.num_gpus, 8)
    failed = fabric.without(link_kind="leaf", fraction=0.05, seed=3)
    routes = route(failed, src, dst, policy="ecmp", seed=0)
    reference = progressive_filling(routes.links, failed.capacity)
    metrics = ss.maxmin_point(
        fabric=fabric, traffic="alltoall", fail_kind="leaf", fail_fraction=0.05, fail_seed=3
    )
    assert metrics["total_throughput_Bps"] == pytest.approx(reference.sum(), rel=1e-5)
    assert metrics["min_rate_Bps"] == pytest.approx(reference.min(), rel=1e-5)
    assert metrics["p50_rate_Bps"] == pytest.approx(np.median(reference), rel=1e-5)
    assert metrics["stalled_flows"] == 0


def test_without_reroute_the_flows_on_failed_cables_stall(fabric):
    src, dst = alltoall_groups(fabric.num_gpus, 8)
    intact = route(fabric, src, dst, policy="ecmp", seed=0)
    failed = fabric.without(link_kind="leaf", fraction=0.1, seed=5)
    crossing = np.any((intact.links >= 0) & ~failed.link_up[intact.links], axis=1)
    assert crossing.any()
    stay = ss.maxmin_point(
        fabric=fabric, fail_kind="leaf", fail_fraction=0.1, fail_seed=5, reroute=False
    )
    moved = ss.maxmin_point(fabric=fabric, fail_kind="leaf", fail_fraction=0.1, fail_seed=5)
    assert stay["stalled_flows"] == crossing.sum()
    assert stay["min_rate_Bps"] == 0
    assert moved["stalled_flows"] == 0
    assert moved["total_throughput_Bps"] > stay["total_throughput_Bps"]


def test_chunked_batch_equals_one_chunk(fabric, monkeypatch):
    common = {"fabric": fabric, "traffic": "permutation", "seed": 4, "reroute": True}
    whole = ss.maxmin_batch(common, VARYING)
    # a budget that fits a few of the 6 scenarios (~50 KB each) at a time
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "220000")
    chunks = []
    real = ss._solve_chunk
    monkeypatch.setattr(ss, "_solve_chunk", lambda *a: chunks.append(len(a[1])) or real(*a))
    parts = ss.maxmin_batch(common, VARYING)
    assert len(chunks) > 1 and len(set(chunks)) == 1
    for a, b in zip(whole, parts, strict=True):
        _close(a, b)


def test_failure_capacities_equal_fabric_without(fabric):
    fractions, seeds = [0.05, 0.1, 0.2], [0, 1, 2]
    batch = ss.failure_capacities(fabric, "spine", fractions, seeds)
    for row, (f, s) in enumerate(zip(fractions, seeds, strict=True)):
        expected = fabric.without(link_kind="spine", fraction=f, seed=s).capacity
        np.testing.assert_array_equal(batch[row], expected)


def test_traffic_file(fabric, tmp_path):
    path = tmp_path / "pairs.csv"
    path.write_text("# src,dst\n0,5\n5,0\n1,100\n")
    metrics = ss.maxmin_point(fabric=fabric, traffic=str(path))
    assert metrics["total_throughput_Bps"] == pytest.approx(3 * 50e9, rel=1e-5)
    path.write_text("0,5,7\n")
    with pytest.raises(SpecError, match="src,dst"):
        ss.maxmin_point(fabric=fabric, traffic=str(path))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"traffic": "broadcast"}, "traffic"),
        ({"fail_fraction": 0.1}, "fail_kind"),
        ({"fail_kind": "warp", "fail_fraction": 0.1}, "link_kind"),
        ({"capacity_scale": -1}, "capacity_scale"),
        ({"capacity_scale": {"spine": 0}}, "capacity_scale.spine"),
        ({"capacity_scale": {"warp": 1}}, "kind"),
        ({"demand": 0}, "demand"),
        ({"reroute": "yes"}, "reroute"),
        ({"flows": 0}, "flows"),
        ({"colour": 1}, "colour"),
    ],
)
def test_maxmin_bad_input(fabric, kwargs, field):
    with pytest.raises(SpecError) as error:
        ss.maxmin_point(fabric=fabric, **kwargs)
    assert error.value.field == field


def test_maxmin_needs_a_fabric_and_batch_keys():
    with pytest.raises(SpecError, match="fabric"):
        ss.maxmin_point(traffic="ring")
    with pytest.raises(SpecError, match="batch key"):
        ss.maxmin_batch({}, [{"routing": "spray"}])


def test_reroute_around_a_cut_host_is_a_routing_error(fabric):
    with pytest.raises(RoutingError, match="reroute: false"):
        ss.maxmin_point(fabric=fabric, fail_kind="nic", fail_fraction=0.5, fail_seed=0)


def test_task_attributes():
    assert ss.maxmin_point.batch_keys == ss.MAXMIN_BATCH_KEYS
    assert ss.maxmin_point.run_batch is ss.maxmin_batch
    assert ss.cc_point.run_batch is ss.cc_batch
    # every DCQCN parameter field can be swept in a batch, and nothing else
    assert ss.CC_BATCH_KEYS == {f.name for f in dataclasses.fields(DCQCNParams)}


# The cc runs below share one scenario, timing and batch size (4), so the single and the
# batched kernels compile once each for this file.
CC_COMMON = {"scenario": "incast", "flows": 3, "pfc": "on", "duration": 2e-3, "records": 50}


def test_cc_batch_equals_points():
    common = {**CC_COMMON, "duration": "2ms"}  # a unit string is accepted too
    varying = [
        {"kmin": "5KB", "kmax": "100KB"},
        {"kmin": "20KB", "kmax": "400KB", "rate_ai": "80Mbps"},
        {"g": 1 / 16, "pmax": 0.2},
        {},
    ]
    batch = ss.cc_batch(common, varying)
    points = [ss.cc_point(**common, **entry) for entry in varying]
    for b, p in zip(batch, points, strict=True):
        assert b.keys() == set(ss.CC_METRICS)
        for key in p:
            assert b[key] == pytest.approx(p[key], rel=1e-5, abs=1e-6), key
    assert all(0 < p["bottleneck_utilization"] <= 1 + 1e-6 for p in points)
    assert all(0 <= p["pause_fraction"] <= 1 for p in points)


def test_cc_bad_input(fabric):
    with pytest.raises(SpecError, match="either scenario"):
        ss.cc_point(flows=3)
    with pytest.raises(SpecError) as error:
        ss.cc_point(scenario="incast", flows=3, kmax="lots")
    assert "kmax" in str(error.value)
    with pytest.raises(SpecError, match="batch key"):
        ss.cc_batch({"scenario": "incast"}, [{"pfc": "on"}])
    with pytest.raises(SpecError) as error:
        ss.cc_point(fabric=fabric, traffic="tornado", flows=3)
    assert error.value.field == "traffic"


def test_sweep_runs_maxmin_as_one_batch_equal_to_points(tmp_path):
    """ff.sweep's built-in maxmin task: the failure grid is one batch (one vmapped call),
    and every stored value equals the per-point function's."""
    import fabricflow as ff

    fixed = {"fabric": "fat-tree-k16", "traffic": "permutation", "fail_kind": "leaf"}
    grid = {"fail_fraction": [0.0, 0.05], "fail_seed": [0, 1, 2]}
    ds = ff.sweep("maxmin", grid, fixed=fixed, store=tmp_path / "mm", workers=0)
    counts = __import__("json").loads(ds.attrs["last_run"])
    assert counts["computed"] == 6 and counts["batches"] == 1
    fabric = ff.load_fabric("fat-tree-k16")
    for fraction in grid["fail_fraction"]:
        for seed in grid["fail_seed"]:
            point = ss.maxmin_point(
                fabric=fabric,
                traffic="permutation",
                fail_kind="leaf",
                fail_fraction=fraction,
                fail_seed=seed,
            )
            stored = ds.sel(fail_fraction=fraction, fail_seed=seed)
            assert float(stored["total_throughput_Bps"]) == pytest.approx(
                point["total_throughput_Bps"], rel=2e-6
            )
    total = ds["total_throughput_Bps"]
    assert float(total.sel(fail_fraction=0.05).max()) < float(total.sel(fail_fraction=0.0)[0])


def test_sweep_runs_cc_parameters_as_one_batch(tmp_path):
    """ff.sweep's built-in cc task: DCQCN parameters are batch keys (one vmapped run)."""
    import fabricflow as ff

    grid = {"kmin": [5e3, 40e3], "kmax": [200e3, 400e3]}
    ds = ff.sweep("cc", grid, fixed=CC_COMMON, store=tmp_path / "cc", workers=0)
    counts = __import__("json").loads(ds.attrs["last_run"])
    assert counts["computed"] == 4 and counts["batches"] == 1
    point = ss.cc_point(**CC_COMMON, kmin=40e3, kmax=400e3)
    stored = ds.sel(kmin=40e3, kmax=400e3)
    for name in ss.CC_METRICS:
        assert float(stored[name]) == pytest.approx(point[name], rel=1e-5, abs=1e-9), name
