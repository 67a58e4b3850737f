"""Training step time: compute, pipeline bubble, and exposed TP/CP/EP/PP/DP communication.

Composition (one GPU of the slowest pipeline rank; all times in seconds):

* per micro-batch and layer: compute from :func:`layer_cost.layer_cost` (forward, backward,
  recompute), plus the exposed part of its collectives, each timed on the fabric with all
  concurrent groups by :func:`comm.collective_seconds`:
  TP: 2 all-reduces of the activations ``b s/cp h`` (bf16) per pass, or with sequence
  parallelism 2 all-gathers + 2 reduce-scatters; hidden behind the pass's GEMMs when
  ``tp_overlap``. CP: a ring of ``cp - 1`` K/V send/recv steps forward (K/V + their
  gradients backward), hidden behind the attention core. EP: dispatch and combine
  all-to-all of ``top_k`` token copies per pass (dispatch in fp8 under ``fp8_dispatch``),
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
  the traffic that overlaps them in time on the fabric (:mod:`fabricflow.collective.coupling`: the 1F1B
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

import numpy as np

from fabricflow.collective.comm import CollectiveCache
from fabricflow.collective.coupling import plan_windows
from fabricflow.collective.nccl_cost import DEFAULT_COST, CostModel
from fabricflow.errors import SolverError, SpecError, check_flag
from fabricflow.fabric.fabric import Fabric
from fabricflow.workload.calibration import Calibration, as_calibration
from fabricflow.workload.compute import (
    ADAM_BYTES_PER_PARAM,
    BREAKDOWN_KEYS,
    COLLECTIVES,
    CommTimes,
    Composition,
    collective_sizes,
    compose,
)
from fabricflow.workload.dispatch import dispatch_seconds, line_rate
from fabricflow.workload.flops import executed_flops_per_step, model_flops_per_step
from fabricflow.workload.gpu import GpuSpec
from fabricflow.workload.gpu_memory import GIB, MemoryEstimate, rank_memory, usable_hbm
from fabricflow.workload.hetero import is_mixed, job_gpus, split_for_gpus
from fabricflow.workload.intervals import DEFAULT_LEVEL, Interval, step_interval
from fabricflow.workload.layout import OFFLOAD_FIELDS, Layout, for_layout
from fabricflow.workload.layout_table import LayoutTable
from fabricflow.workload.model_spec import ModelSpec, load_model
from fabricflow.workload.placement import DEFAULT_PLACEMENT, Placement, parse_order, place
from fabricflow.workload.stack import Stack, load_stack
from fabricflow.workload.stages import rank_names

__all__ = [
    "ADAM_BYTES_PER_PARAM",
    "BREAKDOWN_KEYS",
    "DEFAULT_ORDER",
    "StepResult",
    "compute_only",
    "step_time",
]


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

    ``interval``: the prediction interval of the step time
    (:mod:`fabricflow.workload.intervals`: from the model's residuals on published runs,
    or from a calibration's uncertainty); tokens/s and MFU get theirs from it.
    """

    step_time_s: float
    tokens_per_s: float
    tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float
    memory: MemoryEstimate
    breakdown: dict
    details: dict
    interval: Interval | None = None

    @property
    def memory_gib_per_gpu(self) -> float:
        return self.memory.total / GIB

    def intervals(self) -> dict:
        """``{"step_time_s" | "tokens_per_s" | "mfu": Interval}`` (empty without one)."""
        if self.interval is None:
            return {}
        return {
            "step_time_s": self.interval,
            "tokens_per_s": self.interval.inverse(self.tokens_per_s * self.step_time_s),
            "mfu": self.interval.inverse(self.mfu * self.step_time_s),
        }

    def to_dict(self) -> dict:
        bands = self.intervals()
        interval = (
            {
                "step_time_interval_s": bands["step_time_s"].to_list(),
                "step_time_interval_level": bands["step_time_s"].level,
                "tokens_per_s_interval": bands["tokens_per_s"].to_list(),
                "mfu_interval": bands["mfu"].to_list(),
                "interval_method": bands["step_time_s"].method,
                "interval_basis": bands["step_time_s"].basis,
            }
            if bands
            else {}
        )
        return {
            "step_time_s": self.step_time_s,
            **interval,
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
    placement: str | Placement = DEFAULT_PLACEMENT,
    placement_seed: int = 0,
    check_memory: bool = True,
    collectives: str = "fabric",
    routing_seeds: int | None = None,
    routing_seed: int = 0,
    coupling: bool = True,
    algorithms: dict[str, str] | None = None,
    routing: str = "auto",
    cc: str | None = None,
    calibration: Calibration | str | None = None,
    interval_level: float | None = DEFAULT_LEVEL,
    stack: Stack | str | None = None,
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
        placement: ``deployed`` (default: as racks are run; on fabrics without
            spare-keeping scale-up domains the same as ``contiguous``), ``contiguous``,
            ``domain-aligned``, ``scattered`` (seeded by ``placement_seed``, whole servers),
            ``topology-aware`` (picks the order: heaviest dimension into the smallest
            subtree of ``fabric``; ``order`` stays at its default) or a
            :class:`Placement` built by :func:`placement.place` for this ``layout`` (a
            non-default ``order`` must then match the placement's).
        placement_seed: seed of the ``scattered`` placement (an integer >= 0; the other
            placements draw nothing).
        check_memory: raise :class:`SpecError` when the estimate exceeds HBM.
        collectives: ``fabric`` (the collective model: flows on the fabric, max-min
            shared) or ``alpha-beta`` (analytic estimate, no contention; for comparison).
        algorithms: collective algorithm per dimension (``tp``, ``cp``, ``ep``, ``pp``,
            ``dp``; expert data parallel follows ``dp``), e.g. ``{"dp": "ring"}``; a
            dimension not named, or ``auto``, takes the fastest algorithm per message size.
            Used by the ``fabric`` backend (alpha-beta has no algorithm choice).
        routing_seeds: ``None`` (one routing seed, ``routing_seed``) or ``N >= 1``: also
            time the step with the collectives' ECMP hash seeds ``routing_seed + 1 ..
            routing_seed + N - 1``; ``details["variability"]`` then holds
            ``routing_seeds``, ``p50_s``, ``p99_s``, ``max_s`` and ``step_time_s_per_seed``
            (the result is ``routing_seed``'s).
        routing_seed: the ECMP hash seed of the collectives' routes (an integer >= 0,
            default 0; ``details["routing_seed"]``).
        coupling: ``False`` times each dimension's collectives alone (the model before
            the coupling; faster, never slower a step), for comparison.
        routing: routing of the collective model's flows: ``auto`` (the fabric's
            transport: adaptive spraying or per-flow ECMP), ``ecmp``, ``multipath``,
            ``spray``, ``adaptive`` or ``optimized`` (:func:`fabricflow.optimize_routing`
            per phase).
        cc: ``None`` (default: max-min phase rates, an ideal congestion control) or a
            rate law (``dcqcn``, ``hpcc``, ``timely``, ``swift``, ``predictive``): each
            collective's phase rates are scaled by its flows' efficiency under that law,
            from the congestion-control fluid (:mod:`fabricflow.collective.cc_rates`;
            ``fabric`` backend only). Windows where two dimensions' collectives overlap
            are still solved jointly at max-min.
        calibration: a :class:`~fabricflow.workload.calibration.Calibration` (or the path
            of a calibration file, ``fabricflow calibrate``): its ``gpu.*`` parameters
            replace those of the GPU it was measured on, its ``network.*`` parameters the
            collective model's constants; the interval is then the calibrated one.
        interval_level: the level of the prediction interval (``result.interval``), 0.8
            by default; ``None``: no interval (what the interval table's generator uses).
        stack: the software stack (a :class:`~fabricflow.workload.stack.Stack`, a preset
            name such as ``nemo-25.09``, or None for the default ``megatron-core``): its
            physical parameters (host time per module, the MoE dispatchers' achieved
            bandwidth and SMs, ...) time the step; ``layout`` is taken as given (build it
            with ``stack.layout_for(...)`` to take the stack's software choices as
            defaults). ``details["stack"]`` reports it.

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
    inputs = _resolve_inputs(
        model,
        gpu,
        layout,
        fabric,
        stack=stack,
        calibration=calibration,
        routing_seeds=routing_seeds,
        routing_seed=routing_seed,
        coupling=coupling,
    )
    memory = _check_memory(inputs, check_memory)
    where, layout = _place(
        inputs, fabric, order=order, placement=placement, placement_seed=placement_seed
    )
    timing = _time_step(
        inputs,
        layout,
        where,
        fabric,
        collectives=collectives,
        algorithms=algorithms,
        routing=routing,
        cc=cc,
    )
    return _result(inputs, layout, where, fabric, placement, memory, timing, interval_level)


@dataclasses.dataclass(frozen=True)
class _Inputs:
    """What :func:`step_time` times, resolved from names and checked: the model, the
    software stack, the calibration (``None``: priors), the GPU of each pipeline rank
    (``rank_gpus``), the caller's layout (``given_layout``: what a given
    :class:`Placement` was made for) and that layout split over the ranks' GPUs
    (``layout``), the collective cost model, the number of routing seeds (``None``: one),
    the first routing seed and whether overlapping traffic is coupled."""

    model: ModelSpec
    stack: Stack
    calibration: Calibration | None
    rank_gpus: tuple
    given_layout: Layout
    layout: Layout
    cost: CostModel
    num_seeds: int | None
    routing_seed: int
    coupling: bool


def _resolve_inputs(
    model: ModelSpec | str,
    gpu: GpuSpec | str | Sequence | Mapping,
    layout: Layout,
    fabric: Fabric,
    *,
    stack: Stack | str | None,
    calibration: Calibration | str | None,
    routing_seeds: int | None,
    routing_seed: int,
    coupling: bool,
) -> _Inputs:
    """:func:`step_time`'s arguments resolved and checked, in this order: model, stack and
    calibration from names or paths (a calibration's stack parameters replace the
    stack's), ``layout`` and ``fabric`` by type, ``routing_seeds``, ``routing_seed`` and ``coupling`` by value, the
    layout against the model, the GPU of each pipeline rank (a calibration's ``gpu.*``
    parameters applied to the GPU it was measured on) and the collective cost model (its
    ``network.*`` parameters), the layout's precision and offload against those GPUs, and
    the layout split over them. Raises :class:`SpecError` naming the argument."""
    model = load_model(model) if not isinstance(model, ModelSpec) else model
    stack = stack if isinstance(stack, Stack) else load_stack(stack)
    calibration = as_calibration(calibration)
    if calibration is not None:
        stack = calibration.stack_spec(stack)
    if not isinstance(layout, Layout):
        raise SpecError("layout", f"expected a Layout, got {type(layout).__name__}")
    if not isinstance(fabric, Fabric):
        raise SpecError(
            "fabric",
            f"expected a Fabric (fabricflow.load_fabric(name)), got {type(fabric).__name__}",
        )
    num_seeds = None if routing_seeds is None else _check_routing_seeds(routing_seeds)
    routing_seed = _check_routing_seed(routing_seed)
    coupling = check_flag(coupling, "coupling")
    layout.validate(model)
    rank_gpus = job_gpus(gpu, layout)
    if calibration is not None:
        rank_gpus = tuple(calibration.gpu_spec(each) for each in rank_gpus)
    cost = DEFAULT_COST if calibration is None else calibration.cost_model()
    for each in set(rank_gpus):
        # fp8 on a chip without fp8, MXFP8 on one without block scales -> clear error
        each.check_precision(layout.precision, layout.fp8_recipe)
    offloading = any(getattr(layout, f) > 0 for f in OFFLOAD_FIELDS)
    for each in set(rank_gpus) if offloading else ():
        if each.host_link_bandwidth is None:
            raise SpecError(
                "gpu.host_link_bandwidth",
                f"{each.name} has no host link bandwidth; give it (e.g. --gpu-set "
                "host_link_bandwidth=50GB/s) to offload, or set the offload fractions to 0",
            )
    split = split_for_gpus(model, layout, rank_gpus).validate(model)
    return _Inputs(
        model, stack, calibration, rank_gpus, layout, split, cost, num_seeds, routing_seed, coupling
    )


def _check_memory(inputs: _Inputs, check: bool) -> tuple[MemoryEstimate, dict]:
    """The most loaded rank's memory estimate and the margin entry of ``details``
    (``usable_gib``, ``margin_gib``: the least room below any rank's usable HBM, in GiB).
    With ``check``, raises :class:`SpecError` when a rank needs more than its GPU's usable
    HBM."""
    rank_gpus = inputs.rank_gpus
    memories = rank_memory(inputs.model, inputs.layout)
    # each rank against its own GPU's usable HBM (the device less the headroom for CUDA
    # context, NCCL buffers and fragmentation, as the layout optimizer checks it); the
    # most oversubscribed rank is reported
    memory, gpu = max(zip(memories, rank_gpus), key=lambda mg: mg[0].total / usable_hbm(mg[1]))
    if check and memory.total > usable_hbm(gpu):
        parts = ", ".join(
            f"{k} {v:.1f}"
            for k, v in memory.as_gib().items()
            if k not in ("total", "rank", "offloaded")
        )
        raise SpecError(
            "layout",
            f"needs {memory.total / GIB:.1f} GiB per GPU on the {memory.rank} "
            f"pipeline rank ({parts} GiB) but {gpu.name} has {usable_hbm(gpu) / GIB:.1f} "
            f"GiB usable of {gpu.hbm / GIB:.1f} GiB of HBM (the rest is headroom for the CUDA "
            "context, NCCL and fragmentation); raise tp/pp, use recompute, ZeRO, offload or a "
            "smaller micro-batch",
        )
    # the margin below the usable HBM (the headroom kept for context, NCCL, fragmentation)
    margin = min(usable_hbm(g) - m.total for m, g in zip(memories, rank_gpus, strict=True))
    memory_margin = {
        "usable_gib": min(usable_hbm(g) for g in rank_gpus) / GIB,
        "margin_gib": margin / GIB,
    }
    return max(memories, key=lambda estimate: estimate.total), memory_margin


def _place(
    inputs: _Inputs,
    fabric: Fabric,
    *,
    order: str,
    placement: str | Placement,
    placement_seed: int,
) -> tuple[Placement, Layout]:
    """Where the job's GPUs sit on ``fabric`` (a given :class:`Placement`, checked against
    the layout and ``order``, or one built by :func:`placement.place`), and the layout to
    time there: TP comm-GEMM overlap is dropped where a TP group leaves its scale-up
    domain."""
    layout = inputs.layout
    if isinstance(placement, Placement):
        # a placement of another layout (or rank order) would time other groups: refused
        if placement.layout != inputs.given_layout:
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
            inputs.given_layout,
            fabric.num_gpus,
            order=order,
            placement=placement,
            seed=placement_seed,
            gpus_per_node=fabric.gpus_per_node,
            fabric=fabric,
            model=inputs.model,
        )
    # Transformer Engine's userbuffers (TP comm-GEMM overlap) works only inside one NVLink
    # domain (docs/references.md): a TP group over the scale-out network runs NCCL
    # collectives, asynchronous in the backward pass where tp_backward_overlap allows
    if layout.tp_overlap and not _tp_in_one_domain(where, fabric):
        layout = dataclasses.replace(layout, tp_overlap=False)
    return where, layout


@dataclasses.dataclass(frozen=True)
class _Timing:
    """The composed step of :func:`_time_step`: per-rank micro-batch ``times``,
    the ``slow``-est rank's entry, the ``breakdown`` (seconds) and its ``total``, the
    ``coupling`` details entry, the collective cache ``comm`` that timed it, and the
    ``variability`` over routing seeds (``None`` with one seed)."""

    times: dict
    slow: dict
    breakdown: dict
    total: float
    coupling: dict
    comm: CollectiveCache
    variability: dict | None


def _time_step(
    inputs: _Inputs,
    layout: Layout,
    where: Placement,
    fabric: Fabric,
    *,
    collectives: str,
    algorithms: dict[str, str] | None,
    routing: str,
    cc: str | None,
) -> _Timing:
    """Every collective of the step timed on ``fabric`` with the groups of ``where``, and
    the step composed from them (:func:`_coupled_step`); with several routing seeds, the
    step again per seed. Raises :class:`SolverError` when a part is not a finite positive
    number of seconds."""
    model, stack = inputs.model, inputs.stack
    ep_nodes = _ep_domains(where, fabric, model)
    ep_line = line_rate(fabric, ep_nodes)

    def coupled(route_seed: int) -> tuple[CollectiveCache, tuple]:
        cache = CollectiveCache(
            fabric,
            collectives,
            field="collectives",
            seed=route_seed,
            algorithms=algorithms,
            routing=routing,
            cc=cc,
            cost=inputs.cost,
        )
        comm = register_groups(cache, where, model, layout)
        step = _coupled_step(
            model,
            inputs.rank_gpus,
            layout,
            comm,
            inputs.coupling,
            ep_nodes=ep_nodes,
            stack=stack,
            ep_line=ep_line,
        )
        return comm, step

    first = inputs.routing_seed
    comm, (times, slow, breakdown, coupled_entry) = coupled(first)
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
    if inputs.num_seeds is not None:
        # Only the routes depend on the seed: groups, placement and layer costs are reused.
        per_seed = [total]
        for route_seed in range(first + 1, first + inputs.num_seeds):
            per_seed.append(sum(coupled(route_seed)[1][2].values()))
        variability = {
            "routing_seeds": len(per_seed),
            "p50_s": float(np.percentile(per_seed, 50)),
            "p99_s": float(np.percentile(per_seed, 99)),
            "max_s": float(max(per_seed)),
            "step_time_s_per_seed": [float(t) for t in per_seed],
        }
    return _Timing(times, slow, breakdown, total, coupled_entry, comm, variability)


def _result(
    inputs: _Inputs,
    layout: Layout,
    where: Placement,
    fabric: Fabric,
    placement: str | Placement,
    memory: tuple[MemoryEstimate, dict],
    timing: _Timing,
    interval_level: float | None,
) -> StepResult:
    """The :class:`StepResult` of a timed step: throughput, model and executed FLOPs per
    GPU, MFU against the sum of every GPU's peak, the details entries and the prediction
    interval at ``interval_level`` (``None``: none)."""
    model, stack, calibration, rank_gpus = (
        inputs.model,
        inputs.stack,
        inputs.calibration,
        inputs.rank_gpus,
    )
    memory_estimate, memory_margin = memory
    comm, slow, total = timing.comm, timing.slow, timing.total
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
        # what else sets the collectives' times: routing, its hash seed, algorithms
        "routing": comm.routing,
        "routing_seed": comm.seed,
        "algorithms": dict(comm.algorithms),
        "model_flops_per_step": flops,
        "parameters": model.num_parameters(),
        "micro_batch_s": {rank: t["total"] for rank, t in timing.times.items()},
        "slowest_rank": slow["rank"],
        "pipeline_schedule": layout.schedule,
        "rank_layers": list(layout.rank_layers(model)),
        "rank_gpus": [rank_gpu.name for rank_gpu in rank_gpus],
        "coupling": timing.coupling,
        "memory": memory_margin,
        "overlap": slow["overlap"],
        # TP comm-GEMM overlap in force (every TP group in one NVLink domain: _place keeps
        # tp_overlap only then)
        "tp_userbuffers": bool(layout.tp_overlap and layout.sequence_parallel and layout.tp > 1),
        # compute seconds the slowest rank's GPU waits for its host to issue work (eager
        # layers whose host time exceeds their kernels'; included in "compute")
        "host_wait_s": slow["host"] * layout.num_micro_batches,
        "stack": stack.to_dict(),
    }
    if timing.variability is not None:
        details["variability"] = timing.variability
    if comm.cc is not None:
        details["cc"] = comm.cc
    if calibration is not None:
        details["calibration"] = {
            "gpu": calibration.gpu,
            "compute_applied": any(calibration.applies_to(g) for g in rank_gpus),
            "parameters": {
                name: p.value for name, p in calibration.parameters.items() if p.determined
            },
        }
    interval = (
        None
        if interval_level is None
        else step_interval(
            total,
            gpu=rank_gpus[0].name,
            moe=model.is_moe,
            precision=layout.precision,
            level=interval_level,
            calibration=calibration,
            stack=stack.name,
        )
    )
    return StepResult(
        step_time_s=total,
        tokens_per_s=layout.global_batch * layout.seq_len / total,
        tflops_per_gpu=flops / total / num_gpus / 1e12,
        hardware_tflops_per_gpu=hw_flops / total / num_gpus / 1e12,
        mfu=flops / (total * peak_sum),
        memory=memory_estimate,
        breakdown=timing.breakdown,
        details=details,
        interval=interval,
    )


def compute_only(
    model: ModelSpec, gpu: GpuSpec, layout: Layout, stack: Stack | str | None = None
) -> dict:
    """Breakdown (seconds, :data:`BREAKDOWN_KEYS`) of a step of ``layout`` with every
    collective taking no time: compute, pipeline bubble, optimizer and offload only.

    Its sum is a lower bound of :func:`step_time` for the same model, GPU and layout on any
    fabric, rank order and placement: every part of the composition is non-decreasing in
    each collective's time (sums, ``max(0, comm - compute)`` exposures, and the bubble's
    sum-minus-maximum of the ranks' times), so communication only adds. The layout
    optimizer prunes with it. ``layout`` is validated against ``model`` first; the table
    form is :func:`fabricflow.workload.compute.compute_table`.
    """
    layout.validate(model)
    rank_gpus = job_gpus(gpu, layout)
    layout = split_for_gpus(model, layout, rank_gpus).validate(model)
    stack = stack if isinstance(stack, Stack) else load_stack(stack)
    free = CommTimes.free()
    return for_layout(compose, layout, model=model, gpu=rank_gpus, comm=free, stack=stack).breakdown


def _needed_collectives(model: ModelSpec, layout: Layout, sizes: dict) -> list[str]:
    """The keys of :data:`~fabricflow.workload.compute.COLLECTIVES` this layout issues."""
    keys: list[str] = []
    if layout.tp > 1:
        keys += (
            ["tp_all_gather", "tp_reduce_scatter"]
            if layout.sequence_parallel
            else ["tp_all_reduce"]
        )
    if layout.cp > 1:
        keys += ["cp_forward", "cp_backward"]
    if model.is_moe and layout.ep > 1:
        keys += ["ep_dispatch", "ep_combine"]
        if sizes["etp_all_gather"][0] > 0:
            keys += ["etp_all_gather", "etp_reduce_scatter"]
    if layout.pp > 1:
        keys.append("pp_hop")
    sets = [("dp", layout.dp * layout.cp)] + ([("edp", layout.expert_dp)] if model.is_moe else [])
    for name, size in sets:
        if size == 1 or sizes[f"{name}_all_gather"][0] == 0:
            continue
        if layout.zero == 0:
            keys.append(f"{name}_all_reduce")
        else:
            keys += [f"{name}_reduce_scatter", f"{name}_all_gather"]
    return keys


def collective_times(
    model: ModelSpec,
    table: LayoutTable,
    comm,
    ep_nodes: int = 1,
    stack: Stack | None = None,
    ep_line: float = 0.0,
) -> CommTimes:
    """:class:`CommTimes` of a one-row table, each collective timed by ``comm.slowest``
    (a :class:`CollectiveCache` or its coupled view); ``ep_nodes``: scale-up domains an
    expert-parallel group spans (for node-limited dispatch); the MoE dispatch and combine
    through the layout's dispatcher (:func:`~fabricflow.workload.dispatch.dispatch_seconds`)
    with ``stack``'s parameters, ``ep_line`` the per-GPU line rate its fractions apply to
    (B/s; 0: the collective model's rate)."""
    layout = Layout.from_table(table, 0)
    sizes = collective_sizes(model, table, ep_nodes)
    seconds = {}
    needed = _needed_collectives(model, layout, sizes)
    prepare = getattr(comm, "prepare_many", None)  # collective caches solve them together
    if prepare is not None:
        prepare([COLLECTIVES[key] for key in needed])
    gather = layout.dispatcher == "allgather"
    for key in needed:
        name, op = COLLECTIVES[key]
        size = float(sizes[key][0])
        if gather and key in ("ep_dispatch", "ep_combine"):
            # all-gather the expert-parallel group's tokens, reduce-scatter the outputs
            op = "all_gather" if key == "ep_dispatch" else "reduce_scatter"
            size = float(sizes["ep_allgather"][0])
        seconds[key] = comm.slowest(name, op, size)
    if "ep_dispatch" in seconds:
        stack = stack if isinstance(stack, Stack) else load_stack(stack)
        d, c = dispatch_seconds(
            stack,
            table,
            (seconds["ep_dispatch"], seconds["ep_combine"]),
            (sizes["ep_dispatch"], sizes["ep_combine"]),
            ep_nodes,
            ep_line,
        )
        seconds["ep_dispatch"], seconds["ep_combine"] = float(d[0]), float(c[0])
    return CommTimes(seconds)


def compose_step(
    model: ModelSpec,
    rank_gpus: tuple,
    layout: Layout,
    comm,
    ep_nodes: int = 1,
    stack: Stack | None = None,
    ep_line: float = 0.0,
) -> tuple[dict, dict, dict]:
    """Per-rank micro-batch times, the slowest rank and the breakdown (seconds), with
    collective times from ``comm`` (a :class:`CollectiveCache`, or its coupled view);
    ``rank_gpus``: the GPU of each pipeline rank. One row of
    :func:`fabricflow.workload.compute.compose`."""
    stack = stack if isinstance(stack, Stack) else load_stack(stack)

    def composed(table: LayoutTable) -> Composition:
        times_ = collective_times(model, table, comm, ep_nodes, stack, ep_line)
        return compose(model, rank_gpus, table, times_, per_rank=True, stack=stack)

    parts = for_layout(composed, layout)
    names = rank_names(layout.pp)
    assert parts.ranks is not None
    times = {
        name: {**values, "rank": name} for name, values in zip(names, parts.ranks, strict=True)
    }
    slow = dict(times[names[parts.slow["rank"]]])
    assert parts.overlap is not None
    # what overlap hid and cost over the step, per dimension (also in step_time's details)
    slow["overlap"] = parts.overlap
    return times, slow, parts.breakdown


def _coupled_step(
    model: ModelSpec,
    rank_gpus: tuple,
    layout: Layout,
    comm: CollectiveCache,
    on: bool = True,
    ep_nodes: int = 1,
    stack: Stack | None = None,
    ep_line: float = 0.0,
) -> tuple[dict, dict, dict, dict]:
    """:func:`compose_step` with each dimension alone, then (``on``) again with the traffic of
    each overlap window sharing the fabric; returns the coupled (times, slowest rank,
    breakdown) and the ``coupling`` details entry."""
    times, slow, alone = compose_step(model, rank_gpus, layout, comm, ep_nodes, stack, ep_line)
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
    times, slow, breakdown = compose_step(model, rank_gpus, layout, view, ep_nodes, stack, ep_line)
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
    from :func:`compose_step`; the counts of the per-layer collectives that
    :func:`~fabricflow.workload.compute.compose` gathers in its ``layer_comm``, of
    :func:`~fabricflow.workload.compute._pipeline_exposed` and of ZeRO-3's per-micro-batch
    gathers): how much of a dimension's traffic falls inside a long overlap window."""
    layers = slow["layers"]
    moe_layers = layers * model.num_moe_layers / model.num_layers if model.is_moe else 0.0
    passes = (2 if layout.recompute == "full" else 1) + 1  # forward(s) and backward
    redo = 1 if layout.recompute in ("full", "selective") else 0
    per_micro_batch = {
        # forward: 2 all-reduces, or 2 all-gathers + 2 reduce-scatters per pass; backward
        # adds the all-gathers of the inputs again under sequence parallelism
        "tp": layers
        * (
            (passes - 1) * (4 if layout.sequence_parallel else 2)
            + (6 if layout.sequence_parallel else 2)
        ),
        "cp": layers * (layout.cp - 1) * (2 + redo),
        "ep": moe_layers * 2 * passes,
        "pp": 2 * layout.vpp,
        "dp": 3.0,  # ZeRO-3: two parameter gathers and one gradient scatter
        "edp": 3.0,
    }
    return {name: count / slow["total"] for name, count in per_micro_batch.items()}


def _tp_in_one_domain(where: Placement, fabric: Fabric) -> bool:
    """Every tensor-parallel group of ``where`` lies inside one scale-up domain."""
    domains = fabric.gpu_domain[where.groups("tp")]
    return bool(np.all(domains == domains[:, :1]))


def _ep_domains(where: Placement, fabric: Fabric, model: ModelSpec) -> int:
    """Scale-up domains the widest expert-parallel group spans (1 without experts)."""
    if not model.is_moe or where.layout.ep == 1:
        return 1
    domains = fabric.gpu_domain[where.groups("ep", expert=True)]
    counts = [len(np.unique(row)) for row in domains[: min(len(domains), 64)]]
    return int(max(counts))


def _check_routing_seeds(routing_seeds) -> int:
    if (
        isinstance(routing_seeds, bool)
        or not isinstance(routing_seeds, numbers.Integral)
        or routing_seeds < 1
    ):
        raise SpecError(
            "routing_seeds",
            f"must be an integer >= 1 (the routing seeds from routing_seed on), got {routing_seeds!r}",
        )
    return int(routing_seeds)


def _check_routing_seed(routing_seed) -> int:
    if (
        isinstance(routing_seed, bool)
        or not isinstance(routing_seed, numbers.Integral)
        or routing_seed < 0
    ):
        raise SpecError("routing_seed", f"must be an integer >= 0, got {routing_seed!r}")
    return int(routing_seed)


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
