"""Model FLOPs derived from the shapes (GQA, SwiGLU, MoE top-k, MLA), per token and per step.

Convention (Megatron SC21 eq. 3, PaLM): a multiply-add is 2 FLOPs; attention scores and
context count the full ``s x s`` product (no causal halving) so that MFU figures compare
with published ones; backward = 2 x forward. For the dense GPT of Megatron this gives
``72 B s l h^2 (1 + s/(6h) + V/(12 l h))`` per step without recompute and
``96 B s l h^2 (1 + s/(6h) + V/(16 l h))`` with full recompute (the layers run forward
twice, the logits once).

Two counts are kept apart. *Model FLOPs* (:func:`model_flops_per_step`, the MFU numerator,
the Megatron/PaLM convention) and Megatron's "achieved" count
(:func:`hardware_flops_per_step`, model FLOPs plus recomputation) both charge the full
``s x s`` attention product. *Executed FLOPs* (:func:`executed_flops_per_step`, what
``hardware_tflops_per_gpu`` counts) are the multiply-adds the kernels of the step model
actually run: a causal Flash kernel skips the tiles above the diagonal (half the product)
and its backward recomputes the scores (``FLASH_BACKWARD`` x its forward), an eager kernel
materialises the whole product. The step model times exactly the executed FLOPs, each at
most at the GPU's peak, so executed FLOP/s never exceed the peak; model FLOP/s can (for
very long causal sequences the masked half that is never computed dominates the count).
"""

from __future__ import annotations

from fabricflow.workload.layer_cost import FLASH_BACKWARD
from fabricflow.workload.model_spec import ModelSpec


def attention_core_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """Forward FLOPs per token of ``softmax(Q K^T) V`` over ``seq_len`` keys (all heads)."""
    return 2.0 * seq_len * model.num_heads * (model.qk_head_dim + model.value_head_dim)


def layer_flops_per_token(model: ModelSpec, seq_len: int, *, moe: bool) -> float:
    """Forward FLOPs per token of one transformer layer (dense, or MoE with top-k experts)."""
    projections = sum(i * o for i, o in model.attention_weight_shapes())
    if moe:
        expert = sum(i * o for i, o in model.ffn_weight_shapes(model.moe_intermediate_size))
        ffn = (model.experts_per_token + model.num_shared_experts) * expert
        ffn += model.hidden_size * model.num_experts  # router
    else:
        ffn = sum(i * o for i, o in model.ffn_weight_shapes(model.intermediate_size))
    return 2.0 * (projections + ffn) + attention_core_flops_per_token(model, seq_len)


def forward_flops_per_token(model: ModelSpec, seq_len: int) -> dict[str, float]:
    """Forward FLOPs per token: ``layers`` (all of them) and ``logits`` (output projection)."""
    layers = model.num_dense_layers * layer_flops_per_token(model, seq_len, moe=False)
    if model.is_moe:
        layers += model.num_moe_layers * layer_flops_per_token(model, seq_len, moe=True)
    return {"layers": layers, "logits": 2.0 * model.hidden_size * model.vocab_size}


def model_flops_per_step(model: ModelSpec, seq_len: int, global_batch: int) -> float:
    """Model FLOPs of one training step (forward + backward, no recompute): the MFU numerator."""
    per_token = forward_flops_per_token(model, seq_len)
    return 3.0 * global_batch * seq_len * (per_token["layers"] + per_token["logits"])


def megatron_flops_per_step(model: ModelSpec, seq_len: int, global_batch: int) -> float:
    """Model FLOPs of one step as Megatron-LM's logged TFLOP/s counts them
    (``num_floating_point_operations`` of ``megatron/training/training.py``): as
    :func:`model_flops_per_step` but the causal attention core charged half the ``s x s``
    product (its ``seq_length / 2``), which published Megatron-Core throughputs use."""
    core = model.num_layers * attention_core_flops_per_token(model, seq_len)
    return model_flops_per_step(model, seq_len, global_batch) - 1.5 * global_batch * seq_len * core


def hardware_flops_per_step(
    model: ModelSpec, seq_len: int, global_batch: int, recompute: str
) -> float:
    """FLOPs actually executed, counting recomputation (Megatron's "achieved TFLOP/s")."""
    per_token = forward_flops_per_token(model, seq_len)
    tokens = global_batch * seq_len
    total = 3.0 * tokens * (per_token["layers"] + per_token["logits"])
    if recompute == "full":
        total += tokens * per_token["layers"]
    elif recompute == "selective":
        total += tokens * model.num_layers * attention_core_flops_per_token(model, seq_len)
    return total


def executed_flops_per_step(
    model: ModelSpec, seq_len: int, global_batch: int, recompute: str
) -> float:
    """FLOPs the step model's kernels execute in one step (the ``hardware_tflops_per_gpu``
    numerator): weight GEMMs and logits as in :func:`hardware_flops_per_step`, the attention
    core as its kernel runs it (Flash, causal: half the ``s x s`` product forward and
    ``FLASH_BACKWARD`` x that backward, ``min(window, s)`` keys per query on the
    sliding-window layers; eager: the full product, backward 2 x forward)."""
    per_token = forward_flops_per_token(model, seq_len)
    core = model.num_layers * attention_core_flops_per_token(model, seq_len)
    gemms = per_token["layers"] - core
    if model.attention == "flash":
        # a sliding-window layer's query sees min(window, s) keys, a full layer half the
        # sequence on average (causal), as the kernel times of layer_cost charge them
        sliding = model.sliding_layers / model.num_layers if model.sliding_window else 0.0
        window = min(float(model.sliding_window), float(seq_len)) if sliding else 0.0
        run = core * ((1.0 - sliding) * 0.5 + sliding * window / seq_len)
        core_fwd, core_bwd = run, FLASH_BACKWARD * run
    else:
        core_fwd, core_bwd = core, 2.0 * core
    tokens = global_batch * seq_len
    total = tokens * (3.0 * (gemms + per_token["logits"]) + core_fwd + core_bwd)
    if recompute == "full":
        total += tokens * (gemms + core_fwd)
    elif recompute == "selective":
        total += tokens * core_fwd
    return total
