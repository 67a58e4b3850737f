"""'Did you mean' suggestions: one helper (closest first) behind every error that lists
the allowed values, and on the command line for misspelled flags and choices."""

from __future__ import annotations

import json

import pytest

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.errors import SpecError, close_matches, did_you_mean


def test_closest_first_case_and_prefix_before_similarity():
    assert close_matches("llama3-8", ["mixtral-8x7b", "llama3-70b", "llama3-8b"])[0] == "llama3-8b"
    assert close_matches("H100", ["a100-80gb", "h200", "h100-sxm"])[0] == "h100-sxm"
    assert close_matches("gbps", ["GBps", "Gbps", "bps"])[0] == "Gbps"  # ties broken by case
    assert close_matches("spine", ["nvlink", "nic", "leaf"]) == []
    assert did_you_mean("ecpm", ["ecmp", "spray"]) == "; did you mean 'ecmp'?"
    assert did_you_mean("xyz", ["ecmp", "spray"]) == ""
    error = SpecError("policy", "unknown policy 'ecpm'", value="ecpm", allowed=["ecmp", "spray"])
    assert str(error) == "policy: unknown policy 'ecpm'; did you mean 'ecmp'?"


@pytest.mark.parametrize(
    "call, suggestion",
    [
        (lambda: ff.load_fabric("dgx-h100"), "'dgx-h100-superpod'"),
        (lambda: ff.parse_bandwidth("400Gbs"), "'Gbps'"),
        (lambda: ff.parse_size("8Gi B"), None),
        (lambda: ff.parse_time("5uss"), "'us'"),
        (lambda: ff.load_fabric("fat-tree-k16").links_of_kind("laef"), "'leaf'"),
        (
            lambda: ff.route(ff.load_fabric("fat-tree-k16"), [0], [1], policy="spary"),
            "'spray'",
        ),
    ],
)
def test_library_errors_suggest_the_closest_allowed_value(call, suggestion):
    with pytest.raises(SpecError) as error:
        call()
    if suggestion is None:
        assert "did you mean" not in str(error.value)
    else:
        assert f"did you mean {suggestion}" in str(error.value)


def test_spec_keys_and_choices_suggest_the_closest():
    spec = {
        "name": "x",
        "gpus": 8,
        "topology": {"type": "clos", "nic_bandwith": "400Gbps", "tiers": [{"radix": 8}]},
    }
    with pytest.raises(SpecError, match="did you mean 'nic_bandwidth'"):
        ff.build_fabric(spec)
    spec["topology"] = {"type": "closs"}
    with pytest.raises(SpecError, match="did you mean 'clos'"):
        ff.build_fabric(spec)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["fabirc", "x"], "did you mean 'fabric'?"),
        (["fabric", "--jsn", "fat-tree-k16"], "unknown option --jsn (did you mean '--json'?)"),
        (["step", "--fabirc", "x"], "unknown option --fabirc (did you mean '--fabric'?)"),
        (["step", "--recompute", "ful"], "did you mean 'full'?"),
        (["fabric", "fat-tree-k8"], "did you mean"),
    ],
)
def test_command_line_suggests_flags_commands_and_choices(capsys, argv, expected):
    assert main([*argv, "--json"]) == 2
    message = json.loads(capsys.readouterr().out)["message"]
    assert expected in message


@pytest.mark.parametrize(
    "call, suggestion",
    [
        (lambda: ff.load_gpu("h100-sx"), "'h100-sxm'"),
        (lambda: ff.load_model("llama3-8"), "'llama3-8b'"),
        (lambda: ff.optimize_layout("llama3-8b", "h100-sxm", ff.load_fabric("dgx-h100-superpod"), gpus=64,
                                    global_batch=64, seq_len=8192, fixed={"tpp": 2}), "'tp'"),
        (lambda: ff.load_trace([{"id": "a", "model": "llama3-8", "gpu": "h100-sxm", "gpus": 8,
                                 "layout": "tp8", "steps": 10}]), "'llama3-8b'"),
        (lambda: ff.load_trace([{"id": "a", "model": "llama3-8b", "gpu": "h100-sx", "gpus": 8,
                                 "layout": "tp8", "steps": 10}]), "'h100-sxm'"),
    ],
    ids=["gpu", "model", "optimizer-knob", "trace-model", "trace-gpu"],
)  # fmt: skip
def test_models_gpus_and_knobs_suggest_the_closest(call, suggestion):
    with pytest.raises(SpecError, match="did you mean") as error:
        call()
    assert suggestion in str(error.value).split("did you mean")[1]


def test_a_size_range_the_wrong_way_round_says_the_sizes_in_units():
    from fabricflow.collective.size_sweep import nccl_sizes

    with pytest.raises(SpecError, match=r"\(8 GiB\), got 8 MiB"):
        nccl_sizes(8 * 2**30, 8 * 2**20)
