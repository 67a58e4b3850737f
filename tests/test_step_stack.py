"""The training stack's features by era (docs/references.md §17): fused weight-gradient
accumulation, asynchronous backward TP collectives, the fused cross entropy."""

import dataclasses

import pytest

import fabricflow as ff
from fabricflow.workload.gpu_memory import memory_per_gpu
from fabricflow.workload.layout import Layout

BASE = dict(tp=1, dp=1, micro_batch=1, global_batch=4, seq_len=2048, zero=0)


@pytest.fixture(scope="module")
def selene():
    return ff.load_fabric("dgx-a100-superpod")


def test_unfused_accumulation_adds_one_pass_over_the_gradients_per_micro_batch(selene):
    """Off, each micro-batch reads the bf16 weight gradient and reads and writes the bf16
    main gradient of every parameter: 6 B per parameter at the copy bandwidth
    (0.9 x 2.039 TB/s on A100), 4 micro-batches."""
    model = ff.load_model("megatron-1.7b")
    fused = ff.step_time(model, "a100-80gb", Layout(**BASE), selene)
    plain = ff.step_time(model, "a100-80gb", Layout(grad_accum_fusion=False, **BASE), selene)
    gpu = ff.load_gpu("a100-80gb")
    hand = 4 * 6.0 * model.num_parameters() / (gpu.hbm_bandwidth * gpu.memory_efficiency)
    extra = plain.breakdown["compute"] - fused.breakdown["compute"]
    assert extra == pytest.approx(hand, rel=0.02)


def test_fused_cross_entropy_keeps_2_bytes_per_logit_instead_of_8():
    model = ff.load_model("llama3-8b")
    fused = memory_per_gpu(model, Layout(**BASE))
    plain = memory_per_gpu(model, Layout(fused_cross_entropy=False, **BASE))
    logits = 2048 * model.vocab_size  # tokens x vocabulary of one micro-batch
    assert plain.total - fused.total == pytest.approx(6.0 * logits, rel=0.01)


def test_async_backward_tp_collectives_hide_behind_the_weight_gradient_gemms(selene):
    """Korthikanti's 22B layer, TP 8, no SP: 2 all-reduces forward and 2 backward. The
    backward pair hides behind the column-parallel layers' GEMMs (NCCL's 24 SMs beside
    them still cost), the forward pair never does: exposed between 1/2 and 3/4 of all."""
    model = ff.load_model("megatron-18.4b", n_embd=6144, n_head=64, n_layer=48, n_inner=24576)
    kw = dict(
        tp=8,
        micro_batch=4,
        global_batch=4,
        seq_len=2048,
        sequence_parallel=False,
        tp_overlap=False,
        zero=0,
    )
    no_check = dict(check_memory=False)  # the layer's timing, one micro-batch of 4
    waits = ff.step_time(
        model, "a100-80gb", Layout(tp_backward_overlap=False, **kw), selene, **no_check
    )
    hides = ff.step_time(model, "a100-80gb", Layout(**kw), selene, **no_check)
    ratio = hides.breakdown["tp"] / waits.breakdown["tp"]
    assert 0.5 < ratio < 0.75


def test_executed_flops_count_the_sliding_window_as_its_kernel_runs_it():
    """GPT-OSS: half the layers attend to 128 keys. At 4,096 tokens the executed attention
    core of those layers is 128 / 4096 of the full product, not the causal half."""
    from fabricflow.workload.flops import attention_core_flops_per_token, executed_flops_per_step
    from fabricflow.workload.layer_cost import FLASH_BACKWARD

    model = ff.load_model("gpt-oss-120b")
    windowless = dataclasses.replace(model, sliding_window=0, sliding_layers=0)
    seq = 4096
    core = attention_core_flops_per_token(model, seq) * model.num_layers * seq  # per sequence
    share = model.sliding_layers / model.num_layers
    saved = core * share * (0.5 - model.sliding_window / seq) * (1.0 + FLASH_BACKWARD)
    diff = executed_flops_per_step(windowless, seq, 1, "none") - executed_flops_per_step(
        model, seq, 1, "none"
    )
    assert diff == pytest.approx(saved, rel=1e-9)
