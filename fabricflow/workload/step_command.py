"""One timed step as the ``fabricflow step`` command line that times it again.

The design-review report, the layout optimizer and anything else that times a layout
with :func:`~fabricflow.workload.step.step_time` can print what it timed so that a
reader gets the same number from ``fabricflow step``: :func:`step_arguments` writes
every :class:`~fabricflow.workload.layout.Layout` field that differs from its default,
and the step options (order, placement, placement seed, routing, collective algorithms, collective
backend, congestion control), as that command's flags. :func:`describe_step` is the same
content as one readable line.

``STEP_FLAGS`` maps each layout field to its flag; a field without one (a new field the
command line does not take yet) is refused by :func:`step_arguments` instead of being
dropped, so a printed command never times something else silently.
"""

from __future__ import annotations

import dataclasses
import shlex

from fabricflow.errors import SpecError
from fabricflow.workload.layout import Layout
from fabricflow.workload.placement import DEFAULT_ORDER, DEFAULT_PLACEMENT
from fabricflow.workload.stack import DEFAULT_STACK, load_stack

__all__ = [
    "STEP_FLAGS",
    "describe_layout",
    "describe_options",
    "describe_step",
    "step_arguments",
    "step_command",
]

# Layout field -> (flag, how the value is written). "value": ``--flag VALUE`` whenever the
# field differs from its default (the parallel sizes and the batch always). Switches are in
# ``SWITCHES``.
STEP_FLAGS: dict[str, tuple[str, str]] = {
    "tp": ("--tp", "value"),
    "pp": ("--pp", "value"),
    "dp": ("--dp", "value"),
    "cp": ("--cp", "value"),
    "ep": ("--ep", "value"),
    "vpp": ("--vpp", "value"),
    "micro_batch": ("--micro-batch", "value"),
    "global_batch": ("--global-batch", "value"),
    "seq_len": ("--seq", "value"),
    "recompute": ("--recompute", "value"),
    "precision": ("--precision", "value"),
    "zero": ("--zero", "value"),
    "grad_reduce_dtype": ("--grad-reduce-dtype", "value"),
    "adam_moments_dtype": ("--adam-moments-dtype", "value"),
    "moe_imbalance": ("--moe-imbalance", "value"),
    "offload_optimizer": ("--offload-optimizer", "value"),
    "offload_weights": ("--offload-weights", "value"),
    "offload_activations": ("--offload-activations", "value"),
    "pp_split": ("--pp-split", "value"),
    "pipeline_schedule": ("--schedule", "value"),
    "expert_tp": ("--expert-tp", "value"),
    "microbatch_group": ("--microbatch-group", "value"),
    "recompute_layers": ("--recompute-layers", "value"),
    "recompute_modules": ("--recompute-modules", "value"),
    "moe_capacity_factor": ("--moe-capacity-factor", "value"),
    "cuda_graph_scope": ("--cuda-graph-scope", "value"),
    "dispatcher": ("--dispatcher", "value"),
    "fp8_recipe": ("--fp8-recipe", "value"),
}
# Boolean Layout field -> (flag that turns it on, flag that turns it off; None: no such
# flag). A stack may set either way, so both directions are written where they exist.
SWITCHES: dict[str, tuple[str | None, str | None]] = {
    "sequence_parallel": ("--sequence-parallel", "--no-sequence-parallel"),
    "dp_overlap": ("--dp-overlap", "--no-dp-overlap"),
    "tp_overlap": ("--tp-overlap", "--no-tp-overlap"),
    "pp_overlap": ("--pp-overlap", "--no-pp-overlap"),
    "ep_overlap": ("--ep-overlap", None),
    "cuda_graphs": ("--cuda-graphs", None),
    "fused_cross_entropy": ("--fused-cross-entropy", "--no-fused-cross-entropy"),
    "tp_backward_overlap": ("--tp-backward-overlap", "--no-tp-backward-overlap"),
    "grad_accum_fusion": ("--grad-accum-fusion", "--no-grad-accum-fusion"),
    "moe_router_fusion": ("--moe-router-fusion", "--no-moe-router-fusion"),
    "cpu_binding": ("--cpu-binding", "--no-cpu-binding"),
    "fp8_norm_fusion": ("--fp8-norm-fusion", "--no-fp8-norm-fusion"),
    "fp8_dispatch": ("--fp8-dispatch", "--no-fp8-dispatch"),
    "fp8_activation_cache": ("--fp8-activation-cache", "--no-fp8-activation-cache"),
}
# Written even when equal to the default: what a reader needs to see at once.
_ALWAYS = frozenset(
    {"tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "global_batch", "seq_len"}
    | {"recompute", "zero"}
)
# Step options -> (flag, default). Algorithms are one flag per dimension.
_OPTIONS = {
    "order": ("--order", DEFAULT_ORDER),
    "placement": ("--placement", DEFAULT_PLACEMENT),
    "placement_seed": ("--seed", 0),
    "routing": ("--routing", "auto"),
    "collectives": ("--collectives", "fabric"),
    "cc": ("--cc", None),
    "stack": ("--stack", DEFAULT_STACK),
    "calibration": ("--calibration", None),
}
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Layout)}


def _text(value) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def step_arguments(layout: Layout, **options) -> list[str]:
    """The ``fabricflow step`` flags that time ``layout`` with ``options`` again.

    Args:
        layout: the timed layout.
        **options: the other arguments given to :func:`step_time`: ``order``,
            ``placement`` (a name), ``placement_seed``, ``routing``, ``algorithms`` (``{dim:
            algorithm}``), ``collectives``, ``cc`` (a law's name), ``stack`` (a preset's name:
            its choices are the defaults the flags start from), ``calibration`` (the
            calibration file's path); missing ones are defaults.

    Returns:
        The flags as words (without ``fabricflow step`` and the job: fabric, model, GPU
        and GPU count).

    Raises:
        SpecError: a layout field or option the command line cannot express.
    """
    words: list[str] = []
    stack = options.get("stack")
    # the defaults the command starts from: the Layout's, with the stack's choices
    defaults = {**_DEFAULTS, **(load_stack(stack).choices if stack is not None else {})}
    for field, default in defaults.items():
        value = getattr(layout, field)
        if field in SWITCHES:
            on, off = SWITCHES[field]
            flag = on if value else off
            if value == default:
                continue
            if flag is None:
                raise SpecError(
                    f"layout.{field}",
                    f"{value!r} over a stack that sets {default!r} has no 'fabricflow step' "
                    "flag; the command cannot repeat it",
                )
            words.append(flag)
            continue
        if field not in STEP_FLAGS:
            if value != default:
                raise SpecError(
                    f"layout.{field}",
                    f"{value!r} has no 'fabricflow step' flag; the command cannot repeat it",
                )
            continue
        flag, _ = STEP_FLAGS[field]
        if field in _ALWAYS or value != default:
            words += [flag, _text(value)]
    unknown = sorted(set(options) - set(_OPTIONS) - {"algorithms"})
    if unknown:
        raise SpecError(unknown[0], f"is no option of 'fabricflow step'; one of {sorted(_OPTIONS)}")
    for name, (flag, default) in _OPTIONS.items():
        value = options.get(name)
        if value is not None and value != default:
            if not isinstance(value, (str, int)):
                raise SpecError(name, f"expected a name, got {type(value).__name__}")
            words += [flag, str(value)]
    for dim, algorithm in sorted((options.get("algorithms") or {}).items()):
        if algorithm != "auto":
            words += ["--algorithm", f"{dim}={algorithm}"]
    return words


def step_command(
    fabric: str,
    model: str,
    gpu: str,
    gpus: int,
    layout: Layout,
    fabric_flags: dict | None = None,
    **options,
) -> str:
    """``fabricflow step --fabric F --model M --gpu G --gpus N ...``, shell-quoted: the
    command that times ``layout`` with ``options`` (:func:`step_arguments`) again.
    ``fabric_flags``: the import flags that read ``fabric`` when it is a ``slurm:PATH`` or
    ``netlist:PATH`` file (``{"gpus_per_node": 8, "nic_bandwidth": "400Gbps",
    "companion": "site.yaml"}``; ``None`` values left out), each written as its flag
    after ``--fabric`` so that the command reads the same fabric."""
    words = ["fabricflow", "step", "--fabric", fabric]
    for name, value in (fabric_flags or {}).items():
        if value is not None:
            words += ["--" + name.replace("_", "-"), str(value)]
    words += ["--model", model, "--gpu", gpu]
    words += ["--gpus", str(gpus), *step_arguments(layout, **options)]
    return " ".join(shlex.quote(word) for word in words)


def describe_layout(layout: Layout) -> str:
    """The layout's part of :func:`describe_step`: the parallel label, micro-batch,
    recompute, ZeRO, sequence parallelism, then every other field away from its default
    (``TP8 CP1 PP1 DP2, mb1, recompute=none, zero1, SP``)."""
    parts = [
        layout.parallel_label(),
        f"mb{layout.micro_batch}",
        f"recompute={layout.recompute}",
        f"zero{layout.zero}",
        "SP" if layout.sequence_parallel else "no SP",
    ]
    shown = {"tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "recompute", "zero"}
    shown |= {"sequence_parallel", "global_batch", "seq_len"}
    for field, default in _DEFAULTS.items():
        value = getattr(layout, field)
        if field not in shown and value != default:
            parts.append(f"{field}={_text(value)}")
    return ", ".join(parts)


def describe_options(*, placement_too: bool = True, **options) -> str:
    """The options' part of :func:`describe_step`: rank order and placement (unless
    ``placement_too`` is False), then routing, collective backend, congestion control,
    algorithms and placement seed where not the defaults; ``''`` when nothing is left to say."""
    steps = []
    if placement_too:
        steps.append(f"order {options.get('order') or _OPTIONS['order'][1]}")
        steps.append(f"{options.get('placement') or _OPTIONS['placement'][1]} placement")
    for name in ("routing", "collectives", "cc"):
        value = options.get(name)
        if value is not None and value != _OPTIONS[name][1]:
            steps.append(f"{name} {value}")
    algorithms = {d: a for d, a in (options.get("algorithms") or {}).items() if a != "auto"}
    steps += [f"{dim} {algorithm}" for dim, algorithm in sorted(algorithms.items())]
    if options.get("placement_seed"):
        steps.append(f"placement seed {options['placement_seed']}")
    return ", ".join(steps)


def describe_step(layout: Layout, **options) -> str:
    """One line with everything that sets the step time of ``layout`` with ``options``
    (those of :func:`step_arguments`): :func:`describe_layout`, then
    :func:`describe_options` (e.g. ``TP8 CP1 PP1 DP2, mb1, recompute=none, zero1, SP;
    order tp-cp-ep-dp-pp, contiguous placement``)."""
    return describe_layout(layout) + "; " + describe_options(**options)
