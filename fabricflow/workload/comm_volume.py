"""Bytes each GPU sends per training step on each parallel dimension (TP, CP, EP, DP, PP).

Used by the topology-aware placement to rank dimensions from heaviest to lightest. The
message sizes and counts are the step model's (:mod:`fabricflow.workload.step`); each is
turned into bytes on the wire per rank with the nccl-tests bus factors (docs/references.md
§4): all-reduce ``2 (n-1)/n S``, all-gather / reduce-scatter / all-to-all ``(n-1)/n S``,
send/recv ``S``. Overlap does not change the bytes, so it is ignored here.

Without a model the ranking falls back to :data:`DEFAULT_RANKING` (TP > CP > EP > DP > PP,
the usual order of per-step volume in Megatron-style training: TP moves activations
several times per layer, CP moves keys/values per layer, EP moves routed tokens per MoE
layer, DP moves gradients once per step, PP moves one activation per micro-batch).
"""

from __future__ import annotations

from fabricflow.workload.gpu_memory import stage_parameters
from fabricflow.workload.layout import Layout
from fabricflow.workload.model_spec import ModelSpec

DEFAULT_RANKING = ("tp", "cp", "ep", "dp", "pp")


def dimension_bytes(model: ModelSpec, layout: Layout) -> dict[str, float]:
    """Bytes sent per GPU per step on each dimension (0 for a dimension of size 1).

    Keys ``tp, cp, ep, dp, pp``; values in bytes. ``dp`` counts the gradient reduction over
    the data x context-parallel group (and the expert data-parallel group of MoE layers).
    """
    m = layout.num_micro_batches
    layers = model.num_layers / layout.pp  # per pipeline rank
    moe_layers = layers * model.num_moe_layers / model.num_layers
    tokens = layout.micro_batch * layout.seq_len / layout.cp
    passes_fwd = 2 if layout.recompute == "full" else 1
    out = dict.fromkeys(DEFAULT_RANKING, 0.0)
    if layout.tp > 1:
        # Two all-reduces (or all-gather + reduce-scatter pairs, the same bytes) per pass.
        size = 2.0 * tokens * model.hidden_size
        wire = 2.0 * (layout.tp - 1) / layout.tp * size
        out["tp"] = m * layers * (passes_fwd + 1) * 2 * wire
    if layout.cp > 1:
        chunk = 2.0 * tokens * model.kv_width / layout.tp
        redo = 1 if layout.recompute in ("full", "selective") else 0
        # Ring attention: cp - 1 chunks forward (again under recompute), 2x that backward.
        out["cp"] = m * layers * (layout.cp - 1) * chunk * (1 + redo + 2)
    if model.is_moe and layout.ep > 1:
        copies = tokens / layout.tp * model.experts_per_token * model.hidden_size
        copies *= layout.moe_imbalance
        dispatch = 1.0 if layout.precision == "fp8" else 2.0
        per_layer = passes_fwd * (dispatch + 2.0) * copies + 2 * 2.0 * copies
        out["ep"] = m * moe_layers * (layout.ep - 1) / layout.ep * per_layer
    dense, expert = stage_parameters(model, layout)
    grad_bytes = 4.0 if layout.grad_reduce_dtype == "fp32" else 2.0
    if layout.zero == 0:
        per_param = 2.0 * grad_bytes  # all-reduce of gradients
    elif layout.zero == 3:
        per_param = m * (2 * 2.0 + grad_bytes)  # per micro-batch: 2 gathers, 1 scatter
    else:
        per_param = grad_bytes + 2.0  # reduce-scatter gradients, all-gather bf16 params
    for params, size in ((dense, layout.dp * layout.cp), (expert, layout.expert_dp)):
        if size > 1 and params > 0:
            out["dp"] += (size - 1) / size * per_param * params
    if layout.pp > 1:
        size = 2.0 * layout.micro_batch * layout.seq_len / layout.cp * model.hidden_size
        out["pp"] = 2 * m * layout.vpp * size / layout.tp
    return out


def rank_dimensions(model: ModelSpec | None, layout: Layout) -> tuple[str, ...]:
    """Dimensions from heaviest to lightest per step; ties (and no model) keep
    :data:`DEFAULT_RANKING`'s order."""
    if model is None:
        return DEFAULT_RANKING
    volume = dimension_bytes(model, layout)
    return tuple(sorted(DEFAULT_RANKING, key=lambda d: (-volume[d], DEFAULT_RANKING.index(d))))
