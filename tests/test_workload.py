"""Kernel-time and memory models: invariants and the published formulas they generalise."""

import numpy as np
import pytest

from fabricflow.errors import SpecError
from fabricflow.workload.efficiency import gemm_efficiency, gemm_time, memory_time
from fabricflow.workload.gpu import list_gpus, load_gpu
from fabricflow.workload.gpu_memory import layer_activation_bytes, memory_per_gpu
from fabricflow.workload.layer_cost import layer_cost
from fabricflow.workload.layout import Layout
from fabricflow.workload.model_spec import load_model

A100 = load_gpu("a100-80gb")
H100 = load_gpu("h100-sxm")


def test_gpu_presets_and_overrides():
    assert set(list_gpus()) >= {
        "a100-80gb",
        "h100-sxm",
        "h800",
        "h200",
        "b200",
        "gb200",
        "mi300x",
        "tpu-v4",
        "tpu-v5p",
    }
    # HBM is what the device reports (nvidia-smi 81559 MiB), no longer "80GB" read as 80e9 B
    assert H100.peak("fp8") == pytest.approx(1979e12) and H100.hbm == 81559 * 2**20
    assert load_gpu("h100-sxm", hbm="96GB", peak_bf16="1PFLOPS").peak_bf16 == 1e15
    with pytest.raises(SpecError, match="fp8"):
        A100.peak("fp8")
    with pytest.raises(SpecError, match="h100-sxm"):
        load_gpu("h1000")
    with pytest.raises(SpecError, match="gemm_efficiency"):
        load_gpu("h100-sxm", gemm_efficiency=1.5)


def test_gemm_efficiency_bounds_and_shape_effects():
    big = gemm_efficiency(A100, 16384, 12288, 12288)
    assert 0.7 < big <= A100.gemm_efficiency
    # A smaller inner dimension (higher TP on a row-parallel GEMM) costs efficiency.
    assert gemm_efficiency(A100, 16384, 12288, 1536) < big
    # Dimensions that are not multiples of 64 cost (tile/K padding).
    assert gemm_efficiency(A100, 8192, 8192, 4096 + 32) < gemm_efficiency(A100, 8192, 8192, 4096)
    # A GEMM with fewer tiles than SMs leaves SMs idle (wave quantization).
    assert gemm_efficiency(A100, 256, 256, 8192) < 0.1


def test_gemm_time_is_roofline_bounded():
    m, n, k = 8192.0, 8192.0, 8192.0
    t = gemm_time(A100, m, n, k)
    assert t >= 2 * m * n * k / A100.peak_bf16
    # thin attention-score GEMM (K = head dim 64) is bound by HBM traffic
    m, n, k, batch = 2048.0, 2048.0, 64.0, 96.0
    bytes_moved = batch * 2 * (m * k + k * n + m * n)
    assert gemm_time(A100, m, n, k, batch) >= bytes_moved / A100.hbm_bandwidth
    assert memory_time(A100, 0.0) == 0.0
    assert np.all(np.diff(memory_time(A100, np.array([1e5, 1e6, 1e7, 1e8, 1e9]))) > 0)


@pytest.mark.parametrize("tp, sp", [(1, False), (8, False), (8, True)])
def test_activation_bytes_reproduce_korthikanti(tp, sp):
    """GPT with dropout, eager attention, no recompute: s b h (34 + 5 a s / h), TP/SP variants."""
    model = load_model("megatron-18.4b")
    s, b, h, a = 2048, 4, model.hidden_size, model.num_heads
    layout = Layout(tp=tp, sequence_parallel=sp, micro_batch=b, seq_len=s, global_batch=b)
    got = layer_activation_bytes(model, layout, moe=False)
    if tp == 1:
        want = s * b * h * (34 + 5 * a * s / h)
    elif not sp:
        want = s * b * h * (10 + 24 / tp + 5 * a * s / (h * tp))
    else:
        want = s * b * h / tp * (34 + 5 * a * s / h)
    assert got == pytest.approx(want, rel=1e-12)


def test_model_states_18_bytes_per_parameter_and_zero_sharding():
    model = load_model("llama3-8b")
    fp32 = dict(grad_reduce_dtype="fp32")  # Megatron's own default: fp32 main gradients
    plain = memory_per_gpu(
        model, Layout(zero=0, micro_batch=1, seq_len=1024, global_batch=1, **fp32)
    )
    states = plain.weights + plain.gradients + plain.optimizer
    assert states == pytest.approx(18 * model.num_parameters(), rel=0.002)
    zero1 = memory_per_gpu(
        model, Layout(dp=8, zero=1, micro_batch=1, seq_len=1024, global_batch=8, **fp32)
    )
    assert zero1.weights + zero1.gradients + zero1.optimizer == pytest.approx(
        (6 + 12 / 8) * model.num_parameters(), rel=0.002
    )
    zero3 = memory_per_gpu(
        model, Layout(dp=8, zero=3, micro_batch=1, seq_len=1024, global_batch=8, **fp32)
    )
    assert zero3.weights + zero3.gradients + zero3.optimizer == pytest.approx(
        18 / 8 * model.num_parameters(), rel=0.002
    )


def test_recompute_and_flash_reduce_activation_memory():
    model = load_model("megatron-18.4b")
    kwargs = dict(tp=8, micro_batch=4, seq_len=2048, global_batch=4)
    eager = memory_per_gpu(model, Layout(**kwargs)).activations
    full = memory_per_gpu(model, Layout(recompute="full", **kwargs)).activations
    flash = memory_per_gpu(
        load_model("megatron-18.4b", attn_implementation="flash"), Layout(**kwargs)
    ).activations
    assert full < flash < eager


def test_layer_cost_ordering():
    model = load_model("llama3-8b")
    layout = Layout(tp=1, micro_batch=1, seq_len=4096, global_batch=1)
    cost = layer_cost(model, H100, layout, moe=False)
    assert 1.5 * cost.forward_s < cost.backward_s < 3.5 * cost.forward_s
    assert cost.recompute_s == 0
    full = layer_cost(
        model,
        H100,
        Layout(recompute="full", micro_batch=1, seq_len=4096, global_batch=1),
        moe=False,
    )
    assert full.recompute_s == pytest.approx(cost.forward_s)
    # Forward time is at least the GEMM FLOPs at peak, and the GEMM-bound bulk of it.
    flops = 2 * 4096 * (4096 * (4096 + 2 * 1024 + 4096) + 3 * 4096 * 14336)
    assert flops / H100.peak_bf16 < cost.forward_gemm_s < flops / H100.peak_bf16 / 0.6
    fp8 = layer_cost(
        model, H100, Layout(precision="fp8", micro_batch=1, seq_len=4096, global_batch=1), moe=False
    )
    assert fp8.forward_gemm_s < 0.6 * cost.forward_gemm_s
