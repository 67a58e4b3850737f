"""The step command's text: FLOP/s labelled for what they count."""

from __future__ import annotations

import pytest

from fabricflow.cli import main


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_executed_flops_are_not_called_recompute(capsys, recompute):
    args = ["step", "--fabric", "dgx-h100-superpod", "--gpu", "h100-sxm", "--model", "llama3-8b"]
    args += ["--gpus", "8", "--tp", "8", "--micro-batch", "1", "--global-batch", "8"]
    assert main([*args, "--seq", "4096", "--recompute", recompute]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "TFLOP/s per GPU" in x)
    assert "incl. recompute" not in line
    assert "model (MFU numerator)" in line and "executed" in line
    assert ("no recompute" if recompute == "none" else "full recompute included") in line
