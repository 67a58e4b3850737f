"""The step model's composition, vectorized over the rows of a layout table.

One implementation serves two callers:

* :func:`compute_table` (the table interface the layout optimizer uses): the step of every
  row with every collective free, i.e. compute, pipeline bubble, optimizer and offload in
  seconds ``[N]``, and the compute-side numbers a network bound combines with collective
  bounds. Its sum ``bound_s`` is a lower bound of :func:`fabricflow.step_time` for that row
  on any fabric, rank order and placement: every part below is non-decreasing in every
  collective time.
* :func:`compose` with :class:`CommTimes` from the fabric (what
  :func:`fabricflow.step_time` does for one row).

Composition (all times seconds, per micro-batch unless said):

* per layer: compute from :func:`~fabricflow.workload.layer_cost.layer_cost_table`
  (forward, backward, recompute) over ``framework_efficiency``, plus the exposed part of
  its collectives: TP (2 all-reduces, or 2 all-gathers + 2 reduce-scatters, per pass;
  hidden behind the pass's GEMMs under ``tp_overlap``), CP (ring exchanges hidden behind the
  attention core), EP (dispatch + combine per pass; exposed, hidden behind the pass under
  ``ep_overlap``, or behind the forward/backward pair under DualPipe);
* per pipeline rank: its layers (dense/MoE mix) plus the embedding (first) or the head
  (last) on its own GPU; the slowest rank sets the pace for ``m`` micro-batches; fill and
  drain add ``(sum_r t_r - max_r t_r) / v`` (1F1B / interleaved) or DualPipe's
  ``(p/2 - 1)(F&B + B - 3W)``;
* PP send/recv exposed on ``2 (p v - 1)`` hops (``pp_overlap``) or every hop; DP: all-reduce
  (ZeRO-0) or reduce-scatter + all-gather (ZeRO-1/2), hidden behind the last backward /
  first forward per bucket (``dp_overlap``), ZeRO-3 per micro-batch;
* optimizer: a memory-bound Adam pass over the local parameters (~34 B each); offload:
  host-link transfers beyond the compute they overlap (docs/memory-offload.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from fabricflow.workload.dispatch import dispatcher_sms
from fabricflow.workload.efficiency import memory_time
from fabricflow.workload.gpu import GpuSpec
from fabricflow.workload.gpu_memory import rank_parameter_arrays, rank_states, recomputed_per_chunk
from fabricflow.workload.host import host_excess
from fabricflow.workload.layer_cost import (
    LayerCost,
    embedding_cost_table,
    head_cost_table,
    layer_cost_table,
    recomputed_fraction,
)
from fabricflow.workload.layout_table import LayoutTable
from fabricflow.workload.model_spec import ModelSpec
from fabricflow.workload.overlap import exposed, slowdown
from fabricflow.workload.stack import Stack, load_stack
from fabricflow.workload.stages import StageGroup, stage_groups

ADAM_BYTES_PER_PARAM = 34.0
BREAKDOWN_KEYS = ("compute", "bubble", "tp", "cp", "ep", "pp", "dp", "optimizer", "offload")
# Collectives of one step: key -> (group set, operation); sizes in collective_sizes().
COLLECTIVES = {
    "tp_all_reduce": ("tp", "all_reduce"),
    "tp_all_gather": ("tp", "all_gather"),
    "tp_reduce_scatter": ("tp", "reduce_scatter"),
    "cp_forward": ("cp", "sendrecv"),
    "cp_backward": ("cp", "sendrecv"),
    "ep_dispatch": ("ep", "all_to_all"),
    "ep_combine": ("ep", "all_to_all"),
    # expert tensor parallelism: the expert grid's tensor groups are the dense TP groups
    # when expert_tp == tp (both grids put TP fastest); timed on those groups
    "etp_all_gather": ("tp", "all_gather"),
    "etp_reduce_scatter": ("tp", "reduce_scatter"),
    "pp_hop": ("pp", "sendrecv"),
    "dp_all_reduce": ("dp", "all_reduce"),
    "dp_reduce_scatter": ("dp", "reduce_scatter"),
    "dp_all_gather": ("dp", "all_gather"),
    "edp_all_reduce": ("edp", "all_reduce"),
    "edp_reduce_scatter": ("edp", "reduce_scatter"),
    "edp_all_gather": ("edp", "all_gather"),
}


@dataclasses.dataclass(frozen=True)
class CommTimes:
    """Seconds of each collective of :data:`COLLECTIVES` (arrays ``[N]``, one per row), as
    the slowest group of its set takes it. Missing keys are 0 (a dimension of size 1)."""

    seconds: dict

    def get(self, key: str, n: int) -> np.ndarray:
        value = self.seconds.get(key, 0.0)
        return np.broadcast_to(np.asarray(value, dtype=np.float64), (n,))

    @classmethod
    def free(cls) -> CommTimes:
        """Every collective takes no time (the compute-only bound)."""
        return cls({})


def node_limited_factor(model: ModelSpec, ep, ep_nodes) -> np.ndarray:
    """Share ``[N]`` of a plain all-to-all's inter-node bytes that node-limited dispatch
    sends: DeepSeek-style group-limited routing (``routing_groups`` groups, a token's experts
    in ``routing_group_topk`` of them) with the groups mapped onto the ``ep_nodes`` nodes an
    expert-parallel group spans, and one copy per destination node over the network,
    forwarded inside the node (DeepSeek-V3 report, section 3.2.2; DeepEP). 1 for a model
    without group-limited routing or an EP group inside one node.

    Expected remote nodes per token: ``k (1 - C(G - G/k, M) / C(G, M)) (k - 1) / k`` for
    ``G >= k`` groups over ``k`` nodes (``M`` groups per token); a plain all-to-all sends
    ``top_k (k - 1) / k`` copies across nodes."""
    k = np.maximum(np.asarray(ep_nodes, dtype=np.float64), 1.0)
    ep = np.asarray(ep, dtype=np.float64)
    groups, chosen = model.routing_groups, model.routing_group_topk
    if not groups or not model.is_moe:
        return np.ones(np.broadcast(k, ep).shape)
    per_node = np.maximum(groups / k, 1.0)
    # probability a given node is missed by M of G groups (hypergeometric), groups >= nodes:
    # C(G - g, M) / C(G, M) = prod_i (G - g - i) / (G - i), g groups per node
    missed = np.ones_like(per_node)
    for i in range(chosen):
        missed = missed * np.maximum(groups - per_node - i, 0.0) / (groups - i)
    nodes = k * (1.0 - missed)
    limited = nodes * (k - 1.0) / k
    plain = model.experts_per_token * (k - 1.0) / k
    factor = np.where(
        (k > 1) & (groups >= k), np.minimum(1.0, limited / np.maximum(plain, 1e-12)), 1.0
    )
    return factor + 0.0 * ep


def collective_sizes(model: ModelSpec, table: LayoutTable, ep_nodes=1) -> dict[str, np.ndarray]:
    """Bytes ``[N]`` of each collective of :data:`COLLECTIVES` per row (0 where the
    dimension has size 1 or the model has no experts). DP sizes are the parameters of the
    pipeline rank holding the most (dense over ``dp x cp``, expert over expert data
    parallel). ``ep_nodes``: scale-up domains an expert-parallel group spans (node-limited
    dispatch, :func:`node_limited_factor`; 1 = within one domain)."""
    tokens = (table.micro_batch * table.seq_len / table.cp).astype(np.float64)
    h = float(model.hidden_size)
    tp = table.tp.astype(np.float64)
    on = lambda mask: np.where(mask, 1.0, 0.0)  # noqa: E731
    activations = 2.0 * tokens * h * on(table.tp > 1)
    chunk = 2.0 * tokens * model.kv_width / tp * on(table.cp > 1)
    copies = tokens / tp * model.experts_per_token * h * table.moe_imbalance
    copies = copies * on((table.ep > 1) & model.is_moe)
    copies = copies * node_limited_factor(model, table.ep, ep_nodes)
    dispatch = np.where((table.precision == "fp8") & table.fp8_dispatch, 1.0, 2.0) * copies
    # the all-gather dispatcher gathers every token of the expert-parallel group (bf16)
    gathered = 2.0 * tokens / tp * h * table.ep * on((table.ep > 1) & model.is_moe)
    # expert tensor parallelism under EP: routed copies all-gathered before the experts and
    # reduce-scattered after (Megatron-Core's all-to-all dispatcher), bf16
    etp = table.expert_tensor.astype(np.float64)
    pairs = tokens * etp / tp * model.experts_per_token * table.moe_imbalance
    routed = 2.0 * h * pairs * on((etp > 1) & (table.ep > 1) & model.is_moe)
    dense, expert = _stage_parameters(model, table)
    grad = np.where(table.grad_reduce_dtype == "fp32", 4.0, 2.0)
    dense = dense * on(table.dp * table.cp > 1)
    expert = expert * on(table.expert_dp > 1)
    hop = 2.0 * tokens * h / tp * on(table.pp > 1)
    return {
        "tp_all_reduce": activations,
        "tp_all_gather": activations,
        "tp_reduce_scatter": activations,
        "cp_forward": chunk,
        "cp_backward": 2.0 * chunk,
        "ep_dispatch": dispatch,
        "ep_combine": 2.0 * copies,
        "ep_allgather": gathered,
        "etp_all_gather": routed,
        "etp_reduce_scatter": routed,
        "pp_hop": hop,
        "dp_all_reduce": grad * dense,
        "dp_reduce_scatter": grad * dense,
        "dp_all_gather": 2.0 * dense,
        "edp_all_reduce": grad * expert,
        "edp_reduce_scatter": grad * expert,
        "edp_all_gather": 2.0 * expert,
    }


def _stage_parameters(model: ModelSpec, table: LayoutTable) -> tuple[np.ndarray, np.ndarray]:
    """(non-expert, expert) parameters ``[N]`` of the pipeline rank holding the most."""
    n = len(table)
    dense_out, expert_out = np.zeros(n), np.zeros(n)
    for group in stage_groups(model, table):
        dense, expert = rank_parameter_arrays(model, table, group)
        worst = np.argmax(dense + expert, axis=1)
        pick = np.arange(len(group.rows))
        dense_out[group.rows] = dense[pick, worst]
        expert_out[group.rows] = expert[pick, worst]
    return dense_out, expert_out


@dataclasses.dataclass(frozen=True)
class _Kernels:
    """Per-layer and per-end costs of every row on one GPU type (arrays ``[N]``)."""

    dense: LayerCost
    moe: LayerCost | None
    embedding: np.ndarray  # forward + backward of the embedding per micro-batch
    head: np.ndarray  # forward + backward of the output layer and loss per micro-batch


def layer_kernels(model: ModelSpec, gpu, table: LayoutTable, stack: Stack | None = None) -> dict:
    """GpuSpec -> the per-layer and per-end costs of every row on it (over
    ``framework_efficiency``), for each GPU type of ``gpu`` (one spec or one per rank),
    under software ``stack`` (None: the default preset)."""
    stack = load_stack(stack) if not isinstance(stack, Stack) else stack
    types = list(dict.fromkeys(_rank_gpus(gpu, int(table.pp.max()) if len(table) else 1)))
    return {each: _kernels(model, each, table, stack) for each in types}


def _kernels(model: ModelSpec, gpu: GpuSpec, table: LayoutTable, stack: Stack) -> _Kernels:
    scale = 1.0 / table.framework_efficiency
    dense = layer_cost_table(model, gpu, table, moe=False, stack=stack).scaled(scale)
    moe = (
        layer_cost_table(model, gpu, table, moe=True, stack=stack).scaled(scale)
        if model.is_moe
        else None
    )
    emb_f, emb_b = embedding_cost_table(model, gpu, table)
    head_f, head_b = head_cost_table(model, gpu, table)
    return _Kernels(dense, moe, emb_f + emb_b, head_f + head_b)


def _overlapped(
    gpu, dim: str, comm_s, compute_s, wire_bytes, memory_share, sms=None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(exposed, hidden, cost) seconds ``[N]`` of ``comm_s`` overlapped with ``compute_s``
    (see :mod:`fabricflow.workload.overlap`; ``sms`` the collective's SMs, None: the
    dimension's)."""
    f = slowdown(gpu, dim, wire_bytes, comm_s, memory_share, sms)
    out = exposed(comm_s, compute_s, f)
    hidden = np.minimum(comm_s, compute_s)
    return out, hidden, out - np.maximum(0.0, comm_s - compute_s)


def _layer_exposed(
    model: ModelSpec,
    gpu: GpuSpec,
    table: LayoutTable,
    comm: CommTimes,
    sizes: dict,
    cost: LayerCost,
    *,
    moe: bool,
    stack: Stack,
) -> dict[str, np.ndarray]:
    """Exposed TP / CP / EP seconds ``[N]`` of one layer for one micro-batch (all passes),
    and for each dimension what overlap hid (``<dim>_hidden``) and cost (``<dim>_cost``)."""
    n = len(table)
    zero = np.zeros(n)
    passes_fwd = 1.0 + recomputed_fraction(model, table)
    tp, tp_hidden, tp_cost = _tensor_parallel_exposed(gpu, table, comm, sizes, cost, passes_fwd)
    out = {"tp": tp, "tp_hidden": tp_hidden, "tp_cost": tp_cost}
    steps = (table.cp - 1).astype(np.float64)
    ring_f = steps * comm.get("cp_forward", n)
    ring_b = steps * comm.get("cp_backward", n)
    redo = np.where(np.isin(table.recompute, ["full", "selective"]), 1.0, 0.0)
    cf = _overlapped(gpu, "cp", ring_f, cost.forward_attention_s, steps * sizes["cp_forward"], 0.0)
    cb = _overlapped(
        gpu, "cp", ring_b, cost.backward_attention_s, steps * sizes["cp_backward"], 0.0
    )
    on_cp = table.cp > 1
    for key, a, b in zip(("cp", "cp_hidden", "cp_cost"), cf, cb, strict=True):
        out[key] = np.where(on_cp, (1.0 + redo) * a + b, zero)
    out |= {"ep": zero, "ep_hidden": zero, "ep_cost": zero}
    if moe:
        # Dispatch sends top_k copies of each token (fp8 under ``fp8_dispatch``, as DeepSeek-V3
        # does), combine returns them in bf16; the most loaded rank sets the pace.
        bf16 = comm.get("ep_combine", n)
        forward = comm.get("ep_dispatch", n) + bf16
        backward = 2.0 * bf16  # gradients of combine and of dispatch, bf16
        wire_f = sizes["ep_dispatch"] + sizes["ep_combine"]
        wire_b = 2.0 * sizes["ep_combine"]
        share = cost.memory_s / np.maximum(cost.forward_s + cost.backward_s, 1e-30)
        # DualPipe runs a forward chunk of one micro-batch with the backward chunk of
        # another: both all-to-alls hide behind the pair's compute (DeepSeek-V3 report)
        pair = passes_fwd * cost.forward_s + cost.backward_s
        sms = dispatcher_sms(stack, table)
        dual = _overlapped(
            gpu,
            "ep",
            passes_fwd * forward + backward,
            pair,
            passes_fwd * wire_f + wire_b,
            share,
            sms,
        )
        ef = _overlapped(gpu, "ep", forward, cost.forward_s, wire_f, share, sms)
        eb = _overlapped(gpu, "ep", backward, cost.backward_s, wire_b, share, sms)
        overlapped = [passes_fwd * a + b for a, b in zip(ef, eb, strict=True)]
        plain = [passes_fwd * forward + backward, zero, zero]
        is_dual = table.schedule == "dualpipe"
        on_ep = table.ep > 1
        for i, key in enumerate(("ep", "ep_hidden", "ep_cost")):
            value = np.where(is_dual, dual[i], np.where(table.ep_overlap, overlapped[i], plain[i]))
            out[key] = np.where(on_ep, value, zero)
        etp = comm.get("etp_all_gather", n) + comm.get("etp_reduce_scatter", n)
        out["ep"] = out["ep"] + (passes_fwd + 1.0) * etp
        # exposed all-to-all per forward and backward pass, for the host model
        split = np.where(is_dual | table.ep_overlap, 0.0, 1.0) * np.where(on_ep, 1.0, 0.0)
        ep_forward, ep_backward = split * (forward + etp), split * (backward + etp)
    else:
        ep_forward = ep_backward = zero
    # the host's pace where it issues a pass slower than the GPU runs it (eager mode)
    wait_f, wait_b = host_excess(
        cost.host, cost.forward_s, cost.backward_s, cost.expert_forward_s, ep_forward, ep_backward
    )
    out["host"] = passes_fwd * wait_f + wait_b
    return out


def _tensor_parallel_exposed(
    gpu, table: LayoutTable, comm: CommTimes, sizes: dict, cost: LayerCost, passes_fwd
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(exposed, hidden, cost) TP seconds ``[N]`` of one layer for one micro-batch.

    Per forward pass: 2 all-reduces of the row-parallel outputs, or with sequence
    parallelism 2 all-gathers of the column-parallel inputs and 2 reduce-scatters of the
    row-parallel outputs. Backward: the column-parallel layers' input gradients (2
    all-reduces, or 2 reduce-scatters) and, with sequence parallelism, the all-gathers of
    the row-parallel output gradients (2) and of the column-parallel inputs again for the
    weight gradients (2; only the local shard is saved). ``tp_overlap`` (Transformer
    Engine's userbuffers) hides every one behind the pass's GEMMs at the interference cost
    of :mod:`~fabricflow.workload.overlap`; without it, ``tp_backward_overlap`` (Megatron's
    asynchronous TP communication, Transformer Engine's linear backward) hides the
    column-parallel layers' backward collectives behind their weight-gradient (reduce and
    reduce-scatter) and data-gradient (re-gather) GEMMs, NCCL kernels beside them."""
    n = len(table)
    zero = np.zeros(n)
    sp = table.sequence_parallel
    gather, scatter = comm.get("tp_all_gather", n), comm.get("tp_reduce_scatter", n)
    reduce = comm.get("tp_all_reduce", n)
    bytes_g, bytes_s = sizes["tp_all_gather"], sizes["tp_reduce_scatter"]
    bytes_r = 2.0 * sizes["tp_all_reduce"]  # an all-reduce moves twice its size per rank
    forward = np.where(sp, 2.0 * (gather + scatter), 2.0 * reduce)
    forward_wire = np.where(sp, 2.0 * (bytes_g + bytes_s), 2.0 * bytes_r)
    # backward: row-parallel gradients (SP only), column-parallel gradients, re-gathers
    row = np.where(sp, 2.0 * gather, 0.0)
    column = np.where(sp, 2.0 * scatter, 2.0 * reduce)
    column_wire = np.where(sp, 2.0 * bytes_s, 2.0 * bytes_r)
    regather = np.where(sp, 2.0 * gather, 0.0)
    backward = row + column + regather
    backward_wire = np.where(sp, 4.0 * bytes_g + 2.0 * bytes_s, 2.0 * bytes_r)
    # userbuffers: everything behind the pass's GEMMs (compute-bound: no memory share)
    ub_f = _overlapped(gpu, "tp", forward, cost.forward_gemm_s, forward_wire, 0.0)
    ub_b = _overlapped(gpu, "tp", backward, cost.backward_gemm_s, backward_wire, 0.0)
    ub = [passes_fwd * f + b for f, b in zip(ub_f, ub_b, strict=True)]
    # asynchronous NCCL collectives behind the column-parallel layers' wgrad / dgrad GEMMs
    half = 0.5 * cost.backward_gemm_s
    col = _overlapped(gpu, "tp_nccl", column, half, column_wire, 0.0)
    reg = _overlapped(gpu, "tp_nccl", regather, half, 2.0 * bytes_g * np.where(sp, 1.0, 0.0), 0.0)
    async_ = [passes_fwd * forward + row + col[0] + reg[0], col[1] + reg[1], col[2] + reg[2]]
    plain = [passes_fwd * forward + backward, zero, zero]
    on = table.tp > 1
    out = []
    userbuffers = table.tp_overlap & sp  # it pipelines all-gathers and reduce-scatters
    for i in range(3):
        value = np.where(
            userbuffers, ub[i], np.where(table.tp_backward_overlap, async_[i], plain[i])
        )
        out.append(np.where(on, value, zero))
    return out[0], out[1], out[2]


# Per-rank values of one micro-batch kept for the slowest rank (seconds; layers).
RANK_KEYS = (
    "compute",
    "host",
    "tp",
    "cp",
    "ep",
    "total",
    "backward_s",
    "forward_s",
    "weight_grad_s",
    "layers",
)
# Dimensions whose overlap is accounted (hidden seconds and interference cost).
OVERLAP_DIMS = ("tp", "cp", "ep", "dp")
OVERLAP_KEYS = ("tp_hidden", "tp_cost", "cp_hidden", "cp_cost", "ep_hidden", "ep_cost")


@dataclasses.dataclass(frozen=True)
class Composition:
    """What :func:`compose` returns (arrays ``[N]`` unless said).

    Attributes:
        breakdown: :data:`BREAKDOWN_KEYS` -> seconds per step.
        slow: the slowest pipeline rank's per-micro-batch ``compute``, ``tp``, ``cp``,
            ``ep``, ``total``, ``backward_s``, ``forward_s``, ``weight_grad_s`` and ``layers``,
            and its index ``rank``.
        ranks: per row, a list of per-rank dicts (the keys of ``slow``), only when
            ``per_rank=True`` (one-row use).
        overlap: dimension (``tp``, ``cp``, ``ep``, ``dp``) -> ``hidden_s`` (communication
            seconds per step that overlap hid) and ``cost_s`` (what hiding it cost: compute
            slowed by the collective's SMs and HBM traffic), both included in that
            dimension's breakdown part as far as they are exposed.
    """

    breakdown: dict
    slow: dict
    ranks: list | None = None
    overlap: dict | None = None

    def row(self, index: int) -> Composition:
        """Row ``index`` of every part: seconds as floats, ``slow["rank"]`` an int,
        ``ranks`` that row's list of per-rank dicts."""
        return Composition(
            breakdown={key: float(value[index]) for key, value in self.breakdown.items()},
            slow={
                key: int(value[index]) if key == "rank" else float(value[index])
                for key, value in self.slow.items()
            },
            ranks=None if self.ranks is None else self.ranks[index],
            overlap=None
            if self.overlap is None
            else {
                dim: {key: float(value[index]) for key, value in values.items()}
                for dim, values in self.overlap.items()
            },
        )


def _rank_gpus(gpu, pp: int) -> tuple[GpuSpec, ...]:
    return (gpu,) * pp if isinstance(gpu, GpuSpec) else tuple(gpu)


def compose(
    model: ModelSpec,
    gpu: GpuSpec | Sequence[GpuSpec],
    table: LayoutTable,
    comm: CommTimes,
    *,
    per_rank: bool = False,
    kernels: dict | None = None,
    stack: Stack | None = None,
) -> Composition:
    """Breakdown of the step of every row of ``table`` with collective times ``comm``.

    ``gpu``: one :class:`GpuSpec` for every rank, or one per pipeline rank (then every row
    has that many ranks). ``stack``: the software stack's physical parameters (None: the
    default preset). Rows are assumed valid (see
    :func:`~fabricflow.workload.layout.table_problems`).
    """
    n = len(table)
    stack = load_stack(stack) if not isinstance(stack, Stack) else stack
    if kernels is None:
        kernels = layer_kernels(model, gpu, table, stack)
    sizes = collective_sizes(model, table)
    layer_comm = {}
    for each, k in kernels.items():
        layer_comm[each] = {
            False: _layer_exposed(model, each, table, comm, sizes, k.dense, moe=False, stack=stack)
        }
        if k.moe is not None:
            layer_comm[each][True] = _layer_exposed(
                model, each, table, comm, sizes, k.moe, moe=True, stack=stack
            )
    keys = RANK_KEYS + OVERLAP_KEYS
    slow = {key: np.zeros(n) for key in keys} | {"rank": np.zeros(n, dtype=np.int64)}
    breakdown = {key: np.zeros(n) for key in BREAKDOWN_KEYS}
    overlap = {dim: {"hidden_s": np.zeros(n), "cost_s": np.zeros(n)} for dim in OVERLAP_DIMS}
    ranks_out: list | None = [None] * n if per_rank else None
    for group in stage_groups(model, table):
        t = table.take(group.rows)
        gpus = _rank_gpus(gpu, group.pp)
        per = _rank_times(model, t, group, gpus, kernels, layer_comm)
        worst = np.argmax(per["total"], axis=1)
        pick = np.arange(len(group.rows))
        for key in keys:
            slow[key][group.rows] = per[key][pick, worst]
        slow["rank"][group.rows] = worst
        if ranks_out is not None:
            for i, row in enumerate(group.rows):
                ranks_out[row] = [
                    {key: float(per[key][i, r]) for key in keys} for r in range(group.pp)
                ]
        mine = {key: value[group.rows] for key, value in slow.items()}
        parts, hidden = _step_parts(model, table, group, gpus, comm, sizes, per, mine)
        for key, value in parts.items():
            breakdown[key][group.rows] = value
        for dim, values in hidden.items():
            for key, value in values.items():
                overlap[dim][key][group.rows] = value
    return Composition(breakdown=breakdown, slow=slow, ranks=ranks_out, overlap=overlap)


def _rank_times(model, t: LayoutTable, group: StageGroup, gpus, kernels, layer_comm) -> dict:
    """Per rank ``[n, P]``: seconds of one micro-batch split by kind, and the layers."""
    rows = group.rows
    kinds = [(False, model.num_dense_layers / model.num_layers)]
    if model.is_moe:
        kinds.append((True, model.num_moe_layers / model.num_layers))
    # DualPipe: ranks 0 and p-1 hold both ends; each micro-batch passes one of them
    end_share = 0.5 if group.dualpipe else 1.0
    passed = group.passed[None, :]
    # layers whose recompute cost is paid: every layer (selective; full with all layers),
    # or recompute_layers of each virtual chunk (full with a limit)
    per_chunk = passed / t.vpp[:, None]
    full_limited = recomputed_per_chunk(t, per_chunk) * t.vpp[:, None]
    redone = np.where((t.recompute == "full")[:, None], full_limited, passed)
    exposure_keys = ("tp", "cp", "ep") + OVERLAP_KEYS
    accumulation = _unfused_accumulation(model, t, group, gpus)
    names = ("compute", "host", "redo", "backward_s", "forward_s", "weight_grad_s") + (
        exposure_keys
    )
    out = {key: np.zeros((len(rows), group.pp)) for key in names}
    for r, each in enumerate(gpus):
        k = kernels[each]
        for moe, share in kinds:
            cost = k.moe if moe else k.dense
            assert cost is not None
            kernels_s = cost.forward_s[rows] + cost.backward_s[rows]
            # a pass whose kernels finish before the host has issued them runs at the host's
            # pace (eager mode, :mod:`fabricflow.workload.host`): the wait is compute time
            wait = layer_comm[each][moe]["host"][rows]
            out["compute"][:, r] += share * (kernels_s + wait)
            out["host"][:, r] += share * wait
            out["redo"][:, r] += share * cost.recompute_s[rows]
            out["backward_s"][:, r] += share * cost.backward_s[rows]
            out["forward_s"][:, r] += share * cost.forward_s[rows]
            out["weight_grad_s"][:, r] += share * cost.backward_gemm_s[rows] / 2.0
            for key in exposure_keys:
                out[key][:, r] += share * layer_comm[each][moe][key][rows]
        # the head rank also runs the multi-token-prediction modules: one layer and one
        # more output head each (DeepSeek-V3 report, section 2.2)
        mtp = model.mtp_layers
        mtp_cost = 0.0
        if mtp:
            layer = k.moe if k.moe is not None else k.dense
            mtp_cost = mtp * (layer.total_s[rows] + k.head[rows])
        ends = k.embedding[rows] * group.embedding[r] + (k.head[rows] + mtp_cost) * group.head[r]
        extra = end_share * ends + accumulation[:, r]
        out["compute"][:, r] = (
            passed[:, r] * out["compute"][:, r]
            + redone[:, r] * out["redo"][:, r]
            + extra / t.framework_efficiency
        )
    for key in exposure_keys + ("backward_s", "forward_s", "weight_grad_s", "host"):
        out[key] = passed * out[key]
    out["total"] = out["compute"] + out["tp"] + out["cp"] + out["ep"]
    out["layers"] = np.broadcast_to(passed, out["total"].shape).astype(np.float64)
    return out


def _unfused_accumulation(model, t: LayoutTable, group: StageGroup, gpus) -> np.ndarray:
    """Seconds ``[n, P]`` per micro-batch of each rank's gradient accumulation kernel where
    the weight-gradient GEMMs do not accumulate into the main gradient themselves
    (``grad_accum_fusion`` off): read the new bf16 gradient, read and write the main
    gradient (``grad_reduce_dtype``) of every local parameter; 0 where fused."""
    local = dataclasses.replace(group, rows=np.arange(len(t)))  # rows of ``t`` itself
    dense, expert = rank_parameter_arrays(model, t, local)
    main = np.where(t.grad_reduce_dtype == "fp32", 4.0, 2.0)[:, None]
    moved = (2.0 + 2.0 * main) * (dense + expert)
    seconds = np.zeros_like(moved)
    for r, each in enumerate(gpus):
        seconds[:, r] = memory_time(each, moved[:, r])
    return np.where(t.grad_accum_fusion[:, None], 0.0, seconds)


def _step_parts(
    model,
    table: LayoutTable,
    group: StageGroup,
    gpus,
    comm: CommTimes,
    sizes: dict,
    per: dict,
    slow: dict,
) -> tuple[dict, dict]:
    """Breakdown ``[n]`` of a stage group's rows (see the module doc), and per dimension
    what overlap hid and cost over the step."""
    t = table.take(group.rows)
    m = t.num_micro_batches.astype(np.float64)
    parts = {key: m * slow[key] for key in ("compute", "tp", "cp", "ep")}
    hidden = {
        dim: {"hidden_s": m * slow[f"{dim}_hidden"], "cost_s": m * slow[f"{dim}_cost"]}
        for dim in ("tp", "cp", "ep")
    }
    if group.dualpipe:
        pair = slow["total"] + slow["backward_s"] - 3.0 * slow["weight_grad_s"]
        parts["bubble"] = (group.pp / 2 - 1) * pair
    else:
        parts["bubble"] = (per["total"].sum(axis=1) - slow["total"]) / t.vpp
    parts["pp"] = _pipeline_exposed(t, comm)
    rows = {key: value[group.rows] for key, value in sizes.items()}
    parts["dp"], dp_hidden, dp_cost = _data_parallel_exposed(
        model, t, group, gpus[0], comm, rows, slow
    )
    hidden["dp"] = {"hidden_s": dp_hidden, "cost_s": dp_cost}
    parts["optimizer"] = _optimizer(model, table, group, gpus) / t.framework_efficiency
    parts["offload"] = _offload_exposed(model, table, group, gpus, per, parts["optimizer"])
    return parts, hidden


def _pipeline_exposed(t: LayoutTable, comm: CommTimes) -> np.ndarray:
    n = len(t)
    hop = comm.get("pp_hop", n)
    chain = 2.0 * (t.pp * t.vpp - 1) * hop
    every = chain + 2.0 * t.num_micro_batches * t.vpp * hop
    return np.where(t.pp > 1, np.where(t.pp_overlap, chain, every), 0.0)


def _data_parallel_exposed(
    model, t: LayoutTable, group: StageGroup, gpu, comm: CommTimes, sizes: dict, slow: dict
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(exposed, hidden, cost) seconds ``[n]`` per step of the gradient reduction and
    parameter gathers. Under ``dp_overlap`` each is issued per bucket (one per layer of the
    end ranks) beside the backward (gradients) or forward (parameters) compute: the first
    bucket is exposed, the rest overlapped at the interference cost of
    :mod:`~fabricflow.workload.overlap`; ZeRO-3 gathers and scatters per micro-batch."""
    n = len(t)
    first, last = group.layers[0], group.layers[-1]
    buckets = max(first, last, 1.0)
    m = t.num_micro_batches.astype(np.float64)
    total, hidden, cost = np.zeros(n), np.zeros(n), np.zeros(n)
    share = np.zeros(n)  # memory-bound share of the hidden compute: elementwise kernels
    sets = [("dp", t.dp * t.cp)]
    if model.is_moe:
        sets.append(("edp", t.expert_dp))

    def overlapped(comm_s, compute_s, wire):
        # the last bucket waits for the last layer's gradients: exposed; the rest overlaps
        tail = comm_s * (1.0 - 1.0 / buckets)
        out, hid, extra = _overlapped(
            gpu, "dp", tail, compute_s, wire * (1.0 - 1.0 / buckets), share
        )
        return comm_s / buckets + out, hid, extra

    for name, size in sets:
        on = size > 1
        reduce0 = comm.get(f"{name}_all_reduce", n)
        scatter = comm.get(f"{name}_reduce_scatter", n)
        gather = comm.get(f"{name}_all_gather", n)
        wire_r = np.where(
            t.zero == 0, 2.0 * sizes[f"{name}_all_reduce"], sizes[f"{name}_reduce_scatter"]
        )
        wire_g = sizes[f"{name}_all_gather"]
        # ZeRO-3: two parameter gathers and a gradient scatter per micro-batch
        per_mb = 2.0 * gather + scatter
        z3, z3_hidden, z3_cost = overlapped(per_mb, slow["total"], 2.0 * wire_g + wire_r)
        z3 = np.where(t.dp_overlap, z3, per_mb)
        reduce = np.where(t.zero == 0, reduce0, scatter)
        gather12 = np.where(t.zero == 0, 0.0, gather)
        r_exp, r_hidden, r_cost = overlapped(reduce, slow["backward_s"], wire_r)
        g_exp, g_hidden, g_cost = overlapped(gather12, slow["total"] - slow["backward_s"], wire_g)
        plain = reduce + gather12
        both = np.where(t.dp_overlap, r_exp + g_exp, plain)
        is_z3 = t.zero == 3
        total = total + np.where(on, np.where(is_z3, m * z3, both), 0.0)
        on_hidden = on & t.dp_overlap
        hidden = hidden + np.where(
            on_hidden, np.where(is_z3, m * z3_hidden, r_hidden + g_hidden), 0.0
        )
        cost = cost + np.where(on_hidden, np.where(is_z3, m * z3_cost, r_cost + g_cost), 0.0)
    return total, hidden, cost


def _optimizer(model, table: LayoutTable, group: StageGroup, gpus) -> np.ndarray:
    """Seconds ``[n]`` of the slowest rank's Adam pass over its (sharded) parameters."""
    t = table.take(group.rows)
    dense, expert = rank_parameter_arrays(model, table, group)
    sharded = dense / (t.dp * t.cp)[:, None] + expert / t.expert_dp[:, None]
    local = np.where((t.zero >= 1)[:, None], sharded, dense + expert)
    seconds = np.zeros_like(local)
    for r, each in enumerate(gpus):
        seconds[:, r] = memory_time(each, ADAM_BYTES_PER_PARAM * local[:, r])
    return seconds.max(axis=1)


def _offload_exposed(
    model, table: LayoutTable, group: StageGroup, gpus, per: dict, optimizer_s: np.ndarray
) -> np.ndarray:
    """Seconds ``[n]`` per step of host-link transfers not hidden behind compute (the worst
    pipeline rank, each over its own GPU's host link; see docs/memory-offload.md). NaN for a
    row that offloads on a GPU without a host link bandwidth."""
    t = table.take(group.rows)
    n = len(t)
    offloading = (t.offload_weights > 0) | (t.offload_optimizer > 0) | (t.offload_activations > 0)
    if not offloading.any():
        return np.zeros(n)
    ranks = rank_states(model, table, group)
    weights = t.offload_weights[:, None] * ranks.weights
    optimizer = t.offload_optimizer[:, None] * ranks.optimizer
    activations = t.offload_activations[:, None] * group.kept[None, :] * ranks.layer_activations
    bandwidth = np.array([g.host_link_bandwidth or np.nan for g in gpus])[None, :]
    fetches_in_backward = np.where(t.recompute == "full", 2.0, 1.0)[:, None]
    micro_batches = (t.num_micro_batches + (t.pp - 1) / t.vpp)[:, None]
    forward = np.maximum(weights, activations) / bandwidth
    backward = (fetches_in_backward * weights + activations) / bandwidth
    per_micro_batch = np.maximum(0.0, forward - per["forward_s"]) + np.maximum(
        0.0, backward - (per["compute"] - per["forward_s"])
    )
    first_fetch = weights / np.maximum(group.kept[None, :], 1.0) / bandwidth
    step = (optimizer + weights) / bandwidth
    total = (
        micro_batches * per_micro_batch + first_fetch + np.maximum(0.0, step - optimizer_s[:, None])
    )
    return np.where(offloading, total.max(axis=1), 0.0)


@dataclasses.dataclass(frozen=True)
class ComputeTable:
    """The compute side of every row's step (arrays ``[N]``, seconds unless said).

    Attributes:
        compute_s, bubble_s, optimizer_s, offload_s: those parts of the step with every
            collective free.
        bound_s: their sum, a lower bound of :func:`fabricflow.step_time` for the row.
        micro_batch_s: the slowest pipeline rank's micro-batch (compute only).
        backward_s, forward_s: that rank's backward / forward compute per micro-batch.
        forward_gemm_s, backward_gemm_s: weight-GEMM seconds of one average layer (dense/MoE
            mix) and micro-batch, forward and backward: what TP communication can hide
            behind.
        layers: layers a micro-batch passes on the slowest rank.
        num_micro_batches: micro-batches per step (float).
    """

    compute_s: np.ndarray
    bubble_s: np.ndarray
    optimizer_s: np.ndarray
    offload_s: np.ndarray
    micro_batch_s: np.ndarray
    backward_s: np.ndarray
    forward_s: np.ndarray
    forward_gemm_s: np.ndarray
    backward_gemm_s: np.ndarray
    layers: np.ndarray
    num_micro_batches: np.ndarray

    @property
    def bound_s(self) -> np.ndarray:
        return self.compute_s + self.bubble_s + self.optimizer_s + self.offload_s


def compute_table(
    model: ModelSpec,
    gpu: GpuSpec | Sequence[GpuSpec],
    table: LayoutTable,
    stack: Stack | None = None,
) -> ComputeTable:
    """The step of every row of ``table`` with every collective taking no time.

    Rows are assumed valid (check them with
    :func:`~fabricflow.workload.layout.table_problems`). ``gpu``: one spec, or one per
    pipeline rank (every row then has that many ranks; layers per rank from ``pp_split``).
    """
    kernels = layer_kernels(model, gpu, table, stack)
    parts = compose(model, gpu, table, CommTimes.free(), kernels=kernels, stack=stack)
    k = next(iter(kernels.values()))
    shares = [(k.dense, model.num_dense_layers / model.num_layers)]
    if k.moe is not None:
        shares.append((k.moe, model.num_moe_layers / model.num_layers))
    forward_gemm = sum(share * c.forward_gemm_s for c, share in shares)
    backward_gemm = sum(share * c.backward_gemm_s for c, share in shares)
    b = parts.breakdown
    return ComputeTable(
        compute_s=b["compute"],
        bubble_s=b["bubble"],
        optimizer_s=b["optimizer"],
        offload_s=b["offload"],
        micro_batch_s=parts.slow["total"],
        backward_s=parts.slow["backward_s"],
        forward_s=parts.slow["forward_s"],
        forward_gemm_s=np.asarray(forward_gemm, dtype=np.float64),
        backward_gemm_s=np.asarray(backward_gemm, dtype=np.float64),
        layers=parts.slow["layers"],
        num_micro_batches=table.num_micro_batches.astype(np.float64),
    )


__all__ = [
    "ADAM_BYTES_PER_PARAM",
    "BREAKDOWN_KEYS",
    "COLLECTIVES",
    "CommTimes",
    "ComputeTable",
    "Composition",
    "collective_sizes",
    "compose",
    "compute_table",
]
