"""Bad and edge inputs to ``fabricflow collective | step | cc`` as a new user types them.

Every bad input must end with exit code 2 and a message naming the flag or field, never
a traceback; with ``--json`` stdout must hold exactly one JSON object. Each case is a
regression test of a fix; the CLI runs in a subprocess as a user would run it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from cli_args import STEP

from fabricflow.collective import nccl_sizes
from fabricflow.errors import SpecError
from fabricflow.workload.gpu import load_gpu
from fabricflow.workload.model_spec import load_model

COLLECTIVE = ["collective", "--fabric", "dgx-h100-superpod", "--op", "all_reduce", "--gpus", "8"]
CC = ["cc", "--scenario", "dumbbell", "--flows", "2", "--duration", "1ms"]


def _with(args: list[str], flag: str, value: str) -> list[str]:
    """``args`` with the value of ``flag`` replaced."""
    out = list(args)
    out[out.index(flag) + 1] = value
    return out


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fabricflow.cli", *args], capture_output=True, text=True, timeout=120
    )


def _json_error(*args: str) -> str:
    """Run with --json; assert exit 2, one JSON error object, no traceback; the message."""
    proc = _run(*args, "--json")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    data = json.loads(proc.stdout)
    assert isinstance(data, dict) and set(data) == {"error", "message"}
    return data["message"]


def _main_error(capsys, *args: str) -> str:
    """As :func:`_json_error` but in this process (no start-up cost; JAX already loaded)."""
    from fabricflow.cli import main

    assert main([*args, "--json"]) == 2
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert isinstance(data, dict) and set(data) == {"error", "message"}
    return data["message"]


# ------------------------------------------------------------------ argparse errors
@pytest.mark.parametrize(
    "args, words",
    [
        (["cc", "--flows", "2"], ["--scenario", "required"]),
        ([*COLLECTIVE, "--layout", "diag"], ["--layout", "contiguous", "strided"]),
        ([*STEP, "--recompute", "ful"], ["--recompute", "selective", "full"]),
    ],
)
def test_usage_errors_with_json_print_one_json_object(args, words):
    message = _json_error(*args)
    assert all(word in message for word in words), message


def test_unexpected_exception_with_json_still_prints_one_object(capsys, monkeypatch):
    import fabricflow.commands.cc as cc_command
    from fabricflow.cli import main

    def broken(args):
        raise RuntimeError("boom")

    monkeypatch.setattr(cc_command, "run", broken)
    assert main([*CC, "--json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"error": "InternalError", "message": "RuntimeError: boom"}
    assert "Traceback" in captured.err
    with pytest.raises(RuntimeError):
        main(CC)


def test_usage_errors_without_json_keep_argparse_text():
    proc = _run("cc", "--flows", "2")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "usage: fabricflow cc" in proc.stderr and "--scenario" in proc.stderr
    assert "Traceback" not in proc.stderr


# ------------------------------------------------------------------ collective
def test_collective_group_size_zero_is_rejected_not_all_gpus():
    assert "group_size" in _json_error(*COLLECTIVE, "--group-size", "0")


def test_collective_fractional_bytes_rejected(capsys):
    message = _main_error(capsys, *COLLECTIVE, "-b", "1.5", "-e", "8")
    assert "minbytes" in message and "whole number of bytes" in message


@pytest.mark.parametrize("value", ["-1", "0"])
def test_collective_nonpositive_minbytes_says_positive(capsys, value):
    from fabricflow.cli import main

    assert main([*COLLECTIVE, "-b", value, "--json"]) == 2
    message = json.loads(capsys.readouterr().out)["message"]
    assert message.startswith("minbytes:") and "> 0" in message


def test_nccl_sizes_are_whole_distinct_bytes():
    sizes = nccl_sizes(1, 10, 1.5)
    assert sizes.tolist() == [1, 2, 3, 5, 8]
    assert np.all(sizes == np.round(sizes)) and np.all(np.diff(sizes) > 0)
    with pytest.raises(SpecError, match="maxbytes"):
        nccl_sizes(8, 9.5)


def test_collective_routing_the_fabric_lacks_names_routing():
    message = _json_error(
        "collective",
        "--fabric",
        "tpu-v4-pod",
        "--op",
        "all_reduce",
        "--gpus",
        "64",
        "-b",
        "8MiB",
        "-e",
        "8MiB",
        "--routing",
        "spray",
    )
    assert message.startswith("routing:") and "'ecmp'" in message


def test_collective_json_success_is_one_object():
    proc = _run(*COLLECTIVE, "-b", "8MiB", "-e", "16MiB", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [row["bytes"] for row in data["rows"]] == [8 * 2**20, 16 * 2**20]


# ------------------------------------------------------------------ step
def test_step_nonpositive_parallel_size_names_its_flag():
    message = _json_error(*_with(STEP, "--tp", "0"))
    assert message.startswith("--tp:") and ">= 1" in message


def test_step_nonpositive_gpus_names_gpus():
    assert _json_error(*_with(STEP, "--gpus", "0")).startswith("--gpus:")


def test_step_negative_seed_is_a_spec_error(capsys):
    message = _main_error(capsys, *STEP, "--placement", "scattered", "--seed", "-1")
    assert message.startswith("seed:") and ">= 0" in message


def test_step_plot_to_unusable_folder_fails_before_running(capsys, tmp_path):
    from fabricflow.cli import main

    (tmp_path / "file").write_text("")
    target = tmp_path / "file" / "b.png"  # its folder is a file: never creatable
    assert main([*STEP, "--plot", str(target), "--json"]) == 1  # an output error
    data = json.loads(capsys.readouterr().out)
    assert data["error"] == "OutputError"
    assert data["message"].startswith("--plot:") and "folder" in data["message"]
    message = _main_error(capsys, *STEP, "--plot", str(tmp_path / "b.xyz"))
    assert "--plot" in message and "png" in message


def test_step_infinite_moe_imbalance_rejected(capsys):
    assert "moe_imbalance" in _main_error(capsys, *STEP, "--moe-imbalance", "inf")


def test_step_unknown_model_override_rejected():
    message = _json_error(*STEP, "--model-set", "num_hidden_layer=4")
    assert "num_hidden_layer" in message and "num_hidden_layers" in message


def test_model_overrides_alias_wins_and_values_checked():
    assert load_model("llama3-8b", n_layer=4).num_layers == 4
    assert load_model("megatron-3.6b", num_hidden_layers=10).num_layers == 10
    with pytest.raises(SpecError, match="hidden_size"):
        load_model("llama3-8b", hidden_size=4097)
    with pytest.raises(SpecError, match="hidden_dropout"):
        load_model("llama3-8b", hidden_dropout="abc")
    with pytest.raises(SpecError, match="attention_dropout"):
        load_model("llama3-8b", attn_pdrop=1.5)
    for field, value in (
        ("num_hidden_layers", float("inf")),
        ("num_hidden_layers", float("nan")),
        ("tie_word_embeddings", "maybe"),
        ("num_local_experts", -8),
        ("kv_lora_rank", -5),
    ):
        with pytest.raises(SpecError, match=field):
            load_model("llama3-8b", **{field: value})


def test_model_file_with_bad_yaml_is_a_spec_error(tmp_path):
    path = tmp_path / "model.yaml"
    path.write_text("a: [1, 2\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_model(str(path))


def test_gpu_overrides_reject_fractional_units_and_text():
    for field, value in (
        ("compute_units", 1.5),
        ("compute_units", "abc"),
        ("gemm_efficiency", "abc"),
    ):
        with pytest.raises(SpecError, match=f"gpu.{field}"):
            load_gpu("h100-sxm", **{field: value})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("hbm", 80),
        ("hbm", "80"),
        ("peak_bf16", 989),
        ("peak_fp8", 1979.0),
        ("hbm_bandwidth", 3.35),
        ("host_link_bandwidth", "64"),
    ],
)
def test_gpu_quantities_without_their_unit_are_refused(field, value):
    """'--gpu-set hbm=80' was 80 bytes and 'hbm_bandwidth=3.35' 3.35 B/s: the step ran
    and printed MFU 0.0% or a memory error of '-2.0 GiB usable'; now the field is named
    with the unit to write, and the same figures with their units still load."""
    with pytest.raises(SpecError, match="write the unit") as error:
        load_gpu("h100-sxm", **{field: value})
    assert error.value.field == f"gpu.{field}"
    load_gpu("h100-sxm", hbm="80GB", peak_bf16=989e12, hbm_bandwidth="3.35TB/s")


def test_step_json_success_is_one_object():
    # 1.28e5 is text to YAML 1.1; --model-set must read it as the number it is
    proc = _run(*STEP, "--model-set", "vocab_size=1.28e5", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["layout"]["dp"] == 8 and data["step_time_s"] > 0


# ------------------------------------------------------------------ cc
def test_cc_out_that_is_a_file_fails_before_simulating(capsys, tmp_path):
    from fabricflow.cli import main

    blocker = tmp_path / "file"
    blocker.write_text("x")
    # an output that cannot be written is exit 1 (OutputError), not bad input (2)
    proc = _run(*CC, "--out", str(blocker), "--json")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    data = json.loads(proc.stdout)
    assert data["error"] == "OutputError" and data["message"].startswith("--out:")
    assert main([*CC, "--out", str(blocker / "sub"), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["message"].startswith("--out:")
    # a simulation error leaves no empty --out folder behind
    assert _main_error(capsys, *_with(CC, "--duration", "0.4us"), "--out", str(tmp_path / "x"))
    assert not (tmp_path / "x").exists()


def test_cc_min_rate_above_line_rate_rejected():
    message = _json_error(*CC, "--set", "min_rate=100Gbps")
    assert message.startswith("params.min_rate:") and "line rate" in message


def test_cc_duration_shorter_than_two_steps_rejected(capsys):
    from fabricflow.cli import main

    assert main([*_with(CC, "--duration", "0.4us"), "--json"]) == 2
    message = json.loads(capsys.readouterr().out)["message"]
    assert message.startswith("duration:") and "dt" in message


def test_pfc_zero_dynamic_threshold_inputs_rejected():
    from fabricflow.solve.pfc.params import PFCParams

    for name in ("shared_buffer", "dynamic_alpha"):
        with pytest.raises(SpecError, match=f"pfc.{name}"):
            PFCParams().replace(**{name: 0})


def test_cc_json_success_is_one_object(tmp_path):
    proc = _run(*CC, "--out", str(tmp_path / "run"), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["flows"] == 2 and (tmp_path / "run" / "summary.json").is_file()


def test_cc_text_report_cuts_long_victim_lists():
    from fabricflow.commands.cc import _short

    assert _short([1, 2]) == "[1, 2]"
    assert _short(list(range(1000))).endswith(", 15, ... (1000 in all)]")
