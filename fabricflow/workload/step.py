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
* every pipeline rank is timed from its own layer count (uneven splits: first holds the
  embedding, last the logits + loss) on its own GPU type (jobs over several types), and
  the slowest sets the pace: ``m`` micro-batches; fill and drain pass once through every
  other rank, a bubble of ``(sum_r t_r - max_r t_r) / v`` (``(p - 1) / v`` micro-batch
  times when the ranks are equal; 1F1B / interleaved), or under DualPipe
  ``(p/2 - 1)(F&B + B - 3W)`` on the slowest rank;
  pipeline send/recv of ``b s/cp h / tp`` bytes (Megatron scatter-gather) is exposed on
  the ``2 (p v - 1)`` hops of fill and drain when overlapped, on every hop otherwise.
* DP: gradients reduced over the data x context ranks (expert gradients over the expert
  data-parallel ranks): all-reduce (ZeRO-0) or reduce-scatter + parameter all-gather
  (ZeRO-1/2), overlapped with the last backward / first forward per bucket when
  ``dp_overlap`` (the first layer's bucket is always exposed); ZeRO-3 gathers parameters
  for every forward and backward and reduce-scatters gradients per micro-batch.
* coupling: the collectives above are first timed each dimension alone, then again with
  the traffic that overlaps them in time on the fabric (:mod:`.coupling`: the 1F1B
  steady state, the DP reduction with the last backward passes, the parameter all-gather
  with the first forward passes); ``details["coupling"]`` reports the difference.
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
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..collective.comm import CollectiveCache
from ..collective.coupling import plan_windows
from ..errors import SolverError, SpecError
from ..fabric.fabric import Fabric
from ..solve.maxmin.inputs import check_flag
from .efficiency import memory_time
from .flops import executed_flops_per_step, model_flops_per_step
from .gpu import GpuSpec
from .hetero import is_mixed, job_gpus, split_for_gpus
from .layer_cost import embedding_cost, head_cost, layer_cost
from .layout import OFFLOAD_FIELDS, Layout
from .memory import (
    GIB,
    MemoryEstimate,
    offload_traffic,
    rank_holdings,
    rank_memory,
    rank_name,
    rank_parameters,
    stage_parameters,
)
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
    gpu: GpuSpec | str | Sequence | Mapping,
    layout: Layout,
    fabric: Fabric,
    *,
    order: str = DEFAULT_ORDER,
    placement: str | Placement = "contiguous",
    seed: int = 0,
    check_memory: bool = True,
    collectives: str = "fabric",
    seeds: int | None = None,
    coupling: bool = True,
    algorithms: dict[str, str] | None = None,
    routing: str = "auto",
) -> StepResult:
    """Time of one training step of ``model`` on ``fabric`` with ``layout``.

    Args:
        model, gpu: specs or preset names. A job over several GPU types gives ``gpu`` as
            ``"h100-sxm:1024,h20:1024"``, a list of ``(GpuSpec | name, count)`` or a
            mapping ``{name: count}``, in pipeline order: each type runs whole pipeline
            stages, layers are split by speed (:mod:`~fabricflow.workload.hetero`) unless
            ``layout.pp_split`` is given, and MFU divides by the sum of every GPU's peak.
        layout: the parallel layout (validated here against the model).
        fabric: the network; the layout's GPUs are placed on its first GPUs or scattered.
        order: Megatron-style rank order, fastest-varying dimension first.
        placement: ``contiguous``, ``scattered`` (seeded, whole servers),
            ``topology-aware`` (picks the order: heaviest dimension into the smallest
            subtree of ``fabric``; ``order`` stays at its default) or a
            :class:`Placement` built by :func:`placement.place` for this ``layout`` (a
            non-default ``order`` must then match the placement's).
        check_memory: raise :class:`SpecError` when the estimate exceeds HBM.
        collectives: ``fabric`` (the collective model: flows on the fabric, max-min
            shared) or ``alpha-beta`` (analytic estimate, no contention; for comparison).
            ``auto`` and ``collective-model`` are deprecated names of ``fabric``.
        algorithms: collective algorithm per dimension (``tp``, ``cp``, ``ep``, ``pp``,
            ``dp``; expert data parallel follows ``dp``), e.g. ``{"dp": "ring"}``; a
            dimension not named, or ``auto``, takes the fastest algorithm per message size.
            Used by the ``fabric`` backend (alpha-beta has no algorithm choice).
        seeds: ``None`` (one routing seed, 0) or ``N >= 1``: also time the step with ECMP
            hash seeds ``1..N-1``; ``details["variability"]`` then holds ``p50_s``,
            ``p99_s``, ``max_s`` and ``step_time_s_per_seed`` (the result is seed 0's).
        coupling: ``False`` times each dimension's collectives alone (the model before
            the coupling; faster, never slower a step), for comparison.
        routing: routing of the collective model's flows: ``auto`` (the fabric's
            transport: adaptive spraying or per-flow ECMP), ``ecmp``, ``multipath``,
            ``spray``, ``adaptive`` or ``optimized`` (:func:`fabricflow.optimize_routing`
            per phase).

    Traffic of different dimensions that overlaps in time shares the fabric
    (:mod:`fabricflow.collective.coupling`); ``details["coupling"]`` gives the step time of
    the isolated model (each dimension alone), the coupled one (``step_time_s``) and what
    each overlap window adds.

    Example::

        fabric = ff.load_fabric("dgx-a100-superpod")
        layout = Layout(tp=8, pp=2, dp=32, micro_batch=4, global_batch=1536, recompute="full")
        result = step_time("megatron-39.1b", "a100-80gb", layout, fabric)
        result.step_time_s, result.breakdown
    """
    model = load_model(model) if not isinstance(model, ModelSpec) else model
    if not isinstance(layout, Layout):
        raise SpecError("layout", f"expected a Layout, got {type(layout).__name__}")
    if not isinstance(fabric, Fabric):
        raise SpecError(
            "fabric",
            f"expected a Fabric (fabricflow.load_fabric(name)), got {type(fabric).__name__}",
        )
    num_seeds = None if seeds is None else _check_seeds(seeds)
    coupling = check_flag(coupling, "coupling")
    layout.validate(model)
    rank_gpus = job_gpus(gpu, layout)
    for each in set(rank_gpus):
        each.peak(layout.precision)  # fp8 on a chip without fp8 -> clear error
    offloading = any(getattr(layout, f) > 0 for f in OFFLOAD_FIELDS)
    for each in set(rank_gpus) if offloading else ():
        if each.host_link_bandwidth is None:
            raise SpecError(
                "gpu.host_link_bandwidth",
                f"{each.name} has no host link bandwidth; give it (e.g. --gpu-set "
                "host_link_bandwidth=50GB/s) to offload, or set the offload fractions to 0",
            )
    given_layout = layout  # what a given Placement was made for
    layout = split_for_gpus(model, layout, rank_gpus).validate(model)
    memories = rank_memory(model, layout)
    # each rank against its own GPU's HBM; the most oversubscribed one is reported
    memory, gpu = max(zip(memories, rank_gpus), key=lambda mg: mg[0].total / mg[1].hbm)
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
    memory = max(memories, key=lambda estimate: estimate.total)  # the most loaded rank
    if isinstance(placement, Placement):
        # a placement of another layout (or rank order) would time other groups: refused
        if placement.layout != given_layout:
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
            given_layout,
            fabric.num_gpus,
            order=order,
            placement=placement,
            seed=seed,
            gpus_per_node=fabric.gpus_per_node,
            fabric=fabric,
            model=model,
        )
    comm = register_groups(
        CollectiveCache(
            fabric, collectives, field="collectives", algorithms=algorithms, routing=routing
        ),
        where,
        model,
        layout,
    )
    times, slow, breakdown, coupled = _coupled_step(model, rank_gpus, layout, comm, coupling)
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
    variability = None
    if num_seeds is not None:
        # Only the routes depend on the seed: groups, placement and layer costs are reused.
        per_seed = [total]
        for route_seed in range(1, num_seeds):
            cache = CollectiveCache(
                fabric,
                collectives,
                field="collectives",
                seed=route_seed,
                algorithms=algorithms,
                routing=routing,
            )
            per_seed.append(
                sum(
                    _coupled_step(
                        model,
                        rank_gpus,
                        layout,
                        register_groups(cache, where, model, layout),
                        coupling,
                    )[2].values()
                )
            )
        variability = {
            "seeds": len(per_seed),
            "p50_s": float(np.percentile(per_seed, 50)),
            "p99_s": float(np.percentile(per_seed, 99)),
            "max_s": float(max(per_seed)),
            "step_time_s_per_seed": [float(t) for t in per_seed],
        }

    num_gpus = layout.num_gpus
    per_stage = num_gpus // layout.pp
    peak_sum = per_stage * sum(rank_gpu.peak(layout.precision) for rank_gpu in rank_gpus)
    flops = model_flops_per_step(model, layout.seq_len, layout.global_batch)
    hw_flops = executed_flops_per_step(model, layout.seq_len, layout.global_batch, layout.recompute)
    details = {
        "model": model.name,
        "gpu": _gpu_label(rank_gpus, per_stage),
        "fabric": fabric.name,
        "num_gpus": num_gpus,
        "layout": dataclasses.asdict(layout),
        "order": "-".join(where.order),
        "placement": placement if isinstance(placement, str) else "custom",
        "num_micro_batches": layout.num_micro_batches,
        "collective_backend": comm.backend,
        "model_flops_per_step": flops,
        "parameters": model.num_parameters(),
        "micro_batch_s": {rank: t["total"] for rank, t in times.items()},
        "slowest_rank": slow["rank"],
        "pipeline_schedule": layout.schedule,
        "rank_layers": list(layout.rank_layers(model)),
        "rank_gpus": [rank_gpu.name for rank_gpu in rank_gpus],
        "coupling": coupled,
    }
    if variability is not None:
        details["variability"] = variability
    return StepResult(
        step_time_s=total,
        tokens_per_s=layout.global_batch * layout.seq_len / total,
        tflops_per_gpu=flops / total / num_gpus / 1e12,
        hardware_tflops_per_gpu=hw_flops / total / num_gpus / 1e12,
        mfu=flops / (total * peak_sum),
        memory=memory,
        breakdown=breakdown,
        details=details,
    )


class _NoCommunication:
    """Every collective free (0 s): the step with compute, bubbles, optimizer and offload
    only."""

    backend = "none"

    def slowest(self, name: str, op: str, size_bytes: float) -> float:
        return 0.0


def compute_only(model: ModelSpec, gpu: GpuSpec, layout: Layout) -> dict:
    """Breakdown (seconds, :data:`BREAKDOWN_KEYS`) of a step of ``layout`` with every
    collective taking no time: compute, pipeline bubble, optimizer and offload only.

    Its sum is a lower bound of :func:`step_time` for the same model, GPU and layout on any
    fabric, rank order and placement: every part of the composition is non-decreasing in
    each collective's time (sums, ``max(0, comm - compute)`` exposures, and the bubble's
    sum-minus-maximum of the ranks' times), so communication only adds. The layout
    optimizer prunes with it. ``layout`` is validated against ``model`` first.
    """
    layout.validate(model)
    rank_gpus = job_gpus(gpu, layout)
    layout = split_for_gpus(model, layout, rank_gpus).validate(model)
    return compose_step(model, rank_gpus, layout, _NoCommunication())[2]


def compose_step(
    model: ModelSpec, rank_gpus: tuple, layout: Layout, comm
) -> tuple[dict, dict, dict]:
    """Per-rank micro-batch times, the slowest rank and the breakdown (seconds), with
    collective times from ``comm`` (a :class:`CollectiveCache`, or its coupled view);
    ``rank_gpus``: the GPU of each pipeline rank."""
    times = _micro_batch_times(model, rank_gpus, layout, comm)
    slow = max(times.values(), key=lambda t: t["total"])
    m = layout.num_micro_batches
    breakdown = {key: 0.0 for key in BREAKDOWN_KEYS}
    for key in ("compute", "tp", "cp", "ep"):
        breakdown[key] = m * slow[key]
    breakdown["bubble"] = _bubble(layout, times, slow)
    breakdown["pp"] = _pipeline_exposed(model, layout, comm)
    breakdown["dp"] = _data_parallel_exposed(model, layout, comm, slow)
    # every rank steps its own (sharded) parameters on its own GPU; the slowest one counts
    optimizer = 0.0
    for (dense_params, expert_params), rank_gpu in zip(
        rank_parameters(model, layout), rank_gpus, strict=True
    ):
        local = dense_params + expert_params
        if layout.zero >= 1:
            local = dense_params / (layout.dp * layout.cp) + expert_params / layout.expert_dp
        optimizer = max(optimizer, float(memory_time(rank_gpu, ADAM_BYTES_PER_PARAM * local)))
    breakdown["optimizer"] = optimizer / layout.framework_efficiency
    if any(getattr(layout, f) > 0 for f in OFFLOAD_FIELDS):
        breakdown["offload"] = _offload_exposed(
            model, rank_gpus, layout, times, breakdown["optimizer"]
        )
    return times, slow, breakdown


def _coupled_step(
    model: ModelSpec, rank_gpus: tuple, layout: Layout, comm: CollectiveCache, on: bool = True
) -> tuple[dict, dict, dict, dict]:
    """:func:`compose_step` with each dimension alone, then (``on``) again with the traffic of
    each overlap window sharing the fabric; returns the coupled (times, slowest rank,
    breakdown) and the ``coupling`` details entry."""
    times, slow, alone = compose_step(model, rank_gpus, layout, comm)
    isolated_s = sum(alone.values())
    if not on or comm.backend == "alpha-beta":
        why = "off" if not on else "none: the alpha-beta backend has no flows on the fabric"
        coupling = {
            "model": f"{why}: each dimension's collectives timed alone",
            "isolated_step_s": isolated_s,
            "coupled_step_s": isolated_s,
            "added_s": 0.0,
            "added_s_by_part": {key: 0.0 for key in BREAKDOWN_KEYS},
            "windows": {},
        }
        return times, slow, alone, coupling
    view = plan_windows(comm, layout, issue_rates(model, layout, slow))
    times, slow, breakdown = compose_step(model, rank_gpus, layout, view)
    coupled_s = sum(breakdown.values())
    coupling = {
        "model": "joint max-min per overlap window (flow completion where it matters)",
        "isolated_step_s": isolated_s,
        "coupled_step_s": coupled_s,
        "added_s": coupled_s - isolated_s,
        "added_s_by_part": {key: breakdown[key] - alone[key] for key in BREAKDOWN_KEYS},
        "windows": view.report(),
    }
    return times, slow, breakdown, coupling


def issue_rates(model: ModelSpec, layout: Layout, slow: dict) -> dict[str, float]:
    """Collectives each dimension issues per second on the slowest pipeline rank (``slow``
    from :func:`compose_step`; the
    counts of :func:`_layer_comm`, :func:`_pipeline_exposed` and ZeRO-3's per-micro-batch
    gathers): how much of a dimension's traffic falls inside a long overlap window."""
    layers = slow["layers"]
    moe_layers = layers * model.num_moe_layers / model.num_layers if model.is_moe else 0.0
    passes = (2 if layout.recompute == "full" else 1) + 1  # forward(s) and backward
    redo = 1 if layout.recompute in ("full", "selective") else 0
    per_micro_batch = {
        "tp": layers * passes * (4 if layout.sequence_parallel else 2),
        "cp": layers * (layout.cp - 1) * (2 + redo),
        "ep": moe_layers * 2 * passes,
        "pp": 2 * layout.vpp,
        "dp": 3.0,  # ZeRO-3: two parameter gathers and one gradient scatter
        "edp": 3.0,
    }
    return {name: count / slow["total"] for name, count in per_micro_batch.items()}


def _check_seeds(seeds) -> int:
    if isinstance(seeds, bool) or not isinstance(seeds, numbers.Integral) or seeds < 1:
        raise SpecError("seeds", f"must be an integer >= 1 (routing seeds 0..N-1), got {seeds!r}")
    return int(seeds)


def register_groups(
    comm: CollectiveCache, where: Placement, model: ModelSpec, layout: Layout
) -> CollectiveCache:
    """``comm`` with the step's group sets registered (``tp``, ``cp``, ``pp``, ``dp`` over
    data x context ranks, and for MoE models ``ep`` and ``edp``): int arrays
    ``[num_groups, group_size]`` of GPU indices of placement ``where``. Used by the step
    model, the cluster simulator and the design-review report."""
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
        chunk = 2.0 * tokens * model.kv_width / layout.tp
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
        if layout.schedule == "dualpipe":
            # DualPipe runs a forward chunk of one micro-batch with the backward chunk of
            # another: both all-to-alls hide behind the pair's compute (DeepSeek-V3 report)
            compute = passes_fwd * cost.forward_s + cost.backward_s
            out["ep"] = max(0.0, passes_fwd * forward + backward - compute)
        elif layout.ep_overlap:
            out["ep"] = passes_fwd * max(0.0, forward - cost.forward_s) + max(
                0.0, backward - cost.backward_s
            )
        else:
            out["ep"] = passes_fwd * forward + backward
    return out


def _micro_batch_times(
    model: ModelSpec,
    gpu: GpuSpec | Sequence[GpuSpec],
    layout: Layout,
    comm: CollectiveCache,
) -> dict:
    """Per pipeline rank (named by :func:`memory.rank_name`): seconds of one micro-batch,
    split by kind, from the rank's own layer count on its own GPU (``gpu``: one for all
    ranks or one per rank). ``backward_s`` and ``weight_grad_s`` (the weight-gradient
    GEMMs, half the backward GEMM time: ``dW`` and ``dX`` have equal FLOPs) feed the
    DualPipe bubble."""
    rank_gpus = (gpu,) * layout.pp if isinstance(gpu, GpuSpec) else tuple(gpu)
    kinds = [(False, model.num_dense_layers / model.num_layers)]
    if model.is_moe:
        kinds.append((True, model.num_moe_layers / model.num_layers))
    per_gpu: dict = {}
    for each in rank_gpus:
        if each in per_gpu:
            continue
        per_layer = {"compute": 0.0, "tp": 0.0, "cp": 0.0, "ep": 0.0}
        costs = {
            moe: layer_cost(model, each, layout, moe=moe).scaled(1.0 / layout.framework_efficiency)
            for moe, _ in kinds
        }
        for moe, share in kinds:
            cost = costs[moe]
            exposed = _layer_comm(model, layout, comm, cost, moe=moe)
            per_layer["compute"] += share * cost.total_s
            for key, value in exposed.items():
                per_layer[key] += share * value
        emb_f, emb_b = embedding_cost(model, each, layout)
        head_f, head_b = head_cost(model, each, layout)
        per_gpu[each] = (
            per_layer,
            sum(share * costs[moe].backward_s for moe, share in kinds),
            sum(share * costs[moe].backward_gemm_s / 2 for moe, share in kinds),
            emb_f + emb_b,
            head_f + head_b,
            sum(share * costs[moe].forward_s for moe, share in kinds),
        )
    # DualPipe: ranks 0 and p-1 hold both ends; each micro-batch passes one of them
    end_share = 0.5 if layout.schedule == "dualpipe" else 1.0
    out = {}
    for index, ((_, layers, has_embedding, has_head), each) in enumerate(
        zip(rank_holdings(model, layout), rank_gpus, strict=True)
    ):
        per_layer, backward, weight_grad, embedding, head, forward = per_gpu[each]
        extra = end_share * (embedding * has_embedding + head * has_head)
        t: dict[str, Any] = {key: layers * value for key, value in per_layer.items()}
        t["compute"] += extra / layout.framework_efficiency
        t["total"] = sum(t.values())
        t["rank"] = rank_name(layout, index)
        t["backward_s"] = layers * backward
        t["forward_s"] = layers * forward
        t["weight_grad_s"] = layers * weight_grad
        t["layers"] = layers  # layers a micro-batch passes on this rank
        out[t["rank"]] = t
    return out


def _bubble(layout: Layout, times: dict, slow: dict) -> float:
    """Pipeline fill and drain seconds.

    1F1B / interleaved: the first micro-batch's forward and the last one's backward pass
    through every rank once, so all ranks but the slowest add their micro-batch time once,
    divided by ``v`` interleaved chunks (Narayanan et al. SC21; ``(p - 1) / v`` micro-batch
    times for equal ranks). DualPipe (DeepSeek-V3 report, Table 2): ``(p/2 - 1)(F&B + B -
    3W)`` with ``F&B`` the overlapped forward + backward chunk pair (the slowest rank's
    micro-batch time: its compute and the comm left exposed), ``B`` its backward and ``W``
    its weight-gradient part.
    """
    if layout.schedule == "dualpipe":
        pair = slow["total"] + slow["backward_s"] - 3 * slow["weight_grad_s"]
        return (layout.pp / 2 - 1) * pair
    return (sum(t["total"] for t in times.values()) - slow["total"]) / layout.vpp


def _gpu_label(rank_gpus: Sequence[GpuSpec], per_stage: int) -> str:
    """``h100-sxm``, or ``h100-sxm:1024,h20:1024`` for a job over several types."""
    if not is_mixed(rank_gpus) and len({g.name for g in rank_gpus}) == 1:
        return rank_gpus[0].name
    runs: list[list] = []
    for each in rank_gpus:
        if runs and runs[-1][0] == each.name:
            runs[-1][1] += per_stage
        else:
            runs.append([each.name, per_stage])
    return ",".join(f"{name}:{count}" for name, count in runs)


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
    model: ModelSpec, rank_gpus, layout: Layout, times: dict, optimizer_s: float
) -> float:
    """Seconds per step of host-link transfers not hidden behind compute (the worst
    pipeline rank, each over its own GPU's host link; see the module docstring)."""
    # weights are needed by the forward, the backward and (full recompute) the forward redone
    fetches_in_backward = 2 if layout.recompute == "full" else 1
    micro_batches = layout.num_micro_batches + (layout.pp - 1) / layout.vpp
    worst = 0.0
    for traffic, rank_gpu in zip(offload_traffic(model, layout), rank_gpus, strict=True):
        t = times[traffic.rank]
        bandwidth = rank_gpu.host_link_bandwidth
        assert bandwidth is not None  # step_time refuses offload without it
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
