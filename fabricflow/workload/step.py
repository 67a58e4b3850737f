"""Training step time: compute, pipeline bubble, and exposed TP/CP/EP/PP/DP communication.

Composition (one GPU of the slowest pipeline rank; all times in seconds):

* per micro-batch and layer: compute from :func:`layer_cost.layer_cost` (forward, backward,
  recompute), plus the exposed part of its collectives, each timed on the fabric with all
  concurrent groups by :func:`comm.collective_seconds`:
  TP: 2 all-reduces of the activations ``b s/cp h`` (bf16) per pass, or with sequence
  parallelism 2 all-gathers + 2 reduce-scatters; hidden behind the pass's GEMMs when
  ``tp_overlap``. CP: a ring of ``cp - 1`` K/V send/recv steps forward (K/V + their
  gradients backward), hidden behind the attention core. EP: dispatch and combine
  all-to-all of ``top_k`` token copies per pass (dispatch in fp8 under fp8 training),
  scaled by the routing imbalance; backward runs both again; hidden behind another
  chunk's compute when ``ep_overlap``.
  Passes: forward, backward, and the forward again under full recompute.
* the slowest pipeline rank (first: embedding, last: logits + loss) sets the pace:
  ``m`` micro-batches, bubble ``(p - 1) / v`` micro-batch times (1F1B / interleaved);
  pipeline send/recv of ``b s/cp h / tp`` bytes (Megatron scatter-gather) is exposed on
  the ``2 (p v - 1)`` hops of fill and drain when overlapped, on every hop otherwise.
* DP: gradients reduced over the data x context ranks (expert gradients over the expert
  data-parallel ranks): all-reduce (ZeRO-0) or reduce-scatter + parameter all-gather
  (ZeRO-1/2), overlapped with the last backward / first forward per bucket when
  ``dp_overlap`` (the first layer's bucket is always exposed); ZeRO-3 gathers parameters
  for every forward and backward and reduce-scatters gradients per micro-batch.
* optimizer: a memory-bound Adam pass over the local (sharded) parameters, ~34 B each
  (read fp32 master, grad, two moments and the grad-norm pass; write master, moments, bf16).
* offload (``Layout.offload_*``): transfers over the GPU's host link (``host_link_bandwidth``
  per direction, full duplex), streamed layer by layer by copy engines beside the kernels:
  per micro-batch, offloaded weights are fetched in the forward pass (while that pass's
  activations are written out) and again in the backward pass (and the recompute forward),
  together with the activations; each pass's transfer is exposed beyond the pass's compute,
  and the first layer's weights once per step (nothing to hide their fetch behind). Exposure
  per micro-batch counts ``m + (p - 1) / v`` times (it lengthens the bubble too). Offloaded
  optimizer state is streamed in and back out during the optimizer step (with the updated
  weights of the offloaded part), exposed beyond the Adam pass's own time. Zero when
  nothing is offloaded. See docs/memory-offload.md.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..errors import SolverError, SpecError
from ..fabric.fabric import Fabric
from .comm import CollectiveCache
from .efficiency import memory_time
from .flops import executed_flops_per_step, model_flops_per_step
from .gpu import GpuSpec, load_gpu
from .layer_cost import embedding_cost, head_cost, layer_cost
from .layout import OFFLOAD_FIELDS, Layout
from .memory import GIB, MemoryEstimate, memory_per_gpu, offload_traffic, stage_parameters
from .model import ModelSpec, load_model
from .placement import Placement, parse_order, place

ADAM_BYTES_PER_PARAM = 34.0
BREAKDOWN_KEYS = ("compute", "bubble", "tp", "cp", "ep", "pp", "dp", "optimizer", "offload")


@dataclasses.dataclass(frozen=True)
class StepResult:
    """Outcome of :func:`step_time` (SI units).

    ``breakdown`` (seconds) sums to ``step_time_s``: ``compute`` (slowest rank's kernels for
    all micro-batches), ``bubble`` (pipeline fill and drain, incl. the comm inside the
    micro-batch time), exposed ``tp``/``cp``/``ep``/``pp``/``dp`` communication,
    ``optimizer`` and ``offload`` (host-link transfers not hidden behind compute). ``tflops_per_gpu`` counts model FLOPs (no recompute, the MFU numerator:
    Megatron/PaLM convention, attention charged the full ``s x s`` product even when causal);
    ``mfu`` divides model FLOP/s by the dense peak of the layout's precision (bf16 or fp8).
    ``hardware_tflops_per_gpu`` counts the FLOPs the kernels execute (recomputation
    included, causal Flash attention half the product, its backward recomputing the scores;
    see :mod:`fabricflow.workload.flops`): it never exceeds the peak. For very long causal
    sequences model FLOPs exceed executed ones, so ``mfu`` can exceed the hardware fraction.
    """

    step_time_s: float
    tokens_per_s: float
    tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float
    memory: MemoryEstimate
    breakdown: dict
    details: dict

    @property
    def memory_gib_per_gpu(self) -> float:
        return self.memory.total / GIB

    def to_dict(self) -> dict:
        return {
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "tflops_per_gpu": self.tflops_per_gpu,
            "hardware_tflops_per_gpu": self.hardware_tflops_per_gpu,
            "mfu": self.mfu,
            "memory_gib_per_gpu": self.memory_gib_per_gpu,
            "memory_gib": self.memory.as_gib(),
            "breakdown": dict(self.breakdown),
            **self.details,
        }


DEFAULT_ORDER = "tp-cp-ep-dp-pp"


def step_time(
    model: ModelSpec | str,
    gpu: GpuSpec | str,
    layout: Layout,
    fabric: Fabric,
    *,
    order: str = DEFAULT_ORDER,
    placement: str | Placement = "contiguous",
    seed: int = 0,
    check_memory: bool = True,
    collectives: str = "fabric",
    routing: str = "ecmp",
) -> StepResult:
    """Time of one training step of ``model`` on ``fabric`` with ``layout``.

    Args:
        model, gpu: specs or preset names.
        layout: the parallel layout (validated here against the model).
        fabric: the network; the layout's GPUs are placed on its first GPUs or scattered.
        order: Megatron-style rank order, fastest-varying dimension first.
        placement: ``contiguous``, ``scattered`` (seeded, whole servers) or a
            :class:`Placement` built by :func:`placement.place` for this ``layout`` (a
            non-default ``order`` must then match the placement's).
        check_memory: raise :class:`SpecError` when the estimate exceeds HBM.
        collectives: ``fabric`` (the collective model: flows on the fabric, max-min
            shared) or ``alpha-beta`` (analytic estimate, no contention; for comparison).
            ``auto`` and ``collective-model`` are deprecated names of ``fabric``.
        routing: routing of the collective model's flows: ``ecmp``, ``multipath``,
            ``spray`` or ``optimized`` (:func:`fabricflow.optimize_routing` per phase).

    Example::

        fabric = ff.load_fabric("dgx-a100-superpod")
        layout = Layout(tp=8, pp=2, dp=32, micro_batch=4, global_batch=1536, recompute="full")
        result = step_time("megatron-39.1b", "a100-80gb", layout, fabric)
        result.step_time_s, result.breakdown
    """
    model = load_model(model) if not isinstance(model, ModelSpec) else model
    gpu = load_gpu(gpu) if not isinstance(gpu, GpuSpec) else gpu
    if not isinstance(layout, Layout):
        raise SpecError("layout", f"expected a Layout, got {type(layout).__name__}")
    if not isinstance(fabric, Fabric):
        raise SpecError(
            "fabric",
            f"expected a Fabric (fabricflow.load_fabric(name)), got {type(fabric).__name__}",
        )
    layout.validate(model)
    gpu.peak(layout.precision)  # fp8 on a chip without fp8 -> clear error
    offloading = any(getattr(layout, f) > 0 for f in OFFLOAD_FIELDS)
    if offloading and gpu.host_link_bandwidth is None:
        raise SpecError(
            "gpu.host_link_bandwidth",
            f"{gpu.name} has no host link bandwidth; give it (e.g. "
            "--gpu-set host_link_bandwidth=50GB/s) to offload, or set the offload fractions to 0",
        )
    memory = memory_per_gpu(model, layout)
    if check_memory and memory.total > gpu.hbm:
        parts = ", ".join(
            f"{k} {v:.1f}"
            for k, v in memory.as_gib().items()
            if k not in ("total", "rank", "offloaded")
        )
        raise SpecError(
            "layout",
            f"needs {memory.total / GIB:.1f} GiB per GPU on the {memory.rank} "
            f"pipeline rank ({parts} GiB) but {gpu.name} has {gpu.hbm / GIB:.1f} GiB "
            "of HBM; raise tp/pp, use recompute, ZeRO, offload or a smaller micro-batch",
        )
    if isinstance(placement, Placement):
        # a placement of another layout (or rank order) would time other groups: refused
        if placement.layout != layout:
            raise SpecError("placement", "was made for another layout; place(layout, ...) this one")
        if order != DEFAULT_ORDER and parse_order(order) != placement.order:
            raise SpecError(
                "order",
                f"{order!r} differs from the placement's order {'-'.join(placement.order)!r}; "
                "give one of them",
            )
        where = placement
    else:
        where = place(
            layout,
            fabric.num_gpus,
            order=order,
            placement=placement,
            seed=seed,
            gpus_per_node=fabric.gpus_per_node,
        )
    cache = CollectiveCache(fabric, collectives, field="collectives", routing=routing)
    comm = _register_groups(cache, where, model, layout)

    times = _micro_batch_times(model, gpu, layout, comm)
    slow = max(times.values(), key=lambda t: t["total"])
    m, p, v = layout.num_micro_batches, layout.pp, layout.vpp
    breakdown = {key: 0.0 for key in BREAKDOWN_KEYS}
    for key in ("compute", "tp", "cp", "ep"):
        breakdown[key] = m * slow[key]
    breakdown["bubble"] = (p - 1) / v * slow["total"]
    breakdown["pp"] = _pipeline_exposed(model, layout, comm)
    breakdown["dp"] = _data_parallel_exposed(model, layout, comm, slow)
    dense_params, expert_params = stage_parameters(model, layout)
    local = dense_params + expert_params
    if layout.zero >= 1:
        local = dense_params / (layout.dp * layout.cp) + expert_params / layout.expert_dp
    breakdown["optimizer"] = (
        float(memory_time(gpu, ADAM_BYTES_PER_PARAM * local)) / layout.framework_efficiency
    )
    if offloading:
        breakdown["offload"] = _offload_exposed(model, gpu, layout, times, breakdown["optimizer"])
    total = sum(breakdown.values())
    bad = [key for key, value in breakdown.items() if not math.isfinite(value)]
    if bad or not math.isfinite(total) or total <= 0:
        # A guard, not a model path: every part is built finite from validated inputs.
        part = bad[0] if bad else "total"
        value = breakdown[part] if bad else total
        raise SolverError(
            f"step time: the {part!r} part is {value!r}, not a finite positive number of "
            f"seconds (collectives={comm.backend!r}, fabric {fabric.name!r})"
        )

    num_gpus = layout.num_gpus
    flops = model_flops_per_step(model, layout.seq_len, layout.global_batch)
    hw_flops = executed_flops_per_step(model, layout.seq_len, layout.global_batch, layout.recompute)
    details = {
        "model": model.name,
        "gpu": gpu.name,
        "fabric": fabric.name,
        "num_gpus": num_gpus,
        "layout": dataclasses.asdict(layout),
        "order": "-".join(where.order),
        "placement": placement if isinstance(placement, str) else "custom",
        "num_micro_batches": m,
        "collective_backend": comm.backend,
        "model_flops_per_step": flops,
        "parameters": model.num_parameters(),
        "micro_batch_s": {rank: t["total"] for rank, t in times.items()},
        "slowest_rank": slow["rank"],
    }
    return StepResult(
        step_time_s=total,
        tokens_per_s=layout.global_batch * layout.seq_len / total,
        tflops_per_gpu=flops / total / num_gpus / 1e12,
        hardware_tflops_per_gpu=hw_flops / total / num_gpus / 1e12,
        mfu=flops / (total * num_gpus * gpu.peak(layout.precision)),
        memory=memory,
        breakdown=breakdown,
        details=details,
    )


def _register_groups(
    comm: CollectiveCache, where: Placement, model: ModelSpec, layout: Layout
) -> CollectiveCache:
    """Build each group set once: int arrays [num_groups, group_size] of GPU indices."""
    for name, dims, expert in (
        ("tp", "tp", False),
        ("cp", "cp", False),
        ("pp", "pp", False),
        ("dp", ("dp", "cp"), False),
    ):
        comm.add(name, where.groups(dims, expert=expert))
    if model.is_moe:
        comm.add("ep", where.groups("ep", expert=True))
        comm.add("edp", where.groups("dp", expert=True))
    return comm


def _layer_comm(
    model: ModelSpec, layout: Layout, comm: CollectiveCache, cost, *, moe: bool
) -> dict:
    """Exposed TP / CP / EP seconds of one layer for one micro-batch (all passes)."""
    tokens = layout.micro_batch * layout.seq_len / layout.cp
    passes_fwd = 2 if layout.recompute == "full" else 1
    out = {"tp": 0.0, "cp": 0.0, "ep": 0.0}
    if layout.tp > 1:
        size = 2.0 * tokens * model.hidden_size
        if layout.sequence_parallel:
            per_pass = 2 * (
                comm.slowest("tp", "all_gather", size) + comm.slowest("tp", "reduce_scatter", size)
            )
        else:
            per_pass = 2 * comm.slowest("tp", "all_reduce", size)
        if layout.tp_overlap:
            out["tp"] = passes_fwd * max(0.0, per_pass - cost.forward_gemm_s) + max(
                0.0, per_pass - cost.backward_gemm_s
            )
        else:
            out["tp"] = (passes_fwd + 1) * per_pass
    if layout.cp > 1:
        if model.is_mla:
            width = model.num_heads * (model.qk_head_dim + model.value_head_dim)
        else:
            width = 2 * model.num_kv_heads * model.head_dim
        chunk = 2.0 * tokens * width / layout.tp
        steps = layout.cp - 1
        ring_f = steps * comm.slowest("cp", "sendrecv", chunk)
        ring_b = steps * comm.slowest("cp", "sendrecv", 2 * chunk)
        redo = 1 if layout.recompute in ("full", "selective") else 0
        out["cp"] = (1 + redo) * max(0.0, ring_f - cost.forward_attention_s) + max(
            0.0, ring_b - cost.backward_attention_s
        )
    if moe and layout.ep > 1:
        # Dispatch sends top_k copies of each token (fp8 under fp8 training, as DeepSeek-V3
        # does), combine returns them in bf16; the most loaded rank sets the pace.
        copies = tokens / layout.tp * model.experts_per_token * model.hidden_size
        copies *= layout.moe_imbalance
        dispatch_bytes = 1.0 if layout.precision == "fp8" else 2.0
        bf16 = comm.slowest("ep", "all_to_all", 2.0 * copies)
        forward = comm.slowest("ep", "all_to_all", dispatch_bytes * copies) + bf16
        backward = 2 * bf16  # gradients of combine and of dispatch, bf16
        if layout.ep_overlap:
            out["ep"] = passes_fwd * max(0.0, forward - cost.forward_s) + max(
                0.0, backward - cost.backward_s
            )
        else:
            out["ep"] = passes_fwd * forward + backward
    return out


def _micro_batch_times(
    model: ModelSpec, gpu: GpuSpec, layout: Layout, comm: CollectiveCache
) -> dict:
    """Per pipeline rank (first, middle, last): seconds of one micro-batch, split by kind."""
    kinds = [(False, model.num_dense_layers / model.num_layers)]
    if model.is_moe:
        kinds.append((True, model.num_moe_layers / model.num_layers))
    per_layer = {"compute": 0.0, "tp": 0.0, "cp": 0.0, "ep": 0.0}
    costs = {
        moe: layer_cost(model, gpu, layout, moe=moe).scaled(1.0 / layout.framework_efficiency)
        for moe, _ in kinds
    }
    for moe, share in kinds:
        cost = costs[moe]
        exposed = _layer_comm(model, layout, comm, cost, moe=moe)
        per_layer["compute"] += share * cost.total_s
        for key, value in exposed.items():
            per_layer[key] += share * value
    emb_f, emb_b = embedding_cost(model, gpu, layout)
    head_f, head_b = head_cost(model, gpu, layout)
    first, middle, last = layout.stage_layers(model)
    ranks = {
        "first": (first, emb_f + emb_b),
        "middle": (middle, 0.0),
        "last": (last, head_f + head_b),
    }
    if layout.pp == 1:
        ranks = {"only": (first, emb_f + emb_b + head_f + head_b)}
    out = {}
    for rank, (layers, extra) in ranks.items():
        t: dict[str, Any] = {key: layers * value for key, value in per_layer.items()}
        t["compute"] += extra / layout.framework_efficiency
        t["total"] = sum(t.values())
        t["rank"] = rank
        t["backward_s"] = layers * sum(share * costs[moe].backward_s for moe, share in kinds)
        t["forward_s"] = layers * sum(share * costs[moe].forward_s for moe, share in kinds)
        out[rank] = t
    return out


def _pipeline_exposed(model: ModelSpec, layout: Layout, comm: CollectiveCache) -> float:
    if layout.pp == 1:
        return 0.0
    size = 2.0 * layout.micro_batch * layout.seq_len / layout.cp * model.hidden_size / layout.tp
    hop = comm.slowest("pp", "sendrecv", size)
    chain = 2 * (layout.pp * layout.vpp - 1) * hop
    if layout.pp_overlap:
        return chain
    return chain + 2 * layout.num_micro_batches * layout.vpp * hop


def _data_parallel_exposed(
    model: ModelSpec, layout: Layout, comm: CollectiveCache, slow: dict
) -> float:
    dense, expert = stage_parameters(model, layout)
    grad_bytes = 4.0 if layout.grad_reduce_dtype == "fp32" else 2.0
    sets = [("dp", dense, layout.dp * layout.cp)]
    if model.is_moe:
        sets.append(("edp", expert, layout.expert_dp))
    first, _, last = layout.stage_layers(model)
    buckets = max(first, last, 1)
    total = 0.0
    for name, params, size in sets:
        if size == 1 or params == 0:
            continue
        if layout.zero == 3:
            gather = comm.slowest(name, "all_gather", 2.0 * params)
            scatter = comm.slowest(name, "reduce_scatter", grad_bytes * params)
            per_mb = 2 * gather + scatter
            if layout.dp_overlap:
                per_mb = max(per_mb - slow["total"], per_mb / buckets)
            total += layout.num_micro_batches * per_mb
            continue
        if layout.zero == 0:
            reduce = comm.slowest(name, "all_reduce", grad_bytes * params)
            gather = 0.0
        else:
            reduce = comm.slowest(name, "reduce_scatter", grad_bytes * params)
            gather = comm.slowest(name, "all_gather", 2.0 * params)
        if layout.dp_overlap:
            reduce = max(reduce - slow["backward_s"], reduce / buckets)
            gather = (
                max(gather - (slow["total"] - slow["backward_s"]), gather / buckets)
                if gather
                else 0.0
            )
        total += reduce + gather
    return total


def _offload_exposed(
    model: ModelSpec, gpu: GpuSpec, layout: Layout, times: dict, optimizer_s: float
) -> float:
    """Seconds per step of host-link transfers not hidden behind compute (the worst end
    pipeline rank; see the module docstring)."""
    bandwidth = gpu.host_link_bandwidth
    assert bandwidth is not None  # step_time refuses offload without it
    # weights are needed by the forward, the backward and (full recompute) the forward redone
    fetches_in_backward = 2 if layout.recompute == "full" else 1
    micro_batches = layout.num_micro_batches + (layout.pp - 1) / layout.vpp
    worst = 0.0
    for traffic in offload_traffic(model, layout):
        t = times[traffic.rank]
        # full duplex: each direction has the whole bandwidth; the busier one sets the time
        forward = max(traffic.weights, traffic.activations) / bandwidth
        backward = (fetches_in_backward * traffic.weights + traffic.activations) / bandwidth
        # prefetched layer by layer beside the pass's kernels: exposed beyond the pass
        per_micro_batch = max(0.0, forward - t["forward_s"]) + max(
            0.0, backward - (t["compute"] - t["forward_s"])
        )
        # the first layer's weights must arrive before the step's first forward can start
        first_fetch = traffic.weights / max(traffic.layers, 1) / bandwidth
        # optimizer step: state in and out, plus the updated offloaded weights out
        step = (traffic.optimizer + traffic.weights) / bandwidth
        total = micro_batches * per_micro_batch + first_fetch + max(0.0, step - optimizer_s)
        worst = max(worst, total)
    return worst
