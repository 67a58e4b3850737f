"""``fabricflow step``: training step time, MFU, memory and breakdown of a layout on a fabric."""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from pathlib import Path

from fabricflow.assignments import key_values
from fabricflow.collective.comm import check_algorithms
from fabricflow.collective.timing import ROUTINGS
from fabricflow.commands.calibration_flags import add_calibration_flags, calibration_from_args
from fabricflow.commands.cc import CC_CHOICES
from fabricflow.commands.common import (
    add_fabric_flags,
    add_fail_flag,
    add_json_flag,
    failed_fabric,
    load_fabric_flags,
    output_file,
    print_json,
    write_outputs,
)
from fabricflow.errors import SpecError
from fabricflow.fabric.summary import failure_counts, failure_text
from fabricflow.files import parse_structured
from fabricflow.plots.figures import image_formats
from fabricflow.plots.step import plot_breakdown
from fabricflow.units import format_time
from fabricflow.workload.gpu import load_gpu
from fabricflow.workload.hetero import job_gpus, load_job, parse_gpu_mix
from fabricflow.workload.layout import DISPATCHERS, FP8_RECIPES
from fabricflow.workload.model_spec import load_model
from fabricflow.workload.stack import load_stack
from fabricflow.workload.step import step_time


def register(parser) -> None:
    """The flags of ``fabricflow step``, group by group (the order ``--help`` lists them)."""
    add_fabric_flags(parser)
    _add_job_flags(parser)
    _add_parallelism_flags(parser)
    _add_batch_flags(parser)
    add_stack_flags(parser)
    _add_training_flags(parser)
    _add_overlap_flags(parser)
    _add_memory_flags(parser)
    _add_override_flags(parser)
    _add_kernel_flags(parser)
    _add_placement_flags(parser)
    _add_network_flags(parser)
    _add_output_flags(parser)
    add_calibration_flags(parser)
    add_json_flag(parser)
    parser.set_defaults(func=run)


def _add_job_flags(parser) -> None:
    """The job: ``--gpu`` (or ``--job``), ``--model`` and ``--gpus``."""
    parser.add_argument(
        "--gpu",
        default=None,
        help="GPU preset (a100-80gb, h100-sxm, ...), or a job over several types in pipeline "
        "order, whole stages each: h100-sxm:1024,h20:1024 (layers split by speed)",
    )
    parser.add_argument(
        "--job",
        default=None,
        metavar="FILE",
        help="YAML job spec instead of --gpu: 'gpus' (list of {gpu: NAME, count: N} in "
        "pipeline order) and optional 'pp_split'",
    )
    parser.add_argument("--model", required=True, help="model preset or config.json/YAML path")
    parser.add_argument("--gpus", type=int, required=True, help="GPUs in the job")


def _add_parallelism_flags(parser) -> None:
    """The parallel dimensions (``--tp``, ``--pp``, ``--dp``, ``--cp``, ``--ep``, ``--vpp``),
    ``--pp-split`` and sequence parallelism."""
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--dp", type=int, default=None, help="default: gpus / (tp cp pp)")
    parser.add_argument("--cp", type=int, default=1)
    parser.add_argument("--ep", type=int, default=1)
    parser.add_argument("--vpp", type=int, default=1, help="virtual pipeline stages per GPU")
    parser.add_argument(
        "--pp-split",
        default=None,
        metavar="N,N,...",
        help="transformer layers per pipeline rank, first to last (default: even, or uneven "
        "with the embedding and the loss counted as one layer each)",
    )
    parser.add_argument(
        "--sequence-parallel",
        action="store_true",
        help="shard norms and dropouts over TP (the default; turns it on over a stack that "
        "turns it off)",
    )
    parser.add_argument(
        "--no-sequence-parallel",
        action="store_true",
        help="turn sequence parallelism off (all-reduces instead of all-gather / reduce-scatter)",
    )


def _add_batch_flags(parser) -> None:
    """``--micro-batch``, ``--global-batch`` (sequences) and ``--seq`` (tokens)."""
    parser.add_argument("--micro-batch", type=int, required=True)
    parser.add_argument("--global-batch", type=int, required=True)
    parser.add_argument("--seq", type=int, required=True, help="sequence length (tokens)")


def _add_training_flags(parser) -> None:
    """Recomputation, precision, ZeRO stage and pipeline schedule (else the stack's)."""
    parser.add_argument(
        "--recompute",
        default=None,
        choices=["none", "selective", "full"],
        help="default: the stack's, else none",
    )
    parser.add_argument(
        "--precision", default=None, choices=["bf16", "fp8"], help="default: the stack's, else bf16"
    )
    parser.add_argument(
        "--zero", type=int, default=None, choices=[0, 1, 2, 3], help="default: the stack's, else 1"
    )
    parser.add_argument(
        "--schedule",
        default=None,
        choices=["1f1b", "interleaved", "dualpipe"],
        help="interleaved needs --vpp > 1 (default: from --vpp); dualpipe: DeepSeek-V3's "
        "bidirectional schedule (even pp, even micro-batch count >= 2 pp; hides MoE "
        "all-to-all, keeps two copies of the weights)",
    )


def _add_overlap_flags(parser) -> None:
    """Which communication hides behind compute, and the fused kernels: each switch and
    its ``--no-`` form override the stack."""
    parser.add_argument(
        "--no-dp-overlap", action="store_true", help="DP gradient comm after backward"
    )
    parser.add_argument(
        "--dp-overlap",
        action="store_true",
        help="overlap DP gradient comm with backward (over a stack that turns it off)",
    )
    parser.add_argument(
        "--tp-backward-overlap",
        action="store_true",
        help="backward TP collectives beside their GEMMs (over a stack that turns it off)",
    )
    parser.add_argument(
        "--grad-accum-fusion",
        action="store_true",
        help="fused gradient accumulation (over a stack that turns it off)",
    )
    parser.add_argument(
        "--fused-cross-entropy",
        action="store_true",
        help="fused cross entropy (over a stack that turns it off)",
    )
    parser.add_argument(
        "--pp-overlap",
        action="store_true",
        help="overlap pipeline send/receive (over a stack that turns it off)",
    )
    parser.add_argument(
        "--tp-overlap",
        action="store_true",
        help="overlap TP comm with GEMMs (needs SP; the default; turns it on over a stack "
        "that turns it off)",
    )
    parser.add_argument(
        "--no-tp-overlap",
        action="store_true",
        help="no userbuffers TP overlap (TP collectives beside the GEMMs only in backward, "
        "see --no-tp-backward-overlap)",
    )
    parser.add_argument(
        "--no-tp-backward-overlap",
        action="store_true",
        help="without TP overlap, backward TP collectives wait too (Megatron-LM before 2021-09)",
    )
    parser.add_argument(
        "--no-grad-accum-fusion",
        action="store_true",
        help="weight gradients added to the main gradient by a separate kernel per micro-batch "
        "(Megatron-LM before 2022-02)",
    )
    parser.add_argument(
        "--no-fused-cross-entropy",
        action="store_true",
        help="fp32 vocab-parallel loss (fp32 logits and gradient kept) instead of the fused one",
    )
    parser.add_argument("--no-pp-overlap", action="store_true")
    parser.add_argument(
        "--ep-overlap",
        action="store_true",
        help="hide MoE all-to-all behind another chunk's compute (DualPipe-like)",
    )


def _add_memory_flags(parser) -> None:
    """Data types of the gradients, optimizer state and cached activations, the MoE
    imbalance, and the shares offloaded to host memory (fractions in [0, 1])."""
    parser.add_argument(
        "--grad-reduce-dtype",
        default=None,
        choices=["fp32", "bf16"],
        help="main gradients and their reduction (default: the stack's, else bf16, as the "
        "performance recipes)",
    )
    parser.add_argument(
        "--adam-moments-dtype",
        default=None,
        choices=["fp32", "bf16"],
        help="Adam's first and second moments (default: the stack's, else fp32; bf16: 8 B "
        "of optimizer state per parameter, as DeepSeek-V3)",
    )
    parser.add_argument(
        "--fp8-activation-cache",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with fp8: expert SwiGLU inputs saved in FP8, one copy of the attention output "
        "(DeepSeek-V3's activation storage; default: the stack's, else off)",
    )
    parser.add_argument(
        "--moe-imbalance",
        type=float,
        default=None,
        help="max/mean tokens per expert-parallel rank (default: the stack's, else 1.1)",
    )
    for state, what in (
        ("optimizer", "optimizer state (fp32 master weights, Adam moments)"),
        ("weights", "bf16 weights (fetched every pass)"),
        ("activations", "activations saved for backward"),
    ):
        parser.add_argument(
            f"--offload-{state}",
            type=float,
            default=0.0,
            metavar="F",
            help=f"fraction in [0, 1] of the {what} kept in host memory over the GPU's "
            "host link (--gpu-set host_link_bandwidth=...)",
        )


def _add_override_flags(parser) -> None:
    """Overrides of the model and the GPU: ``--attention``, ``--gpu-set``, ``--model-set``."""
    parser.add_argument(
        "--attention",
        default=None,
        choices=["flash", "eager"],
        help="override the model's attention implementation (default: the model's own)",
    )
    parser.add_argument(
        "--gpu-set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a GPU field, e.g. hbm=96GB, peak_bf16=900TFLOPS, "
        "host_link_bandwidth=64GB/s (per direction) (repeatable)",
    )
    parser.add_argument(
        "--model-set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a config.json field, e.g. num_hidden_layers=4 (repeatable)",
    )


def _add_kernel_flags(parser) -> None:
    """Expert tensor parallelism and MoE capacity, the interleaved schedule's groups,
    what is recomputed and what runs from CUDA graphs."""
    parser.add_argument(
        "--expert-tp",
        type=int,
        default=0,
        help="tensor-parallel size of the expert layers (0: Megatron's default, tp where "
        "ep divides cp x dp, else 1)",
    )
    parser.add_argument(
        "--moe-capacity-factor",
        type=float,
        default=None,
        help="tokens an expert takes, as a multiple of its balanced share; excess dropped "
        "(0: dropless; default: the stack's, else 0)",
    )
    parser.add_argument(
        "--microbatch-group",
        type=int,
        default=0,
        help="micro-batches per virtual-stage group of the interleaved schedule: sets how "
        "many are in flight (0: pp)",
    )
    parser.add_argument(
        "--recompute-layers",
        type=int,
        default=0,
        help="with --recompute full: layers of each stage chunk recomputed (0: all)",
    )
    parser.add_argument(
        "--recompute-modules",
        default=None,
        help="with --recompute selective: comma-separated modules recomputed, of "
        "core_attn, layernorm, mla_up_proj, mlp (dense layers), moe (MoE layers), moe_act, "
        "shared_experts ('': core_attn; "
        "default: the stack's, else '')",
    )
    parser.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="the whole step replayed from CUDA graphs (no per-kernel host launches)",
    )
    parser.add_argument(
        "--cuda-graph-scope",
        default=None,
        help="parts of each layer captured in CUDA graphs, comma-separated, of attn, mlp, "
        "moe, moe_router, moe_preprocess ('': none; ignored with --cuda-graphs; default: the "
        "stack's, else '')",
    )


def _add_placement_flags(parser) -> None:
    """Rank order and placement, the ECMP hash seeds and the ``--fail`` what-if."""
    parser.add_argument("--order", default="tp-cp-ep-dp-pp", help="rank order, fastest first")
    parser.add_argument(
        "--placement",
        default="deployed",
        choices=["deployed", "contiguous", "scattered", "topology-aware", "domain-aligned"],
        help="rank placement; deployed: as racks are run (on scale-up domains of 64 or more "
        "GPUs whole trays, spares kept, TP/EP groups inside one domain when they fit; "
        "contiguous elsewhere); domain-aligned: 64 ranks per such domain",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the run's random draws: the cables --fail takes down and the scattered "
        "placement (default 0)",
    )
    parser.add_argument(
        "--routing-seeds",
        type=int,
        default=None,
        metavar="N",
        help="time the step with ECMP hash seeds 0..N-1 and report p50, p99 and max "
        "(default: one run, routing seed 0)",
    )
    add_fail_flag(parser)


def _add_network_flags(parser) -> None:
    """How collectives are timed: ``--collectives``, ``--routing``, ``--algorithm``, ``--cc``."""
    parser.add_argument(
        "--collectives",
        default="fabric",
        choices=["fabric", "alpha-beta"],
        help="collective times: flows on the fabric, max-min shared (fabric) or "
        "the analytic alpha-beta estimate (no contention), for comparison",
    )
    parser.add_argument(
        "--routing",
        default="auto",
        metavar="{auto,ecmp,multipath,spray,adaptive,optimized}",
        help="routing of the collectives' flows (auto: what the fabric's transport does, "
        "adaptive spraying on a Clos with adaptive routing, per-flow ECMP otherwise)",
    )
    parser.add_argument(
        "--algorithm",
        action="append",
        default=[],
        metavar="DIM=ALGORITHM",
        help="collective algorithm of one dimension (tp, cp, ep, pp, dp), e.g. dp=ring "
        "(repeatable; default: the fastest per message size)",
    )
    parser.add_argument(
        "--cc",
        default=None,
        choices=CC_CHOICES,
        help="congestion control: scale each collective phase's rates by its flows' "
        "efficiency under this rate law (default: ideal max-min rates; see docs/cc.md)",
    )


def _add_output_flags(parser) -> None:
    """``--no-memory-check`` and ``--plot FILE``."""
    parser.add_argument(
        "--no-memory-check",
        action="store_true",
        help="report memory over HBM instead of refusing the layout",
    )
    parser.add_argument(
        "--plot",
        default=None,
        type=output_file,
        help="write a stacked-bar breakdown; format from the extension (png, pdf, svg, ...; "
        "none: PNG)",
    )


def layout_from_args(args):
    """The :class:`Layout` described by the CLI flags (errors name the flag)."""
    if args.gpus < 1:
        raise SpecError("--gpus", f"must be an integer >= 1, got {args.gpus}")
    for flag in ("tp", "cp", "pp"):
        if getattr(args, flag) < 1:
            raise SpecError(f"--{flag}", f"must be an integer >= 1, got {getattr(args, flag)}")
    dp = args.dp
    if dp is None:
        denominator = args.tp * args.cp * args.pp
        if denominator <= 0 or args.gpus % denominator:
            raise SpecError(
                "--dp", f"--gpus {args.gpus} is not divisible by tp x cp x pp = {denominator}"
            )
        dp = args.gpus // denominator
    if args.schedule == "interleaved" and args.vpp < 2:
        raise SpecError("--schedule", "interleaved needs --vpp >= 2")
    if args.schedule in ("1f1b", "dualpipe") and args.vpp > 1:
        raise SpecError("--schedule", f"{args.schedule} means --vpp 1")
    pp_split = None if args.pp_split is None else parse_pp_split(args.pp_split)
    no_sp = getattr(args, "no_sequence_parallel", False)
    if no_sp and getattr(args, "sequence_parallel", False):
        raise SpecError("--no-sequence-parallel", "give --sequence-parallel or its --no- form")
    if no_sp and args.tp > 1 and getattr(args, "tp_overlap", False):
        raise SpecError(
            "layout.tp_overlap",
            "TP communication overlap needs sequence parallelism (all-gather/reduce-scatter "
            "pipelined with GEMMs); drop --no-sequence-parallel or --tp-overlap",
        )
    if getattr(args, "no_tp_overlap", False) and getattr(args, "tp_overlap", False):
        raise SpecError("--no-tp-overlap", "give --tp-overlap or --no-tp-overlap, not both")
    explicit = dict(
        sequence_parallel=_switch(args, "sequence_parallel"),
        recompute=args.recompute,
        precision=args.precision,
        zero=args.zero,
        dp_overlap=_switch(args, "dp_overlap"),
        tp_overlap=_switch(args, "tp_overlap"),
        tp_backward_overlap=_switch(args, "tp_backward_overlap"),
        grad_accum_fusion=_switch(args, "grad_accum_fusion"),
        fused_cross_entropy=_switch(args, "fused_cross_entropy"),
        pp_overlap=_switch(args, "pp_overlap"),
        ep_overlap=True if getattr(args, "ep_overlap", False) else None,
        grad_reduce_dtype=args.grad_reduce_dtype,
        moe_imbalance=args.moe_imbalance,
        pipeline_schedule=args.schedule,
        moe_capacity_factor=getattr(args, "moe_capacity_factor", None),
        recompute_modules=getattr(args, "recompute_modules", None),
        cuda_graphs=True if getattr(args, "cuda_graphs", False) else None,
        cuda_graph_scope=getattr(args, "cuda_graph_scope", None),
        dispatcher=getattr(args, "dispatcher", None),
        fp8_recipe=getattr(args, "fp8_recipe", None),
        moe_router_fusion=getattr(args, "moe_router_fusion", None),
        cpu_binding=getattr(args, "cpu_binding", None),
        fp8_norm_fusion=getattr(args, "fp8_norm_fusion", None),
        fp8_dispatch=getattr(args, "fp8_dispatch", None),
        adam_moments_dtype=getattr(args, "adam_moments_dtype", None),
        fp8_activation_cache=getattr(args, "fp8_activation_cache", None),
    )
    return stack_from_args(args).layout_for(
        tp=args.tp,
        pp=args.pp,
        dp=dp,
        cp=args.cp,
        ep=args.ep,
        vpp=args.vpp,
        micro_batch=args.micro_batch,
        global_batch=args.global_batch,
        seq_len=args.seq,
        offload_optimizer=args.offload_optimizer,
        offload_weights=args.offload_weights,
        offload_activations=args.offload_activations,
        pp_split=pp_split,
        expert_tp=getattr(args, "expert_tp", 0),
        microbatch_group=getattr(args, "microbatch_group", 0),
        recompute_layers=getattr(args, "recompute_layers", 0),
        **{key: value for key, value in explicit.items() if value is not None},
    )


def _switch(args, name: str) -> bool | None:
    """True for ``--NAME``, False for ``--no-NAME``, None (the stack decides) for neither."""
    on = getattr(args, name, False)
    off = getattr(args, f"no_{name}", False)
    flag = name.replace("_", "-")
    if on and off:
        raise SpecError(f"--no-{flag}", f"give --{flag} or --no-{flag}, not both")
    return True if on else (False if off else None)


def add_stack_flags(parser) -> None:
    """``--stack`` and the software-choice flags a stack sets and a user may override."""
    parser.add_argument(
        "--stack",
        default=None,
        help="software stack preset (megatron-core, nemo-25.09, ...) or a .json/.yaml file: its "
        "choices are the defaults of the flags below, its measured parameters time the "
        "step (default: megatron-core)",
    )
    parser.add_argument(
        "--stack-set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a stack parameter, e.g. deepep_sms=20, host_module_ops=6 (repeatable)",
    )
    parser.add_argument(
        "--dispatcher",
        default=None,
        choices=list(DISPATCHERS),
        help="MoE token dispatcher (default: the stack's, else alltoall)",
    )
    parser.add_argument(
        "--fp8-recipe",
        default=None,
        choices=list(FP8_RECIPES),
        help="FP8 scaling recipe under --precision fp8 (default: the stack's, else tensorwise)",
    )
    for name, what in (
        ("moe-router-fusion", "fused MoE router kernels"),
        ("cpu-binding", "each rank bound to its GPU's NUMA node"),
        ("fp8-norm-fusion", "FP8 quantization fused into the norms"),
        ("fp8-dispatch", "MoE dispatch in fp8 under --precision fp8"),
    ):
        parser.add_argument(
            f"--{name}",
            action=argparse.BooleanOptionalAction,
            default=None,
            help=f"{what} (default: the stack's)",
        )


def stack_from_args(args):
    """The :class:`~fabricflow.workload.stack.Stack` of ``--stack`` (the default preset
    without one); errors name the flag."""
    sets = _assignments(getattr(args, "stack_set", []), "--stack-set")
    try:
        return load_stack(getattr(args, "stack", None), **sets)
    except SpecError as error:
        if error.field == "stack":
            raise SpecError("--stack", str(error).removeprefix("stack: ")) from None
        if error.field.startswith("stack.") and error.field.removeprefix("stack.") in sets:
            message = str(error).removeprefix(f"{error.field}: ")
            raise SpecError(f"--stack-set {error.field.removeprefix('stack.')}", message) from None
        raise


def parse_algorithms(items: list[str]) -> dict[str, str]:
    """``['dp=ring', 'tp=nvls']`` (``--algorithm``, repeatable) -> ``{'dp': 'ring', 'tp': 'nvls'}``
    with canonical names; errors name the flag, the dimension and the allowed values."""
    out: dict[str, str] = {}
    for item in items:
        dim, sep, algorithm = (word.strip() for word in item.partition("="))
        if not sep or not dim or not algorithm:
            raise SpecError("--algorithm", f"expected DIM=ALGORITHM such as dp=ring, got {item!r}")
        if dim in out:
            raise SpecError(f"--algorithm {dim}", "given twice; give each dimension once")
        out[dim] = algorithm
    try:
        return check_algorithms(out)
    except SpecError as error:
        raise SpecError(
            error.field.replace("algorithms.", "--algorithm ").replace("algorithms", "--algorithm"),
            str(error).split(": ", 1)[-1],
        ) from None


def parse_pp_split(text: str) -> tuple[int, ...]:
    """``"3,4,4,3"`` -> ``(3, 4, 4, 3)``; the layout checks the length and the sum."""
    items = [item.strip() for item in text.split(",")]
    if not all(re.fullmatch(r"[0-9]+", item) for item in items):
        raise SpecError(
            "--pp-split", f"expected layers per rank as N,N,... (integers >= 0), got {text!r}"
        )
    return tuple(int(item) for item in items)


def gpus_from_args(args, layout):
    """The GPU of the job: a :class:`GpuSpec`, or a list of ``(GpuSpec, count)`` in
    pipeline order (``--gpu a:n,b:m`` or ``--job FILE``), checked against ``layout``
    (whole stages; errors name the flag). ``--gpu-set`` applies to every type."""
    sets = _assignments(args.gpu_set, "--gpu-set")
    if args.job is not None:
        job = load_job(args.job)
        mix = [(load_gpu(spec, **sets), count) for spec, count in job["gpus"]]
        job_gpus(mix, layout, field="--job gpus")
        return mix, job["pp_split"]
    if args.gpu is None:
        raise SpecError("--gpu", "give a GPU preset (or TYPE:COUNT,...), or --job FILE")
    if ":" in args.gpu or "," in args.gpu:
        mix = [(load_gpu(name, **sets), count) for name, count in parse_gpu_mix(args.gpu, "--gpu")]
        job_gpus(mix, layout, field="--gpu")
        return mix, None
    return load_gpu(args.gpu, **sets), None


def _assignments(items: list[str], flag: str) -> dict:
    """``['hbm=96GB', 'compute_units=132']`` -> dict; numbers parsed, the rest kept as text.

    Values are read as YAML by :func:`fabricflow.files.parse_structured` (its limits on
    depth, aliases, duplicate keys and int64 range apply); NaN, infinities, dates and a
    key given twice are refused, and every error names the flag and the key. Lists,
    mappings and null go to the model or GPU loader, which checks each field.
    """
    out: dict = {}
    for key, value in key_values(items, flag, example="FIELD=VALUE").items():
        field = f"{flag} {key}"
        text = value
        if re.fullmatch(r"\s*[-+]?[0-9]+\s*", value):
            # a plain integer is decimal even with leading zeros (010 is ten), which the
            # YAML reader refuses as possibly octal
            text = re.sub(r"^(\s*[-+]?)0+(?=[0-9])", r"\1", value)
        if value.strip():
            try:
                parsed = parse_structured(text, what=field, source=f"{flag} {key}={value!r}")
            except SpecError as error:
                raise SpecError(field, str(error).removeprefix(f"{error.field}: ")) from None
        else:
            parsed = value
        if not isinstance(parsed, (str, int, float, bool, list, dict, type(None))):
            # YAML dates, timestamps and !!binary: no field takes them
            raise SpecError(
                field, f"expected a number, a quantity with a unit or a word, got {value!r}"
            )
        if isinstance(parsed, str):  # YAML 1.1 reads 1e9 as text; a number is meant
            try:
                number = float(parsed)
            except ValueError:
                number = None
            if number is not None:
                if not math.isfinite(number):
                    raise SpecError(field, f"must be a finite number, got {value!r}")
                parsed = number
        elif isinstance(parsed, float) and not math.isfinite(parsed):
            raise SpecError(field, f"must be a finite number, got {value!r}")
        # the reader takes numbers in decimal only: 0x10 and 1_000 were refused above,
        # 1:30 (base 60 in YAML 1.1) is text
        out[key] = parsed
    return out


def _check_plot_format(path: str) -> None:
    """Refuse a --plot format matplotlib cannot write before the model runs
    (:class:`SpecError`); the format is read from the extension (none: PNG) as
    :func:`~fabricflow.plots.figures.save_figure` reads it. The destination itself is
    checked by the CLI before the command runs (an unwritable one is reported after the
    result)."""
    extension = Path(path).suffix.lstrip(".").lower() or "png"
    formats = image_formats()
    if extension not in formats:
        raise SpecError(
            "--plot", f"unknown image format {extension!r} in {path!r}; use one of {formats}"
        )


def run(args) -> int:
    if args.plot:
        _check_plot_format(args.plot)
    calibration = calibration_from_args(args)
    if args.job is not None and args.gpu is not None:
        raise SpecError("--job", "gives the GPUs; drop --gpu")
    layout = layout_from_args(args).validate(num_gpus=args.gpus)
    gpu, job_split = gpus_from_args(args, layout)
    if job_split is not None:
        if layout.pp_split is not None:
            raise SpecError("--pp-split", "the --job file gives pp_split too; give it once")
        layout = dataclasses.replace(layout, pp_split=job_split).validate()
    overrides = _assignments(args.model_set, "--model-set")
    if args.attention:
        overrides["attn_implementation"] = args.attention
    model = load_model(args.model, **overrides)
    fabric = failed_fabric(load_fabric_flags(args), args.fail, args.seed)
    if args.routing_seeds is not None and args.routing_seeds < 1:
        raise SpecError(
            "--routing-seeds",
            f"must be at least 1 (routing seeds 0..N-1), got {args.routing_seeds}",
        )
    algorithms = parse_algorithms(args.algorithm)
    if args.routing not in ROUTINGS:
        raise SpecError("--routing", f"unknown routing {args.routing!r}; one of {list(ROUTINGS)}")
    result = step_time(
        model,
        gpu,
        layout,
        fabric,
        order=args.order,
        placement=args.placement,
        placement_seed=args.seed,
        check_memory=not args.no_memory_check,
        collectives=args.collectives,
        routing_seeds=args.routing_seeds,
        calibration=calibration,
        interval_level=args.interval_level,
        routing=args.routing,
        algorithms=algorithms,
        cc=args.cc,
        stack=stack_from_args(args),
    )
    if args.plot:
        label = f"{model.name}\nTP{layout.tp} PP{layout.pp} DP{layout.dp}"
        # a plot that cannot be written is reported after the result (exit 1)
        if not write_outputs(args, "--plot", plot_breakdown, [(label, result)], args.plot):
            args.plot = None
    if args.fail:
        # what --fail took: links down and links left at reduced capacity (partly
        # failed bundles), which slow the step as much as links down can
        # (the same keys as collective's: failed_cables, failed_links, reduced_links)
        result.details.update(fail=args.fail, **failure_counts(fabric))
    if args.json:
        out = result.to_dict()
        if args.plot:
            out["plot"] = args.plot
        print_json(out)
    else:
        print_result(result, args.plot)
    return 0


def flops_text(result, recompute: str) -> str:
    """``'390.0 model (MFU numerator), 368.3 executed (...)'``: model FLOP/s and the FLOP/s
    the kernels execute, which count attention as its kernel computes it (a causal
    Flash kernel skips the masked half of the scores) and the recomputation."""
    redo = "no recompute" if recompute == "none" else f"{recompute} recompute included"
    return (
        f"{result.tflops_per_gpu:.1f} model (MFU numerator), "
        f"{result.hardware_tflops_per_gpu:.1f} executed (attention as its kernel computes "
        f"it, {redo})"
    )


def print_result(result, plot: str | None) -> None:
    d = result.details
    lay = d["layout"]
    print(
        f"{d['model']} on {d['num_gpus']} x {d['gpu']} ({d['fabric']}), TP {lay['tp']} PP {lay['pp']}"
        f" (vpp {lay['vpp']}) DP {lay['dp']} CP {lay['cp']} EP {lay['ep']}, order {d['order']}, "
        f"{d['placement']} placement"
    )
    bands = result.intervals()
    formats = {
        "step_time_s": lambda v: f"{v:.4g}",
        "tokens_per_s": lambda v: f"{v:,.0f}",
        "mfu": lambda v: f"{100 * v:.1f}%",
    }
    band = {
        key: f"  [{formats[key](interval.low)} .. {formats[key](interval.high)}]"
        for key, interval in bands.items()
    }
    print(
        f"  step time        {format_time(result.step_time_s)}  ({d['num_micro_batches']} micro-batches)"
        + (band["step_time_s"] + " s" if bands else "")
    )
    print(f"  tokens/s         {result.tokens_per_s:,.0f}" + band.get("tokens_per_s", ""))
    print(f"  TFLOP/s per GPU  {flops_text(result, lay['recompute'])}")
    print(f"  MFU              {100 * result.mfu:.1f}%" + band.get("mfu", ""))
    if bands:
        interval = bands["step_time_s"]
        print(
            f"  interval         {100 * interval.level:.0f}% prediction interval from "
            f"{'the calibration' if interval.method == 'calibration' else 'published runs'}:"
            f" {interval.basis}"
        )
    if lay["pp"] > 1:
        layers = ",".join(str(n) for n in d["rank_layers"])
        # under DualPipe rank r also holds stage pp-1-r: the list is per stage
        unit = "stage" if d["pipeline_schedule"] == "dualpipe" else "rank"
        print(f"  pipeline         {d['pipeline_schedule']}, layers per {unit} {layers}")
    if "stack" in d:
        stack = d["stack"]
        print(
            f"  stack            {stack['name']}"
            + (f" ({stack['release']})" if stack["release"] else "")
        )
    mem = result.memory.as_gib()
    print(
        f"  memory per GPU   {mem['total']:.1f} GiB (weights {mem['weights']:.1f}, grads "
        f"{mem['gradients']:.1f}, optimizer {mem['optimizer']:.1f}, activations "
        f"{mem['activations']:.1f}; {mem['rank']} pipeline rank)"
    )
    if mem["offloaded"]:
        print(f"  host memory      {mem['offloaded']:.1f} GiB per GPU offloaded")
    print("  breakdown:")
    for key, value in result.breakdown.items():
        share = value / result.step_time_s if result.step_time_s else 0.0
        print(f"    {key:<10} {format_time(value) if value else '0':>10}  {100 * share:5.1f}%")
    extra = [f"routing {d['routing']}"] if d.get("routing", "auto") != "auto" else []
    extra += [f"{dim} {algorithm}" for dim, algorithm in (d.get("algorithms") or {}).items()]
    if d.get("cc"):
        extra.append(f"congestion control {d['cc']} (phase rates scaled by its efficiency)")
    print(f"  collectives: {', '.join([d['collective_backend'], *extra])}")
    coupling = d.get("coupling")
    if coupling and coupling.get("windows"):
        parts = ", ".join(
            f"{key} +{format_time(value)}"
            for key, value in coupling["added_s_by_part"].items()
            if value > 0
        )
        print(
            f"  coupling         +{format_time(coupling['added_s'])} over each dimension alone "
            f"({format_time(coupling['isolated_step_s'])}){': ' + parts if parts else ''}"
        )
    if d.get("fail"):
        print(f"  failures         --fail {d['fail']}: {failure_text(d)}")
    var = d.get("variability")
    if var:
        print(
            f"  over {var['routing_seeds']} routing seeds: p50 {format_time(var['p50_s'])}, "
            f"p99 {format_time(var['p99_s'])}, max {format_time(var['max_s'])}"
        )
    if plot:
        print(f"  plot written to {plot}")
