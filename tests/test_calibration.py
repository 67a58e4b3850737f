"""Calibration (fabricflow.calibrate, fabricflow.fitting) and prediction intervals (fabricflow.workload.intervals)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.collective.nccl_cost import DEFAULT_COST
from fabricflow.collective.nccl_tests import format_nccl_tests
from fabricflow.collective.size_sweep import table_rows
from fabricflow.collective.timing import prepare_collective
from fabricflow.errors import SpecError
from fabricflow.workload.calibration import Calibration, Parameter, read_calibration
from fabricflow.workload.intervals import collective_interval, interval_table, step_interval
from fabricflow.workload.layout import Layout

LOGS = Path(__file__).parent / "nccl_logs"
ROOT = Path(__file__).resolve().parent.parent
FABRIC = "dgx-h100-superpod"


@pytest.fixture(scope="module")
def fabric():
    return ff.load_fabric(FABRIC)


def _write_log(path: Path, fabric, cost, gpus: int) -> None:
    """A log of the model with ``cost`` in nccl-tests' layout, with its rank lines."""
    sizes = 2.0 ** np.arange(16, 31)
    results = prepare_collective(fabric, "all_reduce", np.arange(gpus)[None], cost=cost)
    text = format_nccl_tests(table_rows(results.evaluate(sizes)), "all_reduce", gpus=gpus)
    lines = text.splitlines(True)
    ranks = [f"#  Rank {r:2d} Group  0 Pid {100 + r} on node device {r} [0x1] H100\n" for r in range(gpus)]  # fmt: skip
    path.write_text("".join(lines[:2] + ranks + lines[2:]))


def test_network_fit_recovers_the_parameters_that_made_the_logs(tmp_path, fabric):
    truth = dataclasses.replace(DEFAULT_COST, scale_up_efficiency=0.75, scale_up_latency_scale=1.6)
    _write_log(tmp_path / "a.log", fabric, truth, 8)
    cal = ff.calibrate(
        [tmp_path / "a.log"],
        fabric=fabric,
        parameters=["network.scale_up_efficiency", "network.scale_up_latency_scale"],
    )
    for name, value in (("scale_up_efficiency", 0.75), ("scale_up_latency_scale", 1.6)):
        parameter = cal.parameters[f"network.{name}"]
        assert parameter.determined
        assert parameter.value == pytest.approx(value, rel=0.01)
        assert parameter.prior == getattr(DEFAULT_COST, name)
    sizes = cal.inputs[0]["sizes"]
    assert max(abs(s["residual"]) for s in sizes) < 0.01
    # the prior model was visibly off: the fit moved it
    assert max(abs(s["uncalibrated_busbw"] / s["measured_busbw"] - 1) for s in sizes) > 0.05


@pytest.mark.parametrize(
    "log",
    [
        "dgx-h100-all-reduce-8.txt",
        pytest.param("dgx-h100-all-reduce-16.txt", marks=pytest.mark.slow),  # ~25 s
    ],
)
def test_calibrated_collective_reproduces_each_log_within_5_percent(log, fabric):
    """Logs not made by the model: after calibration, ``collective`` with the calibration
    gives each size's bus bandwidth within 5 % from 1 MiB up."""
    cal = ff.calibrate([LOGS / log], fabric=fabric)
    entry = cal.inputs[0]
    sizes = np.array([s["bytes"] for s in entry["sizes"]], dtype=float)
    measured = np.array([s["measured_busbw"] for s in entry["sizes"]])
    assert sizes.min() == 2**20
    gpus = entry["gpus"]
    results = prepare_collective(
        fabric, "all_reduce", np.arange(gpus)[None], cost=cal.cost_model()
    ).evaluate(sizes)
    modeled = np.array([r.busbw_Bps / 1e9 for r in results])
    assert np.all(np.abs(modeled / measured - 1) < 0.05)
    undetermined = [p for p in cal.parameters.values() if not p.determined]
    assert undetermined and all(p.value == p.prior for p in undetermined)
    assert all(p.source.startswith("prior: ") for p in undetermined)


def test_contradictory_logs_are_refused_naming_both(tmp_path, fabric):
    source = (LOGS / "dgx-h100-all-reduce-8.txt").read_text().splitlines(True)
    slower = []
    for line in source:
        fields = line.split()
        if line.startswith("#") or len(fields) != 13:
            slower.append(line)
            continue
        # the same run 20 % slower at every size
        t1, t2 = float(fields[5]) * 1.25, float(fields[9]) * 1.25
        size = int(fields[0])
        alg1, alg2 = size / t1 / 1e3, size / t2 / 1e3
        slower.append(
            f"{size:12d}  {int(fields[1]):12d}     float     sum      -1  {t1:7.2f}  {alg1:6.2f}"
            f"  {alg1 * 1.75:6.2f}      0  {t2:7.2f}  {alg2:6.2f}  {alg2 * 1.75:6.2f}      0\n"
        )
    (tmp_path / "slow.txt").write_text("".join(slower))
    with pytest.raises(SpecError, match="contradict") as error:
        ff.calibrate([LOGS / "dgx-h100-all-reduce-8.txt", tmp_path / "slow.txt"], fabric=fabric)
    assert "dgx-h100-all-reduce-8.txt" in str(error.value) and "slow.txt" in str(error.value)


def _steps(gpu, seqs=(4096, 16384)):
    """Measured runs made by the model itself with ``gpu`` (llama3-8b on 8 GPUs)."""
    fabric = ff.load_fabric(FABRIC)
    entries = []
    for seq in seqs:
        for recompute in ("none", "full"):
            layout = Layout(tp=8, micro_batch=1, global_batch=16, seq_len=seq, recompute=recompute)
            result = ff.step_time("llama3-8b", gpu, layout, fabric)
            entries.append(
                {
                    "fabric": FABRIC,
                    "gpu": "h100-sxm",
                    "model": "llama3-8b",
                    "gpus": 8,
                    "tp": 8,
                    "micro_batch": 1,
                    "global_batch": 16,
                    "seq": seq,
                    "recompute": recompute,
                    "step_time_s": result.step_time_s,
                }
            )
    return entries


def test_step_fit_recovers_known_efficiencies():
    gpu = ff.load_gpu("h100-sxm", gemm_efficiency=0.7, attention_efficiency=0.5)
    cal = ff.calibrate(
        steps=_steps(gpu), parameters=["gpu.gemm_efficiency", "gpu.attention_efficiency"]
    )
    assert cal.gpu == "h100-sxm"
    assert cal.parameters["gpu.gemm_efficiency"].value == pytest.approx(0.7, rel=0.01)
    assert cal.parameters["gpu.attention_efficiency"].value == pytest.approx(0.5, rel=0.01)
    for entry in cal.inputs:
        assert abs(entry["residual"]) < 0.01
    # one run determines one parameter at most; the other keeps its prior and says why
    one = ff.calibrate(
        steps=_steps(gpu, seqs=(4096,))[:1],
        parameters=["gpu.gemm_efficiency", "gpu.attention_efficiency"],
    )
    assert sum(p.determined for p in one.parameters.values()) == 1
    kept = next(p for p in one.parameters.values() if not p.determined)
    assert kept.value == kept.prior and kept.source.startswith("prior: ")


def test_contradictory_steps_are_refused_naming_both():
    entries = _steps(ff.load_gpu("h100-sxm"), seqs=(4096,))[:1]
    twice = [dict(entries[0], name="first"), dict(entries[0], name="second")]
    twice[1]["step_time_s"] *= 1.3
    with pytest.raises(SpecError, match="first and second contradict"):
        ff.calibrate(steps=twice)


@pytest.mark.parametrize(("key", "value"), [("tp", "2"), ("tp", 0), ("pp", 1.5), ("cp", True)])
def test_a_step_entry_with_a_bad_size_is_refused_naming_it(key, value):
    """The sizes multiply into dp before the layout is checked: a string raised
    TypeError and a 0 ZeroDivisionError."""
    from fabricflow.fitting.steps import step_inputs

    entry = dict(_steps(ff.load_gpu("h100-sxm"), seqs=(4096,))[0], **{key: value})
    with pytest.raises(SpecError, match=rf"steps\[0\]\.{key}: must be an integer >= 1"):
        step_inputs([entry])


def test_interval_never_excludes_the_point():
    rng = np.random.default_rng(0)
    calibration = Calibration(
        {"gpu.gemm_efficiency": Parameter("gpu.gemm_efficiency", 0.8, 0.7, 0.01, True, "x")},
        gpu="h100-sxm",
        step_log_sigma=0.03,
        collective_log_sigma=0.02,
    )
    for _ in range(200):
        point = float(10 ** rng.uniform(-5, 3))
        level = float(rng.uniform(0.05, 0.99))
        for gpu in ("h100-sxm", "a100-80gb", "b200", "mi300x", "unknown-chip"):
            for moe in (False, True):
                for precision in ("bf16", "fp8"):
                    for cal in (None, calibration):
                        band = step_interval(
                            point,
                            gpu=gpu,
                            moe=moe,
                            precision=precision,
                            level=level,
                            calibration=cal,
                        )
                        assert band.low <= point <= band.high
        for cal in (None, calibration):
            band = collective_interval(point, level=level, calibration=cal)
            assert band.low <= point <= band.high


def test_uncalibrated_80_percent_intervals_cover_the_study_runs():
    """The shipped table's own runs: between 70 % and 90 % inside their class's 80 %
    interval (the intervals are built from these residuals, by class)."""
    rows = interval_table()["steps"]
    inside = 0
    for row in rows:
        band = step_interval(
            1.0,
            gpu={"ampere": "a100-80gb", "hopper": "h100-sxm", "blackwell": "b200"}[
                row["generation"]
            ],
            moe=row["moe"],
            precision=row["precision"],
        )
        inside += band.low <= math.exp(row["log_ratio"]) <= band.high
    assert 0.7 <= inside / len(rows) <= 0.9


def _cli(*args, cwd):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "fabricflow.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


def test_cli_round_trip_and_calibrated_step(tmp_path):
    import yaml

    gpu = ff.load_gpu("h100-sxm", gemm_efficiency=0.6)
    entries = _steps(gpu, seqs=(4096,))[:1]
    (tmp_path / "steps.yaml").write_text(yaml.safe_dump(entries))
    done = _cli(
        "calibrate",
        "--steps",
        "steps.yaml",
        "--parameters",
        "gpu.gemm_efficiency",
        "--out",
        "cal.yaml",
        "--json",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["parameters"]["gpu.gemm_efficiency"]["value"] == pytest.approx(0.6, rel=0.01)
    assert out["inputs"][0]["calibrated_step_time_s"] == pytest.approx(
        entries[0]["step_time_s"], rel=0.01
    )
    cal = read_calibration(tmp_path / "cal.yaml")
    assert cal.to_dict()["parameters"] == out["parameters"]
    step = [
        "step", "--fabric", FABRIC, "--gpu", "h100-sxm", "--model", "llama3-8b", "--gpus", "8",
        "--tp", "8", "--micro-batch", "1", "--global-batch", "16", "--seq", "4096", "--json",
    ]  # fmt: skip
    plain = json.loads(_cli(*step, cwd=tmp_path).stdout)
    calibrated = json.loads(_cli(*step, "--calibration", "cal.yaml", cwd=tmp_path).stdout)
    measured = entries[0]["step_time_s"]
    assert abs(plain["step_time_s"] / measured - 1) > 0.05  # the prior is off
    assert calibrated["step_time_s"] == pytest.approx(measured, rel=0.01)
    for result in (plain, calibrated):
        low, high = result["step_time_interval_s"]
        assert low <= result["step_time_s"] <= high
        assert result["step_time_interval_level"] == 0.8
    assert calibrated["interval_method"] == "calibration"
    assert plain["interval_method"] == "published-runs"
    bad = _cli("step", *step[1:], "--calibration", "missing.yaml", cwd=tmp_path)
    assert bad.returncode == 2 and "missing.yaml" in bad.stdout


def test_a_calibration_vouches_only_for_its_own_software_stack():
    """Steps measured with one stack give the calibrated (narrow) interval to that stack;
    a job on another stack keeps the published-runs interval."""
    made = Calibration({}, gpu="h100-sxm", stack="nemo-25.09", step_log_sigma=0.01)
    kwargs = dict(gpu="h100-sxm", moe=False, precision="fp8", calibration=made)
    own = step_interval(1.0, stack="nemo-25.09", **kwargs)
    other = step_interval(1.0, stack="megatron-2022", **kwargs)
    published = step_interval(1.0, gpu="h100-sxm", moe=False, precision="fp8")
    assert (other.low, other.high) == (published.low, published.high)
    assert own.high - own.low < published.high - published.low
