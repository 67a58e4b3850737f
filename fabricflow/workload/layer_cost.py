"""Compute time of one transformer layer for one micro-batch on one GPU, from its kernels.

The layer is written out as the kernels a Megatron-style implementation runs, with the
shapes each GPU sees under TP (column-parallel QKV/FC1, row-parallel output/FC2), CP
(``s / cp`` query tokens against ``s`` keys), SP (norms, residuals and dropouts on
``tokens / tp``) and EP (``top_k`` routed tokens over ``num_experts / ep`` local experts,
scaled by the routing imbalance; expert weights split over the expert tensor-parallel
size). Weight GEMMs run in the layout's precision (fp8: Transformer Engine linear layers),
attention in bf16. GEMMs are timed by :func:`efficiency.gemm_time` (backward =
data-gradient ``(M, K, N)`` + weight-gradient ``(K, N, M)`` GEMMs), attention by
:func:`efficiency.attention_time` (Flash: causal tiles skipped, backward 2.5 x forward) or
as materialised ``s x s`` GEMMs + softmax/dropout kernels (eager), and element-wise
kernels by the bytes they move. Element-wise backward kernels read the saved input and the
incoming gradient and write one gradient: 1.5 x the forward bytes.

:func:`layer_cost_table` times every row of a :class:`~fabricflow.workload.table.LayoutTable`
at once (arrays ``[N]``); :func:`layer_cost` is the same for one :class:`Layout`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .efficiency import attention_time, gemm_time, memory_time
from .gpu import GpuSpec
from .layout import Layout
from .model import ModelSpec
from .table import LayoutTable, layout_table

BACKWARD_ELEMENTWISE = 1.5
FLASH_BACKWARD = 2.5


@dataclasses.dataclass(frozen=True)
class LayerCost:
    """Seconds for one layer and one micro-batch on one GPU (compute only, no comm).

    ``forward_s``/``backward_s`` are totals; ``*_gemm_s`` is the part spent in weight
    GEMMs (what TP overlap can hide communication behind), ``*_attention_s`` the attention
    core (what hides CP ring exchanges), ``recompute_s`` the forward work redone in backward.
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

    @property
    def total_s(self):
        return self.forward_s + self.backward_s + self.recompute_s

    def scaled(self, factor) -> LayerCost:
        """Every time multiplied by ``factor`` (a number or an array ``[N]``)."""
        return LayerCost(
            **{f.name: getattr(self, f.name) * factor for f in dataclasses.fields(self)}
        )

    def row(self, index: int) -> LayerCost:
        """Row ``index`` of a table's costs, as floats."""
        return LayerCost(
            **{
                f.name: float(np.asarray(getattr(self, f.name))[index])
                for f in dataclasses.fields(self)
            }
        )


def _gemms_fwd_bwd(gpu: GpuSpec, shapes: list, precision) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward seconds ``[N]`` of GEMMs given as ``(M, N, K, batch)`` tuples of
    arrays ``[N]`` (or scalars)."""
    forward: Any = 0.0
    backward: Any = 0.0
    for m, n, k, b in shapes:
        forward = forward + gemm_time(gpu, m, n, k, b, precision=precision)
        backward = (
            backward
            + gemm_time(gpu, m, k, n, b, precision=precision)
            + gemm_time(gpu, k, n, m, b, precision=precision)
        )
    return np.asarray(forward, dtype=np.float64), np.asarray(backward, dtype=np.float64)


def _memory_sum(gpu: GpuSpec, parts: list) -> np.ndarray:
    """Seconds of memory-bound kernels, one per entry of ``parts`` (bytes, arrays ``[N]``)."""
    total: Any = 0.0
    for num_bytes in parts:
        total = total + memory_time(gpu, num_bytes)
    return np.asarray(total, dtype=np.float64)


def layer_cost_table(model: ModelSpec, gpu: GpuSpec, table: LayoutTable, *, moe: bool) -> LayerCost:
    """Compute time of one (dense or MoE) layer per micro-batch on one GPU for every row of
    ``table`` (arrays ``[N]``); see the module doc. Rows are not validated here."""
    tp = table.tp.astype(np.float64)
    cp = table.cp.astype(np.float64)
    b = table.micro_batch.astype(np.float64)
    s = table.seq_len.astype(np.float64)
    h = float(model.hidden_size)
    tokens = b * s / cp  # rows of every GEMM on this GPU
    tokens_elementwise = np.where(table.sequence_parallel, tokens / tp, tokens)
    heads = model.num_heads / tp
    precision = table.precision

    # Weight GEMMs: column-parallel inputs, row-parallel outputs (rows = tokens).
    weights: list[tuple] = []
    attn_shapes = model.attention_weight_shapes()
    for fan_in, fan_out in attn_shapes[:-1]:
        weights.append((tokens, fan_out / tp, fan_in, 1.0))
    fan_in, fan_out = attn_shapes[-1]
    weights.append((tokens, fan_out, fan_in / tp, 1.0))
    elementwise_fwd: list = []
    if moe:
        etp = table.expert_tensor.astype(np.float64)
        ep = table.ep.astype(np.float64)
        shard = tokens * etp / tp  # tokens this rank's expert group position processes
        routed = shard * model.experts_per_token * table.moe_imbalance  # token-expert pairs
        local_experts = model.num_experts / ep
        per_expert = routed * ep / model.num_experts
        (i1, o1), (i2, o2) = model.ffn_weight_shapes(model.moe_intermediate_size)
        router_rows = tokens_elementwise
        weights += [
            (router_rows, float(model.num_experts), h, 1.0),
            (per_expert, o1 / etp, float(i1), local_experts),
            (per_expert, float(o2), i2 / etp, local_experts),
        ]
        if model.num_shared_experts:
            n_shared = model.num_shared_experts
            weights += [
                (tokens, n_shared * o1 / tp, i1, 1.0),
                (tokens, o2, n_shared * i2 / tp, 1.0),
            ]
            elementwise_fwd.append(
                _activation_bytes(model, tokens, n_shared * model.moe_intermediate_size / tp)
            )
        elementwise_fwd.append(_activation_bytes(model, routed, model.moe_intermediate_size / etp))
        # permute + unpermute of routed tokens (read + write, bf16), on SP-sharded tokens
        elementwise_fwd.append(2 * 2 * 2.0 * h * routed * tokens_elementwise / tokens)
    else:
        (i1, o1), (i2, o2) = model.ffn_weight_shapes(model.intermediate_size)
        weights += [(tokens, o1 / tp, i1, 1.0), (tokens, o2, i2 / tp, 1.0)]
        elementwise_fwd.append(_activation_bytes(model, tokens, model.intermediate_size / tp))
    gemm_fwd, gemm_bwd = _gemms_fwd_bwd(gpu, weights, precision)

    # Norms (read + write), residual adds (read 2, write 1) with dropout masks (1 byte).
    residual = 6.0 + (1.0 if model.hidden_dropout > 0 else 0.0)
    elementwise_fwd += [4.0 * tokens_elementwise * h] * 2 + [residual * tokens_elementwise * h] * 2
    elementwise_f = _memory_sum(gpu, elementwise_fwd)
    elementwise_b = _memory_sum(gpu, [BACKWARD_ELEMENTWISE * x for x in elementwise_fwd])

    attn_f, attn_b = _attention(model, gpu, b, s, cp, heads)

    forward = gemm_fwd + elementwise_f + attn_f
    backward = gemm_bwd + elementwise_b + attn_b
    recompute = np.where(
        table.recompute == "full", forward, np.where(table.recompute == "selective", attn_f, 0.0)
    )
    return LayerCost(
        forward_s=forward,
        backward_s=backward,
        forward_gemm_s=gemm_fwd,
        backward_gemm_s=gemm_bwd,
        forward_attention_s=attn_f,
        backward_attention_s=attn_b,
        recompute_s=recompute,
    )


def _attention(model: ModelSpec, gpu: GpuSpec, b, s, cp, heads) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds ``[N]`` of the attention core of one layer."""
    q_len, kv_len = s / cp, s
    if model.attention == "flash":
        flops = 2.0 * b * heads * q_len * kv_len * (model.qk_head_dim + model.value_head_dim)
        flops = flops * 0.5  # causal: tiles above the diagonal are skipped
        return attention_time(gpu, flops), attention_time(gpu, FLASH_BACKWARD * flops)
    batch = b * heads
    core = [
        (q_len, kv_len, float(model.qk_head_dim), batch),
        (q_len, float(model.value_head_dim), kv_len, batch),
    ]
    attn_f, attn_b = _gemms_fwd_bwd(gpu, core, "bf16")
    scores = b * heads * q_len * kv_len
    dropout = 5.0 if model.attention_dropout > 0 else 0.0
    # softmax: read 2 + write 2 (fwd), read 4 + write 2 (bwd); dropout adds a 1-byte mask
    attn_f = attn_f + _memory_sum(gpu, [4.0 * scores, dropout * scores])
    attn_b = attn_b + _memory_sum(gpu, [6.0 * scores, dropout * scores])
    return attn_f, attn_b


def _activation_bytes(model: ModelSpec, rows, width):
    """Forward bytes of the FFN activation: GELU reads 1 and writes 1 tensor of ``width``,
    SwiGLU reads 2 (gate, up) and writes 1."""
    return (6.0 if model.gated_ffn else 4.0) * rows * width


def layer_cost(model: ModelSpec, gpu: GpuSpec, layout: Layout, *, moe: bool) -> LayerCost:
    """Compute time of one (dense or MoE) layer per micro-batch on one GPU; see module doc."""
    return layer_cost_table(model, gpu, layout_table([layout]), moe=moe).row(0)


def head_cost_table(model: ModelSpec, gpu: GpuSpec, table: LayoutTable) -> tuple:
    """(forward, backward) seconds ``[N]`` per micro-batch of the output layer on the last
    stage: final norm, logits GEMM ``[tokens, h] x [h, V / tp]`` and the fp32 cross-entropy
    (fwd: read bf16 logits, write fp32, two fp32 reductions ~ 14 B per logit; bwd ~ 10 B)."""
    tokens = table.micro_batch * table.seq_len / table.cp
    vocab = model.vocab_size / table.tp
    fwd, bwd = _gemms_fwd_bwd(
        gpu, [(tokens, vocab, float(model.hidden_size), 1.0)], table.precision
    )
    logits = tokens * vocab
    norm = 4.0 * tokens * model.hidden_size
    fwd = fwd + _memory_sum(gpu, [14.0 * logits, norm])
    bwd = bwd + _memory_sum(gpu, [10.0 * logits, BACKWARD_ELEMENTWISE * norm])
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
    fwd, bwd = head_cost_table(model, gpu, layout_table([layout]))
    return float(fwd[0]), float(bwd[0])


def embedding_cost(model: ModelSpec, gpu: GpuSpec, layout: Layout) -> tuple[float, float]:
    """:func:`embedding_cost_table` for one layout (floats)."""
    fwd, bwd = embedding_cost_table(model, gpu, layout_table([layout]))
    return float(fwd[0]), float(bwd[0])
