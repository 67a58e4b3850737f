"""Compute time of one transformer layer for one micro-batch on one GPU, from its kernels.

The layer is written out as the kernels a Megatron-Core / Transformer Engine implementation
runs, with the shapes each GPU sees under TP (column-parallel QKV/FC1, row-parallel
output/FC2), CP (``s / cp`` query tokens against ``s`` keys), SP (norms, residuals and
dropouts on ``tokens / tp``) and EP (routed token copies over ``num_experts / ep`` local
experts, expert weights split over the expert tensor-parallel size). Per layer and pass:

* weight GEMMs in the layout's precision, timed by :func:`efficiency.gemm_time`; backward
  is a data-gradient ``(M, K, N)`` and a weight-gradient ``(K, N, M)`` GEMM, the latter
  accumulating into the fp32 main gradient (Megatron's gradient-accumulation fusion);
* the attention core: fused (Flash / cuDNN) at the GPU's measured forward / backward
  efficiency with the key-length ramp of :func:`efficiency.attention_time` (causal: half the
  ``s x s`` product; a sliding-window layer sees ``window`` keys), or materialised ``s x s``
  GEMMs with softmax / dropout kernels (eager);
* memory-bound kernels by the bytes they move (:data:`ELEMENTWISE` documents each): norms,
  residual adds and dropout masks, the FFN activation, rotary embeddings, Q/K norms, and
  under fp8 the casts of every GEMM input (forward) and output gradient (backward) to fp8
  with both row- and column-wise copies and a current-scaling amax pass; MoE adds the
  router and its top-k, token permutation and un-permutation.

:func:`layer_cost_table` times every row of a :class:`~fabricflow.workload.layout_table.LayoutTable`
at once (arrays ``[N]``); :func:`layer_cost` is the same for one :class:`Layout`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from fabricflow.workload.dispatch import permute_bytes
from fabricflow.workload.efficiency import attention_time, gemm_time, memory_time
from fabricflow.workload.gpu import GpuSpec
from fabricflow.workload.host import HostTimes, host_times
from fabricflow.workload.layout import (
    DEFAULT_RECOMPUTE_MODULES,
    RECOMPUTE_MODULES,
    Layout,
    for_layout,
)
from fabricflow.workload.layout_table import LayoutTable
from fabricflow.workload.model_spec import ModelSpec
from fabricflow.workload.stack import Stack, load_stack

# Attention backward FLOPs per forward FLOP of a fused kernel (it recomputes the scores:
# 5 matmuls instead of 2; FlashAttention-2 paper, section 3.1).
FLASH_BACKWARD = 2.5
# Bytes per element of an fp8 cast of a bf16 tensor, by recipe (``Layout.fp8_recipe``);
# every recipe writes the row-wise and the column-wise (transposed) fp8 copies the forward
# and backward GEMMs take (1 + 1):
# - tensorwise (per-tensor current scaling, the NeMo / Megatron-Bridge FP8 recipe): reads
#   the tensor once for its amax, once to cast: 2 + 2 + 1 + 1;
# - delayed (per-tensor scale from the amax history): the amax of the output is reduced
#   inside the cast kernel: 2 + 1 + 1;
# - mxfp8 (1 x 32 blocks, one E8M0 scale byte per block and copy): 2 + 1 + 1 + 2 / 32;
# - blockwise (1 x 128 activation tiles, fp32 scales per tile and copy): 2 + 1 + 1 + 8 / 128.
FP8_CAST_BYTES = {
    "tensorwise": 6.0,
    "delayed": 4.0,
    "mxfp8": 4.0 + 2.0 / 32.0,
    "blockwise": 4.0 + 8.0 / 128.0,
}
# Recipes with local (block) scales, whose quantization a norm kernel can emit itself
# (``Layout.fp8_norm_fusion``; cuDNN's MXFP8 norms): the norm's bf16 output is neither
# written (2 B) nor read back by the cast (2 B).
NORM_FUSED_RECIPES = ("mxfp8", "blockwise")
NORM_FUSION_SAVED_BYTES = 4.0
# Streams Transformer Engine's grouped GEMM (GroupedLinear) spreads the local experts'
# GEMMs over (``num_compute_streams`` in its common/util/multi_stream.h).
GROUPED_GEMM_STREAMS = 4
# Bytes per element of fp32 router scores kept through softmax/sigmoid and top-k: read
# the logits, write probabilities, read them for top-k and write the gates (forward).
ROUTER_BYTES = 4.0 * 4
# Documentation of the element-wise kernels charged per layer (bytes per element, fwd/bwd).
ELEMENTWISE = {
    "norm": "read 2, write 2 (bf16); backward reads input and gradient, writes 2: 6",
    "residual": "read 2 x 2, write 2 (+1 dropout mask); backward 6",
    "activation": "SwiGLU reads gate and up (4), writes 2; backward reads 2 + 4, writes 4",
    "rope": "read and write Q and K (4 per element); same backward",
    "qk_norm": "per-head RMSNorm on Q and K: 4 forward, 6 backward",
    "fp8_cast": "by recipe (FP8_CAST_BYTES): 6 per element under current scaling (amax "
    "read, cast read, row- and column-wise fp8 writes), 4 and scales otherwise",
    "router": "fp32 scores: 16 per expert score forward, as much backward",
    "permute": "gather token copies into expert order: read 2 + write 2 per element",
    "unpermute": "weighted sum of the copies back into token order",
}


@dataclasses.dataclass(frozen=True)
class LayerCost:
    """Seconds for one layer and one micro-batch on one GPU (compute only, no comm).

    ``forward_s``/``backward_s`` are totals; ``*_gemm_s`` is the part spent in weight
    GEMMs (what TP overlap can hide communication behind), ``*_attention_s`` the attention
    core (what hides CP ring exchanges), ``recompute_s`` the forward work redone in backward
    (selective recompute: the modules' forward; full recompute: the whole forward).
    ``memory_s`` is the part of ``forward_s + backward_s`` spent in memory-bound kernels;
    ``expert_forward_s`` / ``expert_backward_s`` the part of a MoE layer's passes after
    its token-count synchronization (grouped expert GEMMs, routed activation and casts,
    un-permutation); ``host_pre_s``, ``host_post_s``, ``host_backward_s`` the host (CPU)
    seconds to issue the forward before and after that synchronization and the backward
    (:mod:`fabricflow.workload.host`; 0 under CUDA graphs) and ``host_synced`` 1 where the
    forward synchronizes.
    Fields are floats (:func:`layer_cost`) or arrays ``[N]`` over the rows of a layout table
    (:func:`layer_cost_table`).
    """

    # float (one layout) or float64 [N] (a table's rows)
    forward_s: Any
    backward_s: Any
    forward_gemm_s: Any
    backward_gemm_s: Any
    forward_attention_s: Any
    backward_attention_s: Any
    recompute_s: Any
    memory_s: Any = 0.0
    expert_forward_s: Any = 0.0
    expert_backward_s: Any = 0.0
    host_pre_s: Any = 0.0
    host_post_s: Any = 0.0
    host_backward_s: Any = 0.0
    host_synced: Any = 0.0

    @property
    def total_s(self):
        return self.forward_s + self.backward_s + self.recompute_s

    @property
    def host_s(self):
        """Host seconds to issue every pass of the layer (forward and backward)."""
        return self.host_pre_s + self.host_post_s + self.host_backward_s

    @property
    def host(self) -> HostTimes:
        """The host times as :class:`~fabricflow.workload.host.HostTimes`."""
        return HostTimes(
            pre=self.host_pre_s,
            post=self.host_post_s,
            backward=self.host_backward_s,
            synced=self.host_synced,
        )

    def scaled(self, factor) -> LayerCost:
        """Every GPU time multiplied by ``factor`` (a number or an array ``[N]``); host
        times are not GPU kernels and stay."""
        kept = {"host_pre_s", "host_post_s", "host_backward_s", "host_synced"}
        return LayerCost(
            **{
                f.name: getattr(self, f.name) * (1.0 if f.name in kept else factor)
                for f in dataclasses.fields(self)
            }
        )

    def row(self, index: int) -> LayerCost:
        """Row ``index`` of a table's costs, as floats."""
        return LayerCost(
            **{
                f.name: float(np.broadcast_to(getattr(self, f.name), (index + 1,))[index])
                for f in dataclasses.fields(self)
            }
        )


def _gemms(gpu: GpuSpec, shapes: list, precision) -> tuple[Any, Any]:
    """Forward and backward seconds ``[N]`` of weight GEMMs given as ``(M, N, K, batch)``
    or ``(M, N, K, batch, concurrent)`` tuples (arrays ``[N]`` or scalars); the weight
    gradient accumulates into fp32."""
    forward: Any = 0.0
    backward: Any = 0.0
    for m, n, k, b, *rest in shapes:
        at_once = rest[0] if rest else np.inf
        kw = dict(precision=precision, concurrent=at_once)
        forward = forward + gemm_time(gpu, m, n, k, b, **kw)
        backward = (
            backward
            + gemm_time(gpu, m, k, n, b, **kw)
            + gemm_time(gpu, k, n, m, b, accumulate_fp32=True, **kw)
        )
    return forward, backward


def gemm_kind(table: LayoutTable) -> np.ndarray:
    """The GEMM operand kind ``[N]`` of each row's linear layers: ``bf16``, ``fp8``, or
    ``mxfp8`` (fp8 under the MXFP8 recipe: block scales applied in the tensor cores, timed
    at the GPU's ``gemm_efficiency_mxfp8``)."""
    mx = (table.precision == "fp8") & (table.fp8_recipe == "mxfp8")
    return np.where(mx, "mxfp8", table.precision)


def _memory(gpu: GpuSpec, parts: list) -> Any:
    """Seconds of memory-bound kernels, one per entry of ``parts`` (bytes, arrays ``[N]``)."""
    total: Any = 0.0
    for num_bytes in parts:
        total = total + memory_time(gpu, num_bytes)
    return total


@dataclasses.dataclass(frozen=True)
class LayerShapes:
    """Per-row sizes one GPU sees in a layer (arrays ``[N]``)."""

    tokens: np.ndarray  # rows of the GEMMs (b s / cp)
    sharded: np.ndarray  # tokens of the norm / residual kernels (/ tp under SP)
    tp: np.ndarray
    fp8: np.ndarray  # bool: linear layers in fp8
    cast_bytes: np.ndarray  # bytes per element of an fp8 cast (0 on bf16 rows)
    norm_cast_bytes: np.ndarray  # the same for a norm's output (fused into the norm or not)
    q: np.ndarray  # query width per rank (heads x qk head dim / tp)
    k: np.ndarray  # key width per rank
    v: np.ndarray  # value width per rank
    o: np.ndarray  # attention output width per rank
    rope: np.ndarray  # width of Q and K that takes rotary embeddings, per rank


def layer_shapes(model: ModelSpec, t: LayoutTable) -> LayerShapes:
    """Per-row sizes one GPU sees in a layer of ``model`` for the rows of ``t``."""
    tp = t.tp.astype(np.float64)
    tokens = (t.micro_batch * t.seq_len / t.cp).astype(np.float64)
    heads = model.num_heads / tp
    if model.is_mla:
        q = heads * model.qk_head_dim
        k = heads * model.qk_head_dim
        v = heads * model.v_head_dim
        rope = heads * model.qk_rope_head_dim + model.qk_rope_head_dim  # q rope + shared k rope
    else:
        kv_heads = model.num_kv_heads / tp
        q = heads * model.head_dim
        k = kv_heads * model.head_dim
        v = kv_heads * model.head_dim
        rope = q + k
    fp8 = t.precision == "fp8"
    cast = np.zeros(len(t))
    for recipe, per_element in FP8_CAST_BYTES.items():
        cast = np.where(t.fp8_recipe == recipe, per_element, cast)
    cast = np.where(fp8, cast, 0.0)
    fused = t.fp8_norm_fusion & np.isin(t.fp8_recipe, NORM_FUSED_RECIPES)
    return LayerShapes(
        tokens=tokens,
        sharded=np.where(t.sequence_parallel, tokens / tp, tokens),
        tp=tp,
        fp8=fp8,
        cast_bytes=cast,
        norm_cast_bytes=np.where(fused, cast - NORM_FUSION_SAVED_BYTES, cast),
        q=q,
        k=k,
        v=v,
        o=heads * model.value_head_dim,
        rope=rope * (1.0 if model.rope else 0.0),
    )


def _cast(z: LayerShapes, elements, *, norm: bool = False) -> Any:
    """Bytes of fp8 casts of ``elements`` (0 on bf16 rows); ``norm``: the cast of a norm's
    output (fused into the norm under ``fp8_norm_fusion``)."""
    return (z.norm_cast_bytes if norm else z.cast_bytes) * elements


def _attention_block(model: ModelSpec, z: LayerShapes) -> tuple[list, list, list]:
    """(weight GEMMs, forward bytes, backward bytes) of the attention block: norm, QKV (or
    MLA down/up projections), rotary / Q-K norm, output projection, residual."""
    h = float(model.hidden_size)
    mask = 1.0 if model.hidden_dropout > 0 else 0.0
    gemms: list = []
    shapes = model.attention_weight_shapes()
    # column-parallel projections, except MLA's down-projections to the compressed latents
    # (replicated over TP, as Megatron-Core builds them): the first and third of MLA's five
    down = {0, 2} if model.is_mla and model.q_lora_rank else ({1} if model.is_mla else set())
    for index, (fan_in, fan_out) in enumerate(shapes[:-1]):
        split = 1.0 if index in down else z.tp
        gemms.append((z.tokens, fan_out / split, float(fan_in), 1.0))
    fan_in, fan_out = shapes[-1]
    gemms.append((z.tokens, float(fan_out), fan_in / z.tp, 1.0))
    forward = [4.0 * h * z.sharded, (6.0 + mask) * h * z.sharded, 4.0 * z.rope * z.tokens]
    backward = [6.0 * h * z.sharded, 6.0 * h * z.sharded, 4.0 * z.rope * z.tokens]
    if model.qk_norm:
        forward.append(4.0 * (z.q + z.k) * z.tokens)
        backward.append(6.0 * (z.q + z.k) * z.tokens)
    if model.is_mla:
        latent = float(model.q_lora_rank + model.kv_lora_rank)
        forward.append(4.0 * latent * z.tokens)  # RMSNorms of the compressed latents
        backward.append(6.0 * latent * z.tokens)
    # fp8: the QKV input (norm output, before the SP all-gather) and the projection input;
    # backward, the gradients of the QKV and projection outputs
    forward += [_cast(z, h * z.sharded, norm=True), _cast(z, z.o * z.tokens)]
    backward += [_cast(z, (z.q + z.k + z.v) * z.tokens), _cast(z, h * z.tokens)]
    return gemms, forward, backward


def _ffn(model: ModelSpec, z: LayerShapes, rows, width, fp8_in_rows) -> tuple[list, list, list]:
    """(GEMMs, forward bytes, backward bytes) of FFNs of ``width`` per rank over ``rows``
    token rows (arrays or scalars), without their input norm."""
    h = float(model.hidden_size)
    up = (2.0 if model.gated_ffn else 1.0) * width  # gate and up projections when gated
    gemms = [(rows, up, h, 1.0), (rows, h, width, 1.0)]
    act_f = (6.0 if model.gated_ffn else 4.0) * width * rows
    act_b = (10.0 if model.gated_ffn else 6.0) * width * rows
    forward = [act_f, _cast(z, h * fp8_in_rows, norm=True), _cast(z, width * rows)]
    backward = [act_b, _cast(z, up * rows), _cast(z, h * rows)]
    return gemms, forward, backward


def layer_cost_table(
    model: ModelSpec, gpu: GpuSpec, table: LayoutTable, *, moe: bool, stack: Stack | None = None
) -> LayerCost:
    """Compute time of one (dense or MoE) layer per micro-batch on one GPU for every row of
    ``table`` (arrays ``[N]``) under software ``stack`` (None: the default preset); see the
    module doc. Rows are not validated here."""
    stack = load_stack(stack) if not isinstance(stack, Stack) else stack
    z = layer_shapes(model, table)
    h = float(model.hidden_size)
    mask = 1.0 if model.hidden_dropout > 0 else 0.0
    attn_gemms, attn_f_bytes, attn_b_bytes = _attention_block(model, z)
    mlp_f: list = [4.0 * h * z.sharded, (6.0 + mask) * h * z.sharded]  # norm, residual
    mlp_b: list = [6.0 * h * z.sharded, 6.0 * h * z.sharded]
    if moe:
        mlp_gemms, moe_f, moe_b = _moe(model, table, z)
    else:
        mlp_gemms, moe_f, moe_b = _ffn(
            model, z, z.tokens, model.intermediate_size / z.tp, z.sharded
        )
    mlp_f += moe_f
    mlp_b += moe_b
    expert = _expert_gemms(model, table, z) if moe else []
    gemm_f, gemm_b = _gemms(gpu, attn_gemms + mlp_gemms, gemm_kind(table))
    expert_f: Any = 0.0
    expert_b: Any = 0.0
    if expert:
        ef, eb = _gemms(gpu, expert, gemm_kind(table))
        gemm_f, gemm_b = gemm_f + ef, gemm_b + eb
        routed_f, routed_b = _routed_memory(model, table, z)
        expert_f = ef + _memory(gpu, routed_f)
        expert_b = eb + _memory(gpu, routed_b)
    attn_mem_f, attn_mem_b = _memory(gpu, attn_f_bytes), _memory(gpu, attn_b_bytes)
    mlp_mem_f, mlp_mem_b = _memory(gpu, mlp_f), _memory(gpu, mlp_b)
    core_f, core_b = _attention(model, gpu, table)
    forward = gemm_f + attn_mem_f + mlp_mem_f + core_f
    backward = gemm_b + attn_mem_b + mlp_mem_b + core_b
    recompute = _recomputed(model, gpu, table, z, forward, core_f, moe)
    host = host_times(
        model,
        gpu,
        table,
        moe=moe,
        stack=stack,
        redo={"full": recomputed_fraction(model, table), **module_masks(table)},
    )
    as_array = lambda x: np.asarray(x, dtype=np.float64) * np.ones(len(table))  # noqa: E731
    return LayerCost(
        forward_s=np.asarray(forward, dtype=np.float64),
        backward_s=np.asarray(backward, dtype=np.float64),
        forward_gemm_s=np.asarray(gemm_f, dtype=np.float64),
        backward_gemm_s=np.asarray(gemm_b, dtype=np.float64),
        forward_attention_s=np.asarray(core_f, dtype=np.float64),
        backward_attention_s=np.asarray(core_b, dtype=np.float64),
        recompute_s=np.asarray(recompute, dtype=np.float64),
        memory_s=np.asarray(attn_mem_f + attn_mem_b + mlp_mem_f + mlp_mem_b, dtype=np.float64),
        expert_forward_s=as_array(expert_f),
        expert_backward_s=as_array(expert_b),
        host_pre_s=host.pre,
        host_post_s=host.post,
        host_backward_s=host.backward,
        host_synced=host.synced,
    )


def routed_tokens(model: ModelSpec, table: LayoutTable) -> tuple[np.ndarray, np.ndarray]:
    """(token-expert pairs this rank's experts process, tokens per local expert) per micro-
    batch, arrays ``[N]``: ``shard x top_k x load`` with ``shard = b s / cp x expert_tp /
    tp`` the tokens of this rank's position in the expert grid and ``load`` the routing
    imbalance (max/mean), capped at the capacity factor when tokens are dropped."""
    tokens = table.micro_batch * table.seq_len / table.cp
    shard = tokens * table.expert_tensor / table.tp
    load = np.where(
        table.moe_capacity_factor > 0,
        np.minimum(table.moe_imbalance, np.maximum(table.moe_capacity_factor, 1.0)),
        table.moe_imbalance,
    )
    pairs = shard * model.experts_per_token * load
    return pairs, pairs * table.ep / model.num_experts


def _expert_gemms(model: ModelSpec, table: LayoutTable, z: LayerShapes) -> list:
    """Grouped expert GEMMs ``(M, N, K, local experts, concurrent)`` per row: Transformer
    Engine's grouped linear runs the local experts' GEMMs on :data:`GROUPED_GEMM_STREAMS`
    streams, so that many share the SMs at a time."""
    etp = table.expert_tensor.astype(np.float64)
    _, per_expert = routed_tokens(model, table)
    local = model.num_experts / table.ep
    (i1, o1), (i2, o2) = model.ffn_weight_shapes(model.moe_intermediate_size)
    streams = GROUPED_GEMM_STREAMS
    return [
        (per_expert, o1 / etp, float(i1), local, streams),
        (per_expert, float(o2), i2 / etp, local, streams),
    ]


def _routed_memory(model: ModelSpec, table: LayoutTable, z: LayerShapes) -> tuple[list, list]:
    """(forward bytes, backward bytes) of the memory-bound kernels of a MoE block that run
    after its token-count synchronization: the experts' activation and fp8 casts on the
    routed pairs this rank processes, and the un-permutation of its token copies."""
    h = float(model.hidden_size)
    pairs, _ = routed_tokens(model, table)
    etp = table.expert_tensor.astype(np.float64)
    width = model.moe_intermediate_size / etp
    copies = z.sharded * model.experts_per_token  # this rank's token copies it dispatches
    unpermute = (2.0 * copies + 2.0 * z.sharded) * h
    act_f = (6.0 if model.gated_ffn else 4.0) * width * pairs
    act_b = (10.0 if model.gated_ffn else 6.0) * width * pairs
    up = (2.0 if model.gated_ffn else 1.0) * width
    _, local, pad = permute_bytes(table, copies, pairs, h)
    forward = [unpermute, local, pad, act_f, _cast(z, h * pairs), _cast(z, width * pairs)]
    backward = [unpermute, local, pad, act_b, _cast(z, up * pairs), _cast(z, h * pairs)]
    return forward, backward


def _moe(model: ModelSpec, table: LayoutTable, z: LayerShapes) -> tuple[list, list, list]:
    """(dense GEMMs: router and shared experts, forward bytes, backward bytes) of a MoE
    block without its grouped expert GEMMs (:func:`_expert_gemms`)."""
    h = float(model.hidden_size)
    router = ROUTER_BYTES * model.num_experts * z.sharded
    copies = z.sharded * model.experts_per_token  # this rank's token copies it dispatches
    gemms: list = [(z.sharded, float(model.num_experts), h, 1.0)]
    routed_f, routed_b = _routed_memory(model, table, z)
    pairs, _ = routed_tokens(model, table)
    permute, _, _ = permute_bytes(table, copies, pairs, h)  # before the exchange
    forward = [router, permute] + routed_f  # router, global permutation, routed part
    backward = [router, permute] + routed_b
    if model.num_shared_experts:
        shared = model.num_shared_experts * model.moe_intermediate_size / z.tp
        g, f, b = _ffn(model, z, z.tokens, shared, z.sharded)
        gemms += g
        forward += f
        backward += b
    return gemms, forward, backward


def _attention(model: ModelSpec, gpu: GpuSpec, table: LayoutTable) -> tuple[Any, Any]:
    """(forward, backward) seconds ``[N]`` of the attention core of one (average) layer."""
    b = table.micro_batch.astype(np.float64)
    s = table.seq_len.astype(np.float64)
    cp = table.cp.astype(np.float64)
    heads = model.num_heads / table.tp
    q_len = s / cp
    width = model.qk_head_dim + model.value_head_dim
    if model.attention == "flash":
        sliding = model.sliding_layers / model.num_layers if model.sliding_window else 0.0
        window = float(model.sliding_window or 1)
        # causal: half the s x s product; CP ring chunks of s / cp keys
        full_keys = 0.5 * s
        slid_keys = np.minimum(window, s)
        forward: Any = 0.0
        backward: Any = 0.0
        # the key length a query block sees: half the sequence on average (causal), a ring
        # chunk of s / cp keys under CP, the window for a sliding layer
        full_block = np.where(cp > 1, s / cp, 0.5 * s)
        kinds = ((1.0 - sliding, full_keys, full_block), (sliding, slid_keys, slid_keys))
        for share, keys, block in kinds:
            if share == 0.0:
                continue
            flops = 2.0 * b * heads * q_len * keys * width
            forward = forward + share * attention_time(gpu, flops, block, "forward")
            backward = backward + share * attention_time(
                gpu, FLASH_BACKWARD * flops, block, "backward"
            )
        return forward, backward
    batch = b * heads
    core = [
        (q_len, s, float(model.qk_head_dim), batch),
        (q_len, float(model.value_head_dim), s, batch),
    ]
    attn_f: Any = 0.0
    attn_b: Any = 0.0
    for m, n, k, bb in core:
        attn_f = attn_f + gemm_time(gpu, m, n, k, bb)
        attn_b = attn_b + gemm_time(gpu, m, k, n, bb) + gemm_time(gpu, k, n, m, bb)
    scores = b * heads * q_len * s
    dropout = 5.0 if model.attention_dropout > 0 else 0.0
    # softmax: read 2 + write 2 (fwd), read 4 + write 2 (bwd); dropout adds a 1-byte mask
    attn_f = attn_f + _memory(gpu, [4.0 * scores, dropout * scores])
    attn_b = attn_b + _memory(gpu, [6.0 * scores, dropout * scores])
    return attn_f, attn_b


def _recomputed(model, gpu, table: LayoutTable, z: LayerShapes, forward, core_f, moe: bool) -> Any:
    """Seconds of forward work one layer redoes in its backward pass: the whole forward
    (full recompute; the rank composition applies ``recompute_layers``), or under selective
    recompute the forward of each module named in ``recompute_modules``."""
    h = float(model.hidden_size)
    full = table.recompute == "full"
    selective = table.recompute == "selective"
    modules = module_masks(table)
    redo: Any = np.where(modules["core_attn"], core_f, 0.0)
    redo = redo + np.where(modules["layernorm"], _memory(gpu, [4.0 * h * z.sharded] * 2), 0.0)
    if model.is_mla:
        kv_up = model.num_heads * (model.qk_nope_head_dim + model.v_head_dim) / z.tp
        up = [(z.tokens, z.q, float(model.q_lora_rank or h), 1.0)]
        up.append((z.tokens, kv_up, float(model.kv_lora_rank), 1.0))
        up_f, _ = _gemms(gpu, up, gemm_kind(table))
        redo = redo + np.where(modules["mla_up_proj"], up_f, 0.0)
    if moe:
        pairs, _ = routed_tokens(model, table)
        width = model.moe_intermediate_size / table.expert_tensor
        act = (6.0 if model.gated_ffn else 4.0) * width * pairs
        redo = redo + np.where(modules["moe_act"], _memory(gpu, [act]), 0.0)
        mlp_gemms, mlp_f, _ = _moe(model, table, z)
        mlp_time = _gemms(gpu, mlp_gemms + _expert_gemms(model, table, z), gemm_kind(table))[0]
        redo = redo + np.where(modules["moe"], mlp_time + _memory(gpu, mlp_f), 0.0)
        if model.num_shared_experts:
            shared = model.num_shared_experts * model.moe_intermediate_size / z.tp
            g, f, _ = _ffn(model, z, z.tokens, shared, z.sharded)
            redo = redo + np.where(
                modules["shared_experts"],
                _gemms(gpu, g, gemm_kind(table))[0] + _memory(gpu, f),
                0.0,
            )
    else:
        g, f, _ = _ffn(model, z, z.tokens, model.intermediate_size / z.tp, z.sharded)
        redo = redo + np.where(
            modules["mlp"], _gemms(gpu, g, gemm_kind(table))[0] + _memory(gpu, f), 0.0
        )
    return np.where(full, forward, np.where(selective, redo, 0.0))


def recomputed_fraction(model: ModelSpec, table: LayoutTable) -> np.ndarray:
    """Fraction ``[N]`` of the layers whose forward runs twice under full recompute (1 for
    every layer; ``recompute_layers`` of an average virtual chunk; 0 without full
    recompute): how often a layer's forward collectives run again."""
    chunk = model.num_layers / (table.pp * table.vpp).astype(np.float64)
    limit = table.recompute_layers.astype(np.float64)
    share = np.where(limit > 0, np.minimum(1.0, limit / chunk), 1.0)
    return np.where(table.recompute == "full", share, 0.0)


def module_masks(table: LayoutTable) -> dict[str, np.ndarray]:
    """Module name -> bool ``[N]``: recomputed under selective recompute."""
    out = {name: np.zeros(len(table), dtype=bool) for name in RECOMPUTE_MODULES}
    texts = np.where(
        table.recompute_modules == "", DEFAULT_RECOMPUTE_MODULES, table.recompute_modules
    )
    selective = table.recompute == "selective"
    for text in np.unique(texts):
        rows = (texts == text) & selective
        for name in str(text).split(","):
            name = name.strip()
            if name in out:
                out[name] |= rows
    return out


def layer_cost(
    model: ModelSpec, gpu: GpuSpec, layout: Layout, *, moe: bool, stack: Stack | None = None
) -> LayerCost:
    """Compute time of one (dense or MoE) layer per micro-batch on one GPU; see module doc."""
    return for_layout(layer_cost_table, layout, model=model, gpu=gpu, moe=moe, stack=stack)


# Bytes per logit of the loss: Transformer Engine's fused cross entropy (the recipes'
# ``cross_entropy_fusion_impl = "te"``) reads the bf16 logits twice (maximum and sum, then
# loss and gradient) and writes the gradient in place, forward; backward scales it by the
# incoming gradient. Megatron's vocab-parallel fp32 loss casts the logits to fp32 and makes
# several fp32 passes (max, subtract, exp, sum, divide: about 14 B forward, 10 B backward).
CROSS_ENTROPY_BYTES = {True: (6.0, 4.0), False: (14.0, 10.0)}


def head_cost_table(model: ModelSpec, gpu: GpuSpec, table: LayoutTable) -> tuple:
    """(forward, backward) seconds ``[N]`` per micro-batch of the output layer on the last
    stage: final norm, logits GEMM ``[tokens, h] x [h, V / tp]`` (bf16, as Megatron keeps
    the output layer) and the cross entropy (:data:`CROSS_ENTROPY_BYTES` per logit, fused
    or not by ``fused_cross_entropy``)."""
    tokens = table.micro_batch * table.seq_len / table.cp
    vocab = model.vocab_size / table.tp
    fwd, bwd = _gemms(gpu, [(tokens, vocab, float(model.hidden_size), 1.0)], "bf16")
    logits = tokens * vocab
    norm = 4.0 * tokens * model.hidden_size
    fused_f, fused_b = CROSS_ENTROPY_BYTES[True]
    plain_f, plain_b = CROSS_ENTROPY_BYTES[False]
    fused = table.fused_cross_entropy
    fwd = fwd + _memory(gpu, [np.where(fused, fused_f, plain_f) * logits, norm])
    bwd = bwd + _memory(gpu, [np.where(fused, fused_b, plain_b) * logits, 1.5 * norm])
    return fwd, bwd


def embedding_cost_table(model: ModelSpec, gpu: GpuSpec, table: LayoutTable) -> tuple:
    """(forward, backward) seconds ``[N]`` per micro-batch of the input embedding on the
    first stage (row gather, and a scatter-add of the gradient)."""
    tokens = table.micro_batch * table.seq_len / table.cp
    rows = np.where(table.sequence_parallel, tokens / table.tp, tokens)
    moved = 4.0 * rows * model.hidden_size
    return memory_time(gpu, moved), memory_time(gpu, 2.0 * moved)


def head_cost(model: ModelSpec, gpu: GpuSpec, layout: Layout) -> tuple[float, float]:
    """:func:`head_cost_table` for one layout (floats)."""
    fwd, bwd = for_layout(head_cost_table, layout, model=model, gpu=gpu)
    return float(fwd), float(bwd)


def embedding_cost(model: ModelSpec, gpu: GpuSpec, layout: Layout) -> tuple[float, float]:
    """:func:`embedding_cost_table` for one layout (floats)."""
    fwd, bwd = for_layout(embedding_cost_table, layout, model=model, gpu=gpu)
    return float(fwd), float(bwd)
