"""One timed step as the ``fabricflow step`` command line that times it again.

The design-review report, the layout optimizer and anything else that times a layout
with :func:`~fabricflow.workload.step.step_time` can print what it timed so that a
reader gets the same number from ``fabricflow step``: :func:`step_arguments` writes
every :class:`~fabricflow.workload.layout.Layout` field that differs from its default,
and the step options (order, placement, seed, routing, collective algorithms, collective
backend, congestion control), as that command's flags. :func:`describe_step` is the same
content as one readable line.

``STEP_FLAGS`` maps each layout field to its flag; a field without one (a new field the
command line does not take yet) is refused by :func:`step_arguments` instead of being
dropped, so a printed command never times something else silently.
"""

from __future__ import annotations

import dataclasses
import shlex

from ..errors import SpecError
from .layout import Layout

__all__ = [
    "STEP_FLAGS",
    "describe_layout",
    "describe_options",
    "describe_step",
    "step_arguments",
    "step_command",
]

# Layout field -> (flag, how the value is written). "value": ``--flag VALUE`` whenever the
# field differs from its default (the parallel sizes and the batch always); "on"/"off": a
# switch given when the field is True / False.
STEP_FLAGS: dict[str, tuple[str, str]] = {
    "tp": ("--tp", "value"),
    "pp": ("--pp", "value"),
    "dp": ("--dp", "value"),
    "cp": ("--cp", "value"),
    "ep": ("--ep", "value"),
    "vpp": ("--vpp", "value"),
    "sequence_parallel": ("--no-sequence-parallel", "off"),
    "micro_batch": ("--micro-batch", "value"),
    "global_batch": ("--global-batch", "value"),
    "seq_len": ("--seq", "value"),
    "recompute": ("--recompute", "value"),
    "precision": ("--precision", "value"),
    "zero": ("--zero", "value"),
    "dp_overlap": ("--no-dp-overlap", "off"),
    "tp_overlap": ("--no-tp-overlap", "off"),
    "pp_overlap": ("--no-pp-overlap", "off"),
    "ep_overlap": ("--ep-overlap", "on"),
    "grad_reduce_dtype": ("--grad-reduce-dtype", "value"),
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
    "cuda_graphs": ("--cuda-graphs", "on"),
    "cuda_graph_scope": ("--cuda-graph-scope", "value"),
    "fused_cross_entropy": ("--no-fused-cross-entropy", "off"),
    "tp_backward_overlap": ("--no-tp-backward-overlap", "off"),
    "grad_accum_fusion": ("--no-grad-accum-fusion", "off"),
}
# Written even when equal to the default: what a reader needs to see at once.
_ALWAYS = frozenset(
    {"tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "global_batch", "seq_len"}
    | {"recompute", "zero"}
)
# Step options -> (flag, default). Algorithms are one flag per dimension.
_OPTIONS = {
    "order": ("--order", "tp-cp-ep-dp-pp"),
    "placement": ("--placement", "contiguous"),
    "seed": ("--seed", 0),
    "routing": ("--routing", "auto"),
    "collectives": ("--collectives", "fabric"),
    "cc": ("--cc", None),
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
            ``placement`` (a name), ``seed``, ``routing``, ``algorithms`` (``{dim:
            algo}``), ``collectives``, ``cc`` (a law's name); missing ones are defaults.

    Returns:
        The flags as words (without ``fabricflow step`` and the job: fabric, model, GPU
        and GPU count).

    Raises:
        SpecError: a layout field or option the command line cannot express.
    """
    words: list[str] = []
    for field, default in _DEFAULTS.items():
        value = getattr(layout, field)
        if field not in STEP_FLAGS:
            if value != default:
                raise SpecError(
                    f"layout.{field}",
                    f"{value!r} has no 'fabricflow step' flag; the command cannot repeat it",
                )
            continue
        flag, kind = STEP_FLAGS[field]
        if kind == "on" and value:
            words.append(flag)
        elif kind == "off" and not value:
            words.append(flag)
        elif kind == "value" and (field in _ALWAYS or value != default):
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
    for dim, algo in sorted((options.get("algorithms") or {}).items()):
        if algo != "auto":
            words += ["--algo", f"{dim}={algo}"]
    return words


def step_command(fabric: str, model: str, gpu: str, gpus: int, layout: Layout, **options) -> str:
    """``fabricflow step --fabric F --model M --gpu G --gpus N ...``, shell-quoted: the
    command that times ``layout`` with ``options`` (:func:`step_arguments`) again."""
    words = ["fabricflow", "step", "--fabric", fabric, "--model", model, "--gpu", gpu]
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
    algorithms and seed where not the defaults; ``''`` when nothing is left to say."""
    steps = []
    if placement_too:
        steps.append(f"order {options.get('order') or _OPTIONS['order'][1]}")
        steps.append(f"{options.get('placement') or _OPTIONS['placement'][1]} placement")
    for name in ("routing", "collectives", "cc"):
        value = options.get(name)
        if value is not None and value != _OPTIONS[name][1]:
            steps.append(f"{name} {value}")
    algorithms = {d: a for d, a in (options.get("algorithms") or {}).items() if a != "auto"}
    steps += [f"{dim} {algo}" for dim, algo in sorted(algorithms.items())]
    if options.get("seed"):
        steps.append(f"seed {options['seed']}")
    return ", ".join(steps)


def describe_step(layout: Layout, **options) -> str:
    """One line with everything that sets the step time of ``layout`` with ``options``
    (those of :func:`step_arguments`): :func:`describe_layout`, then
    :func:`describe_options` (e.g. ``TP8 CP1 PP1 DP2, mb1, recompute=none, zero1, SP;
    order tp-cp-ep-dp-pp, contiguous placement``)."""
    return describe_layout(layout) + "; " + describe_options(**options)
