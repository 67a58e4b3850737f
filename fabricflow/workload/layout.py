"""Parallel layout of a training job (5-D: TP, CP, EP, DP, PP) and its validation.

Conventions follow Megatron-LM: the GPU count is ``tp * cp * dp * pp``. Expert layers
regroup the same ``tp * cp * dp`` ranks of a pipeline stage as ``expert_tp * ep * edp``
(Megatron-Core's "MoE parallel folding": the expert-parallel group may span tensor-,
context- and data-parallel ranks), so ``ep * expert_tp`` must divide ``tp * cp * dp``; a
pipeline stage holds ``num_layers / (pp * vpp)`` layers per virtual stage when that
divides, else an uneven split (:meth:`Layout.stage_split`) or the layers per rank given as
``pp_split``; the global batch is ``dp * micro_batch * num_micro_batches`` sequences.

The rules are checked for many layouts at once by :func:`table_problems` (numpy columns
of a :class:`~fabricflow.workload.layout_table.LayoutTable`); :meth:`Layout.validate` checks the
types of one layout and then runs the same rules on a one-row table.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
from collections.abc import Callable, Iterable

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.workload.layout_table import (
    BOOL_COLUMNS,
    FLOAT_COLUMNS,
    INT_COLUMNS,
    NAME_COLUMNS,
    OBJECT_COLUMNS,
    LayoutTable,
    as_column,
    first_problem,
    only_row,
)
from fabricflow.workload.model_spec import ModelSpec

RECOMPUTE = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp8")
SCHEDULES = ("1f1b", "interleaved")
# Values of ``Layout.pipeline_schedule``: ``auto`` derives 1F1B / interleaved from ``vpp``.
PIPELINE_SCHEDULES = ("auto", "1f1b", "interleaved", "dualpipe")
GRAD_DTYPES = ("fp32", "bf16")
# Megatron-Core's CUDA-graph scopes (``--cuda-graph-scope``) that the host model
# (:mod:`fabricflow.workload.host`) knows.
CUDA_GRAPH_SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess")
# dtypes of Adam's two moments (Megatron-Core's precision-aware optimizer ``exp_avg_dtype``
# / ``exp_avg_sq_dtype``; the master weights stay fp32)
MOMENT_DTYPES = ("fp32", "bf16")
# FP8 scaling recipes (Megatron-Core ``--fp8-recipe``): per-tensor current scaling
# (``tensorwise``), per-tensor delayed scaling from an amax history, MXFP8 (1x32 blocks,
# E8M0 scales; Blackwell) and blockwise (1x128 activations, 128x128 weights; DeepSeek-V3).
FP8_RECIPES = ("tensorwise", "delayed", "mxfp8", "blockwise")
# MoE token dispatchers (Megatron-Core ``--moe-token-dispatcher-type`` and the flex
# dispatcher's backends): see :mod:`fabricflow.workload.dispatch`.
DISPATCHERS = ("alltoall", "allgather", "deepep", "hybridep")
# Modules of selective recompute (Megatron-Core ``--recompute-modules``): the attention
# core, the MLA up-projections, the dense MLP (``mlp``: dense layers only), the whole MoE
# layer (``moe``), the MoE activation, the norms, the shared experts.
RECOMPUTE_MODULES = (
    "core_attn",
    "mla_up_proj",
    "mlp",
    "moe",
    "moe_act",
    "layernorm",
    "shared_experts",
)
DEFAULT_RECOMPUTE_MODULES = "core_attn"

# Fraction of compute-phase wall time the GPU spends inside the modelled kernels. 1: every
# kernel of a step is written out and timed from measurements (docs/references.md §14);
# no factor is fitted to end-to-end step times. A user with a measured kernel-busy
# fraction of their own stack (a profile) can give it; compute times are divided by it.
FRAMEWORK_EFFICIENCY = 1.0


INT64_MAX = 2**63 - 1
# Integer fields that must be >= 1 (``zero`` and the 0-means-default knobs are checked apart).
INT_FIELDS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "global_batch", "seq_len", "zero")
POSITIVE_FIELDS = INT_FIELDS[:-1]
# Integer knobs where 0 means "the default" (see the Layout docstring).
DEFAULTED_FIELDS = ("expert_tp", "microbatch_group", "recompute_layers")
# Fractions of each model state held in host memory instead of HBM.
OFFLOAD_FIELDS = ("offload_optimizer", "offload_weights", "offload_activations")


@dataclasses.dataclass(frozen=True)
class Layout:
    """How a model is split over GPUs and how a step is run.

    Attributes:
        tp, pp, dp, cp, ep: tensor, pipeline, data, context and expert parallel sizes.
        vpp: virtual pipeline stages per GPU (interleaved schedule when > 1).
        sequence_parallel: shard norms/dropouts over TP (Megatron SP; all-gather +
            reduce-scatter instead of all-reduce). On by default, as every published
            performance recipe with ``tp > 1`` runs it (no effect at ``tp = 1``).
        micro_batch: sequences per micro-batch per data-parallel rank.
        global_batch: sequences per step (all data-parallel ranks).
        seq_len: tokens per sequence.
        recompute: ``none``, ``selective`` (the modules of ``recompute_modules``
            recomputed) or ``full`` (whole layers; ``recompute_layers`` of them per stage).
        precision: GEMM precision ``bf16`` or ``fp8``.
        zero: ZeRO stage 0-3 over the data-parallel (x context-parallel) group; 3 = FSDP.
        dp_overlap: overlap DP gradient reduce-scatter / all-reduce (and ZeRO-3 gathers)
            with backward compute, per bucket.
        tp_overlap: overlap TP collectives with the GEMMs they feed (Transformer Engine
            userbuffers). It pipelines all-gathers and reduce-scatters, so it acts only with
            ``sequence_parallel`` (without it the TP all-reduces are not overlapped). On by
            default, as in the performance recipes.
        tp_backward_overlap: without ``tp_overlap``, the column-parallel layers' backward
            collectives (input-gradient all-reduce or reduce-scatter, and the input
            re-gather under SP) run beside their weight- and data-gradient GEMMs (Megatron's
            asynchronous TP communication, since 2021-09; Transformer Engine's linear
            backward); off, every backward collective waits (Megatron-LM before 2021-09).
        grad_accum_fusion: the weight-gradient GEMMs accumulate into the main gradient in
            their epilogue (Megatron ``gradient_accumulation_fusion``, since 2022-02); off, a
            separate add kernel per parameter and micro-batch reads the new gradient and
            reads and writes the main gradient (``grad_reduce_dtype``).
        pp_overlap: overlap pipeline send/recv with compute (Megatron default on).
        ep_overlap: overlap MoE dispatch/combine all-to-all with the compute of another
            micro-batch chunk (DeepSeek DualPipe-style); off = all-to-all exposed.
        grad_reduce_dtype: dtype of the main gradients and their reduction: ``bf16``
            (default, as every bf16 / fp8 performance recipe sets
            ``grad_reduce_in_fp32 = False``) or ``fp32`` (Megatron-LM's own default).
        adam_moments_dtype: dtype of Adam's first and second moments: ``fp32`` (default)
            or ``bf16`` (DeepSeek-V3's training; Megatron-Core's precision-aware optimizer
            with ``exp_avg_dtype = exp_avg_sq_dtype = bf16``, as NVIDIA's DeepSeek-V3
            recipes set it): optimizer state 8 B per parameter instead of 12 (fp32 master
            weights kept).
        fp8_activation_cache: with ``precision="fp8"``, the MoE expert up-projection output
            (the SwiGLU input) is saved for backward in FP8 (1 B per element, fine-grained
            scaling) instead of bf16, and the attention output once (the output
            projection's backward reads the same copy, no separate FP8 one): DeepSeek-V3's
            low-precision activation storage (report section 3.3.3; it recomputes the SwiGLU
            output, ``recompute_modules`` ``moe_act``).
        moe_imbalance: max/mean tokens per expert-parallel rank (routing load imbalance);
            the slowest rank sets the all-to-all and expert-GEMM time.
        framework_efficiency: fraction of compute-phase time spent inside the modelled
            kernels (default 1; see ``FRAMEWORK_EFFICIENCY``); compute times are divided by
            it.
        offload_optimizer, offload_weights, offload_activations: fractions in [0, 1] of
            the optimizer state (fp32 master weights and Adam moments), the bf16 weights and
            the activations saved for backward held in host (or pooled) memory across the
            GPU's host link instead of HBM (see :mod:`fabricflow.workload.gpu_memory` and
            ``offload`` in :func:`fabricflow.step_time`); 0 = all in HBM.
        pp_split: transformer layers per pipeline rank, first to last (summed over its
            virtual stages), or None for the automatic split of :meth:`rank_layers`.
        pipeline_schedule: ``auto`` (1F1B, interleaved when ``vpp > 1``), ``1f1b``,
            ``interleaved`` or ``dualpipe`` (DeepSeek-V3's bidirectional schedule: each
            rank holds stages ``r`` and ``pp - 1 - r``, forward and backward chunks of two
            micro-batches overlap, hiding the MoE all-to-all).
        expert_tp: tensor-parallel size of the expert layers (Megatron-Core
            ``--expert-tensor-parallel-size``; tuned MoE recipes set 1); 0 = automatic:
            Megatron-Core's default ``tp`` where ``ep`` divides ``cp x dp``, else 1 (the
            expert-parallel group then spans tensor-parallel ranks).
        microbatch_group: micro-batches per virtual-stage group of the interleaved
            schedule (Megatron-Core ``--microbatch-group-size-per-virtual-pipeline-stage``,
            the ``N`` of Llama 3's schedule): it sets how many micro-batches are in flight;
            0 = ``pp`` (the classic interleaved schedule).
        recompute_layers: under ``recompute="full"``, the layers of each pipeline stage
            (virtual chunk) that are recomputed (Megatron ``--recompute-num-layers`` with
            the ``block`` method); the others keep their activations. 0 = all of them.
        recompute_modules: under ``recompute="selective"``, comma-separated modules
            recomputed in backward, from ``RECOMPUTE_MODULES``; "" = ``core_attn``.
        moe_capacity_factor: tokens an expert accepts per micro-batch, as a multiple of the
            balanced share (GShard / Megatron ``--moe-expert-capacity-factor``): excess
            tokens are dropped, the expert GEMMs run at most that many tokens; 0 =
            dropless (every routed token is processed).
        cuda_graphs: the whole step is replayed from CUDA graphs (Megatron's
            ``full_iteration`` scope), so the host launches none of its kernels one by one;
            off (eager), a layer pass whose host work exceeds its kernels' time waits for
            the host (see :mod:`fabricflow.workload.host`).
        fused_cross_entropy: the loss is Transformer Engine's fused cross entropy (bf16
            logits, gradient written in place: 2 B per logit kept, three passes), as the
            performance recipes set it; off, Megatron's vocab-parallel fp32 loss (fp32
            logits and gradient, 8 B per logit, more passes; Megatron-LM before 2024).
        cuda_graph_scope: with ``cuda_graphs`` off, comma-separated parts of each layer
            captured by Transformer Engine CUDA graphs (Megatron ``--cuda-graph-scope``),
            from ``CUDA_GRAPH_SCOPES``: ``attn``, ``mlp``, ``moe`` (a MoE layer with static
            shapes: ``moe_capacity_factor > 0``), ``moe_router``, ``moe_preprocess`` (needs
            ``moe_router``); "" = none.
        fp8_recipe: the FP8 scaling recipe under ``precision="fp8"``, from
            ``FP8_RECIPES``: it sets the bytes and host ops of every quantization.
        dispatcher: the MoE token dispatcher, from ``DISPATCHERS``
            (:mod:`fabricflow.workload.dispatch`).
        moe_router_fusion: the router's fused top-k, score and auxiliary-loss kernels
            (``--moe-router-fusion``); off, the router's element-wise kernels one by one.
        cpu_binding: each rank's process bound to the CPU cores and memory of its GPU's
            NUMA node (``numactl`` / ``bindpcie``); off, host time per op grows by the
            stack's ``unbound_host_factor``.
        fp8_norm_fusion: the FP8 quantization of a norm's output fused into the norm
            kernel (cuDNN norms): the bf16 output is neither written nor read back.
        fp8_dispatch: under fp8, the MoE dispatch sends the token copies in fp8 (DeepSeek-V3;
            DeepEP's FP8 dispatch); off, in bf16 (Megatron-Core's all-to-all, and NVIDIA's
            GB200 recipe, which finds the re-quantization for the backward costs more than
            the halved bytes save). Combine is bf16 either way.

    The software choices among these fields (:data:`fabricflow.workload.stack.LAYOUT_CHOICES`)
    take a software stack's values as defaults where a stack is named (``--stack``,
    :meth:`fabricflow.workload.stack.Stack.layout_for`); the defaults here are those of
    the ``megatron-core`` preset.
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    vpp: int = 1
    sequence_parallel: bool = True
    micro_batch: int = 1
    global_batch: int = 1
    seq_len: int = 2048
    recompute: str = "none"
    precision: str = "bf16"
    zero: int = 1
    dp_overlap: bool = True
    tp_overlap: bool = True
    pp_overlap: bool = True
    ep_overlap: bool = False
    grad_reduce_dtype: str = "bf16"
    adam_moments_dtype: str = "fp32"
    fp8_activation_cache: bool = False
    moe_imbalance: float = 1.1
    framework_efficiency: float = FRAMEWORK_EFFICIENCY
    offload_optimizer: float = 0.0
    offload_weights: float = 0.0
    offload_activations: float = 0.0
    pp_split: tuple[int, ...] | None = None
    pipeline_schedule: str = "auto"
    expert_tp: int = 0
    microbatch_group: int = 0
    recompute_layers: int = 0
    recompute_modules: str = ""
    moe_capacity_factor: float = 0.0
    cuda_graphs: bool = False
    cuda_graph_scope: str = ""
    fused_cross_entropy: bool = True
    tp_backward_overlap: bool = True
    grad_accum_fusion: bool = True
    fp8_recipe: str = "tensorwise"
    dispatcher: str = "alltoall"
    moe_router_fusion: bool = True
    cpu_binding: bool = True
    fp8_norm_fusion: bool = False
    fp8_dispatch: bool = False

    def __post_init__(self):
        # numpy integers (np.int64(8) from an array or a sweep) are integers: stored as
        # Python ints so sizes multiply exactly and the layout writes to JSON. Booleans
        # (Python or numpy) stay as they are for validate() to refuse.
        for field in INT_FIELDS + DEFAULTED_FIELDS:
            value = getattr(self, field)
            if (
                isinstance(value, numbers.Integral)
                and not isinstance(value, (bool, np.bool_))
                and type(value) is not int
            ):
                object.__setattr__(self, field, int(value))
        if isinstance(self.cuda_graph_scope, (list, tuple)):
            object.__setattr__(
                self, "cuda_graph_scope", ",".join(str(m).strip() for m in self.cuda_graph_scope)
            )
        if isinstance(self.recompute_modules, (list, tuple)):
            # a list of module names is kept as the canonical comma-separated text
            object.__setattr__(
                self, "recompute_modules", ",".join(str(m).strip() for m in self.recompute_modules)
            )
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
    def expert_tensor(self) -> int:
        """Tensor-parallel size of the expert layers: ``expert_tp``, or automatically
        Megatron-Core's default ``tp`` where it fits (``ep`` divides ``cp x dp``) and 1
        (experts folded over the tensor-parallel ranks) where it does not."""
        if self.expert_tp > 0:
            return self.expert_tp
        return self.tp if (self.cp * self.dp) % self.ep == 0 else 1

    @property
    def expert_dp(self) -> int:
        """Data-parallel size of expert weights (``tp * cp * dp / (ep * expert_tp)``)."""
        return self.tp * self.cp * self.dp // (self.ep * self.expert_tensor)

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

    @property
    def group_size(self) -> int:
        """Micro-batches per virtual-stage group of the interleaved schedule."""
        return self.microbatch_group if self.microbatch_group > 0 else self.pp

    @property
    def selective_modules(self) -> frozenset[str]:
        """The modules recomputed under ``recompute="selective"`` (empty otherwise)."""
        if self.recompute != "selective":
            return frozenset()
        text = self.recompute_modules or DEFAULT_RECOMPUTE_MODULES
        return frozenset(m.strip() for m in text.split(",") if m.strip())

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
        if model.num_layers % stages and model.num_layers + 2 < stages:
            raise SpecError(
                "layout.pp",
                f"num_hidden_layers={model.num_layers} (+ embedding and loss) cannot fill "
                f"pp x vpp = {stages} stages",
            )
        return tuple(int(n) for n in split_stages(model.num_layers, stages))

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

    @classmethod
    def from_table(cls, table: LayoutTable, row: int) -> Layout:
        """Row ``row`` of ``table`` as a :class:`Layout` (numpy values back to Python ints,
        bools, floats and strings)."""
        values = {}
        for name, column in table.columns.items():
            value = column[row]
            if name in INT_COLUMNS:
                value = int(value)
            elif name in BOOL_COLUMNS:
                value = bool(value)
            elif name in FLOAT_COLUMNS:
                value = float(value)
            elif name in NAME_COLUMNS:
                value = str(value)
            values[name] = value
        return cls(**values)

    def validate(self, model: ModelSpec | None = None, num_gpus: int | None = None) -> Layout:
        """Raise :class:`SpecError` naming the field if the layout is not runnable.

        Checks the type of every field here, then the rules of :func:`table_problems`
        (sizes >= 1, the product against ``num_gpus``, heads / KV heads / experts / layers
        / batch divisibility, option names) on a one-row table. Returns ``self``.
        """
        self._check_types()
        problem = _first_problem(self, model, num_gpus)
        if problem is not None:
            raise SpecError(*problem)
        return self

    def _check_types(self) -> None:
        """Each field holds a value of its kind (a bool is not an integer, a string is not
        a switch); the rules on the values are :func:`table_problems`'."""
        for field in INT_FIELDS + DEFAULTED_FIELDS:
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int):
                kind = "an integer >= 0" if field in DEFAULTED_FIELDS else "an integer >= 1"
                if field == "zero":
                    raise SpecError(
                        "layout.zero", f"must be 0, 1, 2 or 3 (3 = FSDP), got {value!r}"
                    )
                raise SpecError(f"layout.{field}", f"must be {kind}, got {value!r}")
            if abs(value) > INT64_MAX:  # the rules run on int64 columns
                raise SpecError(f"layout.{field}", f"{value} is too large: at most {INT64_MAX:,}")
        for field in BOOL_COLUMNS:
            # a string such as "no" would be truthy: only real booleans are accepted
            if not isinstance(getattr(self, field), bool):
                raise SpecError(
                    f"layout.{field}", f"must be True or False, got {getattr(self, field)!r}"
                )
        for field in FLOAT_COLUMNS:
            value = getattr(self, field)
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
                if field in OFFLOAD_FIELDS:
                    raise SpecError(
                        f"layout.{field}",
                        "must be a fraction in [0, 1] (0 = all in HBM, 1 = all offloaded), "
                        f"got {value!r}",
                    )
                raise SpecError(f"layout.{field}", f"must be a number, got {value!r}")
        for field in NAME_COLUMNS:
            if not isinstance(getattr(self, field), str):
                raise SpecError(f"layout.{field}", f"must be a word, got {getattr(self, field)!r}")
        split = self.pp_split
        if split is not None and (
            not isinstance(split, tuple)
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in split)
        ):
            raise SpecError(
                "layout.pp_split",
                f"must be a sequence of integers (layers per rank), got {split!r}",
            )


def layout_table(layouts: Iterable[Layout] | None = None, **columns) -> LayoutTable:
    """A :class:`LayoutTable` from an iterable of :class:`Layout` or from columns.

    Column values are arrays (all of one length ``N``) or scalars (broadcast); fields not
    given take the :class:`Layout` default. Values of the wrong kind raise
    :class:`SpecError` naming ``layout.<field>``. Checks of the layout rules themselves
    (divisibility, sizes) are :func:`table_problems`' job.
    """
    fields = dataclasses.fields(Layout)
    names = [f.name for f in fields]
    if layouts is not None:
        if columns:
            raise SpecError("columns", "give layouts or columns, not both")
        rows = list(layouts)
        columns = {name: [getattr(row, name) for row in rows] for name in names}
        if not rows:
            return LayoutTable({name: as_column(name, [], 0) for name in names})
    unknown = sorted(set(columns) - set(names))
    if unknown:
        raise SpecError(f"layout.{unknown[0]}", f"unknown layout field; known: {names}")
    lengths = {len(v) for v in columns.values() if not np.isscalar(v) and v is not None}
    lengths |= {
        len(v)
        for k, v in columns.items()
        if k in OBJECT_COLUMNS and isinstance(v, (list, np.ndarray))
    }
    if len(lengths) > 1:
        raise SpecError("columns", f"columns have different lengths {sorted(lengths)}")
    n = lengths.pop() if lengths else 1
    out = {}
    for f in fields:
        value = columns.get(f.name, f.default)
        out[f.name] = as_column(f.name, value, n)
    return LayoutTable(out)


def for_layout(table_function: Callable, layout: Layout, /, **arguments):
    """``table_function`` asked about one :class:`Layout`: the one row of
    ``table_function(table=<the one-row table of layout>, **arguments)``.

    This is how the per-layout API runs the table models (one code path for one layout
    and for millions); ``table_function`` takes the table as its ``table`` argument and
    returns row-indexed results, reduced to their row by
    :func:`~fabricflow.workload.layout_table.only_row`. Example::

        fwd, bwd = for_layout(head_cost_table, layout, model=model, gpu=gpu)  # floats
    """
    return only_row(table_function(table=layout_table([layout]), **arguments))


@functools.lru_cache(maxsize=4096)
def _first_problem(
    layout: Layout, model: ModelSpec | None, num_gpus: int | None
) -> tuple[str, str] | None:
    """(field, message) of the first rule ``layout`` breaks, or None; memoised (layouts and
    models are frozen), since a step validates the same layout several times."""
    ok, field, message = for_layout(table_problems, layout, model=model, num_gpus=num_gpus)
    return None if ok else (field, message)


def split_stages(num_layers: int, stages: int) -> np.ndarray:
    """int64 ``[stages]``: transformer layers of each (virtual) stage, in model order, by
    the rule of :meth:`Layout.stage_split` (even when ``stages`` divides the layers; else
    the embedding and the loss count as one layer each and the lighter stages go to the
    ends). Assumes ``num_layers + 2 >= stages`` when uneven."""
    if stages == 1:
        return np.array([num_layers], dtype=np.int64)
    if num_layers % stages == 0:
        return np.full(stages, num_layers // stages, dtype=np.int64)
    base, heavy = divmod(num_layers + 2, stages)
    # light stages (base units) go to the ends first: 0, S-1, 1, S-2, ...
    ends = np.empty(stages, dtype=np.int64)
    ends[0::2] = np.arange((stages + 1) // 2)
    ends[1::2] = stages - 1 - np.arange(stages // 2)
    per_stage = np.full(stages, base + 1, dtype=np.int64)
    per_stage[ends[: stages - heavy]] = base
    per_stage[0] -= 1
    per_stage[-1] -= 1
    return per_stage


def _member(values: np.ndarray, allowed) -> np.ndarray:
    """``values`` in ``allowed`` (a few words or numbers), elementwise (faster than isin on
    short tables)."""
    out = np.zeros(len(values), dtype=bool)
    for item in allowed:
        out |= values == item
    return out


def _choice(table: LayoutTable, field: str, allowed) -> tuple:
    values = getattr(table, field)
    bad = ~_member(values, allowed)
    return (
        f"layout.{field}",
        bad,
        lambda rows: [f"unknown {str(values[i])!r}; one of {list(allowed)}" for i in rows],
    )


def _modules_problem(table: LayoutTable) -> tuple:
    texts = table.recompute_modules
    unknown = {}
    for text in np.unique(texts):  # distinct texts: a handful, not one per row
        names = [m.strip() for m in str(text).split(",") if m.strip()]
        wrong = [m for m in names if m not in RECOMPUTE_MODULES]
        if wrong:
            unknown[str(text)] = wrong[0]
    bad = _member(texts, list(unknown))
    return (
        "layout.recompute_modules",
        bad,
        lambda rows: [
            f"unknown module {unknown[str(texts[i])]!r}; one of {list(RECOMPUTE_MODULES)} "
            "(comma-separated)"
            for i in rows
        ],
    )


def _scope_problems(table: LayoutTable) -> list[tuple]:
    texts = table.cuda_graph_scope
    unknown: dict[str, str] = {}
    lonely = np.zeros(len(table), dtype=bool)
    dynamic = np.zeros(len(table), dtype=bool)
    for text in np.unique(texts):  # distinct texts: a handful, not one per row
        names = {m.strip() for m in str(text).split(",") if m.strip()}
        wrong = sorted(names - set(CUDA_GRAPH_SCOPES))
        rows = texts == text
        if wrong:
            unknown[str(text)] = wrong[0]
        if "moe_preprocess" in names and "moe_router" not in names:
            lonely |= rows
        if "moe" in names:
            dynamic |= rows & (table.moe_capacity_factor == 0.0)
    return [
        (
            "layout.cuda_graph_scope",
            _member(texts, list(unknown)),
            lambda rows: [
                f"unknown scope {unknown[str(texts[i])]!r}; one of {list(CUDA_GRAPH_SCOPES)} "
                "(comma-separated)"
                for i in rows
            ],
        ),
        ("layout.cuda_graph_scope", lonely, "moe_preprocess needs moe_router in the scope too"),
        (
            "layout.cuda_graph_scope",
            dynamic,
            "moe (a whole MoE layer in a graph) needs static shapes: moe_capacity_factor > 0 "
            "(dropless layers are captured as moe_router,moe_preprocess)",
        ),
    ]


def table_problems(
    table: LayoutTable, model: ModelSpec | None = None, num_gpus: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The layout rules, checked for every row of ``table`` at once.

    Returns ``(ok [N] bool, field [N], message [N])``: for each row that breaks a rule, the
    ``SpecError`` field and message of the first rule it breaks (in the order
    :meth:`Layout.validate` reports them), ``None`` where ``ok``. With ``model`` the
    model-dependent rules (heads, KV heads, experts, layers) are checked too; with
    ``num_gpus`` the GPU count.
    """
    with np.errstate(divide="ignore", invalid="ignore"):  # rows with a 0 size fail first
        return _problems(table, model, num_gpus)


def _problems(t: LayoutTable, model: ModelSpec | None, num_gpus: int | None) -> tuple:
    checks: list[tuple] = []
    for field in POSITIVE_FIELDS:
        values = getattr(t, field)
        checks.append(
            (
                f"layout.{field}",
                values < 1,
                lambda rows, values=values: [
                    f"must be an integer >= 1, got {int(values[i])!r}" for i in rows
                ],
            )
        )
    for field in DEFAULTED_FIELDS:
        values = getattr(t, field)
        checks.append(
            (
                f"layout.{field}",
                values < 0,
                lambda rows, values=values: [
                    f"must be an integer >= 0 (0 = default), got {int(values[i])!r}" for i in rows
                ],
            )
        )
    checks += [
        _choice(t, "recompute", RECOMPUTE),
        _choice(t, "precision", PRECISIONS),
        _choice(t, "grad_reduce_dtype", GRAD_DTYPES),
        _choice(t, "adam_moments_dtype", MOMENT_DTYPES),
        _choice(t, "fp8_recipe", FP8_RECIPES),
        _choice(t, "dispatcher", DISPATCHERS),
        (
            "layout.zero",
            ~_member(t.zero, (0, 1, 2, 3)),
            lambda rows: [f"must be 0, 1, 2 or 3 (3 = FSDP), got {int(t.zero[i])!r}" for i in rows],
        ),
        (
            "layout.framework_efficiency",
            ~((t.framework_efficiency > 0.0) & (t.framework_efficiency <= 1.0)),
            lambda rows: [f"must lie in (0, 1], got {t.framework_efficiency[i]}" for i in rows],
        ),
        (
            "layout.moe_imbalance",
            ~((t.moe_imbalance >= 1.0) & (t.moe_imbalance < np.inf)),
            lambda rows: [
                f"must be finite and >= 1 (max/mean load), got {t.moe_imbalance[i]}" for i in rows
            ],
        ),
        (
            "layout.moe_capacity_factor",
            ~(
                (t.moe_capacity_factor == 0.0)
                | ((t.moe_capacity_factor >= 1.0) & (t.moe_capacity_factor < np.inf))
            ),
            lambda rows: [
                f"must be 0 (dropless) or a finite number >= 1, got {t.moe_capacity_factor[i]}"
                for i in rows
            ],
        ),
    ]
    for field in OFFLOAD_FIELDS:
        values = getattr(t, field)
        checks.append(
            (
                f"layout.{field}",
                ~((values >= 0.0) & (values <= 1.0)),  # also refuses NaN
                lambda rows, values=values: [
                    "must be a fraction in [0, 1] (0 = all in HBM, 1 = all offloaded), "
                    f"got {values[i]!r}"
                    for i in rows
                ],
            )
        )
    checks.append(_modules_problem(t))
    checks += _scope_problems(t)
    checks += _size_problems(t, num_gpus)
    checks += _pipeline_problems(t)
    checks += _knob_problems(t)
    if model is not None:
        checks += _model_problems(t, model)
    return first_problem(checks, len(t))


def _knob_problems(t: LayoutTable) -> list[tuple]:
    """Knobs that only mean something beside another setting: given without it they would
    be silently ignored, so a user who sets one believes it acted (the compatibility rules
    that ``step``, ``optimize`` and ``design`` share; the model-dependent ones are in
    :func:`_model_problems`)."""
    modules = np.array([bool(str(m).strip()) for m in t.recompute_modules], dtype=bool)
    return [
        (
            "layout.microbatch_group",
            (t.microbatch_group > 0) & (t.vpp < 2),
            lambda rows: [
                f"microbatch_group={t.microbatch_group[i]} sizes the micro-batch groups of the "
                "interleaved schedule; it needs vpp >= 2 (vpp=1 runs 1F1B)"
                for i in rows
            ],
        ),
        (
            "layout.recompute_layers",
            (t.recompute_layers > 0) & (t.recompute != "full"),
            lambda rows: [
                f"recompute_layers={t.recompute_layers[i]} counts the layers of full "
                f"recompute; it needs recompute='full', got {str(t.recompute[i])!r}"
                for i in rows
            ],
        ),
        (
            "layout.recompute_modules",
            modules & (t.recompute != "selective"),
            lambda rows: [
                f"{str(t.recompute_modules[i])!r} names the modules of selective recompute; "
                f"it needs recompute='selective', got {str(t.recompute[i])!r}"
                + (" (full recompute recomputes whole layers)" if t.recompute[i] == "full" else "")
                for i in rows
            ],
        ),
    ]


def _size_problems(t: LayoutTable, num_gpus: int | None) -> list[tuple]:
    # Products of the int64 columns, in float64 first: beyond INT64_MAX the integer
    # products below wrap around (dp x micro_batch = 8 x (2^63 - 1) reads as -8, which
    # divides any batch) and the step then fails far away, or times a wrapped size.
    gpus = t.tp.astype(np.float64) * t.cp * t.dp * t.pp
    per_step = t.dp.astype(np.float64) * t.micro_batch
    tokens = t.global_batch.astype(np.float64) * t.seq_len
    out: list[tuple] = [
        (
            "layout",
            gpus > INT64_MAX,
            lambda rows: [
                f"tp x cp x dp x pp = {t.tp[i]} x {t.cp[i]} x {t.dp[i]} x {t.pp[i]} is over "
                f"{INT64_MAX:,} GPUs"
                for i in rows
            ],
        ),
        (
            "layout.seq_len",
            tokens > INT64_MAX,
            lambda rows: [
                f"global_batch x seq_len = {t.global_batch[i]} x {t.seq_len[i]} tokens per "
                f"step is over {INT64_MAX:,}"
                for i in rows
            ],
        ),
    ]
    if num_gpus is not None:
        out.append(
            (
                "layout",
                t.num_gpus != num_gpus,
                lambda rows: [
                    f"tp x cp x dp x pp = {t.tp[i]} x {t.cp[i]} x {t.dp[i]} x {t.pp[i]} = "
                    f"{t.num_gpus[i]} differs from the GPU count {num_gpus}"
                    for i in rows
                ],
            )
        )
    folded = t.tp * t.cp * t.dp
    expert = t.ep * t.expert_tensor
    out += [
        (
            "layout.ep",
            (folded % np.maximum(expert, 1)) != 0,
            lambda rows: [
                f"ep x expert_tp = {t.ep[i]} x {t.expert_tensor[i]} must divide tp x cp x dp "
                f"= {folded[i]} (expert layers regroup the tensor-, context- and "
                "data-parallel ranks of a stage)"
                for i in rows
            ],
        ),
        (
            "layout.global_batch",
            per_step > t.global_batch,
            lambda rows: [
                f"{t.global_batch[i]} is smaller than dp x micro_batch = "
                f"{t.dp[i]} x {t.micro_batch[i]} (one micro-batch per data-parallel rank)"
                for i in rows
            ],
        ),
        (
            "layout.global_batch",
            (t.global_batch % np.maximum(t.dp * t.micro_batch, 1)) != 0,
            lambda rows: [
                f"{t.global_batch[i]} is not divisible by "
                f"dp x micro_batch = {t.dp[i]} x {t.micro_batch[i]}"
                for i in rows
            ],
        ),
        ("layout.vpp", (t.vpp > 1) & (t.pp == 1), "virtual pipeline stages need pp > 1"),
        (
            "layout.fp8_activation_cache",
            t.fp8_activation_cache & (t.precision != "fp8"),
            "FP8 activation storage needs precision='fp8'",
        ),
    ]
    return out


def _pipeline_problems(t: LayoutTable) -> list[tuple]:
    schedule = t.pipeline_schedule
    m = t.num_micro_batches
    dual = schedule == "dualpipe"
    out: list[tuple] = [
        _choice(t, "pipeline_schedule", PIPELINE_SCHEDULES),
        (
            "layout.pipeline_schedule",
            (schedule == "interleaved") & (t.vpp < 2),
            "interleaved needs vpp >= 2",
        ),
        (
            "layout.pipeline_schedule",
            _member(schedule, ("1f1b", "dualpipe")) & (t.vpp > 1),
            lambda rows: [f"{schedule[i]} means vpp = 1" for i in rows],
        ),
        (
            # DeepSeek's DualPipe feeds half the micro-batches from each end and pairs rank
            # r with rank pp-1-r: it asserts an even pp and an even m >= 2 pp
            "layout.pp",
            dual & ((t.pp < 2) | (t.pp % 2 != 0)),
            lambda rows: [
                f"dualpipe needs an even pp >= 2 (ranks in pairs), got {t.pp[i]}" for i in rows
            ],
        ),
        (
            "layout.global_batch",
            dual & ((m % 2 != 0) | (m < 2 * t.pp)),
            lambda rows: [
                f"dualpipe needs an even number of micro-batches >= 2 x pp = {2 * t.pp[i]} "
                f"(half fed from each end), got {m[i]}"
                for i in rows
            ],
        ),
    ]
    out += _pp_split_problems(t)
    out += [
        (
            "layout.vpp",
            (t.vpp > 1) & (t.num_micro_batches % np.maximum(t.group_size, 1) != 0),
            lambda rows: [
                f"the interleaved schedule needs the number of micro-batches "
                f"({m[i]}) to be a multiple of "
                + (
                    f"pp={t.pp[i]}"
                    if t.microbatch_group[i] == 0
                    else f"microbatch_group={t.microbatch_group[i]}"
                )
                for i in rows
            ],
        ),
        (
            "layout.seq_len",
            t.seq_len % np.where(t.cp > 1, 2 * t.cp, 1) != 0,
            lambda rows: [
                f"{t.seq_len[i]} must be divisible by 2 x cp = "
                f"{2 * t.cp[i]} (load-balanced causal context parallelism)"
                for i in rows
            ],
        ),
    ]
    return out


def _pp_split_problems(t: LayoutTable) -> list[tuple]:
    """The problems of each row's ``pp_split`` (layers per pipeline rank, when given): one
    entry per rank, and at least one layer on every rank but the first and the last (the
    only rank, when pp = 1, needs one too)."""
    has_split = np.array([s is not None for s in t.pp_split], dtype=bool)
    lengths = np.array([len(s) if s is not None else -1 for s in t.pp_split])
    bad_values = np.array(
        [
            s is not None
            and len(s) == p
            and (min(s) < 0 or (p > 2 and min(s[1:-1]) < 1) or (p == 1 and s[0] < 1))
            for s, p in zip(t.pp_split, t.pp, strict=True)
        ],
        dtype=bool,
    )
    return [
        (
            "layout.pp_split",
            has_split & (lengths != t.pp),
            lambda rows: [
                f"has {lengths[i]} entries; it needs one per rank, pp={t.pp[i]}" for i in rows
            ],
        ),
        (
            "layout.pp_split",
            bad_values,
            lambda rows: [
                f"{list(t.pp_split[i])}: the only rank needs >= 1 layer"
                if t.pp[i] == 1
                else f"{list(t.pp_split[i])}: every rank needs >= 1 layer; only the first and "
                "the last (which hold the embedding and the loss) may hold 0"
                for i in rows
            ],
        ),
    ]


def _model_problems(t: LayoutTable, model: ModelSpec) -> list[tuple]:
    stages = t.pp * t.vpp
    layers = model.num_layers
    has_split = np.array([s is not None for s in t.pp_split], dtype=bool)
    split_sum = np.array([sum(s) if s is not None else -1 for s in t.pp_split])
    tokens = (t.seq_len // t.cp) * t.micro_batch
    out: list[tuple] = [
        (
            "layout.tp",
            model.num_heads % t.tp != 0,
            lambda rows: [
                f"tp={t.tp[i]} must divide num_attention_heads={model.num_heads}" for i in rows
            ],
        ),
        (
            "layout.tp",
            (model.num_kv_heads % t.tp != 0) & (not model.is_mla),
            lambda rows: [
                f"tp={t.tp[i]} must divide num_key_value_heads="
                f"{model.num_kv_heads} (replicating KV heads is not modelled)"
                for i in rows
            ],
        ),
        (
            "layout.pp",
            ~has_split & (layers % stages != 0) & (layers + 2 < stages),
            lambda rows: [
                f"num_hidden_layers={layers} (+ embedding and loss) cannot fill "
                f"pp x vpp = {stages[i]} stages"
                for i in rows
            ],
        ),
        (
            "layout.pp_split",
            has_split & (split_sum != layers),
            lambda rows: [
                f"{list(t.pp_split[i])} sums to {split_sum[i]} layers but "
                f"{model.name} has num_hidden_layers={layers}"
                for i in rows
            ],
        ),
    ]
    if model.is_moe:
        out.append(
            (
                "layout.ep",
                model.num_experts % t.ep != 0,
                lambda rows: [
                    f"ep={t.ep[i]} must divide the {model.num_experts} experts" for i in rows
                ],
            )
        )
    else:
        dense = f"but {model.name} has no experts (a dense model has no expert layers)"
        out += [
            (
                "layout.ep",
                t.ep > 1,
                lambda rows: [f"ep={t.ep[i]} > 1 {dense}" for i in rows],
            ),
            (
                "layout.expert_tp",
                t.expert_tp > 0,
                lambda rows: [f"expert_tp={t.expert_tp[i]} is set {dense}" for i in rows],
            ),
            ("layout.ep_overlap", t.ep_overlap, f"hides the MoE all-to-all {dense}"),
            (
                "layout.moe_capacity_factor",
                t.moe_capacity_factor > 0.0,
                lambda rows: [
                    f"{t.moe_capacity_factor[i]} caps the tokens per expert {dense}" for i in rows
                ],
            ),
        ]
    out.append(
        (
            "layout.sequence_parallel",
            (tokens % np.where(t.sequence_parallel, t.tp, 1)) != 0,
            lambda rows: [
                f"tokens per micro-batch per CP rank must be divisible by tp={t.tp[i]}"
                for i in rows
            ],
        )
    )
    return out


# Every Layout field has one column kind in the table.
assert {f.name for f in dataclasses.fields(Layout)} == set(
    INT_COLUMNS + BOOL_COLUMNS + FLOAT_COLUMNS + NAME_COLUMNS + OBJECT_COLUMNS
)
