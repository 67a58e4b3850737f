"""Parallel layout of a training job (5-D: TP, CP, EP, DP, PP) and its validation.

Conventions follow Megatron-LM: the GPU count is ``tp * cp * dp * pp``; expert parallelism
``ep`` divides ``dp * cp`` (expert layers regroup the same GPUs as ``tp * ep * edp * pp``
with ``edp = dp * cp / ep``); a pipeline stage holds ``num_layers / (pp * vpp)`` layers per
virtual stage; the global batch is ``dp * micro_batch * num_micro_batches`` sequences.
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

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

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
        return "interleaved" if self.vpp > 1 else "1f1b"

    def stage_layers(self, model: ModelSpec) -> tuple[int, int, int]:
        """Transformer layers held by the first, a middle and the last pipeline rank.

        Even split when ``pp * vpp`` divides the layers; otherwise (as Llama 3 405B did with
        126 layers on 16 stages) the embedding and the loss count as one layer each, so the
        first and last ranks hold one layer fewer.
        """
        stages = self.pp * self.vpp
        if model.num_layers % stages == 0:
            per_rank = model.num_layers // self.pp
            return per_rank, per_rank, per_rank
        per_rank = (model.num_layers + 2) // stages * self.vpp
        if self.pp == 1:
            return model.num_layers, model.num_layers, model.num_layers
        return per_rank - 1, per_rank, per_rank - 1

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
        stages = self.pp * self.vpp
        if model.num_layers % stages and (model.num_layers + 2) % stages:
            raise SpecError(
                "layout.pp",
                f"num_hidden_layers={model.num_layers} is not divisible "
                f"by pp x vpp = {self.pp} x {self.vpp} = {stages}, nor is "
                f"num_hidden_layers + 2 (embedding and loss counted as one layer "
                "each, Megatron --account-for-embedding/loss-in-pipeline-split)",
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
