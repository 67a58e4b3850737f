"""KEY=VALUE items: one splitter for every command (``fabricflow.assignments``), so a key
given twice with different values is refused everywhere, never last-one-wins."""

from __future__ import annotations

import json

import pytest

from fabricflow.assignments import key_values
from fabricflow.cli import main
from fabricflow.errors import SpecError


def test_items_split_in_order_with_keys_stripped():
    assert key_values([" tp =8", "zero=1"], "--fix") == {"tp": "8", "zero": "1"}
    assert key_values(None, "--fix") == {}


def test_the_same_value_twice_is_accepted_different_values_are_refused():
    assert key_values(["tp=8", "tp= 8"], "--fix") == {"tp": "8"}
    with pytest.raises(SpecError, match=r"^--fix tp: given twice with different values"):
        key_values(["tp=8", "tp=4"], "--fix")


def test_a_repeated_list_names_the_joined_list_to_give():
    with pytest.raises(SpecError) as info:
        key_values(["tp=2,4", "tp=8,4"], "--space", lists=True)
    assert info.value.field == "--space tp" and "--space tp=2,4,8" in str(info.value)


def test_items_without_a_key_and_unknown_keys_are_refused_with_the_closest():
    for item in ("tp", "=8", ""):
        with pytest.raises(SpecError, match="expected KEY=VALUE"):
            key_values([item], "--fix")
    with pytest.raises(SpecError, match=r"unknown component 'gpuu'.*did you mean 'gpu'"):
        key_values(["gpuu=1h"], "--mtbf", keys=["gpu", "node"], key_name="component")


def _cli(capsys, *argv):
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        # design: --space twice and --fix twice with different values (the last one won)
        (
            [
                "design", "--gpu", "h100-sxm", "--job", "llama3-8b:64:64:4096",
                "--space", "tiers=2", "--space", "tiers=3", "--out", "{tmp}",
            ],
            "--space tiers",
        ),
        (
            [
                "design", "--gpu", "h100-sxm", "--job", "llama3-8b:64:64:4096",
                "--fix", "tp=8", "--fix", "tp=4", "--out", "{tmp}",
            ],
            "--fix tp",
        ),
        # cluster: a prediction recall given twice, a component's MTBF given twice
        (
            [
                "cluster", "--fabric", "dgx-h100-superpod", "--synthetic", "4",
                "--mtbf", "default", "--predict", "recall=0.5", "--predict", "recall=0.9",
            ],
            "--predict recall",
        ),
        (
            [
                "cluster", "--fabric", "dgx-h100-superpod", "--synthetic", "4",
                "--mtbf", "gpu=100h", "--mtbf", "gpu=200h",
            ],
            "--mtbf gpu",
        ),
    ],
)  # fmt: skip
def test_commands_refuse_a_key_given_twice_before_any_work(capsys, tmp_path, argv, field):
    code, out = _cli(capsys, *[a.replace("{tmp}", str(tmp_path / "out")) for a in argv])
    assert code == 2
    assert out["message"].startswith(f"{field}: given twice"), out["message"]
    assert not (tmp_path / "out").exists()
