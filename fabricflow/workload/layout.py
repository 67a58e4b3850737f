"""Parallel layout of a training job (5-D: TP, CP, EP, DP, PP) and its validation.

Conventions follow Megatron-LM: the GPU count is ``tp * cp * dp * pp``; expert parallelism
``ep`` divides ``dp * cp`` (expert layers regroup the same GPUs as ``tp * ep * edp * pp``
with ``edp = dp * cp / ep``); a pipeline stage holds ``num_layers / (pp * vpp)`` layers per
virtual stage when that divides, else an uneven split (:meth:`Layout.stage_split`) or the
layers per rank given as ``pp_split``; the global batch is
``dp * micro_batch * num_micro_batches`` sequences.
"""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np

from ..errors import SpecError
from .model import ModelSpec

RECOMPUTE = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp8")
SCHEDULES = ("1f1b", "interleaved")
# Values of ``Layout.pipeline_schedule``: ``auto`` derives 1F1B / interleaved from ``vpp``.
PIPELINE_SCHEDULES = ("auto", "1f1b", "interleaved", "dualpipe")
GRAD_DTYPES = ("fp32", "bf16")

# Fraction of compute-phase wall time the GPU spends inside kernels (the rest: launch gaps,
# host synchronisation, allocator and framework overhead between kernels). The single
# fitted constant of the step model: least squares in log space over the six Megatron
# SC21 Table 1 rows of docs/references.md §5 (tests/test_step_calibration.py recomputes it).
FRAMEWORK_EFFICIENCY = 0.81


# Integer fields (``zero`` last: validate() checks it apart, as 0..3).
INT_FIELDS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "global_batch", "seq_len", "zero")
# Fractions of each model state held in host memory instead of HBM.
OFFLOAD_FIELDS = ("offload_optimizer", "offload_weights", "offload_activations")


@dataclasses.dataclass(frozen=True)
class Layout:
    """How a model is split over GPUs and how a step is run.

    Attributes:
        tp, pp, dp, cp, ep: tensor, pipeline, data, context and expert parallel sizes.
        vpp: virtual pipeline stages per GPU (interleaved schedule when > 1).
        sequence_parallel: shard norms/dropouts over TP (Megatron SP; all-gather +
            reduce-scatter instead of all-reduce).
        micro_batch: sequences per micro-batch per data-parallel rank.
        global_batch: sequences per step (all data-parallel ranks).
        seq_len: tokens per sequence.
        recompute: ``none``, ``selective`` (attention core recomputed) or ``full``.
        precision: GEMM precision ``bf16`` or ``fp8``.
        zero: ZeRO stage 0-3 over the data-parallel (x context-parallel) group; 3 = FSDP.
        dp_overlap: overlap DP gradient reduce-scatter / all-reduce (and ZeRO-3 gathers)
            with backward compute, per bucket.
        tp_overlap: overlap TP collectives with the GEMMs they feed (needs SP).
        pp_overlap: overlap pipeline send/recv with compute (Megatron default on).
        ep_overlap: overlap MoE dispatch/combine all-to-all with the compute of another
            micro-batch chunk (DeepSeek DualPipe-style); off = all-to-all exposed.
        grad_reduce_dtype: dtype of the gradient reduction (``fp32``, Megatron's default
            for bf16 training, or ``bf16``).
        moe_imbalance: max/mean tokens per expert-parallel rank (routing load imbalance);
            the slowest rank sets the all-to-all and expert-GEMM time.
        framework_efficiency: fraction of compute-phase time spent inside kernels
            (see ``FRAMEWORK_EFFICIENCY``); compute times are divided by it.
        offload_optimizer, offload_weights, offload_activations: fractions in [0, 1] of
            the optimizer state (fp32 master weights and Adam moments), the bf16 weights and
            the activations saved for backward held in host (or pooled) memory across the
            GPU's host link instead of HBM (see :mod:`fabricflow.workload.memory` and
            ``offload`` in :func:`fabricflow.step_time`); 0 = all in HBM.
        pp_split: transformer layers per pipeline rank, first to last (summed over its
            virtual stages), or None for the automatic split of :meth:`rank_layers`.
        pipeline_schedule: ``auto`` (1F1B, interleaved when ``vpp > 1``), ``1f1b``,
            ``interleaved`` or ``dualpipe`` (DeepSeek-V3's bidirectional schedule: each
            rank holds stages ``r`` and ``pp - 1 - r``, forward and backward chunks of two
            micro-batches overlap, hiding the MoE all-to-all).
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    vpp: int = 1
    sequence_parallel: bool = False
    micro_batch: int = 1
    global_batch: int = 1
    seq_len: int = 2048
    recompute: str = "none"
    precision: str = "bf16"
    zero: int = 1
    dp_overlap: bool = True
    tp_overlap: bool = False
    pp_overlap: bool = True
    ep_overlap: bool = False
    grad_reduce_dtype: str = "fp32"
    moe_imbalance: float = 1.1
    framework_efficiency: float = FRAMEWORK_EFFICIENCY
    offload_optimizer: float = 0.0
    offload_weights: float = 0.0
    offload_activations: float = 0.0
    pp_split: tuple[int, ...] | None = None
    pipeline_schedule: str = "auto"

    def __post_init__(self):
        # numpy integers (np.int64(8) from an array or a sweep) are integers: stored as
        # Python ints so sizes multiply exactly and the layout writes to JSON. Booleans
        # (Python or numpy) stay as they are for validate() to refuse.
        for field in INT_FIELDS:
            value = getattr(self, field)
            if (
                isinstance(value, numbers.Integral)
                and not isinstance(value, (bool, np.bool_))
                and type(value) is not int
            ):
                object.__setattr__(self, field, int(value))
        if isinstance(self.pp_split, (list, np.ndarray)):
            # a list (from YAML or JSON) or an array is kept as a tuple: the layout stays
            # hashable and compares equal to the same split given as a tuple
            values = (
                self.pp_split.tolist() if isinstance(self.pp_split, np.ndarray) else self.pp_split
            )
            object.__setattr__(self, "pp_split", tuple(values))
        if isinstance(self.pp_split, tuple):
            object.__setattr__(
                self,
                "pp_split",
                tuple(
                    int(v)
                    if isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))
                    else v
                    for v in self.pp_split
                ),
            )

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    def parallel_label(self) -> str:
        """The parallel degrees as one short label, e.g. ``TP8 CP1 EP8 PP4x2 DP16`` (EP
        only when > 1, ``xVPP`` only with virtual stages)."""
        parts = [f"TP{self.tp}", f"CP{self.cp}"] + ([f"EP{self.ep}"] if self.ep > 1 else [])
        parts += [f"PP{self.pp}" + (f"x{self.vpp}" if self.vpp > 1 else ""), f"DP{self.dp}"]
        return " ".join(parts)

    @property
    def expert_dp(self) -> int:
        """Data-parallel size of expert weights (``dp * cp / ep``)."""
        return self.dp * self.cp // self.ep

    @property
    def num_micro_batches(self) -> int:
        """Micro-batches per step per pipeline (``global_batch / (dp * micro_batch)``)."""
        return self.global_batch // (self.dp * self.micro_batch)

    @property
    def schedule(self) -> str:
        """The pipeline schedule run: ``1f1b``, ``interleaved`` or ``dualpipe``."""
        if self.pipeline_schedule == "auto":
            return "interleaved" if self.vpp > 1 else "1f1b"
        return self.pipeline_schedule

    def stage_split(self, model: ModelSpec) -> tuple[int, ...]:
        """Transformer layers of each of the ``pp * vpp`` (virtual) pipeline stages, in
        model order (stage ``c * pp + r`` runs on rank ``r`` as its chunk ``c``).

        Even when ``pp * vpp`` divides the layers. Otherwise the embedding and the loss
        count as one layer each (Megatron's ``--account-for-embedding-in-pipeline-split``
        and ``--account-for-loss-in-pipeline-split``): the ``L + 2`` layer-equivalents are
        dealt out ``floor`` or ``ceil`` per stage, the lighter stages first and last (the
        first rank holds the most activations under 1F1B), and the first and last stages
        give one layer to the embedding and the loss. Llama 3 405B: 126 layers on 16
        stages are 7 + 14 x 8 + 7; DeepSeek-V3: 61 on 16 are 2 + 4 x 14 + 3.
        This is the automatic rule; it ignores ``pp_split`` (layers per rank, see
        :meth:`rank_layers`).
        """
        stages = self.pp * self.vpp
        layers = model.num_layers
        if stages == 1:
            return (layers,)
        if layers % stages == 0:
            return (layers // stages,) * stages
        units = layers + 2
        if units < stages:
            raise SpecError(
                "layout.pp",
                f"num_hidden_layers={layers} (+ embedding and loss) cannot fill "
                f"pp x vpp = {stages} stages",
            )
        base, heavy = divmod(units, stages)
        # light stages (base units) go to the ends first: 0, S-1, 1, S-2, ...
        ends = np.empty(stages, dtype=np.int64)
        ends[0::2] = np.arange((stages + 1) // 2)
        ends[1::2] = stages - 1 - np.arange(stages // 2)
        per_stage = np.full(stages, base + 1, dtype=np.int64)
        per_stage[ends[: stages - heavy]] = base
        per_stage[0] -= 1
        per_stage[-1] -= 1
        return tuple(int(n) for n in per_stage)

    def rank_layers(self, model: ModelSpec) -> tuple[int, ...]:
        """Transformer layers held by each pipeline rank, first to last (length ``pp``).

        ``pp_split`` when given; else :meth:`stage_split` summed over each rank's virtual
        stages. Under ``dualpipe`` entry ``r`` is stage ``r`` of the forward direction; rank
        ``r`` also holds stage ``pp - 1 - r`` for the reverse direction, so it keeps the
        weights of both while each micro-batch passes one of them.
        """
        if self.pp_split is not None:
            return tuple(self.pp_split)
        split = np.asarray(self.stage_split(model)).reshape(self.vpp, self.pp)
        return tuple(int(n) for n in split.sum(axis=0))

    def stage_layers(self, model: ModelSpec) -> tuple[int, int, int]:
        """Transformer layers held by the first, the heaviest middle and the last rank
        (all three the same when ``pp <= 2`` has no middle rank); see :meth:`rank_layers`."""
        ranks = self.rank_layers(model)
        middle = max(ranks[1:-1]) if len(ranks) > 2 else max(ranks)
        return ranks[0], middle, ranks[-1]

    def validate(self, model: ModelSpec | None = None, num_gpus: int | None = None) -> Layout:
        """Raise :class:`SpecError` naming the field if the layout is not runnable.

        Checks sizes >= 1, the product against ``num_gpus``, heads / KV heads / experts /
        layers / batch divisibility, and option names. Returns ``self``.
        """
        for field in INT_FIELDS[:-1]:
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(f"layout.{field}", f"must be an integer >= 1, got {value!r}")
        for field in ("sequence_parallel", "dp_overlap", "tp_overlap", "pp_overlap", "ep_overlap"):
            # a string such as "no" would be truthy: only real booleans are accepted
            if not isinstance(getattr(self, field), bool):
                raise SpecError(
                    f"layout.{field}", f"must be True or False, got {getattr(self, field)!r}"
                )
        for field in ("moe_imbalance", "framework_efficiency"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise SpecError(f"layout.{field}", f"must be a number, got {value!r}")
        for field, allowed in (
            ("recompute", RECOMPUTE),
            ("precision", PRECISIONS),
            ("grad_reduce_dtype", GRAD_DTYPES),
        ):
            if getattr(self, field) not in allowed:
                raise SpecError(
                    f"layout.{field}", f"unknown {getattr(self, field)!r}; one of {list(allowed)}"
                )
        if isinstance(self.zero, (bool, np.bool_)) or self.zero not in (0, 1, 2, 3):
            raise SpecError("layout.zero", f"must be 0, 1, 2 or 3 (3 = FSDP), got {self.zero!r}")
        if not 0.0 < self.framework_efficiency <= 1.0:
            raise SpecError(
                "layout.framework_efficiency",
                f"must lie in (0, 1], got {self.framework_efficiency}",
            )
        if not 1.0 <= self.moe_imbalance < float("inf"):
            raise SpecError(
                "layout.moe_imbalance",
                f"must be finite and >= 1 (max/mean load), got {self.moe_imbalance}",
            )
        for field in OFFLOAD_FIELDS:
            value = getattr(self, field)
            if (
                isinstance(value, (bool, np.bool_))
                or not isinstance(value, numbers.Real)
                or not 0.0 <= float(value) <= 1.0  # also refuses NaN
            ):
                raise SpecError(
                    f"layout.{field}",
                    f"must be a fraction in [0, 1] (0 = all in HBM, 1 = all offloaded), "
                    f"got {value!r}",
                )
        if num_gpus is not None and self.num_gpus != num_gpus:
            raise SpecError(
                "layout",
                f"tp x cp x dp x pp = {self.tp} x {self.cp} x {self.dp} x "
                f"{self.pp} = {self.num_gpus} differs from the GPU count {num_gpus}",
            )
        if (self.dp * self.cp) % self.ep:
            raise SpecError(
                "layout.ep",
                f"ep={self.ep} must divide dp x cp = {self.dp * self.cp} "
                "(Megatron convention: expert layers reuse the DP x CP ranks)",
            )
        if self.tp_overlap and not self.sequence_parallel and self.tp > 1:
            raise SpecError(
                "layout.tp_overlap",
                "TP communication overlap needs "
                "--sequence-parallel (all-gather/reduce-scatter pipelined with GEMMs)",
            )
        if self.global_batch % (self.dp * self.micro_batch):
            raise SpecError(
                "layout.global_batch",
                f"{self.global_batch} is not divisible by "
                f"dp x micro_batch = {self.dp} x {self.micro_batch}",
            )
        if self.vpp > 1 and self.pp == 1:
            raise SpecError("layout.vpp", "virtual pipeline stages need pp > 1")
        self._validate_pipeline()
        if self.vpp > 1 and self.num_micro_batches % self.pp:
            raise SpecError(
                "layout.vpp",
                f"the interleaved schedule needs the number of "
                f"micro-batches ({self.num_micro_batches}) to be a multiple of pp={self.pp}",
            )
        if self.seq_len % (2 * self.cp if self.cp > 1 else 1):
            raise SpecError(
                "layout.seq_len",
                f"{self.seq_len} must be divisible by 2 x cp = "
                f"{2 * self.cp} (load-balanced causal context parallelism)",
            )
        if model is not None:
            self._validate_model(model)
        return self

    def _validate_pipeline(self) -> None:
        """Schedule name and its constraints, and the shape of ``pp_split``."""
        if self.pipeline_schedule not in PIPELINE_SCHEDULES:
            raise SpecError(
                "layout.pipeline_schedule",
                f"unknown {self.pipeline_schedule!r}; one of {list(PIPELINE_SCHEDULES)}",
            )
        if self.pipeline_schedule == "interleaved" and self.vpp < 2:
            raise SpecError("layout.pipeline_schedule", "interleaved needs vpp >= 2")
        if self.pipeline_schedule in ("1f1b", "dualpipe") and self.vpp > 1:
            raise SpecError("layout.pipeline_schedule", f"{self.pipeline_schedule} means vpp = 1")
        if self.pipeline_schedule == "dualpipe":
            # DeepSeek's DualPipe feeds half the micro-batches from each end and pairs rank
            # r with rank pp-1-r: it asserts an even pp and an even m >= 2 pp
            m = self.num_micro_batches
            if self.pp < 2 or self.pp % 2:
                raise SpecError(
                    "layout.pp", f"dualpipe needs an even pp >= 2 (ranks in pairs), got {self.pp}"
                )
            if m % 2 or m < 2 * self.pp:
                raise SpecError(
                    "layout.global_batch",
                    f"dualpipe needs an even number of micro-batches >= 2 x pp = {2 * self.pp} "
                    f"(half fed from each end), got {m}",
                )
        if self.pp_split is None:
            return
        split = self.pp_split
        if not isinstance(split, tuple) or not all(
            isinstance(n, int) and not isinstance(n, bool) for n in split
        ):
            raise SpecError(
                "layout.pp_split",
                f"must be a sequence of integers (layers per rank), got {split!r}",
            )
        if len(split) != self.pp:
            raise SpecError(
                "layout.pp_split", f"has {len(split)} entries; it needs one per rank, pp={self.pp}"
            )
        inner = split[1:-1] if self.pp > 2 else ()
        if min(split) < 0 or (inner and min(inner) < 1):
            raise SpecError(
                "layout.pp_split",
                f"{list(split)}: every rank needs >= 1 layer; only the first and the last "
                "(which hold the embedding and the loss) may hold 0",
            )
        if self.pp == 1 and split[0] < 1:
            raise SpecError("layout.pp_split", f"{list(split)}: the only rank needs >= 1 layer")

    def _validate_model(self, model: ModelSpec) -> None:
        if model.num_heads % self.tp:
            raise SpecError(
                "layout.tp", f"tp={self.tp} must divide num_attention_heads={model.num_heads}"
            )
        if not model.is_mla and model.num_kv_heads % self.tp:
            raise SpecError(
                "layout.tp",
                f"tp={self.tp} must divide num_key_value_heads="
                f"{model.num_kv_heads} (replicating KV heads is not modelled)",
            )
        if self.pp_split is None:
            self.stage_split(model)  # refuses too few layers for the stages
        elif sum(self.pp_split) != model.num_layers:
            raise SpecError(
                "layout.pp_split",
                f"{list(self.pp_split)} sums to {sum(self.pp_split)} layers but "
                f"{model.name} has num_hidden_layers={model.num_layers}",
            )
        if model.is_moe and model.num_experts % self.ep:
            raise SpecError(
                "layout.ep", f"ep={self.ep} must divide the {model.num_experts} experts"
            )
        if not model.is_moe and self.ep > 1:
            raise SpecError("layout.ep", f"ep={self.ep} > 1 but {model.name} has no experts")
        if (
            (self.seq_len // self.cp)
            * self.micro_batch
            % (self.tp if self.sequence_parallel else 1)
        ):
            raise SpecError(
                "layout.sequence_parallel",
                f"tokens per micro-batch per CP rank must be divisible by tp={self.tp}",
            )
