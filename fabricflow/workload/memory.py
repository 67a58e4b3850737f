"""Memory per GPU: model states (weights, gradients, Adam) and activations.

Model states (Megatron mixed precision): bf16 weights 2 B, fp32 main gradients 4 B
(2 B with ``grad_reduce_dtype='bf16'``), fp32 master weights + two Adam moments 12 B per
parameter: 18 B per parameter, as docs/references.md §5. ZeRO-1 (Megatron's distributed optimizer)
shards the 12 B over the data-parallel x context-parallel ranks (``6 + 12/d``), ZeRO-2 the
gradients too, ZeRO-3 everything. Expert weights are sharded over ``tp x ep`` and their
optimizer over the expert data-parallel ranks.

Activations per layer and micro-batch, generalising Korthikanti et al. (``s b h (34 + 5 a
s / h)`` for GPT with dropout) to GQA/MLA, gated FFNs and MoE from the saved tensors:
norm inputs and outputs and dropout masks (replicated over TP without sequence
parallelism), Q/K/V, attention output and FFN intermediates (sharded by TP), and the
``s x s`` softmax / dropout tensors of eager attention (dropped by Flash attention and by
selective recompute). Full recompute keeps only each layer's input. Pipeline rank ``r``
holds ``min(m, p - r)`` micro-batches in flight under 1F1B; with ``v`` interleaved stages
the first rank holds ``L (1 + (p-1)/(p v))`` layers' worth (Korthikanti et al.), see
:func:`in_flight_chunks`.
"""

from __future__ import annotations

import dataclasses

from ..errors import SpecError
from .layout import Layout
from .model import ModelSpec

GIB = 2.0**30


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per GPU on the most loaded pipeline rank."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    rank: str  # the most loaded pipeline rank: "first", "last" or "only" (pp = 1)

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations

    def as_gib(self) -> dict:
        return {
            "weights": self.weights / GIB,
            "gradients": self.gradients / GIB,
            "optimizer": self.optimizer / GIB,
            "activations": self.activations / GIB,
            "total": self.total / GIB,
            "rank": self.rank,
        }


def layer_activation_bytes(model: ModelSpec, layout: Layout, *, moe: bool) -> float:
    """Bytes saved for backward by one layer and one micro-batch on one GPU (no recompute)."""
    tp = layout.tp
    tokens = layout.micro_batch * layout.seq_len / layout.cp
    h = model.hidden_size
    masks = 2.0 * h if model.hidden_dropout > 0 else 0.0
    replicated = 8.0 * h + masks  # 2 norm inputs + 2 norm outputs
    attention = 2.0 * 2 * model.num_heads * (model.qk_head_dim + model.value_head_dim)
    if not model.is_mla:
        attention = 2.0 * (
            2 * model.num_heads * model.head_dim + 2 * model.num_kv_heads * model.head_dim
        )
    ffn_factor = 6.0 if model.gated_ffn else 4.0
    if moe:
        routed = model.experts_per_token * layout.moe_imbalance
        ffn = routed * (2.0 * h + ffn_factor * model.moe_intermediate_size)
        ffn += ffn_factor * model.num_shared_experts * model.moe_intermediate_size
    else:
        ffn = ffn_factor * model.intermediate_size
    sharded = attention + ffn
    if model.attention == "eager" and layout.recompute == "none":
        sharded += (
            model.num_heads * layout.seq_len * (2.0 + (3.0 if model.attention_dropout > 0 else 0.0))
        )
    per_token = (
        (replicated + sharded) / tp if layout.sequence_parallel else replicated + sharded / tp
    )
    return tokens * per_token


def memory_per_gpu(model: ModelSpec, layout: Layout) -> MemoryEstimate:
    """Memory of the most loaded pipeline rank (first: embedding; last: head and logits).

    ``layout`` is validated against ``model`` first (:class:`SpecError` naming the field).
    """
    if not isinstance(model, ModelSpec):
        raise SpecError(
            "model", f"expected a ModelSpec (fabricflow.load_model), got {type(model).__name__}"
        )
    if not isinstance(layout, Layout):
        raise SpecError("layout", f"expected a Layout, got {type(layout).__name__}")
    layout.validate(model)
    first, _, last = layout.stage_layers(model)
    moe_fraction = model.num_moe_layers / model.num_layers
    dense_layer = sum(model.layer_parameters(False).values())
    moe_layer = model.layer_parameters(True) if model.is_moe else None
    embedding = model.vocab_size * model.hidden_size / layout.tp
    shard_dense = layout.dp * layout.cp
    shard_expert = layout.expert_dp

    tokens = layout.micro_batch * layout.seq_len / layout.cp
    best = None
    logits = 2 * 4.0 * tokens * model.vocab_size / layout.tp  # fp32 logits and their gradient
    head = 0.0 if model.tie_word_embeddings else embedding
    if layout.pp == 1:
        ranks = [("only", 0, first, embedding + head, logits)]
    else:  # the last rank keeps its own copy of the output projection even when tied
        ranks = [
            ("first", 0, first, embedding, 0.0),
            ("last", layout.pp - 1, last, embedding, logits),
        ]
    for rank, index, layers, extra_params, extra_act in ranks:
        n_moe = layers * moe_fraction
        n_dense = layers - n_moe
        dense_params = n_dense * dense_layer / layout.tp + extra_params
        expert_params = 0.0
        if moe_layer is not None:
            dense_params += (
                n_moe
                * (moe_layer["attention"] + moe_layer["norm"] + moe_layer["shared"])
                / layout.tp
            )
            expert_params = n_moe * moe_layer["experts"] / (layout.tp * layout.ep)
        wd, gd, od = _states(layout, dense_params, shard_dense)
        we, ge, oe = _states(layout, expert_params, shard_expert)
        activations = _stage_activations(model, layout, layers, n_moe, index) + extra_act
        estimate = MemoryEstimate(
            weights=wd + we,
            gradients=gd + ge,
            optimizer=od + oe,
            activations=activations,
            rank=rank,
        )
        if best is None or estimate.total > best.total:
            best = estimate
    assert best is not None  # every layout has at least one pipeline rank
    return best


def _states(layout: Layout, params: float, shards: int) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes of ``params`` sharded over ``shards`` by ZeRO."""
    grad_bytes = 4.0 if layout.grad_reduce_dtype == "fp32" else 2.0
    weights, grads, optimizer = 2.0 * params, grad_bytes * params, 12.0 * params
    if layout.zero >= 1:
        optimizer /= shards
    if layout.zero >= 2:
        grads /= shards
    if layout.zero >= 3:
        weights /= shards
    return weights, grads, optimizer


def in_flight_chunks(layout: Layout, rank: int) -> int:
    """Micro-batch chunks (of ``layers_per_rank / vpp`` layers) whose activations pipeline
    rank ``rank`` holds at its peak: ``min(m, p - rank)`` under 1F1B, and Megatron's
    interleaved warm-up ``2 (p - rank - 1) + (v - 1) p + 1`` (capped at ``m v``)."""
    p, v, m = layout.pp, layout.vpp, layout.num_micro_batches
    if v == 1:
        return min(m, p - rank)
    return min(m * v, 2 * (p - rank - 1) + (v - 1) * p + 1)


def _stage_activations(
    model: ModelSpec, layout: Layout, layers: int, n_moe: float, rank: int
) -> float:
    chunks = in_flight_chunks(layout, rank)
    layers_per_chunk = layers / layout.vpp
    n_dense = layers - n_moe
    full_layer = (
        n_dense * layer_activation_bytes(model, layout, moe=False)
        + (n_moe * layer_activation_bytes(model, layout, moe=True) if n_moe else 0.0)
    ) / max(layers, 1)
    if layout.recompute == "full":
        tokens = layout.micro_batch * layout.seq_len / layout.cp
        shard = layout.tp if layout.sequence_parallel else 1
        checkpoint = 2.0 * tokens * model.hidden_size / shard
        return chunks * layers_per_chunk * checkpoint + full_layer
    return chunks * layers_per_chunk * full_layer


def stage_parameters(model: ModelSpec, layout: Layout) -> tuple[float, float]:
    """(non-expert, expert) parameters per GPU on the most loaded pipeline rank.

    Non-expert parameters are reduced over data x context parallel ranks, expert ones over
    the expert data-parallel ranks.
    """
    first, _, last = layout.stage_layers(model)
    layers = max(first, last)
    moe_fraction = model.num_moe_layers / model.num_layers
    n_moe = layers * moe_fraction
    dense = (layers - n_moe) * sum(model.layer_parameters(False).values()) / layout.tp
    embedding = model.vocab_size * model.hidden_size / layout.tp
    dense += embedding if layout.pp > 1 or model.tie_word_embeddings else 2 * embedding
    expert = 0.0
    if model.is_moe:
        moe_layer = model.layer_parameters(True)
        dense += (
            n_moe * (moe_layer["attention"] + moe_layer["norm"] + moe_layer["shared"]) / layout.tp
        )
        expert = n_moe * moe_layer["experts"] / (layout.tp * layout.ep)
    return dense, expert
