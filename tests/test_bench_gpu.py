"""``fabricflow bench --gpu``: the prepared accelerator run, checked on CPU in reduced form."""

from __future__ import annotations

import json
import os

import pytest

from fabricflow.bench import gpu
from fabricflow.cli import main


def test_budgets_fit_the_eight_minutes_with_every_case_named():
    assert sum(gpu.BUDGETS_S.values()) <= gpu.TOTAL_BUDGET_S - gpu.RESERVE_S
    assert gpu.TOTAL_BUDGET_S <= 8 * 60
    assert set(gpu.BUDGETS_S) == set(gpu.DEVICE_S_IS) == set(gpu.CPU_REFERENCE)
    for name, budget in gpu.SEARCH_BUDGETS_S.items():
        assert budget < gpu.BUDGETS_S[name]  # the search stops before its process is cut
    for reference in filter(None, gpu.CPU_REFERENCE.values()):
        assert reference["machine"] and reference["source"]


@pytest.mark.skipif(gpu.has_gpu(), reason="the skip is for machines without a GPU")
def test_without_a_gpu_the_run_is_skipped_with_the_reason_and_exit_0(capsys, tmp_path, monkeypatch):
    environ = {k: v for k, v in os.environ.items() if k != "XLA_PYTHON_CLIENT_PREALLOCATE"}
    monkeypatch.setattr(os, "environ", environ)  # the command sets a variable: keep it here
    out = tmp_path / "gpu.json"
    assert main(["bench", "--gpu", "--json", "--out", str(out)]) == 0
    assert environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"  # this process looks only
    report = json.loads(capsys.readouterr().out)
    assert list(report) == ["machine", "quick", "gpu"]  # --gpu alone runs this section only
    assert "no GPU visible to JAX" in report["gpu"]["skipped"]
    assert "cases" not in report["gpu"]
    assert json.loads(out.read_text())["gpu"]["skipped"] == report["gpu"]["skipped"]


def test_all_sections_without_gpu_flag_leave_the_gpu_run_out(monkeypatch, capsys):
    from fabricflow.commands import bench

    ran = []

    class Fake:
        @staticmethod
        def run(args):
            ran.append(args.gpu)
            return {}

    modules = {"fake": Fake, "gpu": gpu}
    monkeypatch.setattr(bench, "SECTIONS", {"fake": "a fake section", "gpu": "the GPU run"})
    monkeypatch.setattr(bench, "load", modules.__getitem__)
    assert main(["bench", "--json"]) == 0
    assert "gpu" not in json.loads(capsys.readouterr().out)
    assert ran == [False]


def test_quick_max_min_case_reports_device_and_host_figures(tmp_path):
    out = tmp_path / "cases.json"
    cases = gpu.run_cases(["maxmin_10m"], quick=True, out=str(out))
    case = cases["maxmin_10m"]
    assert case["status"] == 0 and case["flows"] == 64 * 16 * 15
    assert 0 < case["device_s"] == case["solve_s"] < case["wall_s"] <= case["budget_s"]
    assert case["cpu_s"] > 0 and case["peak_rss_bytes"] > 0
    assert case["cpu_reference"]["solve_s"] > 0 and "2-core" in case["cpu_reference"]["machine"]
    assert json.loads(out.read_text())["maxmin_10m"]["flows"] == case["flows"]


def test_a_case_past_its_budget_is_killed_and_says_so():
    case = gpu.run_case("cc_vmap", 1.0, quick=True)  # compiling alone takes longer
    assert case["timed_out"] is True
    assert case["wall_s"] < 3.0
    assert "status" not in case and "device_s" not in case


@pytest.mark.slow
def test_every_quick_case_runs(capsys):
    assert main(["bench", "--gpu", "--quick", "--json"]) == 0
    cases = json.loads(capsys.readouterr().out)["gpu"]["cases"]
    assert set(cases) == set(gpu.BUDGETS_S)
    for name, case in cases.items():
        assert "error" not in case and "timed_out" not in case, name
        assert case["device_s"] > 0, name
