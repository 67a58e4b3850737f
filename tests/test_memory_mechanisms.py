"""Memory mechanisms of published runs: what MoE layers save for backward, optimizer-state
precision, DeepSeek-V3's FP8 activation storage, and the report's layout fitting an H800."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

import fabricflow as ff
from fabricflow.commands.step import layout_from_args, register
from fabricflow.errors import SpecError
from fabricflow.workload.gpu_memory import (
    layer_activation_bytes,
    memory_per_gpu,
    usable_hbm,
)
from fabricflow.workload.layout import Layout
from fabricflow.workload.stack import load_stack
from fabricflow.workload.step_command import step_arguments

TOKENS = 4096


def _per_copy(model, layout) -> float:
    """Bytes one routed token copy adds to a MoE layer's saved activations."""
    more = dataclasses.replace(model, experts_per_token=model.experts_per_token + 1)
    extra = layer_activation_bytes(more, layout, moe=True)
    return (extra - layer_activation_bytes(model, layout, moe=True)) / TOKENS


def test_a_routed_copy_saves_the_expert_input_and_up_projection_not_the_output():
    """Megatron-Core multiplies the routing probability into the activation output
    (``activation_func_with_probs``), so the expert output is not saved for the
    probability's gradient: per copy the bf16 input (2h), the gated up-projection output
    (2 x 2f), the activation output (2f) and the fp32 probability (4 B)."""
    model = ff.load_model("qwen3-30b-a3b")
    layout = Layout(ep=8, dp=8, seq_len=TOKENS, global_batch=8, moe_imbalance=1.0)
    h, f = model.hidden_size, model.moe_intermediate_size
    assert _per_copy(model, layout) == pytest.approx(2 * h + 4 * f + 2 * f + 4)


def test_fp8_activation_storage_halves_the_swiglu_input_and_keeps_one_attention_output():
    """DeepSeek-V3 report, section 3.3.3: the SwiGLU input of the experts is cached in FP8
    (1 B instead of 2 per element) and the attention output feeds the output projection's
    backward from one copy (no separate FP8 copy)."""
    model = ff.load_model("deepseek-v3")
    base = Layout(
        pp=16, ep=64, dp=128, seq_len=TOKENS, global_batch=128, precision="fp8", moe_imbalance=1.0
    )
    cached = dataclasses.replace(base, fp8_activation_cache=True)
    f = model.moe_intermediate_size
    assert _per_copy(model, base) - _per_copy(model, cached) == pytest.approx(2 * f)
    moe = layer_activation_bytes(model, base, moe=True)
    saved = moe - layer_activation_bytes(model, cached, moe=True)
    out_width = model.num_heads * model.v_head_dim  # the attention output, 1 B per element
    copies = model.experts_per_token
    assert saved / TOKENS == pytest.approx(copies * 2 * f + out_width)


def test_fp8_activation_storage_needs_fp8():
    with pytest.raises(SpecError, match="fp8_activation_cache"):
        Layout(fp8_activation_cache=True).validate()


def test_bf16_adam_moments_take_8_bytes_per_parameter_of_optimizer_state():
    """fp32 master weights (4 B) and bf16 first and second moments (2 + 2 B): DeepSeek-V3's
    optimizer (report, section 3.3.3), against 4 + 4 + 4 B."""
    model = ff.load_model("llama3-8b")
    fp32 = Layout(dp=8, zero=0, micro_batch=1, seq_len=TOKENS, global_batch=8)
    bf16 = dataclasses.replace(fp32, adam_moments_dtype="bf16")
    ratio = memory_per_gpu(model, bf16).optimizer / memory_per_gpu(model, fp32).optimizer
    assert ratio == pytest.approx(8 / 12)
    with pytest.raises(SpecError, match="adam_moments_dtype"):
        dataclasses.replace(fp32, adam_moments_dtype="fp16").validate()


def test_deepseek_v3_fits_2048_h800_at_the_reports_layout():
    """PP 16, EP 64, ZeRO-1 over 128, DualPipe, fp8, RMSNorm / MLA up-projection / SwiGLU
    output recomputed, FP8 SwiGLU inputs, bf16 moments, fp32 gradients: the run the report
    describes fits an 80 GB H800 with the headroom kept; without its storage choices
    (bf16 moments, FP8 SwiGLU inputs) it would not."""
    model = ff.load_model("deepseek-v3")
    h800 = ff.load_gpu("h800")
    report = Layout(
        pp=16,
        ep=64,
        dp=128,
        micro_batch=1,
        global_batch=15360,
        seq_len=4096,
        precision="fp8",
        pipeline_schedule="dualpipe",
        recompute="selective",
        recompute_modules="layernorm,mla_up_proj,moe_act",
        grad_reduce_dtype="fp32",
        adam_moments_dtype="bf16",
        fp8_activation_cache=True,
    )
    assert memory_per_gpu(model, report).total < usable_hbm(h800)
    plain = dataclasses.replace(report, adam_moments_dtype="fp32", fp8_activation_cache=False)
    assert memory_per_gpu(model, plain).total > usable_hbm(h800)


def test_the_deepseek_v3_stack_carries_its_memory_choices():
    """A user who names the published layout and ``--stack deepseek-v3`` gets the report's
    storage choices and a run that fits the H800."""
    stack = load_stack("deepseek-v3")
    layout = stack.layout_for(pp=16, ep=64, dp=128, micro_batch=1, global_batch=15360, seq_len=4096)
    assert layout.adam_moments_dtype == "bf16" and layout.fp8_activation_cache
    model = ff.load_model("deepseek-v3")
    assert memory_per_gpu(model, layout).total < usable_hbm(ff.load_gpu("h800"))


def test_the_memory_choices_round_trip_through_the_step_command():
    layout = Layout(
        pp=2, dp=4, global_batch=8, precision="fp8", adam_moments_dtype="bf16",
        fp8_activation_cache=True,
    )  # fmt: skip
    words = step_arguments(layout)
    assert "--fp8-activation-cache" in words
    assert words[words.index("--adam-moments-dtype") + 1] == "bf16"
    over = step_arguments(
        dataclasses.replace(layout, fp8_activation_cache=False), stack="deepseek-v3"
    )
    assert "--no-fp8-activation-cache" in over
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    register(sub.add_parser("step"))
    args = parser.parse_args(
        ["step", "--fabric", "x", "--model", "m", "--gpu", "g", "--gpus", "8"] + words
    )
    again = layout_from_args(args)
    assert again.adam_moments_dtype == "bf16" and again.fp8_activation_cache
