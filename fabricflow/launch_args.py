"""A training layout as the command-line arguments of Megatron-LM or NeMo.

``fabricflow step --json`` holds the layout it timed under ``layout``, ``fabricflow
optimize --json`` the winner under ``best``; :func:`launch_arguments` turns either into
the arguments that launch the same layout:

* ``megatron``: Megatron-LM's ``pretrain_gpt.py`` flags (``--tensor-model-parallel-size``
  ...), names as in ``megatron/training/arguments.py``;
* ``nemo``: NeMo 2 recipe overrides for ``nemo llm pretrain`` / NeMo-Run
  (``trainer.strategy.tensor_model_parallel_size=2`` ...), names as in
  ``nemo/collections/llm/recipes`` and ``MegatronStrategy``.

Only what the layout decides is written (parallel sizes, batch and sequence, recompute,
precision, optimizer sharding and offload, overlaps); model shape, data and optimizer
settings stay the launcher's. Knobs a framework has no flag for are listed in ``notes``
instead of being dropped silently.
"""

from __future__ import annotations

from .errors import SpecError

__all__ = ["FRAMEWORKS", "launch_arguments", "layout_of"]

FRAMEWORKS = ("megatron", "nemo")


def layout_of(result: dict) -> dict:
    """The layout dict of a ``step --json`` (``layout``) or ``optimize --json`` (``best``)
    object, or a layout itself.

    Raises:
        SpecError: ``result`` holds none of these.
    """
    if not isinstance(result, dict):
        raise SpecError("result", f"expected a JSON object, got {type(result).__name__}")
    for key in ("layout", "best"):
        if isinstance(result.get(key), dict):
            return result[key]
    if {"tp", "pp", "micro_batch"} <= set(result):
        return result
    raise SpecError(
        "result",
        "holds no layout: give the object of 'fabricflow step --json' (key 'layout') or "
        "'fabricflow optimize --json' (key 'best')",
    )


def launch_arguments(layout: dict, framework: str = "megatron") -> tuple[list[str], list[str]]:
    """``(arguments, notes)`` that launch ``layout`` with ``framework`` (module docs).

    Raises:
        SpecError: an unknown framework, or a layout without ``tp``, ``pp``, ``micro_batch``,
            ``global_batch`` or ``seq_len``.
    """
    if framework not in FRAMEWORKS:
        raise SpecError("framework", f"must be one of {list(FRAMEWORKS)}, got {framework!r}")
    missing = [k for k in ("tp", "pp", "micro_batch", "global_batch", "seq_len") if k not in layout]
    if missing:
        raise SpecError("layout", f"lacks {missing[0]!r} (a step or optimize result's layout)")
    return (_megatron if framework == "megatron" else _nemo)(layout)


def _get(layout: dict, key: str, default=None):
    value = layout.get(key, default)
    return default if value is None else value


def _megatron(layout: dict) -> tuple[list[str], list[str]]:
    args = [
        f"--tensor-model-parallel-size {layout['tp']}",
        f"--pipeline-model-parallel-size {layout['pp']}",
        f"--context-parallel-size {_get(layout, 'cp', 1)}",
        f"--expert-model-parallel-size {_get(layout, 'ep', 1)}",
    ]
    notes: list[str] = []
    if _get(layout, "expert_tp", 0):
        args.append(f"--expert-tensor-parallel-size {layout['expert_tp']}")
    if _get(layout, "vpp", 1) > 1:
        args.append(f"--num-virtual-stages-per-pipeline-rank {layout['vpp']}")
    if _get(layout, "sequence_parallel", False):
        args.append("--sequence-parallel")
    args += [
        f"--micro-batch-size {layout['micro_batch']}",
        f"--global-batch-size {layout['global_batch']}",
        f"--seq-length {layout['seq_len']}",
    ]
    args += _megatron_recompute(layout)
    precision = _get(layout, "precision", "bf16")
    args += {"bf16": ["--bf16"], "fp16": ["--fp16"], "fp8": ["--bf16", "--fp8-format hybrid"]}.get(
        precision, []
    )
    if precision not in ("bf16", "fp16", "fp8"):
        notes.append(f"precision {precision!r}: no Megatron-LM flag written")
    zero = _get(layout, "zero", 0)
    if zero == 1:
        args.append("--use-distributed-optimizer")
    elif zero >= 2:
        strategy = "optim_grads" if zero == 2 else "optim_grads_params"
        args += ["--use-megatron-fsdp", f"--data-parallel-sharding-strategy {strategy}"]
    if _get(layout, "dp_overlap", False):
        args.append("--overlap-grad-reduce")
        if zero >= 1:
            args.append("--overlap-param-gather")
    if _get(layout, "tp_overlap", False) and layout["tp"] > 1:
        args.append("--tp-comm-overlap")
    if _get(layout, "grad_reduce_dtype", "bf16") == "fp32":
        args.append("--accumulate-allreduce-grads-in-fp32")
    if _get(layout, "offload_optimizer", 0.0) > 0:
        args += [
            "--optimizer-cpu-offload",
            f"--optimizer-offload-fraction {layout['offload_optimizer']:g}",
        ]
    if _get(layout, "moe_capacity_factor", 0.0) > 0:
        args.append(f"--moe-expert-capacity-factor {layout['moe_capacity_factor']:g}")
    if _get(layout, "fused_cross_entropy", False):
        args.append("--cross-entropy-loss-fusion")
    notes += _unmapped(layout)
    return args, notes


def _megatron_recompute(layout: dict) -> list[str]:
    recompute = _get(layout, "recompute", "none")
    if recompute == "full":
        layers = _get(layout, "recompute_layers", 0)
        return [
            "--recompute-granularity full",
            "--recompute-method uniform" if not layers else "--recompute-method block",
            f"--recompute-num-layers {layers or 1}",
        ]
    if recompute == "selective":
        modules = _get(layout, "recompute_modules", "")
        extra = [f"--recompute-modules {' '.join(modules.split(','))}"] if modules else []
        return ["--recompute-granularity selective", *extra]
    return []


def _unmapped(layout: dict) -> list[str]:
    notes = []
    if _get(layout, "offload_weights", 0.0) or _get(layout, "offload_activations", 0.0):
        notes.append("weight/activation offload: set it in the launcher (no standard flag)")
    if _get(layout, "pp_split"):
        notes.append(f"pipeline split {layout['pp_split']}: set per-stage layers by hand")
    return notes


def _nemo(layout: dict) -> tuple[list[str], list[str]]:
    strategy = "trainer.strategy."
    vpp = _get(layout, "vpp", 1)
    args = [
        f"{strategy}tensor_model_parallel_size={layout['tp']}",
        f"{strategy}pipeline_model_parallel_size={layout['pp']}",
        f"{strategy}context_parallel_size={_get(layout, 'cp', 1)}",
        f"{strategy}expert_model_parallel_size={_get(layout, 'ep', 1)}",
        f"{strategy}virtual_pipeline_model_parallel_size={vpp if vpp > 1 else None}",
        f"{strategy}sequence_parallel={bool(_get(layout, 'sequence_parallel', False))}",
        f"data.micro_batch_size={layout['micro_batch']}",
        f"data.global_batch_size={layout['global_batch']}",
        f"data.seq_length={layout['seq_len']}",
    ]
    if _get(layout, "expert_tp", 0):
        args.append(f"{strategy}expert_tensor_parallel_size={layout['expert_tp']}")
    recompute = _get(layout, "recompute", "none")
    if recompute in ("full", "selective"):
        args.append(f"model.config.recompute_granularity={recompute}")
        if recompute == "full":
            args += [
                "model.config.recompute_method=uniform",
                f"model.config.recompute_num_layers={_get(layout, 'recompute_layers', 0) or 1}",
            ]
    notes = []
    if _get(layout, "zero", 0) >= 1:
        args.append("optim.config.use_distributed_optimizer=True")
    if _get(layout, "zero", 0) >= 2:
        notes.append("ZeRO-2/3 sharding: use NeMo's FSDP strategy (not written)")
    notes += _unmapped(layout)
    return args, notes
