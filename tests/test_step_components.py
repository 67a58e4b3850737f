"""One test per component of the step model, against a hand calculation or a published
figure (docs/references.md §14-§15; the figures are quoted in each test)."""

import math

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.study.step_validation import MEGATRON_2022
from fabricflow.workload.compute import node_limited_factor
from fabricflow.workload.efficiency import (
    TYPICAL_SHAPE_FRACTION,
    attention_time,
    gemm_efficiency,
    memory_time,
)
from fabricflow.workload.gpu_memory import layer_activation_bytes, usable_hbm
from fabricflow.workload.layer_cost import layer_cost, routed_tokens
from fabricflow.workload.layout import Layout, layout_table
from fabricflow.workload.overlap import COMM_SMS, exposed, slowdown
from fabricflow.workload.placement import aligned_gpus, place
from fabricflow.workload.stages import in_flight_chunks

# Maximum achievable matmul FLOP/s (TFLOP/s) at the best shape M x N x K of a brute-force
# search: the MAMF table of the ml-engineering book (docs/references.md §14).
MAMF = [
    ("a100-80gb", "bf16", (1024, 10240, 5120), 271.2),
    ("h100-sxm", "bf16", (2048, 2048, 13312), 794.5),
    ("b200", "bf16", (1792, 16128, 3072), 1745.0),
    ("gb200", "bf16", (4096, 9728, 2048), 1822.0),
    ("h100-sxm", "fp8", (1024, 9216, 14336), 1402.6),
    ("h200", "fp8", (1280, 4096, 12032), 1453.4),
    ("b200", "fp8", (15360, 4096, 3072), 3432.5),
    ("gb200", "fp8", (19456, 5120, 1536), 3615.6),
]


@pytest.mark.parametrize("gpu, precision, shape, tflops", MAMF)
def test_gemm_model_gives_the_measured_maximum_back_at_its_shape(gpu, precision, shape, tflops):
    spec = ff.load_gpu(gpu)
    best = gemm_efficiency(spec, *shape, precision=precision) / TYPICAL_SHAPE_FRACTION
    assert best * spec.peak(precision) / 1e12 == pytest.approx(tflops, rel=0.002)


# cuDNN fused attention on H100 SXM, head dim 128, non-causal, 16k tokens per batch
# (FlashAttention-3 paper, figures of forward / backward TFLOP/s by sequence length).
CUDNN_H100 = {
    "forward": dict(zip((512, 1024, 2048, 4096, 8192, 16384), (497, 574, 617, 609, 600, 595))),
    "backward": dict(zip((512, 1024, 2048, 4096, 8192, 16384), (305, 408, 465, 499, 518, 516))),
}


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_attention_ramp_follows_the_published_cudnn_curve(direction):
    h100 = ff.load_gpu("h100-sxm")
    for length, published in CUDNN_H100[direction].items():
        flops = 4.0 * length * length * 128 * 16 * (16384 // length)  # 16 heads of 128
        flops *= 2.5 if direction == "backward" else 1.0
        rate = flops / attention_time(h100, flops, length, direction) / 1e12
        assert rate == pytest.approx(published, rel=0.05), length


def test_memory_bound_kernels_run_at_the_measured_copy_bandwidth():
    h100 = ff.load_gpu("h100-sxm")
    # 1 GB at 90% of 3.35 TB/s (large copies), plus one launch
    assert memory_time(h100, 1e9) == pytest.approx(1e9 / (0.9 * h100.hbm_bandwidth), rel=0.01)


def _korthikanti_22b(**layout):
    model = ff.load_model("megatron-18.4b", n_embd=6144, n_head=64, n_layer=48, n_inner=4 * 6144)
    kw = dict(tp=8, micro_batch=4, global_batch=4, seq_len=2048) | MEGATRON_2022 | layout
    return model, Layout(**kw)


def test_layer_times_reproduce_korthikanti_table4():
    """22B GPT layer on 8 A100 (TP 8, b 4, s 2048): 7.7 ms forward, 11.9 ms backward
    (Korthikanti et al. 2023, Table 4, baseline), each with two 100 MB TP all-reduces."""
    selene = ff.load_fabric("dgx-a100-superpod")
    model, layout = _korthikanti_22b()
    a100 = ff.load_gpu("a100-80gb")
    cost = layer_cost(model, a100, layout, moe=False)
    result = ff.step_time(model, a100, layout, selene, check_memory=False)
    all_reduce = result.breakdown["tp"] / (model.num_layers * 4)  # 2 forward + 2 backward
    assert cost.forward_s + 2 * all_reduce == pytest.approx(7.7e-3, rel=0.08)
    assert cost.backward_s + 2 * all_reduce == pytest.approx(11.9e-3, rel=0.05)
    # selective recompute redoes the attention core: 13.2 - 11.9 = 1.3 ms in Table 4
    selective = layer_cost(model, a100, _korthikanti_22b(recompute="selective")[1], moe=False)
    assert 0.8e-3 < selective.recompute_s < 1.6e-3
    # sequence parallelism runs norms and dropouts on s / t tokens: 7.7 -> 7.2 ms forward
    sp = layer_cost(model, a100, _korthikanti_22b(sequence_parallel=True)[1], moe=False)
    assert cost.forward_s - sp.forward_s == pytest.approx(0.5e-3, abs=0.15e-3)


def test_activation_memory_is_korthikanti_formula_with_flash_dropping_scores():
    model, layout = _korthikanti_22b()
    s, b, h, a = 2048, 4, 6144, 64
    eager = layer_activation_bytes(model, layout, moe=False)
    assert eager == pytest.approx(s * b * h * (10 + 24 / 8 + 5 * a * s / (h * 8)), rel=1e-9)
    flash = ff.load_model(
        "megatron-18.4b", n_embd=h, n_head=a, n_layer=48, n_inner=4 * h, attn_implementation="flash"
    )
    # no s x s tensors; the fused kernel's fp32 log-sum-exp per query and head instead
    want = s * b * h * (10 + 24 / 8) + 4 * s * b * a / 8
    assert layer_activation_bytes(flash, layout, moe=False) == pytest.approx(want, rel=1e-9)


def test_node_limited_routing_halves_deepseek_v3_inter_node_copies():
    """8 groups, top-4 groups per token (DeepSeek-V3 report, 3.2.2) on 8 nodes: a token
    reaches 8 (1 - C(7,4)/C(8,4)) = 4 nodes, 3.5 of them remote, against 8 x 7/8 = 7
    remote copies for a plain all-to-all."""
    model = ff.load_model("deepseek-v3")
    assert model.routing_groups == 8 and model.routing_group_topk == 4
    nodes = 8 * (1 - math.comb(7, 4) / math.comb(8, 4))
    want = nodes * 7 / 8 / (model.experts_per_token * 7 / 8)
    assert float(node_limited_factor(model, 64, 8)) == pytest.approx(want) == pytest.approx(0.5)
    assert float(node_limited_factor(model, 8, 1)) == 1.0  # inside one node: nothing saved
    assert float(node_limited_factor(ff.load_model("qwen3-30b-a3b"), 64, 8)) == 1.0


def test_overlap_interference_hand_calculation():
    """H100 (132 SMs, 3.35 TB/s at 90%): a data-parallel reduction (24 SMs) moving 10 GB in
    0.5 s beside compute whose memory-bound share is 30%."""
    h100 = ff.load_gpu("h100-sxm")
    f = float(slowdown(h100, "dp", 10e9, 0.5, 0.3))
    want = 24 / 132 + 0.3 * min(1.0, 2 * 20e9 / (0.9 * h100.hbm_bandwidth))
    assert COMM_SMS["dp"] == 24 and f == pytest.approx(want)
    assert float(exposed(0.5, 2.0, f)) == pytest.approx(f * 0.5)  # hidden, at a cost
    assert float(exposed(0.5, 0.1, f)) == pytest.approx(0.4)  # longer than the compute
    assert float(exposed(0.0, 1.0, f)) == 0.0


def test_in_flight_micro_batches_of_megatron_schedules():
    def chunks(**kw):
        layout = Layout(**(dict(micro_batch=1, seq_len=1024) | kw))
        return in_flight_chunks(layout_table([layout]), layout.pp)[0].tolist()

    # 1F1B: rank r holds p - r micro-batches
    assert chunks(pp=4, dp=1, global_batch=16) == [4, 3, 2, 1]
    # interleaved (Megatron-Core warm-up): 2 (p - r - 1) + (v - 1) p + 1 chunks
    assert chunks(pp=4, vpp=2, global_batch=16) == [11, 9, 7, 5]
    # Llama 3's in-flight limit: groups of 2 micro-batches instead of p
    assert chunks(pp=4, vpp=2, global_batch=16, microbatch_group=2) == [9, 7, 5, 3]


def test_capacity_factor_caps_the_slowest_expert_rank_and_dropless_does_not():
    model = ff.load_model("qwen3-30b-a3b")
    base = dict(ep=8, dp=8, micro_batch=1, seq_len=4096, global_batch=8, moe_imbalance=1.6)
    dropless = layout_table([Layout(**base)])
    capped = layout_table([Layout(moe_capacity_factor=1.25, **base)])
    pairs_free, per_expert = routed_tokens(model, dropless)
    pairs_cap, _ = routed_tokens(model, capped)
    assert float(pairs_free[0]) == pytest.approx(4096 * 8 * 1.6)
    assert float(pairs_cap[0]) == pytest.approx(4096 * 8 * 1.25)
    assert float(per_expert[0]) == pytest.approx(4096 * 8 * 1.6 * 8 / 128)


def test_expert_parallel_group_folds_over_tensor_and_data_ranks():
    """Megatron-Core parallel folding: TP 2 x DP 8 = 16 ranks per stage regrouped as
    expert-TP 1 x EP 16; an EP group spans both TP ranks of 8 TP groups."""
    layout = Layout(tp=2, dp=8, ep=16, expert_tp=1, micro_batch=1, seq_len=1024, global_batch=8)
    where = place(layout, 16)
    ep = where.groups("ep", expert=True)
    assert ep.shape == (1, 16) and sorted(ep[0].tolist()) == list(range(16))
    assert where.groups("tp").shape == (8, 2)


def test_nvl72_racks_run_64_ranks_and_keep_8_spares():
    fabric = ff.load_fabric("gb200-nvl72-superpod")
    used = aligned_gpus(fabric)
    per_rack = np.bincount(fabric.gpu_domain[used].astype(int))
    assert used.size == 64 * fabric.num_domains and set(per_rack.tolist()) == {64}
    layout = Layout(ep=32, dp=256, micro_batch=1, seq_len=4096, global_batch=256)
    for placement, inside in (("contiguous", False), ("domain-aligned", True)):
        groups = place(layout, fabric.num_gpus, placement=placement, fabric=fabric).groups(
            "ep", expert=True
        )
        domains = fabric.gpu_domain[groups]
        assert bool(np.all(domains == domains[:, :1])) is inside


def test_usable_hbm_is_capacity_less_fixed_and_proportional_headroom():
    h100 = ff.load_gpu("h100-sxm")
    assert usable_hbm(h100) == pytest.approx(h100.hbm * 0.97 - 2 * 2**30)


def test_grouped_expert_gemms_share_the_sms_four_at_a_time():
    """Transformer Engine runs a grouped linear's GEMMs on 4 streams: 16 small expert
    GEMMs of 2 tiles each fill 8 of B200's 148 SMs at a time, not 32."""
    b200 = ff.load_gpu("b200")
    one = gemm_efficiency(b200, 128, 256, 2048, 16, concurrent=4)
    assert float(one / gemm_efficiency(b200, 128, 256, 2048, 16)) == pytest.approx(8 / 32)
    # large experts fill the GPU either way
    big = (4096, 4096, 2048, 16)
    assert gemm_efficiency(b200, *big, concurrent=4) == gemm_efficiency(b200, *big)
