"""Memory per GPU: model states (weights, gradients, Adam) and activations.

Model states (Megatron mixed precision): bf16 weights 2 B, fp32 main gradients 4 B
(2 B with ``grad_reduce_dtype='bf16'``), fp32 master weights + two Adam moments 12 B per
parameter (8 B with ``adam_moments_dtype='bf16'``, DeepSeek-V3's optimizer): 18 B per
parameter, as docs/references.md §5. ZeRO-1 (Megatron's distributed optimizer)
shards the 12 B over the data-parallel x context-parallel ranks (``6 + 12/d``), ZeRO-2 the
gradients too, ZeRO-3 everything. Expert weights are sharded over ``expert_tp x ep`` and
their optimizer over the expert data-parallel ranks.

Activations per layer and micro-batch, generalising Korthikanti et al. (``s b h (34 + 5 a
s / h)`` for GPT with dropout) to GQA/MLA, gated FFNs and MoE from the saved tensors:
norm inputs and outputs and dropout masks (replicated over TP without sequence
parallelism), Q/K/V, attention output and FFN intermediates (sharded by TP), and the
``s x s`` softmax / dropout tensors of eager attention (dropped by Flash attention and by
selective recompute). Full recompute keeps only each layer's input. Pipeline rank ``r``
holds the activations of :func:`fabricflow.workload.stages.in_flight_chunks` micro-batch
chunks at its peak.

Offload (``Layout.offload_weights`` / ``offload_optimizer`` / ``offload_activations``, a
fraction ``f`` of each): the offloaded part lives in host (or pooled) memory and is streamed
through HBM layer by layer, double-buffered, so HBM keeps ``(1 - f)`` of the state plus
``f`` of two layers' worth (weights and optimizer state: the rank's total over its layers;
activations: one layer of one micro-batch, as saved for backward). Offloading therefore
never raises the estimate, and ``f = 0`` leaves it exactly as without offload. The recompute
working set (one full layer under full recompute) and the logits stay in HBM. See
docs/memory-offload.md; the transfer time is in :func:`fabricflow.step_time`.

Table interface: :func:`memory_table` sizes every row of a
:class:`~fabricflow.workload.layout_table.LayoutTable` at once (arrays of bytes ``[N]``, the most
loaded pipeline rank of each row); :func:`rank_memory` and :func:`memory_per_gpu` run it on
one layout.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.workload.layer_cost import layer_shapes, module_masks, routed_tokens
from fabricflow.workload.layout import Layout, for_layout
from fabricflow.workload.layout_table import LayoutTable
from fabricflow.workload.model_spec import ModelSpec
from fabricflow.workload.stages import StageGroup, rank_names, rank_structure, stage_groups
from fabricflow.workload.stages import in_flight_chunks as chunks_in_flight

GIB = 2.0**30
# HBM a training process cannot give to tensors (docs/memory-offload.md, "Headroom"): the
# CUDA context with library workspaces, NCCL's communicator buffers, and what the caching
# allocator reserves beyond the live tensors (fragmentation), as a fixed part plus a
# fraction of the device.
HEADROOM_FIXED_BYTES = 2.0 * GIB
HEADROOM_FRACTION = 0.03


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
class MemoryTable:
    """HBM bytes per GPU of the most loaded pipeline rank of every row (arrays ``[N]``).

    Attributes:
        weights, gradients, optimizer, activations: bytes in HBM (offload applied).
        offloaded: bytes kept in host (or pooled) memory instead, not in ``total``.
        rank: int ``[N]`` index of that pipeline rank (0 = first).
    """

    weights: np.ndarray
    gradients: np.ndarray
    optimizer: np.ndarray
    activations: np.ndarray
    offloaded: np.ndarray
    rank: np.ndarray

    @property
    def total(self) -> np.ndarray:
        """HBM bytes ``[N]`` (the offloaded part excluded)."""
        return self.weights + self.gradients + self.optimizer + self.activations


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


def memory_headroom(gpu) -> float:
    """Bytes of ``gpu``'s HBM kept free of the estimated tensors: ``HEADROOM_FIXED_BYTES``
    (CUDA context and workspaces, NCCL buffers) + ``HEADROOM_FRACTION`` of the device
    (allocator fragmentation). The layout optimizer and :func:`fabricflow.step_time` both
    refuse estimates above :func:`usable_hbm`; the step reports the margin below it."""
    return HEADROOM_FIXED_BYTES + HEADROOM_FRACTION * gpu.hbm


def usable_hbm(gpu) -> float:
    """Bytes of HBM the estimated tensors may use: ``gpu.hbm - memory_headroom(gpu)``."""
    return gpu.hbm - memory_headroom(gpu)


def layer_activation_table(model: ModelSpec, table: LayoutTable, *, moe: bool) -> np.ndarray:
    """Bytes ``[N]`` one layer saves for backward for one micro-batch on one GPU, for every
    row of ``table``, with the modules of selective recompute not saved (full recompute is
    the rank composition's business: it keeps :func:`checkpoint_table` instead).

    Saved tensors (bf16, 2 B per element, unless said): the two norm inputs and outputs
    (the norm outputs are the QKV / FC1 inputs: 1 B under fp8, which Transformer Engine
    keeps as the fp8 copy its weight-gradient GEMM reads), Q, K, V and the attention output
    (the fused kernel's backward reads them; under fp8 the projection also keeps its 1-B
    input) and the softmax statistics (4 B per head), the FFN's up-projection output and
    activation output (1 B under fp8); MLA adds the compressed Q and KV latents and their
    norm inputs; a MoE layer keeps fp32 router scores, and per routed token copy the expert
    input, up-projection output, activation output and its fp32 routing probability (the
    probability multiplies the activation, so the expert output is not kept;
    docs/references.md §21); ``fp8_activation_cache`` keeps the up-projection output in
    FP8 and the attention output once (DeepSeek-V3's storage); eager attention the
    ``s x s`` scores and softmax (and dropout mask and output); dropout masks 1 B. Norm
    tensors are per token of the SP shard, the rest per token of the TP-sharded widths.
    Selective recompute drops: ``core_attn`` the ``s x s`` tensors (a fused kernel keeps
    none), ``layernorm`` the norm outputs, ``mla_up_proj`` Q, K, V (the latents stay),
    ``mlp`` a dense layer's FFN internals, ``moe`` a MoE layer's (its input stays),
    ``moe_act`` the expert activation outputs, ``shared_experts`` the shared experts'
    internals (Megatron-Core's modules: ``mlp`` is the dense MLP only).
    """
    z = layer_shapes(model, table)
    modules = module_masks(table)
    h = float(model.hidden_size)
    fp8_width = np.where(z.fp8, 1.0, 2.0)
    keep = lambda name: np.where(modules[name], 0.0, 1.0)  # noqa: E731
    mask = 1.0 if model.hidden_dropout > 0 else 0.0
    norms = (2.0 * 2.0 + 2.0 * mask) * h + keep("layernorm") * 2.0 * fp8_width * h
    saved = norms * z.sharded
    qkv = 2.0 * (z.q + z.k + z.v) * (keep("mla_up_proj") if model.is_mla else 1.0)
    cached = table.fp8_activation_cache  # DeepSeek-V3's FP8 activation storage
    attention = qkv + 2.0 * z.o + np.where(z.fp8 & ~cached, z.o, 0.0)
    if model.attention != "eager":  # a fused kernel's fp32 log-sum-exp per query and head
        attention = attention + 4.0 * model.num_heads / z.tp
    if model.is_mla:
        latents = float(model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim)
        attention = attention + 2.0 * 2.0 * latents
    saved = saved + attention * z.tokens
    if model.attention == "eager":
        scores = (
            model.num_heads
            / z.tp
            * table.seq_len
            * (2.0 + (3.0 if model.attention_dropout > 0 else 0.0))
        )
        saved = (
            saved
            + np.where(modules["core_attn"] | (table.recompute == "full"), 0.0, scores) * z.tokens
        )
    up_factor = 2.0 if model.gated_ffn else 1.0
    if moe:
        pairs, _ = routed_tokens(model, table)
        width = model.moe_intermediate_size / table.expert_tensor
        # the routing probability multiplies the activation output (Megatron-Core's
        # activation_func_with_probs), so the expert output is not saved; its fp32 prob is
        swiglu_in = np.where(cached, 1.0, 2.0)
        per_copy = fp8_width * h + swiglu_in * up_factor * width + 4.0
        per_copy = per_copy + keep("moe_act") * fp8_width * width
        experts = per_copy * pairs * keep("moe") + 4.0 * model.num_experts * z.sharded
        saved = saved + experts
        if model.num_shared_experts:
            shared = model.num_shared_experts * model.moe_intermediate_size / z.tp
            inner = (2.0 * up_factor + fp8_width) * shared * z.tokens
            saved = saved + inner * keep("moe") * keep("shared_experts")
    else:
        width = model.intermediate_size / z.tp
        saved = saved + (2.0 * up_factor + fp8_width) * width * z.tokens * keep("mlp")
    return np.asarray(saved, dtype=np.float64)


def recomputed_per_chunk(table: LayoutTable, layers_per_chunk: np.ndarray) -> np.ndarray:
    """Layers ``[n, P]`` of each rank's virtual chunk that full recompute recomputes
    (``recompute_layers``, or all of them when 0; none without full recompute); ``table``
    has the ``n`` rows and ``layers_per_chunk`` is ``[n, P]``."""
    limit = table.recompute_layers.astype(np.float64)[:, None]
    full = (table.recompute == "full")[:, None]
    capped = np.where(limit > 0, np.minimum(limit, layers_per_chunk), layers_per_chunk)
    return np.where(full, capped, 0.0)


def checkpoint_table(model: ModelSpec, table: LayoutTable) -> np.ndarray:
    """Bytes ``[N]`` a fully recomputed layer keeps per micro-batch: its bf16 input, on the
    SP shard."""
    tokens = table.micro_batch * table.seq_len / table.cp
    shard = np.where(table.sequence_parallel, table.tp, 1)
    return 2.0 * tokens * model.hidden_size / shard


def layer_activation_bytes(model: ModelSpec, layout: Layout, *, moe: bool) -> float:
    """Bytes saved for backward by one layer and one micro-batch on one GPU (no recompute)."""
    return float(for_layout(layer_activation_table, layout, model=model, moe=moe))


@dataclasses.dataclass(frozen=True)
class RankStates:
    """Bytes per GPU of every rank of a stage group (arrays ``[n, P]``), before offload."""

    kept: np.ndarray  # [P] layers whose weights each rank keeps
    weights: np.ndarray
    gradients: np.ndarray
    optimizer: np.ndarray
    stored_activations: np.ndarray  # saved for backward over all in-flight micro-batches
    working_activations: np.ndarray  # the layer recomputed under full recompute: kept in HBM
    logits: np.ndarray  # logits (and their gradient) on the last rank: kept in HBM
    layer_activations: np.ndarray  # saved by one layer for one micro-batch

    def row(self, index: int) -> RankStates:
        """Row ``index`` of the group (arrays ``[P]``; ``kept`` is the group's already)."""
        return RankStates(
            **{
                f.name: getattr(self, f.name) if f.name == "kept" else getattr(self, f.name)[index]
                for f in dataclasses.fields(self)
            }
        )


def _check_inputs(model, layout_or_table) -> None:
    if not isinstance(model, ModelSpec):
        raise SpecError(
            "model", f"expected a ModelSpec (fabricflow.load_model), got {type(model).__name__}"
        )
    if not isinstance(layout_or_table, (Layout, LayoutTable)):
        raise SpecError("layout", f"expected a Layout, got {type(layout_or_table).__name__}")


def rank_parameter_arrays(
    model: ModelSpec, table: LayoutTable, group: StageGroup
) -> tuple[np.ndarray, np.ndarray]:
    """(non-expert, expert) parameters per GPU ``[n, P]`` of every rank of ``group``.

    Non-expert parameters are split over TP (and reduced over the data x context-parallel
    ranks), expert ones over ``expert_tp x ep`` (reduced over the expert data-parallel ranks).
    """
    t = table.take(group.rows)
    tp = t.tp.astype(np.float64)[:, None]
    moe_fraction = model.num_moe_layers / model.num_layers
    dense_layer = sum(model.layer_parameters(False).values())
    embedding = model.vocab_size * model.hidden_size / tp
    tied_single = group.pp == 1 and model.tie_word_embeddings
    kept = group.kept[None, :]
    n_moe = kept * moe_fraction
    dense = (kept - n_moe) * dense_layer / tp
    dense = dense + embedding * group.embedding[None, :]
    dense = dense + (0.0 if tied_single else 1.0) * embedding * group.head[None, :]
    expert = np.zeros_like(dense)
    # multi-token-prediction modules on the head rank: one layer and a 2h x h projection each
    n_mtp = model.mtp_layers * group.head[None, :]
    h = float(model.hidden_size)
    if model.is_moe:
        moe_layer = model.layer_parameters(True)
        n_moe = n_moe + n_mtp
        dense = (
            dense + n_moe * (moe_layer["attention"] + moe_layer["norm"] + moe_layer["shared"]) / tp
        )
        expert = n_moe * moe_layer["experts"] / (t.expert_tensor * t.ep).astype(np.float64)[:, None]
    else:
        dense = dense + n_mtp * dense_layer / tp
    dense = dense + n_mtp * 2.0 * h * h / tp
    return dense, expert


def _states(table: LayoutTable, params: np.ndarray, shards: np.ndarray) -> tuple:
    """(weights, gradients, optimizer) bytes ``[n, P]`` of ``params`` sharded by ZeRO over
    ``shards`` ``[n]`` ranks."""
    grad_bytes = np.where(table.grad_reduce_dtype == "fp32", 4.0, 2.0)[:, None]
    zero = table.zero[:, None]
    shards = shards.astype(np.float64)[:, None]
    weights = np.where(zero >= 3, 2.0 * params / shards, 2.0 * params)
    grads = np.where(zero >= 2, grad_bytes * params / shards, grad_bytes * params)
    # fp32 master weights and Adam's two moments (fp32, or bf16: precision-aware optimizer)
    per_param = 4.0 + 2.0 * np.where(table.adam_moments_dtype == "bf16", 2.0, 4.0)[:, None]
    optimizer = np.where(zero >= 1, per_param * params / shards, per_param * params)
    return weights, grads, optimizer


def rank_states(model: ModelSpec, table: LayoutTable, group: StageGroup) -> RankStates:
    """Bytes per GPU ``[n, P]`` of every rank of a stage group (``group.rows`` index
    ``table``), before offload."""
    t = table.take(group.rows)
    dense, expert = rank_parameter_arrays(model, table, group)
    wd, gd, od = _states(t, dense, t.dp * t.cp)
    we, ge, oe = _states(t, expert, t.expert_dp)
    moe_fraction = model.num_moe_layers / model.num_layers
    full_layer = (1.0 - moe_fraction) * layer_activation_table(model, t, moe=False)
    if model.is_moe:
        full_layer = full_layer + moe_fraction * layer_activation_table(model, t, moe=True)
    full_layer = full_layer[:, None]
    tokens = (t.micro_batch * t.seq_len / t.cp).astype(np.float64)
    checkpoint = checkpoint_table(model, t)[:, None]
    chunks = chunks_in_flight(t, group.pp)
    layers_per_chunk = group.passed[None, :] / t.vpp[:, None]
    recomputed = recomputed_per_chunk(t, layers_per_chunk)
    full = (t.recompute == "full")[:, None]
    per_chunk = recomputed * checkpoint + (layers_per_chunk - recomputed) * full_layer
    stored = chunks * per_chunk
    # multi-token-prediction modules: one layer more (MoE if the model has experts) and
    # another fp32 logits tensor on the head rank
    if model.mtp_layers:
        mtp_layer = layer_activation_table(model, t, moe=model.is_moe)[:, None]
        stored = stored + model.mtp_layers * group.head[None, :] * chunks * mtp_layer
    per_layer = per_chunk / np.maximum(layers_per_chunk, 1e-12)
    working = np.where(full, full_layer, 0.0) + 0.0 * stored
    # logits kept for the loss's backward: bf16 with the gradient written in place (fused
    # cross entropy), or fp32 logits and their fp32 gradient (Megatron's vocab-parallel loss)
    per_logit = np.where(t.fused_cross_entropy, 2.0, 2 * 4.0)
    logits = (per_logit * tokens * model.vocab_size / t.tp)[:, None] * group.head[None, :]
    logits = logits * (1.0 + model.mtp_layers)
    return RankStates(
        kept=group.kept,
        weights=wd + we,
        gradients=gd + ge,
        optimizer=od + oe,
        stored_activations=stored,
        working_activations=working,
        logits=logits,
        layer_activations=per_layer + 0.0 * stored,
    )


def _with_offload(table: LayoutTable, ranks: RankStates) -> dict:
    """HBM bytes ``[n, P]`` of every rank once the offloaded fractions move to the host."""
    f_w = table.offload_weights[:, None]
    f_o = table.offload_optimizer[:, None]
    f_a = table.offload_activations[:, None]
    # layer by layer, double-buffered: two layers' share of the offloaded part stays in HBM
    buffer = np.minimum(1.0, 2.0 / np.maximum(ranks.kept, 1.0))[None, :]
    moved_w = f_w * ranks.weights
    moved_o = f_o * ranks.optimizer
    moved_a = f_a * ranks.stored_activations
    staged = f_a * np.minimum(ranks.stored_activations, 2.0 * ranks.layer_activations)
    activations = ranks.stored_activations - moved_a + staged
    activations = activations + ranks.working_activations + ranks.logits
    return {
        "weights": ranks.weights - moved_w * (1.0 - buffer),
        "gradients": ranks.gradients,
        "optimizer": ranks.optimizer - moved_o * (1.0 - buffer),
        "activations": activations,
        "offloaded": moved_w + moved_o + moved_a,
    }


def memory_table(model: ModelSpec, table: LayoutTable) -> MemoryTable:
    """HBM bytes per GPU of the most loaded pipeline rank of every row of ``table``.

    Vectorized over rows (see :mod:`fabricflow.workload.stages` for the grouping by pipeline
    structure); rows are not validated here (use
    :func:`~fabricflow.workload.layout.table_problems`). Offload is applied as the module
    docstring says.
    """
    n = len(table)
    out = {
        key: np.zeros(n)
        for key in ("weights", "gradients", "optimizer", "activations", "offloaded")
    }
    rank = np.zeros(n, dtype=np.int64)
    for group in stage_groups(model, table):
        parts = rank_memory_arrays(model, table, group)
        total = parts["weights"] + parts["gradients"] + parts["optimizer"] + parts["activations"]
        worst = np.argmax(total, axis=1)
        pick = np.arange(len(group.rows))
        for key in out:
            out[key][group.rows] = parts[key][pick, worst]
        rank[group.rows] = worst
    return MemoryTable(rank=rank, **out)


def rank_memory_arrays(model: ModelSpec, table: LayoutTable, group: StageGroup) -> dict:
    """HBM bytes ``[n, P]`` (``weights``, ``gradients``, ``optimizer``, ``activations``,
    ``offloaded``) of every rank of a stage group, offload applied."""
    return _with_offload(table.take(group.rows), rank_states(model, table, group))


def _per_rank(rank_arrays, model: ModelSpec, layout: Layout):
    """``rank_arrays(model, table, group)`` (a per-rank table form: arrays ``[n, P]``) for
    one layout, as its row (arrays ``[P]``; see :func:`for_layout`)."""

    def of_table(table: LayoutTable):
        return rank_arrays(model, table, stage_groups(model, table)[0])

    return for_layout(of_table, layout)


def _checked(model: ModelSpec, layout: Layout) -> None:
    _check_inputs(model, layout)
    layout.validate(model)


def rank_memory(model: ModelSpec, layout: Layout) -> tuple[MemoryEstimate, ...]:
    """HBM per GPU of every pipeline rank, first to last (length ``pp``), offload applied;
    see the module doc. ``layout`` is validated against ``model`` first."""
    _checked(model, layout)
    parts = _per_rank(rank_memory_arrays, model, layout)
    names = rank_names(layout.pp)
    return tuple(
        MemoryEstimate(
            weights=float(parts["weights"][r]),
            gradients=float(parts["gradients"][r]),
            optimizer=float(parts["optimizer"][r]),
            activations=float(parts["activations"][r]),
            rank=names[r],
            offloaded=float(parts["offloaded"][r]),
        )
        for r in range(layout.pp)
    )


def memory_per_gpu(model: ModelSpec, layout: Layout) -> MemoryEstimate:
    """Memory of the most loaded pipeline rank (first: embedding; last: head and logits;
    with an uneven split, possibly a heavier middle rank); see :func:`rank_memory`.

    ``layout`` is validated against ``model`` first (:class:`SpecError` naming the field).
    Offloaded fractions (``layout.offload_*``) are taken out of HBM as the module says.
    """
    return max(rank_memory(model, layout), key=lambda estimate: estimate.total)


def offload_traffic(model: ModelSpec, layout: Layout) -> list[OffloadTraffic]:
    """Host-link bytes of every pipeline rank, first to last (all zeros when nothing is
    offloaded)."""
    _checked(model, layout)
    ranks = _per_rank(rank_states, model, layout)
    names = rank_names(layout.pp)
    return [
        OffloadTraffic(
            rank=names[r],
            layers=int(ranks.kept[r]),
            weights=layout.offload_weights * float(ranks.weights[r]),
            optimizer=layout.offload_optimizer * float(ranks.optimizer[r]),
            activations=layout.offload_activations
            * float(ranks.kept[r])
            * float(ranks.layer_activations[r]),
        )
        for r in range(layout.pp)
    ]


def rank_name(layout: Layout, index: int) -> str:
    """``only`` (pp = 1), ``first``, ``last`` or ``rank <index>`` (0-based)."""
    return rank_names(layout.pp)[index]


def rank_holdings(model: ModelSpec, layout: Layout) -> list[tuple[int, float, bool, bool]]:
    """Per pipeline rank: (layers whose weights it keeps, layers a micro-batch passes on it,
    holds the embedding, holds the output head and loss); see
    :mod:`fabricflow.workload.stages`."""
    kept, passed, embedding, head = rank_structure(
        model.num_layers, layout.pp, layout.vpp, layout.schedule == "dualpipe", layout.pp_split
    )
    return [
        (int(k), float(p), bool(e), bool(h))
        for k, p, e, h in zip(kept, passed, embedding, head, strict=True)
    ]


def in_flight_chunks(layout: Layout, rank: int) -> int:
    """Micro-batch chunks (of ``layers_per_rank / vpp`` layers) whose activations pipeline
    rank ``rank`` holds at its peak (:func:`fabricflow.workload.stages.in_flight_chunks`)."""
    return int(for_layout(chunks_in_flight, layout, pp=layout.pp)[rank])


def rank_parameters(model: ModelSpec, layout: Layout) -> list[tuple[float, float]]:
    """(non-expert, expert) parameters per GPU of every pipeline rank, first to last.

    Non-expert parameters are reduced over data x context parallel ranks, expert ones over
    the expert data-parallel ranks.
    """
    dense, expert = _per_rank(rank_parameter_arrays, model, layout)
    return [(float(d), float(e)) for d, e in zip(dense, expert, strict=True)]


def stage_parameters(model: ModelSpec, layout: Layout) -> tuple[float, float]:
    """(non-expert, expert) parameters per GPU on the pipeline rank holding the most."""
    return max(rank_parameters(model, layout), key=sum)
