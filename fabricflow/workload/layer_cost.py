"""Compute time of one transformer layer for one micro-batch on one GPU, from its kernels.

The layer is written out as the kernels a Megatron-style implementation runs, with the
shapes each GPU sees under TP (column-parallel QKV/FC1, row-parallel output/FC2), CP
(``s / cp`` query tokens against ``s`` keys), SP (norms, residuals and dropouts on
``tokens / tp``) and EP (``top_k`` routed tokens over ``num_experts / ep`` local experts,
scaled by the routing imbalance; expert weights split over TP as well, Megatron's default
expert-tensor-parallel size). Weight GEMMs run in the layout's precision (fp8: Transformer
Engine linear layers), attention in bf16. GEMMs are timed by :func:`efficiency.gemm_time`
(backward = data-gradient ``(M, K, N)`` + weight-gradient ``(K, N, M)`` GEMMs), attention
by :func:`efficiency.attention_time` (Flash: causal tiles skipped, backward 2.5 x forward)
or as materialised ``s x s`` GEMMs + softmax/dropout kernels (eager), and element-wise
kernels by the bytes they move. Element-wise backward kernels read the saved input and the
incoming gradient and write one gradient: 1.5 x the forward bytes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .efficiency import attention_time, gemm_time, memory_time
from .gpu import GpuSpec
from .layout import Layout
from .model import ModelSpec

BACKWARD_ELEMENTWISE = 1.5
FLASH_BACKWARD = 2.5


@dataclasses.dataclass(frozen=True)
class LayerCost:
    """Seconds for one layer and one micro-batch on one GPU (compute only, no comm).

    ``forward_s``/``backward_s`` are totals; ``*_gemm_s`` is the part spent in weight
    GEMMs (what TP overlap can hide communication behind), ``*_attention_s`` the attention
    core (what hides CP ring exchanges), ``recompute_s`` the forward work redone in backward.
    """

    forward_s: float
    backward_s: float
    forward_gemm_s: float
    backward_gemm_s: float
    forward_attention_s: float
    backward_attention_s: float
    recompute_s: float

    @property
    def total_s(self) -> float:
        return self.forward_s + self.backward_s + self.recompute_s

    def scaled(self, factor: float) -> LayerCost:
        """Every time multiplied by ``factor``."""
        return LayerCost(
            **{f.name: getattr(self, f.name) * factor for f in dataclasses.fields(self)}
        )


def _gemms_fwd_bwd(gpu: GpuSpec, shapes: np.ndarray, precision: str) -> tuple[float, float]:
    """Forward and backward seconds of GEMMs given as rows (M, N, K, batch)."""
    if shapes.size == 0:
        return 0.0, 0.0
    m, n, k, b = shapes.T
    forward = gemm_time(gpu, m, n, k, b, precision=precision).sum()
    backward = (
        gemm_time(gpu, m, k, n, b, precision=precision)
        + gemm_time(gpu, k, n, m, b, precision=precision)
    ).sum()
    return float(forward), float(backward)


def layer_cost(model: ModelSpec, gpu: GpuSpec, layout: Layout, *, moe: bool) -> LayerCost:
    """Compute time of one (dense or MoE) layer per micro-batch on one GPU; see module doc."""
    tp, cp = layout.tp, layout.cp
    b, s = layout.micro_batch, layout.seq_len
    h = model.hidden_size
    tokens = b * s / cp  # rows of every GEMM on this GPU
    tokens_elementwise = tokens / tp if layout.sequence_parallel else tokens
    heads = model.num_heads / tp
    precision = layout.precision

    # Weight GEMMs: column-parallel inputs, row-parallel outputs (rows = tokens).
    weights: list[tuple[float, float, float, float]] = []
    attn_shapes = model.attention_weight_shapes()
    for fan_in, fan_out in attn_shapes[:-1]:
        weights.append((tokens, fan_out / tp, fan_in, 1))
    fan_in, fan_out = attn_shapes[-1]
    weights.append((tokens, fan_out, fan_in / tp, 1))
    elementwise_fwd = []
    if moe:
        imbalance = layout.moe_imbalance
        routed = tokens * model.experts_per_token * imbalance  # token-expert pairs here
        local_experts = model.num_experts / layout.ep
        per_expert = routed * layout.ep / model.num_experts
        (i1, o1), (i2, o2) = model.ffn_weight_shapes(model.moe_intermediate_size)
        weights += [
            (tokens, model.num_experts, h, 1),
            (per_expert, o1 / tp, i1, local_experts),
            (per_expert, o2, i2 / tp, local_experts),
        ]
        if model.num_shared_experts:
            n_shared = model.num_shared_experts
            weights += [(tokens, n_shared * o1 / tp, i1, 1), (tokens, o2, n_shared * i2 / tp, 1)]
            elementwise_fwd.append(
                _activation_bytes(model, tokens, n_shared * model.moe_intermediate_size / tp)
            )
        elementwise_fwd.append(_activation_bytes(model, routed, model.moe_intermediate_size / tp))
        # permute + unpermute of routed tokens (read + write, bf16), on SP-sharded tokens
        elementwise_fwd.append(2 * 2 * 2.0 * h * routed * tokens_elementwise / tokens)
    else:
        (i1, o1), (i2, o2) = model.ffn_weight_shapes(model.intermediate_size)
        weights += [(tokens, o1 / tp, i1, 1), (tokens, o2, i2 / tp, 1)]
        elementwise_fwd.append(_activation_bytes(model, tokens, model.intermediate_size / tp))
    gemm_fwd, gemm_bwd = _gemms_fwd_bwd(gpu, np.asarray(weights, dtype=np.float64), precision)

    # Norms (read + write), residual adds (read 2, write 1) with dropout masks (1 byte).
    residual = 6.0 + (1.0 if model.hidden_dropout > 0 else 0.0)
    elementwise_fwd += [4.0 * tokens_elementwise * h] * 2 + [residual * tokens_elementwise * h] * 2
    fwd_bytes = np.asarray(elementwise_fwd)
    elementwise_f = float(memory_time(gpu, fwd_bytes).sum())
    elementwise_b = float(memory_time(gpu, BACKWARD_ELEMENTWISE * fwd_bytes).sum())

    # Attention core.
    q_len, kv_len = s / cp, float(s)
    if model.attention == "flash":
        flops = 2.0 * b * heads * q_len * kv_len * (model.qk_head_dim + model.value_head_dim)
        flops *= 0.5  # causal: tiles above the diagonal are skipped
        attn_f = float(attention_time(gpu, flops))
        attn_b = float(attention_time(gpu, FLASH_BACKWARD * flops))
    else:
        batch = b * heads
        core = np.asarray(
            [
                (q_len, kv_len, model.qk_head_dim, batch),
                (q_len, model.value_head_dim, kv_len, batch),
            ]
        )
        attn_f, attn_b = _gemms_fwd_bwd(gpu, core, "bf16")
        scores = b * heads * q_len * kv_len
        dropout = model.attention_dropout > 0
        # softmax: read 2 + write 2 (fwd), read 4 + write 2 (bwd); dropout adds a 1-byte mask
        attn_f += float(memory_time(gpu, np.asarray([4.0, 5.0 if dropout else 0.0]) * scores).sum())
        attn_b += float(memory_time(gpu, np.asarray([6.0, 5.0 if dropout else 0.0]) * scores).sum())

    forward = gemm_fwd + elementwise_f + attn_f
    backward = gemm_bwd + elementwise_b + attn_b
    if layout.recompute == "full":
        recompute = forward
    elif layout.recompute == "selective":
        recompute = attn_f
    else:
        recompute = 0.0
    return LayerCost(
        forward_s=forward,
        backward_s=backward,
        forward_gemm_s=gemm_fwd,
        backward_gemm_s=gemm_bwd,
        forward_attention_s=attn_f,
        backward_attention_s=attn_b,
        recompute_s=recompute,
    )


def _activation_bytes(model: ModelSpec, rows: float, width: float) -> float:
    """Forward bytes of the FFN activation: GELU reads 1 and writes 1 tensor of ``width``,
    SwiGLU reads 2 (gate, up) and writes 1."""
    return (6.0 if model.gated_ffn else 4.0) * rows * width


def head_cost(model: ModelSpec, gpu: GpuSpec, layout: Layout) -> tuple[float, float]:
    """(forward, backward) seconds per micro-batch of the output layer on the last stage:
    final norm, logits GEMM ``[tokens, h] x [h, V / tp]`` and the fp32 cross-entropy
    (fwd: read bf16 logits, write fp32, two fp32 reductions ~ 14 B per logit; bwd ~ 10 B)."""
    tokens = layout.micro_batch * layout.seq_len / layout.cp
    vocab = model.vocab_size / layout.tp
    shapes = np.asarray([(tokens, vocab, model.hidden_size, 1)])
    fwd, bwd = _gemms_fwd_bwd(gpu, shapes, layout.precision)
    logits = tokens * vocab
    norm = 4.0 * tokens * model.hidden_size
    fwd += float(memory_time(gpu, np.asarray([14.0 * logits, norm])).sum())
    bwd += float(memory_time(gpu, np.asarray([10.0 * logits, BACKWARD_ELEMENTWISE * norm])).sum())
    return fwd, bwd


def embedding_cost(model: ModelSpec, gpu: GpuSpec, layout: Layout) -> tuple[float, float]:
    """(forward, backward) seconds per micro-batch of the input embedding on the first stage
    (row gather, and a scatter-add of the gradient)."""
    tokens = layout.micro_batch * layout.seq_len / layout.cp
    rows = tokens / layout.tp if layout.sequence_parallel else tokens
    moved = 4.0 * rows * model.hidden_size
    return float(memory_time(gpu, moved)), float(memory_time(gpu, 2.0 * moved))
