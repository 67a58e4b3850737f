"""``fabricflow models`` and ``fabricflow gpus``: every preset --model and --gpu take,
with facts that match the specs they load; ``collective --cc`` from the command line."""

from __future__ import annotations

import json

import pytest

from fabricflow.cli import main
from fabricflow.workload.gpu import list_gpus
from fabricflow.workload.model_spec import list_models


def _json(argv, capsys) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_models_lists_every_preset_with_parameters(capsys):
    rows = {row["name"]: row for row in _json(["models"], capsys)["models"]}
    assert sorted(rows) == list_models()
    # published sizes: Llama 3 8B has 8.03e9 parameters; Mixtral 8x7B 46.7e9 in total,
    # 12.9e9 active per token (two of eight experts)
    assert rows["llama3-8b"]["parameters"] == pytest.approx(8.03e9, rel=0.01)
    assert rows["llama3-8b"]["active_parameters"] == rows["llama3-8b"]["parameters"]
    assert rows["mixtral-8x7b"]["parameters"] == pytest.approx(46.7e9, rel=0.01)
    assert rows["mixtral-8x7b"]["active_parameters"] == pytest.approx(12.9e9, rel=0.01)
    assert rows["mixtral-8x7b"]["experts"] == 8 and rows["mixtral-8x7b"]["experts_per_token"] == 2
    assert main(["models"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].split()[:3] == ["model", "params", "active"]
    assert len(text) == 1 + len(rows)


def test_gpus_lists_every_preset_with_its_peak_and_memory(capsys):
    rows = {row["name"]: row for row in _json(["gpus"], capsys)["gpus"]}
    assert sorted(rows) == list_gpus()
    h100 = rows["h100-sxm"]  # data sheet: 989 TFLOP/s dense bf16, 3.35 TB/s HBM3
    assert h100["peak_bf16_flops"] == 989e12 and h100["hbm_Bps"] == 3.35e12
    assert main(["gpus"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + len(rows)
    assert any(line.startswith("h100-sxm") and " 989 " in line for line in lines)


def test_collective_takes_cc_from_the_command_line(capsys):
    argv = ["collective", "--fabric", "fat-tree-k16", "--op", "all_to_all", "--gpus", "16"]
    argv += ["-b", "4MiB", "-e", "4MiB"]
    ideal = _json(argv, capsys)
    hpcc = _json([*argv, "--cc", "hpcc"], capsys)
    assert ideal["cc"] is None and hpcc["cc"] == "hpcc"
    # HPCC holds links at eta = 0.95 of their capacity: never faster than max-min
    assert hpcc["rows"][0]["time_s"] > ideal["rows"][0]["time_s"]
    assert main([*argv, "--cc", "hpcc"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "one group of 16 GPUs" in header and "congestion control hpcc" in header
