"""MoE dispatch and the kernels of a step, each against its published figure
(docs/references.md, section "Software stacks, MoE dispatch and kernels in a step")."""

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.collective.comm import CollectiveCache
from fabricflow.workload.compute import collective_sizes
from fabricflow.workload.dispatch import dispatch_seconds, line_rate
from fabricflow.workload.efficiency import gemm_time, memory_time
from fabricflow.workload.host import host_times
from fabricflow.workload.layer_cost import layer_cost_table
from fabricflow.workload.layout import layout_table
from fabricflow.workload.placement import place
from fabricflow.workload.step import collective_times, register_groups


@pytest.fixture(scope="module")
def nvl72():
    return ff.load_fabric("gb200-nvl72-superpod")


@pytest.fixture(scope="module")
def dsv3():
    return ff.load_model("deepseek-v3", num_hidden_layers=4, num_nextn_predict_layers=0)


def _ep32_bandwidth(fabric, model, dispatcher):
    """Algorithm bandwidth (GB/s: bytes per rank over seconds) of dispatch and combine of
    DeepSeek-V3's 4,096 tokens, top-8, hidden 7,168, BF16, over EP32 in one NVL72 rack."""
    stack = ff.load_stack("mcore-dsv3-gb200")
    layout = ff.Layout(
        ep=32, dp=32, micro_batch=1, global_batch=32, seq_len=4096, precision="fp8",
        fp8_recipe="mxfp8", dispatcher=dispatcher, moe_imbalance=1.0,
    )  # fmt: skip
    where = place(
        layout, fabric.num_gpus, placement="domain-aligned",
        gpus_per_node=fabric.gpus_per_node, fabric=fabric, model=model,
    )  # fmt: skip
    comm = register_groups(CollectiveCache(fabric, "fabric"), where, model, layout)
    table = layout_table([layout])
    times = collective_times(model, table, comm, 1, stack, line_rate(fabric, 1))
    sizes = collective_sizes(model, table)
    return tuple(sizes[key][0] / times.seconds[key] / 1e9 for key in ("ep_dispatch", "ep_combine"))


def test_hybridep_and_deepep_reach_their_measured_ep32_bandwidth_on_gb200(nvl72, dsv3):
    """HybridEP, 32 SMs, BF16: 484.22 / 464.54 GB/s dispatch / combine (DeepEP hybrid-ep
    branch notes); DeepEP on GB200 EP32: about 400 / 190 GB/s (NVIDIA's GB200 guide)."""
    assert _ep32_bandwidth(nvl72, dsv3, "hybridep") == pytest.approx((484.22, 464.54), rel=0.02)
    assert _ep32_bandwidth(nvl72, dsv3, "deepep") == pytest.approx((400.0, 190.0), rel=0.02)
    # the guide: switching from NCCL's all-to-all to DeepEP brought no communication gain
    assert _ep32_bandwidth(nvl72, dsv3, "alltoall") == pytest.approx((400.0, 190.0), rel=0.02)


def test_line_rate_is_the_scale_up_link_inside_a_domain_and_the_nic_across(nvl72):
    assert line_rate(nvl72, 1) == pytest.approx(900e9)  # 1.8 TB/s bidirectional NVLink 5
    assert line_rate(nvl72, 2) == pytest.approx(50e9)  # one 400G NIC per GPU


def test_deepep_internode_ep16_moves_its_rdma_share_at_the_measured_43_gbs():
    """DeepEP normal kernels, EP16 over two 8-GPU nodes: 43 GB/s of RDMA bandwidth per
    GPU on 400G CX7 (DeepEP README); half of a rank's tokens stay in its node (NVLink),
    so only that half runs at the RDMA rate."""
    stack = ff.load_stack("deepseek-v3")
    table = layout_table([ff.Layout(ep=16, dp=16, dispatcher="deepep")])
    size = 1e9  # bytes per rank of one dispatch / combine
    d, c = dispatch_seconds(stack, table, (1e-6, 1e-6), (size, size), 2, 50e9)
    assert 0.5 * size / d[0] / 1e9 == pytest.approx(43.0, rel=1e-6)
    assert 0.5 * size / c[0] / 1e9 == pytest.approx(43.0, rel=1e-6)
    # inside one domain every byte moves at the NVLink figure (153 GB/s of 200 on H800)
    d, _ = dispatch_seconds(stack, table, (1e-6, 1e-6), (size, size), 1, 200e9)
    assert size / d[0] / 1e9 == pytest.approx(153.0, rel=1e-6)


def test_flex_dispatchers_fuse_the_global_permutation_and_hybridep_the_padding(dsv3):
    """All-to-all writes top_k copies before the exchange; DeepEP and HybridEP do not
    (GB200 guide 2.1.1); HybridEP also fuses the FP8 padding copy (guide 2.5)."""
    gpu = ff.load_gpu("gb200")
    base = dict(ep=32, dp=32, micro_batch=1, global_batch=32, seq_len=4096, precision="fp8")
    cost = {
        d: layer_cost_table(dsv3, gpu, layout_table([ff.Layout(dispatcher=d, **base)]), moe=True)
        for d in ("alltoall", "deepep", "hybridep")
    }
    h = dsv3.hidden_size
    copies = 4096 * dsv3.experts_per_token
    global_permute = memory_time(gpu, 4.0 * h * copies)
    saved = cost["alltoall"].forward_s[0] - cost["deepep"].forward_s[0]
    assert saved == pytest.approx(global_permute, rel=1e-6)
    assert cost["hybridep"].forward_s[0] < cost["deepep"].forward_s[0]


def test_router_and_preprocess_host_ops_follow_the_measured_kernel_counts(dsv3):
    """Router part 72 kernels, 31 with --moe-router-fusion; router + preprocessing 17
    under DeepEP (GB200 guide 2.1.4, 2.2.1)."""
    gpu = ff.load_gpu("gb200")
    base = dict(ep=32, dp=32, micro_batch=1, global_batch=32, seq_len=4096)
    pre = {}
    for name, kw in {
        "unfused": dict(moe_router_fusion=False),
        "fused": {},
        "deepep": dict(dispatcher="deepep"),
    }.items():
        pre[name] = host_times(dsv3, gpu, layout_table([ff.Layout(**base, **kw)]), moe=True).pre
    op = gpu.host_op_s
    assert pre["unfused"][0] - pre["fused"][0] == pytest.approx((72 - 31) * op)
    # DeepEP: 17 ops for router and preprocessing (the all-to-all path: 31 + 16)
    assert pre["fused"][0] - pre["deepep"][0] == pytest.approx((31 + 16 - 17) * op)


def test_mxfp8_grouped_gemm_on_gb200_runs_at_the_measured_2672_tflops():
    """NVIDIA's MXFP8 grouped GEMM (multi-stream cuBLAS) at K = 7,168, N = 2,048:
    2,672 TFLOP/s on GB200 (flush L2); per-tensor FP8 is faster (MAMF 3,616)."""
    gpu = ff.load_gpu("gb200")
    m, n, k, experts = 4096, 2048, 7168, 8
    flops = 2.0 * m * n * k * experts
    mx = flops / gemm_time(gpu, m, n, k, experts, precision="mxfp8", concurrent=4) / 1e12
    fp8 = flops / gemm_time(gpu, m, n, k, experts, precision="fp8", concurrent=4) / 1e12
    assert mx == pytest.approx(2672, rel=0.01)
    assert fp8 > 1.15 * mx
    # a GPU without an MXFP8 figure times it as fp8
    h100 = ff.load_gpu("h100-sxm")
    assert gemm_time(h100, m, n, k, precision="mxfp8") == gemm_time(h100, m, n, k, precision="fp8")


@pytest.mark.parametrize(
    "recipe, per_element", [("tensorwise", 6.0), ("delayed", 4.0), ("mxfp8", 4.0625)]
)
def test_fp8_cast_bytes_per_recipe(recipe, per_element):
    """Current scaling reads the tensor twice (amax, then cast); delayed scaling and the
    block-scaled recipes once; all write row- and column-wise fp8 copies (+ scales)."""
    from fabricflow.workload.layer_cost import layer_shapes

    model = ff.load_model("llama3-8b")
    layout = ff.Layout(dp=8, global_batch=8, precision="fp8", fp8_recipe=recipe)
    shapes = layer_shapes(model, layout_table([layout]))
    assert shapes.cast_bytes[0] == pytest.approx(per_element)
    bf16 = layer_shapes(model, layout_table([ff.Layout(dp=8, global_batch=8)]))
    assert bf16.cast_bytes[0] == 0.0


def test_norm_fusion_saves_the_norm_output_round_trip_under_mxfp8_only():
    """cuDNN norms emit the MXFP8 output (GB200 guide 2.1.5): the bf16 output is neither
    written nor read back, 4 B per element of both input norms' outputs."""
    model = ff.load_model("llama3-8b")
    gpu = ff.load_gpu("gb200")
    base = dict(dp=8, global_batch=8, precision="fp8", seq_len=4096)

    def forward(**kw):
        table = layout_table([ff.Layout(**base, **kw)])
        return layer_cost_table(model, gpu, table, moe=False).forward_s[0]

    plain, fused = forward(fp8_recipe="mxfp8"), forward(fp8_recipe="mxfp8", fp8_norm_fusion=True)
    elements = 4096.0 * model.hidden_size
    saved = np.sum(
        [memory_time(gpu, (4.0625) * elements) - memory_time(gpu, 0.0625 * elements)] * 2
    )
    assert plain - fused == pytest.approx(saved, rel=1e-6)
    assert forward(fp8_recipe="tensorwise", fp8_norm_fusion=True) == forward(
        fp8_recipe="tensorwise"
    )


def test_sustained_clock_scales_tensor_core_kernels_not_memory_bound_ones():
    """A clock below the measurement's slows GEMMs and attention by its ratio; copies are
    bound by HBM and keep their time. Every preset keeps 1 (the efficiencies are measured
    over sustained loops under the power cap)."""
    full = ff.load_gpu("gb200")
    capped = ff.load_gpu("gb200", sustained_clock_fraction=0.8)
    assert full.sustained_clock_fraction == 1.0
    ratio = (gemm_time(capped, 8192, 8192, 8192) - 2e-6) / (
        gemm_time(full, 8192, 8192, 8192) - 2e-6
    )
    assert ratio == pytest.approx(1 / 0.8, rel=1e-9)  # 8192^3: compute-bound
    assert memory_time(capped, 1e9) == memory_time(full, 1e9)
