"""Host (CPU) time to issue a layer's kernels in eager mode, and when the GPU waits for it.

A training step in eager PyTorch is issued by one host thread per GPU: every op of the
framework (a Transformer Engine module call, a PyTorch op, a collective call, a kernel
launch from a C++ loop) costs host time before its kernels reach the GPU's queue. While
the host is ahead, the GPU never waits; a layer whose host work exceeds its kernels' time
runs at the host's pace.

A dropless MoE layer synchronizes the host with the GPU once per forward pass: the token
counts per expert are copied to the host (Megatron-Core's all-to-all dispatcher needs them
as Python split sizes for the all-to-all and the grouped GEMMs), so the host waits until
the GPU has run everything before, and the queue is empty when it resumes. From that point
to the next layer's synchronization the GPU can only run what the host has issued: with
the post-sync part ``A`` (all-to-alls, expert GEMMs, un-permutation; GPU time ``gA``
including the exposed dispatch/combine, host time ``cA``) followed by the next layer's
pre-sync part ``B`` (attention block, router, token permutation; ``gB``, ``cB``), a FIFO
of uniform kernels takes ``max(gA + gB, cA + gB, cA + cB)``. The backward pass has no
synchronization (split sizes are kept from the forward), so the host runs ahead across
it: ``max(c_b, g_b)``. Dense layers and MoE layers with a capacity factor (static shapes,
padded to capacity) never synchronize: ``max(c, g)``.

Host work is counted per layer pass as Transformer Engine module calls and other eager
ops (:data:`FORWARD` and :data:`BACKWARD`, counted from Megatron-Core 0.15's
TransformerLayer, TopKRouter, MoEAlltoAllTokenDispatcher and TEGroupedMLP and Transformer
Engine 2.9's GroupedLinear; docs/references.md §17), each charged the system CPU's
measured time per eager op (``GpuSpec.host_op_s``); a module call costs the software
stack's ``host_module_ops`` such ops (:class:`~fabricflow.workload.stack.Stack`). The
router's forward and the dispatch preprocessing take the stack's measured kernel counts
(``router_ops`` with ``moe_router_fusion``, ``router_unfused_ops`` without it,
``flex_preprocess_ops`` for both under a flex dispatcher, DeepEP or HybridEP), and an MXFP8
quantization of an expert's input ``mxfp8_quantize_ops``; under MXFP8 every linear
module's quantization of its input (forward) or output gradient (backward) adds the
``mxfp8_quantize_ops - 1`` allocation, zero-fill and swizzle ops beyond the quantize kernel
that a per-tensor recipe also launches (:data:`LINEAR_MODULES`; NVIDIA's GB200 guide,
2.1.2-2.1.3). A recomputed module (``recompute_modules``, or the whole layer under full
recompute) is issued again by the host in the backward pass. Without ``cpu_binding`` every
host op takes ``unbound_host_factor`` times as long. CUDA graphs replay captured work with
one launch: ``cuda_graphs`` (the whole step) removes all host work, ``cuda_graph_scope`` the
scopes it names (Megatron's ``attn``, ``mlp``, ``moe``, ``moe_router`` (with the shared
experts), ``moe_preprocess``).

All functions are vectorized over the rows of a layout table (arrays ``[N]``, seconds).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from fabricflow.workload.gpu import GpuSpec
from fabricflow.workload.layout import CUDA_GRAPH_SCOPES
from fabricflow.workload.layout_table import LayoutTable
from fabricflow.workload.model_spec import ModelSpec
from fabricflow.workload.stack import Stack, load_stack

# Host work of one layer pass by part, as (Transformer Engine module calls, other eager
# ops); ``_fp8`` entries are added under fp8, ``expert`` entries per local expert and
# grouped linear (two per MoE layer: FC1 and FC2). Counted from the code paths (see the
# module docstring; an op is one PyTorch op, collective call or kernel launch):
# - attention: LayerNormLinear (QKV), DotProductAttention, Linear (projection); QKV split,
#   fused RoPE of Q and of K, bias-dropout-add. qk_norm adds two TENorm modules; MLA
#   (DeepSeek) has Q/KV down- and up-projections (4 modules) and its RoPE split/concat.
# - mlp (dense): LayerNormLinear (FC1), Linear (FC2); fused bias-SwiGLU, bias-dropout-add.
# - router: the pre-MLP TENorm module; gating GEMM, fused top-k and score, the forced
#   balancing's random logits (2), the auxiliary loss (token counts, their all-reduce, the
#   fused loss kernel, its autograd scaler, 2 tracker ops).
# - preprocess: token counts per expert and rank (7 sums, reshapes and slices), the count
#   all-gather, the device-to-host copies of the split sizes (event + 4 copies), the fused
#   permutation (row map 2, permute 1).
# - dispatch (after the synchronization): the wait and the ``tolist`` of the counts (2),
#   all-to-all of tokens and of probabilities, fused chunk sort of both, fused weighted
#   SwiGLU, chunk unsort, combine all-to-all, fused un-permutation, residual add; under
#   fp8 the padding of tokens and probabilities to the fp8 GEMM alignment and the
#   un-padding; the two GroupedLinear module calls.
# - expert (per local expert and grouped linear): the GEMM launch from the grouped-GEMM
#   loop, under fp8 the input quantization. Backward: data- and weight-gradient GEMMs, under
#   fp8 the output-gradient quantization.
# - backward also runs the data-parallel wrapper's gradient hook once per parameter and
#   micro-batch (main-gradient bookkeeping and bucket readiness, Megatron-Core
#   DistributedDataParallel): the attention block's QKV, projection and norm weights (3,
#   and the two Q/K norms), the MLP's FC1, FC2 and norm weights (3), the router and pre-MLP
#   norm weights (2), one per expert and grouped linear.
# Linear (GEMM) Transformer Engine modules among each part's modules: all but the
# attention core (DotProductAttention) and the norm modules (Q/K norms, the router's
# pre-MLP norm); MLA has five (Q and KV down- and up-projections, output projection).
LINEAR_MODULES = {"attention": 2, "attention_mla": 5, "mlp": 2}
FORWARD = {
    "attention": (3, 4),
    "attention_qk_norm": (2, 0),
    "attention_mla": (6, 8),
    "mlp": (2, 2),
    "router": (1, 10),
    "preprocess": (0, 16),
    "dispatch": (2, 11),
    "dispatch_fp8": (0, 3),
    "expert": (0, 1),
    "expert_fp8": (0, 1),
}
BACKWARD = {
    "attention": (3, 7),
    "attention_qk_norm": (2, 2),
    "attention_mla": (6, 15),
    "mlp": (2, 5),
    "router": (1, 7),
    "preprocess": (0, 1),
    "dispatch": (2, 8),
    "dispatch_fp8": (0, 3),
    "expert": (0, 3),
    "expert_fp8": (0, 1),
}


@dataclasses.dataclass(frozen=True)
class HostTimes:
    """Host seconds ``[N]`` to issue one layer for one micro-batch, eager where not graphed.

    Attributes:
        pre: forward work issued before a dropless MoE layer's synchronization (all the
            forward of a layer that does not synchronize).
        post: forward work after the synchronization (0 without one).
        backward: the backward pass.
        synced: float ``[N]``, 1 where the forward pass synchronizes host and GPU.
    """

    pre: np.ndarray
    post: np.ndarray
    backward: np.ndarray
    synced: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return self.pre + self.post + self.backward


def scope_masks(table: LayoutTable) -> dict[str, np.ndarray]:
    """Scope name -> bool ``[N]``: captured by a CUDA graph (``cuda_graph_scope``)."""
    out = {name: np.zeros(len(table), dtype=bool) for name in CUDA_GRAPH_SCOPES}
    texts = table.cuda_graph_scope
    for text in np.unique(texts):
        rows = texts == text
        for name in str(text).split(","):
            name = name.strip()
            if name in out:
                out[name] |= rows
    return out


def _cost(parts: list, counts: dict, op_s: np.ndarray, stack: Stack, fp8) -> np.ndarray:
    """Host seconds ``[N]`` of ``parts`` = [(key, multiplicity [N] or scalar), ...]; ``op_s``
    the host seconds per eager op ``[N]``."""
    module = op_s * stack.host_module_ops * np.where(fp8, stack.fp8_module_factor, 1.0)
    total: np.ndarray | float = 0.0
    for key, times in parts:
        modules, ops = counts[key]
        total = total + times * (modules * module + ops * op_s)
    return np.asarray(total, dtype=np.float64) * np.ones(len(fp8))


def op_seconds(gpu: GpuSpec, table: LayoutTable, stack: Stack) -> np.ndarray:
    """Host seconds ``[N]`` per eager op: the system CPU's (``GpuSpec.host_op_s``), times
    the stack's ``unbound_host_factor`` where the process is not bound to its GPU's NUMA
    node (``cpu_binding`` off)."""
    return gpu.host_op_s * np.where(table.cpu_binding, 1.0, stack.unbound_host_factor)


def host_times(
    model: ModelSpec,
    gpu: GpuSpec,
    table: LayoutTable,
    *,
    moe: bool,
    stack: Stack | None = None,
    redo: dict | None = None,
) -> HostTimes:
    """Host seconds to issue one (dense or MoE) layer for one micro-batch, for every row of
    ``table`` under software ``stack`` (None: the default preset; see the module
    docstring); zero under full-step CUDA graphs.

    ``redo``: what the backward pass recomputes, re-issuing its forward host work:
    ``full`` the share ``[N]`` of layers recomputed whole, and per selective module
    (``core_attn``, ``mla_up_proj``, ``layernorm``, ``mlp``, ``moe_act``,
    ``shared_experts``) a bool ``[N]``; None: nothing."""
    stack = load_stack(stack) if not isinstance(stack, Stack) else stack
    n = len(table)
    fp8 = table.precision == "fp8"
    op_s = op_seconds(gpu, table, stack)
    mxfp8 = fp8 & (table.fp8_recipe == "mxfp8")
    # MXFP8's host ops per linear module and pass beyond a per-tensor recipe's
    extra = np.where(mxfp8, stack.mxfp8_quantize_ops - 1.0, 0.0) * op_s
    issue = _Issue(stack, op_s, fp8, scope_masks(table), extra)
    graphed = issue.graphed
    launch = op_s  # one graph replay
    out = {}
    # forward host seconds of the MLP (dense) or MoE block and of the shared experts: what
    # recomputing them re-issues
    parts = {"mlp": np.zeros(n), "shared": np.zeros(n)}
    for name, counts in (("forward", FORWARD), ("backward", BACKWARD)):
        attn = _attention_seconds(model, counts, issue)
        if not moe:
            mlp = np.where(graphed["mlp"], launch, _mlp_seconds(counts, issue))
            out[name] = (attn + mlp, np.zeros(n))
            if name == "forward":
                parts["mlp"] = mlp
            continue
        pre, post, shared = _moe_seconds(model, table, counts, issue, forward=name == "forward")
        out[name] = (attn + pre, post)
        if name == "forward":
            parts = {"mlp": pre + post, "shared": shared}
    synced = moe & (table.moe_capacity_factor == 0.0) & ~graphed["moe"]
    full = table.cuda_graphs
    zero = lambda x: np.where(full, 0.0, x).astype(np.float64)  # noqa: E731
    forward_pre, forward_post = out["forward"]
    backward = out["backward"][0] + out["backward"][1]
    if redo is not None:
        # the recomputed forward work is issued again by the host in the backward pass
        selective = _selective_redo_seconds(model, moe, redo, issue, parts)
        backward = backward + redo["full"] * (forward_pre + forward_post) + selective
    return HostTimes(
        pre=zero(forward_pre),
        post=zero(forward_post),
        backward=zero(backward),
        synced=np.where(synced & ~full, 1.0, 0.0) * np.ones(n),
    )


class _Issue(NamedTuple):
    """What pricing host work needs for every row of a table (``[N]`` arrays):
    ``stack``, ``op_s`` (host seconds per eager op), ``fp8`` (bool), ``graphed``
    (:func:`scope_masks`) and ``extra`` (MXFP8's host seconds per linear module and pass
    beyond a per-tensor recipe's)."""

    stack: Stack
    op_s: np.ndarray
    fp8: np.ndarray
    graphed: dict
    extra: np.ndarray

    def cost(self, parts: list, counts: dict) -> np.ndarray:
        """:func:`_cost` of ``parts`` under this stack: host seconds ``[N]``."""
        return _cost(parts, counts, self.op_s, self.stack, self.fp8)

    def linear(self, module: str) -> np.ndarray:
        """MXFP8's extra host seconds ``[N]`` of the linear layers of ``module``."""
        return self.extra * LINEAR_MODULES[module]


def _attention_seconds(model: ModelSpec, counts: dict, issue: _Issue) -> np.ndarray:
    """Host seconds ``[N]`` of the attention block in one pass (``counts``: :data:`FORWARD`
    or :data:`BACKWARD`): one graph replay where attention is graphed."""
    attention = [("attention_mla" if model.is_mla else "attention", 1.0)]
    if model.qk_norm:
        attention.append(("attention_qk_norm", 1.0))
    attn = issue.cost(attention, counts) + issue.linear(attention[0][0])
    return np.where(issue.graphed["attn"], issue.op_s, attn)


def _mlp_seconds(counts: dict, issue: _Issue) -> np.ndarray:
    """Host seconds ``[N]`` of one dense MLP (or the shared experts) in one pass, eager."""
    return issue.cost([("mlp", 1.0)], counts) + issue.linear("mlp")


def _moe_seconds(
    model: ModelSpec, table: LayoutTable, counts: dict, issue: _Issue, *, forward: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Host seconds ``[N]`` each of the MoE block in one pass: ``(pre, post, shared)``,
    the work before the token dispatch (router and preprocessing), after it (dispatch,
    experts, shared experts) and the shared experts' part of ``post``."""
    stack, op_s, fp8, graphed = issue.stack, issue.op_s, issue.fp8, issue.graphed
    launch = op_s  # one graph replay
    on = lambda mask: np.where(mask, 1.0, 0.0)  # noqa: E731
    flex = (table.dispatcher == "deepep") | (table.dispatcher == "hybridep")
    quantize_ops = np.where(fp8 & (table.fp8_recipe == "mxfp8"), stack.mxfp8_quantize_ops, 1.0)
    local = model.num_experts / table.ep.astype(np.float64)
    if forward:
        # measured forward kernel counts of the router part (and of router + preprocessing
        # under a flex dispatcher); the backward keeps the counted ops
        router_ops = np.where(
            flex,
            stack.flex_preprocess_ops,
            np.where(table.moe_router_fusion, stack.router_ops, stack.router_unfused_ops),
        )
        modules = counts["router"][0]
        router = op_s * (modules * stack.host_module_ops + router_ops)
        preprocess = np.where(flex, 0.0, issue.cost([("preprocess", 1.0)], counts))
    else:
        router = issue.cost([("router", 1.0)], counts)
        preprocess = issue.cost([("preprocess", 1.0)], counts)
    router = np.where(graphed["moe_router"], launch, router)
    preprocess = np.where(graphed["moe_preprocess"], 0.0, preprocess)  # in the router graph
    groups = 2.0 * local  # per expert, per grouped linear (FC1 and FC2)
    dispatch = issue.cost(
        [("dispatch", 1.0), ("dispatch_fp8", on(fp8)), ("expert", groups)]
        + [("expert_fp8", groups * on(fp8) * quantize_ops)],
        counts,
    )
    shared = np.zeros(len(fp8))
    if model.num_shared_experts:
        # the shared experts run inside the router's graph when it is captured
        shared = np.where(graphed["moe_router"], 0.0, _mlp_seconds(counts, issue))
        dispatch = dispatch + shared
    whole_moe = graphed["moe"]
    pre = np.where(whole_moe, launch, router + preprocess)
    post = np.where(whole_moe, 0.0, dispatch)
    return pre, post, np.where(whole_moe, 0.0, shared)


def _selective_redo_seconds(
    model: ModelSpec, moe: bool, redo: dict, issue: _Issue, parts: dict
) -> np.ndarray:
    """Host seconds ``[N]`` the backward pass re-issues for the modules ``redo`` recomputes
    selectively; ``parts``: the forward seconds of the MLP or MoE block (``mlp``) and of
    the shared experts (``shared``)."""
    stack, op_s, graphed = issue.stack, issue.op_s, issue.graphed
    redone = {
        "core_attn": stack.host_module_ops * op_s * ~graphed["attn"],
        "mla_up_proj": (2 * stack.host_module_ops * op_s + 2 * issue.extra)
        * (model.is_mla & ~graphed["attn"]),
        "layernorm": 2 * stack.host_module_ops * op_s,
        "moe_act": op_s * moe,
        "mlp": parts["mlp"] * (not moe),
        "moe": parts["mlp"] * moe,
        "shared_experts": parts["shared"],
    }
    selective = np.zeros(len(issue.fp8))
    for key, cost in redone.items():
        selective = selective + np.where(redo[key], cost, 0.0)
    return selective


def host_excess(
    host: HostTimes, forward_s, backward_s, expert_forward_s, ep_forward_s, ep_backward_s
) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds ``[N]`` a layer pass waits for the host beyond its GPU
    time (kernels plus exposed expert all-to-all): ``max(gA + gB, cA + gB, cA + cB) -
    (gA + gB)`` for a synchronizing forward (``A`` = after the synchronization: expert
    part ``expert_forward_s`` and the all-to-alls; ``B`` = the rest), ``max(0, c - g)``
    otherwise and for the backward."""
    g_a = np.asarray(expert_forward_s) + np.asarray(ep_forward_s)
    g_b = np.asarray(forward_s) - np.asarray(expert_forward_s)
    synced_excess = np.maximum(0.0, np.maximum(host.post - g_a, host.post + host.pre - g_a - g_b))
    free_excess = np.maximum(0.0, host.pre + host.post - g_a - g_b)
    forward = np.where(host.synced > 0, synced_excess, free_excess)
    backward = np.maximum(0.0, host.backward - np.asarray(backward_s) - np.asarray(ep_backward_s))
    return forward, backward


__all__ = [
    "BACKWARD",
    "FORWARD",
    "HostTimes",
    "LINEAR_MODULES",
    "host_excess",
    "host_times",
    "op_seconds",
    "scope_masks",
]
