"""A training layout as the command-line arguments of Megatron-LM or NeMo.

``fabricflow step --json`` holds the layout it timed under ``layout`` (with ``order``,
``placement``, ``model`` and ``num_gpus`` beside it), ``fabricflow optimize --json`` the
winner under ``best`` (with its ``order`` and ``placement``); :func:`result_arguments`
turns either into the arguments that launch the same layout:

* ``megatron``: Megatron-LM's ``pretrain_gpt.py`` flags (``--tensor-model-parallel-size``
  ...), names as in ``megatron/training/arguments.py``;
* ``nemo``: NeMo 2 recipe overrides for ``nemo llm pretrain`` / NeMo-Run
  (``trainer.strategy.tensor_model_parallel_size=2`` ...), names as in
  ``nemo/collections/llm/recipes`` and ``MegatronStrategy``.

A result file may come from anywhere (edited by hand, written by another tool), so the
layout is checked as strictly as the step model checks it: unknown keys are refused, and
the layout goes through :meth:`~fabricflow.workload.layout.Layout.validate` (integer sizes
>= 1, the product against the result's GPU count, heads, layers and batch against the
model, option names), so no arguments are printed for a layout that cannot run.

Only what the layout decides is written (parallel sizes, rank order, batch and sequence,
recompute, precision, optimizer sharding and offload, overlaps); model shape, data and
optimizer settings stay the launcher's. Knobs a framework has no flag for, and a rank
order it cannot build, are listed in ``notes`` instead of being dropped silently.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from fabricflow.errors import SpecError
from fabricflow.schema import MAX_COUNT
from fabricflow.workload.layout import Layout
from fabricflow.workload.model_spec import ModelSpec, list_models, load_model
from fabricflow.workload.placement import (
    DEFAULT_ORDER,
    PLACEMENTS,
    parse_order,
    topology_aware_order,
)

__all__ = [
    "FRAMEWORKS",
    "FRAMEWORK_ORDERS",
    "checked_layout",
    "launch_arguments",
    "layout_of",
    "result_arguments",
]

FRAMEWORKS = ("megatron", "nemo")
# The rank orders (fastest-varying first) both frameworks can build, and the argument that
# selects each: Megatron-LM's initialize_model_parallel takes ``tp-cp-ep-dp-pp``, or
# ``tp-cp-ep-pp-dp`` with --use-tp-pp-dp-mapping (NeMo: MegatronStrategy's
# use_tp_pp_dp_mapping); no other order is reachable from the command line.
FRAMEWORK_ORDERS = {
    "megatron": {DEFAULT_ORDER: None, "tp-cp-ep-pp-dp": "--use-tp-pp-dp-mapping"},
    "nemo": {
        DEFAULT_ORDER: None,
        "tp-cp-ep-pp-dp": "trainer.strategy.use_tp_pp_dp_mapping=True",
    },
}
# Keys a layout must give (the others have the step model's defaults).
REQUIRED_KEYS = ("tp", "pp", "dp", "micro_batch", "global_batch", "seq_len")
# Keys a result's layout may hold besides the Layout fields (optimize's ``best``: the
# other arguments of the step_time call that timed the winner).
PLACEMENT_KEYS = (
    "order",
    "placement",
    "placement_seed",
    "routing",
    "algorithms",
    "collectives",
)


def layout_of(result: Any) -> dict:
    """The layout dict of a ``step --json`` (``layout``) or ``optimize --json`` (``best``)
    object, or a layout itself (unchecked; :func:`result_arguments` checks it).

    Raises:
        SpecError: ``result`` is not a mapping or holds none of these.
    """
    if not isinstance(result, dict):
        raise SpecError("result", f"expected a JSON object, got {type(result).__name__}")
    for key in ("layout", "best"):
        if key in result:
            if not isinstance(result[key], dict):
                raise SpecError(
                    f"result.{key}", f"expected a JSON object, got {type(result[key]).__name__}"
                )
            return result[key]
    if {"tp", "pp", "micro_batch"} <= set(result):
        return result
    if isinstance(result.get("error"), str):  # what a failed command printed with --json
        raise SpecError(
            "result",
            f"is the error a command printed, not a result ({result['error']}: "
            f"{str(result.get('message', ''))[:300]})",
        )
    raise SpecError(
        "result",
        "holds no layout: give the object of 'fabricflow step --json' (key 'layout') or "
        "'fabricflow optimize --json' (key 'best')",
    )


def result_arguments(
    result: Any, framework: str = "megatron", *, model: str | ModelSpec | None = None
) -> tuple[list[str], list[str], dict]:
    """``(arguments, notes, launched)`` of a step or optimize result (module docs).

    The layout's ``order`` and ``placement`` come from the layout (optimize) or the result
    (step), default ``tp-cp-ep-dp-pp`` / ``contiguous``; its GPU count from the result's
    ``num_gpus`` when present. ``model`` (a preset name, a config path or a spec) checks
    heads, layers and batch; without it the result's ``model`` when that is a preset, else
    a note says what was not checked. ``launched``: the checked layout (all fields),
    ``order``, ``placement``, ``num_gpus`` and ``model``.

    Raises:
        SpecError: no layout, an unknown key, a layout that cannot run, an unknown
            framework, order or placement.
    """
    raw = layout_of(result)
    top = result if raw is not result else {}
    order = raw.get("order", top.get("order", DEFAULT_ORDER))
    placement = raw.get("placement", top.get("placement", "contiguous"))
    num_gpus = top.get("num_gpus")
    notes: list[str] = []
    if model is None:
        name = top.get("model")
        if isinstance(name, str) and name in list_models():
            model = name
        else:
            notes.append(
                f"model {name!r} is not a preset: the layout's heads, layers and batch were "
                "not checked against it (pass the model to check them)"
                if name is not None
                else "no model in the result: the layout's heads, layers and batch were not "
                "checked (pass the model to check them)"
            )
    notes += _timing_notes(raw)
    spec = load_model(model) if model is not None else None
    layout = checked_layout(
        {k: v for k, v in raw.items() if k not in PLACEMENT_KEYS}, spec, num_gpus
    )
    arguments, more = launch_arguments(
        layout, framework, order=order, placement=placement, model=spec
    )
    launched = {
        "layout": dataclasses.asdict(layout),
        "order": order,
        "placement": placement,
        "num_gpus": layout.num_gpus,
        "model": spec.name if spec is not None else None,
    }
    return arguments, notes + more, launched


def checked_layout(values: Any, model: ModelSpec | None = None, num_gpus: Any = None) -> Layout:
    """The :class:`Layout` of a layout mapping, checked as the step model checks one.

    Raises:
        SpecError: not a mapping, an unknown key (with the closest field), or a rule of
            :meth:`Layout.validate` broken (naming the field).
    """
    if not isinstance(values, dict):
        raise SpecError("layout", f"expected a JSON object, got {type(values).__name__}")
    fields = [f.name for f in dataclasses.fields(Layout)]
    for key in values:
        if key not in fields:
            raise SpecError(
                f"layout.{key}",
                f"unknown layout key {key!r}; known: {fields}",
                value=key,
                allowed=fields,
            )
    if num_gpus is not None and (
        isinstance(num_gpus, bool) or not isinstance(num_gpus, int) or num_gpus < 1
    ):
        raise SpecError("result.num_gpus", f"must be an integer >= 1, got {num_gpus!r}")
    missing = [key for key in REQUIRED_KEYS if key not in values]
    if missing:
        raise SpecError(
            "layout",
            f"lacks {missing[0]!r} (a step or optimize result's layout holds {list(REQUIRED_KEYS)})",
        )
    sizes = [values.get(key, 1) for key in ("tp", "cp", "dp", "pp")]
    if all(isinstance(n, int) and not isinstance(n, bool) for n in sizes):
        total = math.prod(sizes)
        if total > MAX_COUNT:  # the step model's int64 tables would overflow on it
            raise SpecError(
                "layout",
                f"tp x cp x dp x pp = {total:.3g} GPUs, over the limit of {MAX_COUNT:,} "
                "(GPU ids are 32-bit)",
            )
    return Layout(**values).validate(model, num_gpus)


def launch_arguments(
    layout: Layout | dict,
    framework: str = "megatron",
    *,
    order: str = DEFAULT_ORDER,
    placement: str = "contiguous",
    model: ModelSpec | None = None,
) -> tuple[list[str], list[str]]:
    """``(arguments, notes)`` that launch ``layout`` with ``framework`` (module docs).

    ``layout``: a :class:`Layout` or a layout mapping (checked by :func:`checked_layout`);
    ``order`` and ``placement`` as given to ``step_time``; ``model`` ranks the dimensions
    of ``topology-aware`` placement as the step model does.

    Raises:
        SpecError: an unknown framework, order or placement, or a layout that cannot run.
    """
    if framework not in FRAMEWORKS:
        raise SpecError(
            "framework",
            f"must be one of {list(FRAMEWORKS)}, got {framework!r}",
            value=framework,
            allowed=FRAMEWORKS,
        )
    if not isinstance(layout, Layout):
        layout = checked_layout(layout, model)
    layout.validate(model)
    if placement not in PLACEMENTS:
        raise SpecError(
            "placement",
            f"unknown placement {placement!r}; one of {list(PLACEMENTS)}",
            value=placement,
            allowed=PLACEMENTS,
        )
    if not isinstance(order, str):
        raise SpecError("order", f"must be a text such as {DEFAULT_ORDER!r}, got {order!r}")
    dims = parse_order(order)
    arguments, notes = (_megatron if framework == "megatron" else _nemo)(layout)
    if placement == "topology-aware" and dims == parse_order(DEFAULT_ORDER):
        # the placement picks the order (a step result records the one it picked; an
        # optimize result the default it was given): pick it as the step model does
        dims = topology_aware_order(layout, model)
        if model is None:
            notes.append(
                "placement topology-aware orders the dimensions by the model's bytes; "
                "without the model the ranking TP > CP > EP > DP > PP was assumed"
            )
    order_argument, order_notes = _order(layout, dims, framework)
    arguments += [order_argument] if order_argument else []
    return arguments, notes + order_notes + _placement_notes(placement)


def _active(layout: Layout, dims: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The dimensions larger than 1 of the dense grid (tp, cp, dp, pp) and of the expert
    grid (expert tp, ep, expert dp, pp), in ``dims`` order: two orders build the same
    groups exactly when these agree (a size-1 dimension takes no place)."""
    dense = {"tp": layout.tp, "cp": layout.cp, "dp": layout.dp, "pp": layout.pp}
    expert = {
        "tp": layout.expert_tensor,
        "ep": layout.ep,
        "dp": layout.expert_dp,
        "pp": layout.pp,
    }
    return (
        tuple(d for d in dims if dense.get(d, 1) > 1),
        tuple(d for d in dims if expert.get(d, 1) > 1),
    )


def _order(layout: Layout, dims: tuple[str, ...], framework: str) -> tuple[str | None, list[str]]:
    """The argument that builds rank order ``dims`` (None: the framework's default), or a
    note saying exactly which order was timed and that the framework cannot build it."""
    wanted = _active(layout, dims)
    choices = FRAMEWORK_ORDERS[framework]
    shown = "-".join(dims)
    why = ""
    for name, argument in choices.items():
        if _active(layout, parse_order(name)) != wanted:
            continue
        if name != DEFAULT_ORDER and layout.pp > 1 and layout.expert_dp != layout.dp:
            # both frameworks refuse an order not ending in pp unless the dense and expert
            # data-parallel sizes agree (Megatron-Core's parallel_state)
            why = (
                f"; it matches {name}, but with pp > 1 that order needs the expert "
                f"data-parallel size ({layout.expert_dp}) to equal dp ({layout.dp})"
            )
            continue
        return argument, []
    flag = next(a for a in choices.values() if a)
    return None, [
        f"rank order {shown} (fastest-varying first; non-trivial dimensions dense "
        f"{'-'.join(wanted[0]) or 'none'}, expert {'-'.join(wanted[1]) or 'none'}) cannot be "
        f"set: {framework} builds only {' or '.join(choices)} (the second with {flag}){why}, "
        f"so the launch runs {DEFAULT_ORDER}, not the order timed; time that with "
        f"'fabricflow step --order {DEFAULT_ORDER}'"
    ]


def _timing_notes(raw: dict) -> list[str]:
    """Notes for what an optimize winner was timed with that no launch argument sets: the
    fabric's routing and NCCL's algorithm per parallel dimension."""
    notes = []
    routing = raw.get("routing", "auto")
    if routing != "auto":
        notes.append(
            f"routing {routing!r} was timed: a setting of the fabric (switches, NICs), not "
            "of the launch (not written)"
        )
    algorithms = raw.get("algorithms")
    if algorithms:
        notes.append(
            f"collective algorithms {algorithms} were timed: pin them with NCCL_ALGO for "
            "the job (not written; NCCL picks per call otherwise)"
        )
    return notes


def _placement_notes(placement: str) -> list[str]:
    return {
        "contiguous": [],
        "scattered": [
            "placement scattered: the timed ranks sat on servers a scheduler handed out at "
            "random; nothing to set"
        ],
        "topology-aware": [
            "placement topology-aware: rank r runs on the r-th GPU in the fabric's locality "
            "order (scale-up domain, then leaf or rail group, then pod); give the launcher "
            "its hosts in that order (not written)"
        ],
        "domain-aligned": [
            "placement domain-aligned: launch on the first 64 GPUs of each scale-up domain "
            "of 64 or more GPUs, in host order (the host list is not written)"
        ],
        "deployed": [
            "placement deployed: on scale-up domains that keep spares (NVL72 racks) launch "
            "on whole trays with the spares left out and each tensor- and expert-parallel "
            "group inside one rack, in host order (the host list is not written); elsewhere "
            "it is contiguous"
        ],
    }[placement]


def _megatron(layout: Layout) -> tuple[list[str], list[str]]:
    args = [
        f"--tensor-model-parallel-size {layout.tp}",
        f"--pipeline-model-parallel-size {layout.pp}",
        f"--context-parallel-size {layout.cp}",
        f"--expert-model-parallel-size {layout.ep}",
    ]
    if _expert_tp_written(layout):
        args.append(f"--expert-tensor-parallel-size {layout.expert_tensor}")
    if layout.vpp > 1:
        args.append(f"--num-virtual-stages-per-pipeline-rank {layout.vpp}")
    if layout.sequence_parallel and layout.tp > 1:
        args.append("--sequence-parallel")
    args += [
        f"--micro-batch-size {layout.micro_batch}",
        f"--global-batch-size {layout.global_batch}",
        f"--seq-length {layout.seq_len}",
    ]
    args += _megatron_recompute(layout)
    args += {"bf16": ["--bf16"], "fp8": ["--bf16", "--fp8-format hybrid"]}[layout.precision]
    if layout.zero == 1:
        args.append("--use-distributed-optimizer")
    elif layout.zero >= 2:
        strategy = "optim_grads" if layout.zero == 2 else "optim_grads_params"
        args += ["--use-megatron-fsdp", f"--data-parallel-sharding-strategy {strategy}"]
    if layout.dp_overlap:
        args.append("--overlap-grad-reduce")
        if layout.zero >= 1:
            args.append("--overlap-param-gather")
    if layout.tp_overlap and layout.tp > 1:
        args.append("--tp-comm-overlap")
    if layout.grad_reduce_dtype == "fp32":
        args.append("--accumulate-allreduce-grads-in-fp32")
    if layout.offload_optimizer > 0:
        args += [
            "--optimizer-cpu-offload",
            f"--optimizer-offload-fraction {layout.offload_optimizer:g}",
        ]
    if layout.moe_capacity_factor > 0:
        args.append(f"--moe-expert-capacity-factor {layout.moe_capacity_factor:g}")
    if layout.fused_cross_entropy:
        args.append("--cross-entropy-loss-fusion")
    return args, _unmapped(layout)


def _expert_tp_written(layout: Layout) -> bool:
    """Whether the expert tensor-parallel size must be written: given, or (automatic)
    different from the tensor-parallel size both frameworks default it to."""
    return layout.expert_tp > 0 or (layout.ep > 1 and layout.expert_tensor != layout.tp)


def _megatron_recompute(layout: Layout) -> list[str]:
    if layout.recompute == "full":
        layers = layout.recompute_layers
        return [
            "--recompute-granularity full",
            "--recompute-method uniform" if not layers else "--recompute-method block",
            f"--recompute-num-layers {layers or 1}",
        ]
    if layout.recompute == "selective":
        modules = layout.recompute_modules
        extra = [f"--recompute-modules {' '.join(modules.split(','))}"] if modules else []
        return ["--recompute-granularity selective", *extra]
    return []


def _unmapped(layout: Layout) -> list[str]:
    notes = []
    if layout.offload_weights or layout.offload_activations:
        notes.append("weight/activation offload: set it in the launcher (no standard flag)")
    if layout.pp_split:
        notes.append(f"pipeline split {list(layout.pp_split)}: set per-stage layers by hand")
    return notes


def _nemo(layout: Layout) -> tuple[list[str], list[str]]:
    strategy = "trainer.strategy."
    vpp = layout.vpp
    args = [
        f"{strategy}tensor_model_parallel_size={layout.tp}",
        f"{strategy}pipeline_model_parallel_size={layout.pp}",
        f"{strategy}context_parallel_size={layout.cp}",
        f"{strategy}expert_model_parallel_size={layout.ep}",
        f"{strategy}virtual_pipeline_model_parallel_size={vpp if vpp > 1 else None}",
        f"{strategy}sequence_parallel={layout.sequence_parallel and layout.tp > 1}",
        f"data.micro_batch_size={layout.micro_batch}",
        f"data.global_batch_size={layout.global_batch}",
        f"data.seq_length={layout.seq_len}",
    ]
    if _expert_tp_written(layout):
        args.append(f"{strategy}expert_tensor_parallel_size={layout.expert_tensor}")
    if layout.recompute in ("full", "selective"):
        args.append(f"model.config.recompute_granularity={layout.recompute}")
        if layout.recompute == "full":
            args += [
                "model.config.recompute_method=uniform",
                f"model.config.recompute_num_layers={layout.recompute_layers or 1}",
            ]
    notes = []
    if layout.zero >= 1:
        args.append("optim.config.use_distributed_optimizer=True")
    if layout.zero >= 2:
        notes.append("ZeRO-2/3 sharding: use NeMo's FSDP strategy (not written)")
    notes += _unmapped(layout)
    return args, notes
