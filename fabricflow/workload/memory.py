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

Offload (``Layout.offload_weights`` / ``offload_optimizer`` / ``offload_activations``, a
fraction ``f`` of each): the offloaded part lives in host (or pooled) memory and is streamed
through HBM layer by layer, double-buffered, so HBM keeps ``(1 - f)`` of the state plus
``f`` of two layers' worth (weights and optimizer state: the rank's total over its layers;
activations: one layer of one micro-batch, as saved for backward). Offloading therefore
never raises the estimate, and ``f = 0`` leaves it exactly as without offload. The recompute
working set (one full layer under full recompute) and the logits stay in HBM. See
docs/memory-offload.md; the transfer time is in :func:`fabricflow.step_time`.
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
    rank: str  # the pipeline rank: "first", "last", "rank <i>" or "only" (pp = 1)
    # bytes this GPU keeps in host (or pooled) memory instead of HBM; not in ``total``
    offloaded: float = 0.0

    @property
    def total(self) -> float:
        """HBM bytes (the offloaded part excluded)."""
        return self.weights + self.gradients + self.optimizer + self.activations

    def as_gib(self) -> dict:
        return {
            "weights": self.weights / GIB,
            "gradients": self.gradients / GIB,
            "optimizer": self.optimizer / GIB,
            "activations": self.activations / GIB,
            "total": self.total / GIB,
            "rank": self.rank,
            "offloaded": self.offloaded / GIB,
        }


@dataclasses.dataclass(frozen=True)
class OffloadTraffic:
    """Bytes one GPU of pipeline rank ``rank`` moves over its host link (see step_time).

    Attributes:
        rank: ``first``, ``last`` or ``only``.
        layers: transformer layers the rank holds.
        weights: offloaded bf16 weight bytes, fetched host-to-device once per pass
            (forward, backward, and the recompute forward) of every micro-batch, and written
            back once per step after the optimizer update.
        optimizer: offloaded optimizer-state bytes, streamed in and back out once per step.
        activations: offloaded activation bytes of one micro-batch, written to host in the
            forward pass and read back in the backward pass.
    """

    rank: str
    layers: int
    weights: float
    optimizer: float
    activations: float


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
    """Memory of the most loaded pipeline rank (first: embedding; last: head and logits;
    with an uneven split, possibly a heavier middle rank); see :func:`rank_memory`.

    ``layout`` is validated against ``model`` first (:class:`SpecError` naming the field).
    Offloaded fractions (``layout.offload_*``) are taken out of HBM as the module says.
    """
    return max(rank_memory(model, layout), key=lambda estimate: estimate.total)


def rank_memory(model: ModelSpec, layout: Layout) -> tuple[MemoryEstimate, ...]:
    """HBM per GPU of every pipeline rank, first to last (length ``pp``), offload applied;
    see the module doc. ``layout`` is validated against ``model`` first."""
    return tuple(_with_offload(rank, layout) for rank in _rank_states(model, layout))


def offload_traffic(model: ModelSpec, layout: Layout) -> list[OffloadTraffic]:
    """Host-link bytes of every pipeline rank, first to last (all zeros when nothing is
    offloaded)."""
    out = []
    for rank in _rank_states(model, layout):
        out.append(
            OffloadTraffic(
                rank=rank.name,
                layers=rank.layers,
                weights=layout.offload_weights * rank.weights,
                optimizer=layout.offload_optimizer * rank.optimizer,
                activations=layout.offload_activations * rank.layers * rank.layer_activations,
            )
        )
    return out


def rank_name(layout: Layout, index: int) -> str:
    """``only`` (pp = 1), ``first``, ``last`` or ``rank <index>`` (0-based)."""
    if layout.pp == 1:
        return "only"
    if index == 0:
        return "first"
    if index == layout.pp - 1:
        return "last"
    return f"rank {index}"


def rank_holdings(model: ModelSpec, layout: Layout) -> list[tuple[int, float, bool, bool]]:
    """Per pipeline rank: (layers whose weights it keeps, layers a micro-batch passes on it,
    holds the embedding, holds the output head and loss).

    1F1B / interleaved: rank ``r`` keeps and runs its ``rank_layers`` entry. DualPipe: rank
    ``r`` keeps stages ``r`` and ``pp - 1 - r`` (two copies of the weights in all) and
    each micro-batch passes one of them, half of them each way: ``(n_r + n_{p-1-r}) / 2``
    layers on average; ranks 0 and ``pp - 1`` hold both the embedding and the head.
    """
    ranks = layout.rank_layers(model)
    p = layout.pp
    if layout.schedule == "dualpipe":
        pairs = [ranks[r] + ranks[p - 1 - r] for r in range(p)]
        return [(n, n / 2, r in (0, p - 1), r in (0, p - 1)) for r, n in enumerate(pairs)]
    return [(n, float(n), r == 0, r == p - 1) for r, n in enumerate(ranks)]


@dataclasses.dataclass(frozen=True)
class _RankStates:
    """Bytes one GPU of a pipeline rank holds before any offload."""

    name: str
    layers: int  # layers whose weights it keeps
    weights: float
    gradients: float
    optimizer: float
    stored_activations: float  # saved for backward over all in-flight micro-batches
    working_activations: float  # the layer recomputed under full recompute: never offloaded
    logits: float  # fp32 logits and their gradient on the last rank: never offloaded
    layer_activations: float  # saved by one layer for one micro-batch


def _rank_states(model: ModelSpec, layout: Layout) -> list[_RankStates]:
    if not isinstance(model, ModelSpec):
        raise SpecError(
            "model", f"expected a ModelSpec (fabricflow.load_model), got {type(model).__name__}"
        )
    if not isinstance(layout, Layout):
        raise SpecError("layout", f"expected a Layout, got {type(layout).__name__}")
    layout.validate(model)
    moe_fraction = model.num_moe_layers / model.num_layers
    dense_layer = sum(model.layer_parameters(False).values())
    moe_layer = model.layer_parameters(True) if model.is_moe else None
    embedding = model.vocab_size * model.hidden_size / layout.tp
    shard_dense = layout.dp * layout.cp
    shard_expert = layout.expert_dp

    tokens = layout.micro_batch * layout.seq_len / layout.cp
    logits = 2 * 4.0 * tokens * model.vocab_size / layout.tp  # fp32 logits and their gradient
    tied_single = layout.pp == 1 and model.tie_word_embeddings
    out = []
    for index, (kept, passed, has_embedding, has_head) in enumerate(rank_holdings(model, layout)):
        # a rank with the head keeps its own output projection, even when tied, unless
        # it is the only rank (then the tied matrix is the embedding itself)
        extra_params = embedding * has_embedding + (0.0 if tied_single else embedding) * has_head
        n_moe = kept * moe_fraction
        n_dense = kept - n_moe
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
        stored, working, per_layer = _stage_activation_parts(
            model, layout, passed, passed * moe_fraction, index
        )
        out.append(
            _RankStates(
                name=rank_name(layout, index),
                layers=kept,
                weights=wd + we,
                gradients=gd + ge,
                optimizer=od + oe,
                stored_activations=stored,
                working_activations=working,
                logits=logits if has_head else 0.0,
                layer_activations=per_layer,
            )
        )
    return out


def _with_offload(rank: _RankStates, layout: Layout) -> MemoryEstimate:
    """HBM bytes of ``rank`` once the layout's offloaded fractions are moved to the host."""
    # summed in the order the estimate always used (bit-identical at f = 0)
    activations = rank.stored_activations + rank.working_activations + rank.logits
    weights, optimizer, offloaded = rank.weights, rank.optimizer, 0.0
    # layer by layer, double-buffered: two layers' share of the offloaded part stays in HBM
    buffer = min(1.0, 2.0 / max(rank.layers, 1))
    if layout.offload_weights > 0:
        moved = layout.offload_weights * rank.weights
        weights = rank.weights - moved * (1.0 - buffer)
        offloaded += moved
    if layout.offload_optimizer > 0:
        moved = layout.offload_optimizer * rank.optimizer
        optimizer = rank.optimizer - moved * (1.0 - buffer)
        offloaded += moved
    if layout.offload_activations > 0:
        moved = layout.offload_activations * rank.stored_activations
        staged = layout.offload_activations * min(
            rank.stored_activations, 2.0 * rank.layer_activations
        )
        activations = (
            rank.stored_activations - moved + staged + rank.working_activations + rank.logits
        )
        offloaded += moved
    return MemoryEstimate(
        weights=weights,
        gradients=rank.gradients,
        optimizer=optimizer,
        activations=activations,
        rank=rank.name,
        offloaded=offloaded,
    )


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
    interleaved warm-up ``2 (p - rank - 1) + (v - 1) p + 1`` (capped at ``m v``); ``p + 1``
    stage chunks on every rank under DualPipe."""
    p, v, m = layout.pp, layout.vpp, layout.num_micro_batches
    if layout.schedule == "dualpipe":
        return min(m, p + 1)  # DeepSeek-V3 report, Table 2: PP + 1 on every rank
    if v == 1:
        return min(m, p - rank)
    return min(m * v, 2 * (p - rank - 1) + (v - 1) * p + 1)


def _stage_activation_parts(
    model: ModelSpec, layout: Layout, layers: float, n_moe: float, rank: int
) -> tuple[float, float, float]:
    """(saved for backward over the in-flight micro-batches, recompute working set, saved
    by one layer for one micro-batch) in bytes."""
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
        return chunks * layers_per_chunk * checkpoint, full_layer, checkpoint
    return chunks * layers_per_chunk * full_layer, 0.0, full_layer


def rank_parameters(model: ModelSpec, layout: Layout) -> list[tuple[float, float]]:
    """(non-expert, expert) parameters per GPU of every pipeline rank, first to last.

    Non-expert parameters are reduced over data x context parallel ranks, expert ones over
    the expert data-parallel ranks.
    """
    moe_fraction = model.num_moe_layers / model.num_layers
    dense_layer = sum(model.layer_parameters(False).values())
    embedding = model.vocab_size * model.hidden_size / layout.tp
    tied_single = layout.pp == 1 and model.tie_word_embeddings
    out = []
    for kept, _, has_embedding, has_head in rank_holdings(model, layout):
        n_moe = kept * moe_fraction
        dense = (kept - n_moe) * dense_layer / layout.tp
        dense += embedding * has_embedding + (0.0 if tied_single else embedding) * has_head
        expert = 0.0
        if model.is_moe:
            moe_layer = model.layer_parameters(True)
            dense += (
                n_moe
                * (moe_layer["attention"] + moe_layer["norm"] + moe_layer["shared"])
                / layout.tp
            )
            expert = n_moe * moe_layer["experts"] / (layout.tp * layout.ep)
        out.append((dense, expert))
    return out


def stage_parameters(model: ModelSpec, layout: Layout) -> tuple[float, float]:
    """(non-expert, expert) parameters per GPU on the pipeline rank holding the most."""
    return max(rank_parameters(model, layout), key=sum)
