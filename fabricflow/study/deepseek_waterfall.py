"""The DeepSeek-V3 on GB200 NVL72 optimization waterfall, step by step, against the model.

NVIDIA's Megatron-LM guide "Optimizing DeepSeek-V3 Training Performance on NVIDIA GB200
NVL72" (docs/discussions/deepseek-v3-gb200-optimization) trains DeepSeek-V3 (no MTP, 4,096
tokens, force-balanced routing) with MXFP8 on 256 GB200 GPUs, TP1 PP8 VPP4 EP32, micro-batch
1, global batch 2,048, pipeline layout ``Et|(tt|)*30L``, and publishes the TFLOP/s per GPU
after each of 13 software changes, from 494.46 to 970.01. :data:`STEPS` names each change
as the guide does and the knobs that express it here (Layout fields and stack parameters,
each change on top of the previous ones); a change with no knob of its own (``knobs``
empty) is listed with the published value and a prediction unchanged from the step before.

The memory estimate is not checked (``check_memory=False``): the guide's layout ran, and
the activation estimate with Megatron-Core's module semantics (``mlp`` recomputes only the
dense layers' MLP) exceeds the GB200's usable HBM on the baseline's second pipeline rank
(180 GiB of 177.5), a question for the memory model.

:func:`waterfall_table` times every step with :func:`fabricflow.step_time` and counts
its throughput as the published one is counted (Megatron-LM's FLOPs per step, the causal
attention core at half the ``s x s`` product:
:func:`~fabricflow.workload.flops.megatron_flops_per_step`); nothing is fitted to the
published values.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import xarray as xr

from fabricflow.fabric.spec import load_fabric
from fabricflow.plots.figures import new_figure, save_figure
from fabricflow.workload.flops import megatron_flops_per_step
from fabricflow.workload.model_spec import load_model
from fabricflow.workload.stack import load_stack
from fabricflow.workload.step import step_time

SOURCE = (
    "NVIDIA Megatron-LM, docs/discussions/deepseek-v3-gb200-optimization, "
    "section 3 (optimization history) and the reproduce guide"
)
BASE_STACK = "mcore-dsv3-gb200-baseline"
# The guide's run: layers per pipeline rank of "Et|(tt|)*30L" over PP8 x VPP4 (stage
# c * 8 + r on rank r: rank 0 holds the 1-layer first stage, rank 7 the loss-only last).
SEQ_LEN, GLOBAL_BATCH, GPUS = 4096, 2048, 256
LAYOUT = dict(
    tp=1,
    pp=8,
    vpp=4,
    ep=32,
    dp=GPUS // 8,
    micro_batch=1,
    global_batch=GLOBAL_BATCH,
    seq_len=SEQ_LEN,
    pp_split=(7, 8, 8, 8, 8, 8, 8, 6),
    moe_imbalance=1.0,
)


@dataclasses.dataclass(frozen=True)
class Step:
    """One change of the waterfall.

    Attributes:
        name: the change as the guide names it.
        published: TFLOP/s per GPU after it (the guide's table).
        layout: Layout fields it sets (on top of the previous steps').
        stack: stack parameters it sets.
        note: how it is expressed, or why it is not.
    """

    name: str
    published: float
    layout: dict = dataclasses.field(default_factory=dict)
    stack: dict = dataclasses.field(default_factory=dict)
    note: str = ""

    @property
    def modelled(self) -> bool:
        """The change has knobs of its own (the baseline is the stack itself)."""
        return bool(self.layout or self.stack) or self is STEPS[0]


STEPS = (
    Step("Baseline", 494.46, note="stack mcore-dsv3-gb200-baseline"),
    Step(
        "Fuse torch.zeros for scaling factor allocation & permute kernel optimization",
        529.55,
        stack={"mxfp8_quantize_ops": 3.0},
        note="MXFP8 tensors from one buffer, zero-fill fused (5.9 -> 3 host ops per "
        "quantization); the faster permute kernel is not modelled (no in-training time)",
    ),
    Step("Router fusion", 540.00, layout={"moe_router_fusion": True}),
    Step("Enable DeepEP", 566.07, layout={"dispatcher": "deepep"}),
    Step("Remove up_proj recompute", 610.71, layout={"recompute_modules": "mlp,moe_act"}),
    Step(
        "CUDA Graphs",
        663.27,
        layout={"cuda_graph_scope": "attn,moe_router,moe_preprocess"},
        note="the router graph also captures the shared experts here (the guide's step 10)",
    ),
    Step("Tune DeepEP", 691.49, note="no published rates of the tuned DeepEP"),
    Step(
        "CPU-side optimization (NUMA binding)",
        762.12,
        layout={"cpu_binding": True},
        note="no published host time per op without binding: unbound_host_factor = 1",
    ),
    Step(
        "PDL for quantization kernels & fuse MXFP8 swizzle scaling factor",
        797.67,
        stack={"mxfp8_quantize_ops": 2.0},
        note="one swizzle kernel for all inputs (3 -> 2 host ops per quantization); PDL "
        "not modelled",
    ),
    Step("CUDA Graphs capture shared expert", 829.93, note="modelled with step 6"),
    Step("HybridEP", 943.56, layout={"dispatcher": "hybridep"}),
    Step("CPU-side optimization", 956.21, note="unnamed host-code changes"),
    Step(
        "Fuse quantization to normalization (cuDNN 9.14)",
        970.01,
        layout={"fp8_norm_fusion": True},
    ),
)
# --fast: the baseline, DeepEP and HybridEP (three step evaluations).
FAST = ("Baseline", "Enable DeepEP", "HybridEP")


def step_settings(steps=STEPS) -> list[tuple[Step, dict, dict]]:
    """(step, Layout fields, stack overrides) in force after each step (cumulative)."""
    layout: dict = {}
    stack: dict = {}
    out = []
    for step in steps:
        layout = layout | step.layout
        stack = stack | step.stack
        out.append((step, dict(layout), dict(stack)))
    return out


def waterfall_table(names: tuple[str, ...] | None = None) -> list[dict]:
    """One row per step (all of :data:`STEPS`, or those named): published and predicted
    TFLOP/s per GPU, the signed error, and the step time's breakdown (seconds)."""
    model = load_model("deepseek-v3", num_nextn_predict_layers=0)
    fabric = load_fabric("gb200-nvl72-superpod")
    flops = megatron_flops_per_step(model, SEQ_LEN, GLOBAL_BATCH)
    rows = []
    for step, layout, overrides in step_settings():
        if names is not None and step.name not in names:
            continue
        stack = load_stack(BASE_STACK, **overrides)
        result = step_time(
            model,
            "gb200",
            stack.layout_for(**(LAYOUT | layout)),
            fabric,
            placement="domain-aligned",
            stack=stack,
            # the run ran: its memory is the memory model's question, not this study's
            check_memory=False,
        )
        predicted = flops / result.step_time_s / GPUS / 1e12
        rows.append(
            {
                "step": step.name,
                "published": step.published,
                "predicted": predicted,
                "error": predicted / step.published - 1.0,
                "modelled": step.modelled,
                "note": step.note,
                "breakdown": dict(result.breakdown),
                "host_wait_s": result.details["host_wait_s"],
            }
        )
    return rows


def summary(rows: list[dict]) -> dict:
    """Errors of every step and whether each change's sign is right (published and
    predicted changes from the previous row; a change the model leaves at 0 is counted
    wrong)."""
    published = np.array([r["published"] for r in rows])
    predicted = np.array([r["predicted"] for r in rows])
    errors = predicted / published - 1.0
    signs = [
        bool(np.sign(predicted[i] - predicted[i - 1]) == np.sign(published[i] - published[i - 1]))
        for i in range(1, len(rows))
    ]
    return {
        "steps": len(rows),
        "max_abs_error": float(np.max(np.abs(errors))),
        "within_10pct": int(np.sum(np.abs(errors) <= 0.10)),
        "signs_right": int(sum(signs)),
        "changes": len(signs),
        "errors": {r["step"]: round(float(e), 4) for r, e in zip(rows, errors, strict=True)},
    }


def waterfall_dataset(rows: list[dict]) -> xr.Dataset:
    """The rows as an xarray Dataset over ``step`` (TFLOP/s per GPU, error, breakdown)."""
    parts = list(rows[0]["breakdown"])
    return xr.Dataset(
        {
            "published": ("step", [r["published"] for r in rows]),
            "predicted": ("step", [r["predicted"] for r in rows]),
            "error": ("step", [r["error"] for r in rows]),
            "modelled": ("step", [r["modelled"] for r in rows]),
            "host_wait_s": ("step", [r["host_wait_s"] for r in rows]),
            "breakdown": (
                ("step", "part"),
                [[r["breakdown"][p] for p in parts] for r in rows],
            ),
        },
        coords={"step": [r["step"] for r in rows], "part": parts},
        attrs={"source": SOURCE, "units": "TFLOP/s per GPU (model FLOPs); seconds"},
    )


def plot_waterfall(data: xr.Dataset, path, thumbnail: bool = False) -> None:
    """Published and predicted TFLOP/s per GPU after each step (bars: published; dots:
    predicted, hollow where the change has no knob of its own)."""
    fig = new_figure(figsize=(4, 3) if thumbnail else (9, 4.5))
    ax = fig.add_subplot()
    x = np.arange(data.sizes["step"])
    ax.bar(x, data["published"].values, color="#c8d6e5", label="published")
    modelled = data["modelled"].values.astype(bool)
    ax.plot(x, data["predicted"].values, color="#222f3e", lw=1)
    ax.scatter(x[modelled], data["predicted"].values[modelled], color="#222f3e", zorder=3)
    ax.scatter(
        x[~modelled],
        data["predicted"].values[~modelled],
        facecolor="white",
        edgecolor="#222f3e",
        zorder=3,
        label="predicted (no knob)",
    )
    ax.set_ylabel("TFLOP/s per GPU")
    if not thumbnail:
        ax.set_xticks(x)
        ax.set_xticklabels([f"{i + 1}" for i in x])
        ax.set_xlabel("step of the waterfall (docs: the table names each)")
        ax.legend(loc="upper left")
        ax.set_title("DeepSeek-V3, 256 GB200, MXFP8: published vs predicted")
    save_figure(fig, path)


__all__ = [
    "FAST",
    "LAYOUT",
    "STEPS",
    "Step",
    "plot_waterfall",
    "step_settings",
    "summary",
    "waterfall_dataset",
    "waterfall_table",
]
