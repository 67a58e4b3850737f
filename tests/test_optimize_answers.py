"""What a layout search says about its answer: the why-line (ties named, the runner-up
the first layout that is really slower), complete labels, best.json for launch-args, and
GPU counts suggested only where a layout passes every rule."""

from __future__ import annotations

import dataclasses
import json
import types

import pytest
from optimize_cases import GPU, SEQ, tiny_oversubscribed

import fabricflow as ff
from fabricflow.errors import SpecError
from fabricflow.layout_search.explain import why_best
from fabricflow.layout_search.optimize import optimize_layout


def _result(step_s: float, dp_s: float):
    return types.SimpleNamespace(
        step_time_s=step_s, breakdown={"compute": step_s - dp_s, "dp": dp_s}
    )


def _kwargs(**changes):
    layout = ff.Layout(tp=2, pp=2, dp=4, global_batch=32, seq_len=SEQ, zero=1)
    return {"layout": dataclasses.replace(layout, **changes), "order": "tp-cp-ep-dp-pp",
            "placement": "contiguous"}  # fmt: skip


def test_why_names_ties_and_compares_the_first_layout_really_slower():
    from fabricflow.layout_search.explain import label

    best = _kwargs()
    zero2 = _kwargs(zero=2)  # the same time: a tie, not a runner-up
    slower = _kwargs(tp=4, dp=2)
    search = types.SimpleNamespace(
        top=[(best, _result(1.0, 0.1)), (zero2, _result(1.0, 0.1)), (slower, _result(1.2, 0.3))]
    )
    why = why_best(search)
    assert "1 other layout(s) tie with the winner" in why and "zero 1->2" in why
    assert f"runner-up {label(slower)} is 0.2 s slower (20.00%)" in why
    assert "(0.00%)" not in why
    # only ties: said so, no runner-up at 0.00%
    search.top = search.top[:2]
    assert "tie with the winner" in why_best(search) and "runner-up" not in why_best(search)


def test_labels_tell_apart_layouts_that_differ_in_any_searched_knob():
    from fabricflow.layout_search.explain import label

    base = _kwargs()
    variants = [
        _kwargs(zero=2), _kwargs(sequence_parallel=False), _kwargs(tp_overlap=False),
        _kwargs(dp_overlap=False), _kwargs(recompute="full"), _kwargs(vpp=2),
    ]  # fmt: skip
    labels = {label(k) for k in [base, *variants]}
    assert len(labels) == len(variants) + 1
    assert "ZeRO-1" in label(base) and "ZeRO-2" in label(variants[0])


def test_optimize_out_writes_best_json_that_launch_args_reads(tmp_path, capsys):
    from fabricflow.cli import main

    out = tmp_path / "out"
    code = main(
        [
            "optimize", "--fabric", "dgx-a100-superpod", "--gpu", GPU, "--model",
            "megatron-1.7b", "--gpus", "16", "--global-batch", "32", "--seq", "2048",
            "--space", "tp=1,2", "--space", "pp=1,2", "--out", str(out), "--json",
        ]
    )  # fmt: skip
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads((out / "best.json").read_text(encoding="utf-8"))
    assert saved["best"] == printed["best"] and saved["step_time_s"] == printed["step_time_s"]
    assert str(out / "best.json") in printed["written"]
    assert main(["launch-args", str(out / "best.json"), "--json"]) == 0
    launched = json.loads(capsys.readouterr().out)
    assert f"--tensor-model-parallel-size {saved['best']['tp']}" in launched["arguments"]


def test_suggested_gpu_counts_pass_the_head_rule():
    """tp=3 divides none of the 32 heads: no GPU count helps, and the rule is named
    (counts divisible by 3 used to be suggested, each then failing on the heads)."""
    model = ff.load_model("llama3-8b", num_hidden_layers=8)
    with pytest.raises(SpecError) as info:
        optimize_layout(
            model, GPU, tiny_oversubscribed(), gpus=16, global_batch=32, seq_len=SEQ,
            space={"tp": [3]},
        )  # fmt: skip
    message = str(info.value)
    assert "closest GPU counts" not in message
    assert "tp=3 must divide num_attention_heads=32" in message
    # with tp 2 or 3 on 18 GPUs only counts that tp=2 (or tp=1) can fill are offered
    with pytest.raises(SpecError) as info:
        optimize_layout(
            model, GPU, tiny_oversubscribed(), gpus=18, global_batch=32, seq_len=SEQ,
            space={"tp": [2, 3]},
        )  # fmt: skip
    counts = json.loads(str(info.value).rsplit(": ", 1)[1])
    assert counts and all(c % 2 == 0 and 32 % (c // 2) == 0 for c in counts)
    for count in counts:  # each suggestion runs
        assert optimize_layout(
            model, GPU, tiny_oversubscribed(), gpus=count, global_batch=32, seq_len=SEQ,
            space={"tp": [2, 3]}, top_k=1,
        ).best is not None  # fmt: skip
