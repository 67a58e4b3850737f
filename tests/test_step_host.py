"""The host (CPU) model of the step: what issuing a layer costs and when the GPU waits."""

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.workload.host import BACKWARD, FORWARD, host_excess, host_times
from fabricflow.workload.layout import Layout, layout_table


def _table(**layout):
    return layout_table([Layout(**(dict(micro_batch=1, seq_len=4096, global_batch=8) | layout))])


def test_dense_layer_costs_its_modules_and_ops_on_the_systems_cpu():
    """A Llama layer in bf16 on a DGX H100 (x86): 5 Transformer Engine modules forward
    (QKV, attention, projection, FC1, FC2) at 115 us and 6 other ops at 13.5 us."""
    h100, gb200 = ff.load_gpu("h100-sxm"), ff.load_gpu("gb200")
    module_s = h100.host_op_s * ff.load_stack().host_module_ops
    assert (h100.host_op_s, module_s) == pytest.approx((13.5e-6, 115e-6), rel=0.01)
    model = ff.load_model("llama3-8b")
    host = host_times(model, h100, _table(dp=8), moe=False)
    modules = FORWARD["attention"][0] + FORWARD["mlp"][0]
    ops = FORWARD["attention"][1] + FORWARD["mlp"][1]
    assert (modules, ops) == (5, 6)
    assert host.pre[0] == pytest.approx(5 * module_s + 6 * 13.5e-6)
    assert host.post[0] == 0.0 and host.synced[0] == 0.0
    # a Grace host issues the same ops 37.08 / 13.48 = 2.75x slower (measured per op)
    grace = host_times(model, gb200, _table(dp=8), moe=False)
    assert grace.total[0] / host.total[0] == pytest.approx(37.1 / 13.5, rel=0.01)


def test_dropless_moe_layer_synchronizes_and_counts_per_local_expert():
    model = ff.load_model("qwen3-30b-a3b")  # 128 experts, qk-norm
    h100 = ff.load_gpu("h100-sxm")
    ep8 = host_times(model, h100, _table(dp=8, ep=8), moe=True)  # 16 local experts
    ep16 = host_times(model, h100, _table(dp=16, ep=16, global_batch=16), moe=True)  # 8
    assert ep8.synced[0] == 1.0
    # two grouped linears per layer, one GEMM launch each per local expert (bf16)
    per_expert = 2 * FORWARD["expert"][1] * h100.host_op_s
    assert ep8.post[0] - ep16.post[0] == pytest.approx(8 * per_expert)
    back = 2 * BACKWARD["expert"][1] * h100.host_op_s
    assert ep8.backward[0] - ep16.backward[0] == pytest.approx(8 * back)
    # a capacity factor gives static shapes: no synchronization
    capped = host_times(model, h100, _table(dp=8, ep=8, moe_capacity_factor=1.25), moe=True)
    assert capped.synced[0] == 0.0


def test_cuda_graphs_remove_the_host_work_they_capture():
    model = ff.load_model("qwen3-30b-a3b")
    h100 = ff.load_gpu("h100-sxm")
    eager = host_times(model, h100, _table(dp=8, ep=8), moe=True)
    scoped = host_times(
        model, h100, _table(dp=8, ep=8, cuda_graph_scope="moe_router,moe_preprocess"), moe=True
    )
    full = host_times(model, h100, _table(dp=8, ep=8, cuda_graphs=True), moe=True)
    assert full.total[0] == 0.0 and full.synced[0] == 0.0
    # the router and preprocessing become one graph launch; the experts stay eager
    assert scoped.pre[0] < eager.pre[0] and scoped.post[0] == eager.post[0]
    stack = ff.load_stack()
    module_s = h100.host_op_s * stack.host_module_ops
    # the router's forward: its norm module and the measured kernel count of the fused router
    router = FORWARD["router"][0] * module_s + stack.router_ops * h100.host_op_s
    preprocess = FORWARD["preprocess"][1] * h100.host_op_s
    assert eager.pre[0] - scoped.pre[0] == pytest.approx(router + preprocess - h100.host_op_s)


def test_fifo_after_the_synchronization_hand_calculation():
    """After the sync the GPU runs only what the host issued: part A (experts, host 3 ms,
    GPU 1 ms with the all-to-all) then part B (attention, host 1 ms, GPU 2 ms):
    max(gA + gB, cA + gB, cA + cB) = max(3, 5, 4) = 5 ms, 2 ms beyond the GPU's 3."""
    host = host_times(
        ff.load_model("qwen3-30b-a3b"), ff.load_gpu("h100-sxm"), _table(dp=8, ep=8), moe=True
    )
    host = type(host)(
        pre=np.array([1e-3]), post=np.array([3e-3]), backward=np.array([4e-3]), synced=np.ones(1)
    )
    forward, backward = host_excess(host, 2.5e-3, 3e-3, 0.5e-3, 0.5e-3, 0.5e-3)
    assert forward[0] == pytest.approx(2e-3)
    assert backward[0] == pytest.approx(0.5e-3)  # no sync: the host runs ahead, max(c, g)
    # without the synchronization the host runs ahead across the whole pass
    free = type(host)(pre=host.pre, post=host.post, backward=host.backward, synced=np.zeros(1))
    assert host_excess(free, 2.5e-3, 3e-3, 0.5e-3, 0.5e-3, 0.5e-3)[0][0] == pytest.approx(1e-3)


def test_host_bound_step_is_slower_than_its_kernels_and_graphs_recover_it():
    fabric = ff.load_fabric("dgx-b200-superpod")
    base = dict(ep=8, dp=8, micro_batch=1, seq_len=4096, global_batch=8, moe_imbalance=1.0)
    eager = ff.step_time("qwen3-30b-a3b", "b200", Layout(**base), fabric)
    graphs = ff.step_time("qwen3-30b-a3b", "b200", Layout(cuda_graphs=True, **base), fabric)
    waited = eager.details["micro_batch_s"]["only"]
    assert eager.step_time_s > graphs.step_time_s
    assert eager.details["host_wait_s"] > 0 and graphs.details["host_wait_s"] == 0
    assert waited > 0


def test_mxfp8_quantization_adds_its_host_ops_per_linear_module():
    """Under MXFP8 each linear module's quantization also allocates its data and scale
    tensors, zero-fills and swizzles the scales (NVIDIA's GB200 guide 2.1.2-2.1.3): the
    stack's ``mxfp8_quantize_ops`` minus the quantize kernel a per-tensor recipe launches
    too, per linear module and pass (a Llama layer: QKV, projection, FC1, FC2)."""
    model = ff.load_model("llama3-8b")
    gpu = ff.load_gpu("gb200")
    stack = ff.load_stack("mcore-dsv3-gb200-baseline")
    base = dict(dp=8, precision="fp8")
    tensorwise = host_times(model, gpu, _table(**base), moe=False, stack=stack)
    mxfp8 = host_times(model, gpu, _table(fp8_recipe="mxfp8", **base), moe=False, stack=stack)
    per_pass = 4 * (stack.mxfp8_quantize_ops - 1.0) * gpu.host_op_s
    assert mxfp8.pre[0] - tensorwise.pre[0] == pytest.approx(per_pass)
    assert mxfp8.backward[0] - tensorwise.backward[0] == pytest.approx(per_pass)
