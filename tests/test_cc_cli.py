"""``fabricflow cc`` CLI, the xarray dataset (netCDF round trip) and summaries."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr
from reference_solvers import progressive_filling

from fabricflow.cli import main
from fabricflow.commands.cc import _progress_printer, min_rate_warnings
from fabricflow.dynamics.congestion import simulate_cc
from fabricflow.dynamics.scenarios import SCENARIOS, build_scenario, dumbbell
from fabricflow.dynamics.summaries import jain_fairness, summarize, to_dataset
from fabricflow.solve.cc.dcqcn import DCQCNParams
from fabricflow.solve.cc.hpcc import HPCCParams
from fabricflow.solve.parameters import stack_params


def test_cc_json_has_the_contract_keys(capsys):
    code = main(
        [
            "cc",
            "--scenario",
            "dumbbell",
            "--flows",
            "2",
            "--duration",
            "10ms",
            "--pfc",
            "off",
            "--set",
            "kmax=400KB",
            "--json",
        ]
    )
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    for key in (
        "mean_rate_Bps",
        "queue_mean_bytes",
        "queue_p99_bytes",
        "jain_fairness",
        "pause_fraction",
    ):
        assert key in report
    assert len(report["mean_rate_Bps"]) == 2
    np.testing.assert_allclose(report["mean_rate_Bps"], 2.5e9, rtol=0.02)
    assert report["overrides"] == {"kmax": "400KB"}
    assert report["pause_fraction"] == 0.0
    assert report["jain_fairness"] == pytest.approx(1.0, abs=1e-4)


def test_cc_bad_input_gives_a_json_error(capsys):
    code = main(["cc", "--scenario", "incast", "--flows", "4", "--set", "kmax", "--json"])
    assert code == 2
    error = json.loads(capsys.readouterr().out)
    assert error["error"] == "SpecError" and "--set" in error["message"]
    code = main(["cc", "--scenario", "incast", "--flows", "4", "--params", "fast", "--json"])
    assert code == 2
    assert "paper" in json.loads(capsys.readouterr().out)["message"]


def test_cc_out_writes_netcdf_summary_and_plots(tmp_path, capsys):
    code = main(
        [
            "cc",
            "--scenario",
            "incast",
            "--flows",
            "3",
            "--duration",
            "2ms",
            "--link-bandwidth",
            "100Gbps",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    assert "flow" in capsys.readouterr().out
    for name in ("dcqcn.nc", "summary.json", "rates_queues.png", "pause_spread.png"):
        assert (tmp_path / name).stat().st_size > 0
    ds = xr.open_dataset(tmp_path / "dcqcn.nc")
    assert ds["rate"].attrs["units"] == "bytes/s" and ds["queue"].attrs["units"] == "bytes"
    assert ds["capacity"].max() == pytest.approx(4 * 100e9 / 8)  # uplinks: n + 1 = 4 x
    ds.close()


# The shapes and timing of the dumbbell runs of test_dcqcn.py: the kernels compile once.
LONG = dict(duration=0.1, records=500)


def test_dataset_roundtrip_and_summary_values(tmp_path):
    sc = dumbbell(4)
    res = simulate_cc(sc.fabric, sc.routes, cc="dcqcn", **LONG)
    ds = to_dataset(res)
    assert ds["rate"].dims == ("time", "flow") and ds.sizes["time"] == 500
    ds.to_netcdf(tmp_path / "run.nc")
    back = xr.open_dataset(tmp_path / "run.nc")
    np.testing.assert_allclose(back["queue"].values, res.queue)
    assert back.attrs["param_kmax"] == pytest.approx(200e3)
    back.close()
    summary = summarize(res, bottleneck=sc.bottleneck)
    series = res.queue[res.time >= 0.05, sc.bottleneck]  # the second half
    assert summary["queue_p99_bytes"] == pytest.approx(np.percentile(series, 99))
    assert summary["queue_p50_bytes"] <= summary["queue_p99_bytes"]
    assert summary["jain_fairness"] == pytest.approx(1.0, abs=1e-3)


def test_batched_dataset_and_batch_item():
    sc = dumbbell(2)
    batch = stack_params([DCQCNParams(), DCQCNParams(kmax=400e3), DCQCNParams(kmax=100e3)])
    res = simulate_cc(sc.fabric, sc.routes, cc="dcqcn", params=batch, **LONG)
    ds = to_dataset(res)
    assert ds["queue"].dims == ("batch", "time", "link") and ds.sizes["batch"] == 3
    one = res.batch_item(1)
    assert one.params.kmax == pytest.approx(400e3)
    assert summarize(one)["status"] == "converged"


def test_jain_fairness():
    assert jain_fairness([1, 1, 1, 1]) == pytest.approx(1.0)
    assert jain_fairness([1, 0, 0, 0]) == pytest.approx(0.25)
    assert jain_fairness([3, 1]) == pytest.approx(16 / 20)


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenarios_build_valid_routes(name):
    sc = build_scenario(name, 4)
    links = sc.routes.links
    assert links.max() < sc.fabric.num_links
    # Consecutive hops are connected: dst of hop h is src of hop h+1.
    for row in links:
        path = row[row >= 0]
        np.testing.assert_array_equal(sc.fabric.link_dst[path[:-1]], sc.fabric.link_src[path[1:]])
        assert sc.fabric.node_tier[sc.fabric.link_src[path[0]]] == 0
        assert sc.fabric.node_tier[sc.fabric.link_dst[path[-1]]] == 0


def test_progress_projects_the_time_left_from_the_pieces_after_the_compilation(capsys):
    progress = _progress_printer(0.01, after_s=3.0)
    progress(0.05, 20.0)  # the first piece: mostly compilation
    progress(0.10, 20.1)  # then 0.1 s per 5 %: about 1.8 s left, under the threshold
    progress(0.15, 20.2)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "about 380 s left" in lines[0]  # from the first piece alone
    slow = _progress_printer(0.01, after_s=3.0)
    slow(0.05, 20.0)
    slow(0.10, 30.0)  # 10 s per 5 %: 18 pieces of 10 s left
    assert "about 180 s left" in capsys.readouterr().err.splitlines()[-1]


def test_a_minimum_rate_above_the_fair_share_is_warned_about():
    params = HPCCParams()  # minimum rate 100 Mb/s
    share = np.array([40e6, 5e9, 38.6e6]) / 8  # bytes/s: two flows below the floor
    (warning,) = min_rate_warnings("HPCC", params, share)
    assert warning.startswith("2 of 3 flows") and "100 Mb/s" in warning
    assert "38.6 Mb/s" in warning and "--set min_rate" in warning
    assert min_rate_warnings("HPCC", params, np.array([1e9])) == []
    assert min_rate_warnings("DCQCN", DCQCNParams(), share) == []  # floor 0


# ---------------------------------------------------------------- cc uses no test oracle


def test_cc_max_min_reference_comes_from_the_engine(capsys):
    from fabricflow.dynamics.scenarios import build_scenario

    # Two bottleneck levels, so that the reference is not one shared rate.
    scenario = build_scenario("multi_bottleneck", 3, bandwidth=5e9)  # 40Gbps, cc's default
    expected = progressive_filling(scenario.routes.links, scenario.fabric.capacity)
    assert np.unique(expected).size > 1
    code = main(
        ["cc", "--scenario", "multi_bottleneck", "--flows", "3", "--duration", "1ms", "--json"]
    )
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    np.testing.assert_allclose(report["max_min_rate_Bps"], expected, rtol=1e-12)
