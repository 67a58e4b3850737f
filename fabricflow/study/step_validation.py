"""Published end-to-end training runs and the step model's prediction of each.

Two sets, each row a run that really ran with its published layout and throughput:

* ``a100``: Megatron-LM on Selene (A100 80GB, 8 x HDR 200G per node): the ten rows of
  Narayanan et al., SC 2021, Table 1 (full recompute, fp16, eager attention; micro-batch
  sizes and interleaving of ``examples/sc21/run_table_1.sh``) and the four models of
  Korthikanti et al., MLSys 2023, Tables 3 and 5, with full recompute and with sequence
  parallelism + selective recompute ("present work").
* ``modern``: NVIDIA's Megatron-Bridge performance summary of the 25.11 NeMo container
  (DGX-H100, DGX-B200, DGX-GB200; BF16, FP8 current scaling, MXFP8; Llama 3 8B / 70B /
  405B, DeepSeek-V3, Qwen3 30B-A3B / 235B-A22B, GPT-OSS 120B; MoE rows force-balance the
  routing and drop no token), the 25.09 container's DeepSeek-V3 on 1,024 H100, the Llama 3
  paper's 405B runs on 8,192 and 16,384 H100 (Table 4), and DeepSeek-V3 on 2,048 H800 (its
  technical report).

Layout fields not published are the recipes' (the performance recipes of
``scripts/performance`` of the Megatron-Bridge repository at that release): sequence
parallelism and tensor-parallel communication overlap wherever ``tp > 1``, the distributed
optimizer (ZeRO-1) with overlapped gradient reduction, the recomputation each recipe sets.
Measured step seconds are ``global batch x sequence / (tokens per second per GPU x GPUs)``.

:func:`validation_table` predicts every row (``fabricflow.step_time`` on the named fabric
preset) and reports the signed error of the step time and whether the layout was refused.
Nothing here is fitted: the table finds which mechanism is wrong.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import xarray as xr

from ..errors import FabricflowError
from ..workload.compute import BREAKDOWN_KEYS

NEMO_2511 = (
    "NVIDIA Megatron-Bridge performance summary, 25.11 NeMo container "
    "(docs/performance-summary.md of NVIDIA-NeMo/Megatron-Bridge)"
)
NEMO_2509 = "NVIDIA Megatron-Bridge performance summary, 25.09 NeMo container"
SC21 = "Narayanan et al., SC 2021, Table 1 (Megatron-LM examples/sc21/run_table_1.sh)"
KORTHIKANTI = "Korthikanti et al., Reducing Activation Recomputation, MLSys 2023, Tables 3 and 5"
LLAMA3 = "Llama Team, The Llama 3 Herd of Models, arXiv 2407.21783, Table 4"
DEEPSEEK = "DeepSeek-AI, DeepSeek-V3 Technical Report, arXiv 2412.19437, sections 3.1-3.3"


@dataclasses.dataclass(frozen=True)
class PublishedRun:
    """One published training run.

    Attributes:
        name: short label.
        era: ``a100`` or ``modern``.
        system: the machine as published (``DGX-H100``, ...).
        fabric, fabric_overrides: the fabric preset standing for it (and its overrides).
        gpu: GPU preset.
        model, model_overrides: model preset and config.json overrides.
        gpus: GPUs of the job.
        layout: :class:`~fabricflow.workload.layout.Layout` fields (``dp`` is derived).
        measured_step_s: the published step time, seconds.
        source: where the numbers come from.
        notes: what of the run the layout encodes beyond the published columns.
        placement: rank placement on the fabric (``domain-aligned`` on NVL72 racks: 64 GPUs
            of each rack run the job, 8 are spares).
    """

    name: str
    era: str
    system: str
    fabric: str
    gpu: str
    model: str
    gpus: int
    layout: dict
    measured_step_s: float
    source: str
    notes: str = ""
    placement: str = "contiguous"
    fabric_overrides: dict = dataclasses.field(default_factory=dict)
    model_overrides: dict = dataclasses.field(default_factory=dict)

    @property
    def moe(self) -> bool:
        return (
            self.layout.get("ep", 1) > 1
            or "deepseek" in self.model
            or "qwen3" in self.model
            or "gpt-oss" in self.model
        )


def _step(global_batch: int, seq: int, tokens_per_s_gpu: float, gpus: int) -> float:
    return global_batch * seq / (tokens_per_s_gpu * gpus)


def _modern(
    name,
    system,
    fabric,
    gpu,
    model,
    gpus,
    tokens,
    source=NEMO_2511,
    notes="",
    model_overrides=None,
    **layout,
):
    tp = layout.get("tp", 1)
    layout.setdefault("sequence_parallel", tp > 1)
    layout.setdefault("tp_overlap", tp > 1)
    layout.setdefault("grad_reduce_dtype", "bf16")  # every recipe: grad_reduce_in_fp32 = False
    return PublishedRun(
        name=name,
        era="modern",
        system=system,
        fabric=fabric,
        gpu=gpu,
        model=model,
        gpus=gpus,
        layout=layout,
        measured_step_s=_step(layout["global_batch"], layout["seq_len"], tokens, gpus),
        source=source,
        notes=notes,
        model_overrides=model_overrides or {},
        placement="domain-aligned" if "nvl72" in fabric else "contiguous",
    )


H100 = ("DGX-H100", "dgx-h100-superpod", "h100-sxm")
B200 = ("DGX-B200", "dgx-b200-superpod", "b200")
GB200 = ("DGX-GB200", "gb200-nvl72-superpod", "gb200")
FORCED = dict(moe_imbalance=1.0)  # the benchmarks force-balance routing, dropless

MODERN_RUNS = (
    _modern(
        "llama3-8b h100 fp8",
        *H100,
        "llama3-8b",
        8,
        14451,
        global_batch=128,
        micro_batch=1,
        seq_len=8192,
        precision="fp8",
        recompute="full",
        recompute_layers=5,
        zero=3,
        notes="Megatron FSDP (the table's FSDP column); recipe: 5 layers fully recomputed",
    ),
    _modern(
        "llama3-70b h100 fp8",
        *H100,
        "llama3-70b",
        64,
        1602,
        tp=4,
        pp=8,
        vpp=5,
        global_batch=128,
        micro_batch=1,
        seq_len=8192,
        precision="fp8",
    ),
    _modern(
        "llama3-405b h100 fp8",
        *H100,
        "llama3-405b",
        1024,
        292,
        tp=8,
        pp=8,
        cp=2,
        vpp=8,
        global_batch=512,
        micro_batch=1,
        seq_len=8192,
        precision="fp8",
    ),
    _modern(
        "gpt-oss-120b h100 bf16",
        *H100,
        "gpt-oss-120b",
        64,
        5630,
        pp=4,
        ep=8,
        global_batch=512,
        micro_batch=1,
        seq_len=4096,
        recompute="selective",
        recompute_modules="layernorm,moe_act",
        notes="micro-batch 1: the release's config for DGX-H100 (Megatron-Bridge "
        "scripts/performance/configs/gpt_oss, GPT_OSS_120B_H100_BF16_BASE_CONFIG); the "
        "table's MBS 4 and GA 2 do not multiply to its GBS 512 on 16 data-parallel ranks",
        **FORCED,
    ),
    _modern(
        "qwen3-30b h100 fp8",
        *H100,
        "qwen3-30b-a3b",
        16,
        5275,
        pp=2,
        vpp=24,
        ep=8,
        global_batch=512,
        micro_batch=2,
        seq_len=4096,
        precision="fp8",
        **FORCED,
        ep_overlap=True,
    ),
    _modern(
        "qwen3-235b h100 fp8",
        *H100,
        "qwen3-235b-a22b",
        256,
        1575,
        tp=2,
        pp=8,
        vpp=4,
        ep=32,
        expert_tp=1,
        global_batch=2048,
        micro_batch=1,
        seq_len=4096,
        precision="fp8",
        ep_overlap=True,
        **FORCED,
    ),
    _modern(
        "deepseek-v3 h100 fp8",
        *H100,
        "deepseek-v3",
        1024,
        1297,
        source=NEMO_2509,
        tp=2,
        pp=8,
        vpp=4,
        ep=64,
        expert_tp=1,
        global_batch=8192,
        micro_batch=1,
        seq_len=4096,
        precision="fp8",
        recompute="selective",
        recompute_modules="mla_up_proj,mlp",
        ep_overlap=True,
        notes="25.09 table: dropless; recipe: DeepEP, a2a overlap",
        model_overrides={"num_nextn_predict_layers": 0},
        **FORCED,
    ),
    _modern(
        "llama3-8b b200 fp8",
        *B200,
        "llama3-8b",
        8,
        30624,
        global_batch=128,
        micro_batch=2,
        seq_len=8192,
        precision="fp8",
        cuda_graphs=True,
    ),
    _modern(
        "llama3-405b b200 fp8",
        *B200,
        "llama3-405b",
        128,
        661,
        tp=4,
        pp=8,
        cp=2,
        vpp=8,
        global_batch=64,
        micro_batch=1,
        seq_len=8192,
        precision="fp8",
    ),
    _modern(
        "deepseek-v3 b200 fp8",
        *B200,
        "deepseek-v3",
        256,
        2139,
        pp=16,
        ep=8,
        global_batch=2048,
        micro_batch=1,
        seq_len=4096,
        precision="fp8",
        recompute="selective",
        recompute_modules="mla_up_proj",
        notes="MXFP8 (timed as fp8), with MTP",
        **FORCED,
    ),
    _modern(
        "gpt-oss-120b b200 bf16",
        *B200,
        "gpt-oss-120b",
        64,
        8213,
        ep=8,
        global_batch=512,
        micro_batch=4,
        seq_len=4096,
        recompute="selective",
        recompute_modules="layernorm,moe_act",
        **FORCED,
    ),
    _modern(
        "qwen3-30b b200 fp8",
        *B200,
        "qwen3-30b-a3b",
        8,
        9299,
        ep=8,
        global_batch=512,
        micro_batch=1,
        seq_len=4096,
        precision="fp8",
        notes="MXFP8 (timed as fp8)",
        **FORCED,
        cuda_graph_scope="moe_router,moe_preprocess",
    ),
    _modern(
        "qwen3-235b b200 fp8",
        *B200,
        "qwen3-235b-a22b",
        64,
        3269,
        pp=8,
        vpp=2,
        ep=8,
        global_batch=1024,
        micro_batch=1,
        seq_len=4096,
        precision="fp8",
        notes="MXFP8 (timed as fp8)",
        **FORCED,
        ep_overlap=True,
    ),
    _modern(
        "llama3-8b gb200 fp8",
        *GB200,
        "llama3-8b",
        8,
        31508,
        global_batch=128,
        micro_batch=2,
        seq_len=8192,
        precision="fp8",
        cuda_graphs=True,
    ),
    _modern(
        "llama3-70b gb200 fp8",
        *GB200,
        "llama3-70b",
        64,
        4312,
        global_batch=256,
        micro_batch=2,
        seq_len=8192,
        precision="fp8",
        zero=3,
        offload_activations=0.5,
        notes="Megatron FSDP, activations of 40 of 80 layers offloaded to the Grace CPU",
    ),
    _modern(
        "llama3-405b gb200 fp8",
        *GB200,
        "llama3-405b",
        256,
        813,
        tp=4,
        pp=16,
        vpp=4,
        global_batch=1536,
        micro_batch=1,
        seq_len=8192,
        precision="fp8",
    ),
    _modern(
        "deepseek-v3 gb200 bf16",
        *GB200,
        "deepseek-v3",
        256,
        3139,
        pp=4,
        vpp=4,
        ep=64,
        global_batch=4096,
        micro_batch=1,
        seq_len=4096,
        recompute="selective",
        recompute_modules="mla_up_proj",
        model_overrides={"num_nextn_predict_layers": 0},
        notes="without MTP",
        **FORCED,
        cuda_graph_scope="moe_router,moe_preprocess",
    ),
    _modern(
        "deepseek-v3 gb200 fp8",
        *GB200,
        "deepseek-v3",
        256,
        4018,
        pp=8,
        vpp=4,
        ep=32,
        global_batch=4096,
        micro_batch=1,
        seq_len=4096,
        precision="fp8",
        recompute="selective",
        recompute_modules="mla_up_proj",
        model_overrides={"num_nextn_predict_layers": 0},
        notes="MXFP8 (timed as fp8), without MTP",
        **FORCED,
        cuda_graph_scope="moe_router,moe_preprocess",
    ),
    _modern(
        "gpt-oss-120b gb200 bf16",
        *GB200,
        "gpt-oss-120b",
        64,
        15876,
        ep=64,
        global_batch=1280,
        micro_batch=1,
        seq_len=8192,
        recompute="selective",
        recompute_modules="layernorm,moe_act",
        **FORCED,
    ),
    _modern(
        "qwen3-30b gb200 fp8",
        *GB200,
        "qwen3-30b-a3b",
        8,
        23766,
        ep=8,
        global_batch=512,
        micro_batch=4,
        seq_len=4096,
        precision="fp8",
        notes="MXFP8 (timed as fp8)",
        **FORCED,
        cuda_graph_scope="moe_router,moe_preprocess",
    ),
    _modern(
        "qwen3-235b gb200 bf16",
        *GB200,
        "qwen3-235b-a22b",
        256,
        4916,
        pp=8,
        vpp=3,
        ep=32,
        global_batch=8192,
        micro_batch=1,
        seq_len=4096,
        **FORCED,
        cuda_graph_scope="attn,moe_router,moe_preprocess",
    ),
)


# What the Megatron-LM of each paper ran (its defaults then; docs/step-validation.md): no
# sequence parallelism, no userbuffers TP overlap, blocking pipeline send/receive and the
# fp32 vocab-parallel loss in both. The 2022 code issued its backward TP collectives
# asynchronously, but Korthikanti et al.'s Table 4 times the 22B layer's backward at 11.9
# ms, its kernels plus both all-reduces (11.8 ms with sequence parallelism): they did not
# hide, so both sets keep them waiting. The code of examples/sc21 (2021-08) also predates
# the fused gradient accumulation (2022-02).
MEGATRON_2022 = dict(
    sequence_parallel=False,
    tp_overlap=False,
    pp_overlap=False,
    fused_cross_entropy=False,
    tp_backward_overlap=False,
    grad_accum_fusion=True,
)
SC21_STACK = MEGATRON_2022 | dict(grad_accum_fusion=False)


def _a100(
    name,
    model,
    tp,
    pp,
    gpus,
    micro,
    batch,
    vpp,
    overlap,
    tflops,
    hardware_flops,
    source=SC21,
    **layout,
):
    """A Megatron SC21-era row; ``tflops`` is the published achieved TFLOP/s per GPU over
    ``hardware_flops`` per step (what the paper counts), giving the step time."""
    return PublishedRun(
        name=name,
        era="a100",
        system="DGX-A100 (Selene)",
        fabric="dgx-a100-superpod",
        gpu="a100-80gb",
        model=model,
        gpus=gpus,
        layout=dict(
            tp=tp,
            pp=pp,
            vpp=vpp,
            micro_batch=micro,
            global_batch=batch,
            seq_len=2048,
            zero=0,
            grad_reduce_dtype="bf16",
            dp_overlap=overlap,
            **(SC21_STACK | layout),
        ),
        measured_step_s=hardware_flops / (tflops * 1e12 * gpus),
        source=source,
    )


def _megatron_flops(h, layers, batch, seq=2048, vocab=51200, recompute=True) -> float:
    """FLOPs per step as Megatron counts them (Narayanan et al. eq. 3; 72 without recompute)."""
    factor, last = (96.0, 16.0) if recompute else (72.0, 12.0)
    return factor * batch * seq * layers * h * h * (1 + seq / (6 * h) + vocab / (last * layers * h))


# SC21 Table 1: name, preset, hidden, layers, tp, pp, gpus, micro-batch, batch, vpp, DDP overlapped, TFLOP/s
_SC21 = (
    ("1.7b", "megatron-1.7b", 2304, 24, 1, 1, 32, 16, 512, 1, True, 137.0),
    ("3.6b", "megatron-3.6b", 3072, 30, 2, 1, 64, 16, 512, 1, True, 138.0),
    ("7.5b", "megatron-7.5b", 4096, 36, 4, 1, 128, 16, 512, 1, True, 142.0),
    ("18.4b", "megatron-18.4b", 6144, 40, 8, 1, 256, 8, 1024, 1, True, 135.0),
    ("39.1b", "megatron-39.1b", 8192, 48, 8, 2, 512, 4, 1536, 1, False, 138.0),
    ("76.1b", "megatron-76.1b", 10240, 60, 8, 4, 1024, 2, 1792, 3, False, 140.0),
    ("145.6b", "megatron-145.6b", 12288, 80, 8, 8, 1536, 2, 2304, 2, False, 148.0),
    ("310.1b", "megatron-310.1b", 16384, 96, 8, 16, 1920, 1, 2160, 2, False, 155.0),
    ("529.6b", "megatron-529.6b", 20480, 105, 8, 35, 2520, 1, 2520, 3, False, 163.0),
    ("1008b", "megatron-1t", 25600, 128, 8, 64, 3072, 1, 3072, 1, False, 163.0),
)

A100_RUNS = tuple(
    _a100(
        f"sc21 {n}",
        preset,
        tp,
        pp,
        g,
        mb,
        b,
        v,
        ov,
        tf,
        _megatron_flops(h, layers, b),
        recompute="full",
    )
    for n, preset, h, layers, tp, pp, g, mb, b, v, ov, tf in _SC21
) + tuple(
    PublishedRun(
        name=f"korthikanti {n} {kind}",
        era="a100",
        system="DGX-A100 (Selene)",
        fabric="dgx-a100-superpod",
        gpu="a100-80gb",
        model="megatron-18.4b",
        model_overrides={"n_embd": h, "n_head": a, "n_layer": layers, "n_inner": 4 * h},
        gpus=g,
        layout=dict(
            tp=8,
            pp=pp,
            micro_batch=1 if n != "22b" else 4,
            global_batch=b,
            seq_len=2048,
            zero=0,
            grad_reduce_dtype="bf16",
            dp_overlap=False,
            **(MEGATRON_2022 | kw),
        ),
        measured_step_s=t,
        source=KORTHIKANTI,
        notes="iteration time as published",
    )
    for n, h, a, layers, pp, g, b, full_s, present_s in (
        ("22b", 6144, 64, 48, 1, 8, 4, 1.42, 1.10),
        ("175b", 12288, 96, 96, 8, 64, 64, 18.13, 13.75),
        ("530b", 20480, 128, 105, 35, 280, 280, 49.05, 37.83),
        ("1t", 25600, 160, 128, 64, 512, 512, 94.42, 71.49),
    )
    for kind, t, kw in (
        ("full", full_s, {"recompute": "full"}),
        ("selective+sp", present_s, {"recompute": "selective", "sequence_parallel": True}),
    )
)

PUBLISHED_RUNS = A100_RUNS + MODERN_RUNS


def predict(run: PublishedRun, **step_kwargs) -> dict:
    """The step model's prediction of ``run``: ``predicted_step_s``, ``error`` (predicted /
    measured - 1), the breakdown, memory, and ``refused`` (the layout was refused, with the
    reason)."""
    from ..fabric.spec import load_fabric
    from ..workload.layout import Layout
    from ..workload.model import load_model
    from ..workload.step import step_time

    kwargs = dict(run.layout)
    tp, pp, cp = kwargs.get("tp", 1), kwargs.get("pp", 1), kwargs.get("cp", 1)
    kwargs["dp"] = run.gpus // (tp * pp * cp)
    layout = Layout(**kwargs)
    fabric = load_fabric(run.fabric, **run.fabric_overrides)
    model = load_model(run.model, **run.model_overrides)
    out = {
        "name": run.name,
        "era": run.era,
        "system": run.system,
        "moe": run.moe,
        "measured_step_s": run.measured_step_s,
    }
    try:
        result = step_time(
            model, run.gpu, layout, fabric, **({"placement": run.placement} | step_kwargs)
        )
    except FabricflowError as error:
        return out | {"refused": str(error), "predicted_step_s": math.nan, "error": math.nan}
    return out | {
        "refused": "",
        "predicted_step_s": result.step_time_s,
        "error": result.step_time_s / run.measured_step_s - 1.0,
        "breakdown": dict(result.breakdown),
        "memory_gib": result.memory_gib_per_gpu,
        "margin_gib": result.details["memory"]["margin_gib"],
        "overlap": result.details["overlap"],
    }


def validation_table(runs=PUBLISHED_RUNS, **step_kwargs) -> list[dict]:
    """:func:`predict` for every run."""
    return [predict(run, **step_kwargs) for run in runs]


def summary(rows: list[dict]) -> dict:
    """MAPE of the step time (over the rows that ran) and the refused share, by era, by
    system and dense/MoE (groups without a row are left out)."""
    out: dict = {}

    def stats(selected):
        ran = [r for r in selected if not r["refused"]]
        mape = sum(abs(r["error"]) for r in ran) / len(ran) if ran else math.nan
        signed = sum(r["error"] for r in ran) / len(ran) if ran else math.nan
        return {
            "cases": len(selected),
            "ran": len(ran),
            "mape": mape,
            "signed": signed,
            "refused": 1 - len(ran) / max(len(selected), 1),
        }

    for era in ("a100", "modern"):
        mine = [r for r in rows if r["era"] == era]
        groups = {era: mine}
        for system in sorted({r["system"] for r in mine}):
            groups[f"{era} {system}"] = [r for r in mine if r["system"] == system]
        for kind, flag in (("dense", False), ("moe", True)):
            groups[f"{era} {kind}"] = [r for r in mine if r["moe"] == flag]
        out.update({name: stats(chosen) for name, chosen in groups.items() if chosen})
    return out


def validation_dataset(rows: list[dict]) -> xr.Dataset:
    """The rows of :func:`validation_table` as an :class:`xarray.Dataset` over ``run``:
    ``measured_step_s``, ``predicted_step_s`` (NaN when refused), ``error``, ``refused``
    and ``breakdown_s`` (``run`` x ``part``), with ``era``, ``system`` and ``moe`` as
    coordinates; :func:`summary` in the attributes as JSON."""
    parts = list(BREAKDOWN_KEYS)
    breakdown = np.array(
        [[r.get("breakdown", {}).get(part, np.nan) for part in parts] for r in rows], dtype=float
    )
    data = xr.Dataset(
        {
            "measured_step_s": ("run", [r["measured_step_s"] for r in rows]),
            "predicted_step_s": ("run", [r["predicted_step_s"] for r in rows]),
            "error": ("run", [r["error"] for r in rows]),
            "refused": ("run", [bool(r["refused"]) for r in rows]),
            "breakdown_s": (("run", "part"), breakdown),
        },
        coords={
            "run": [r["name"] for r in rows],
            "part": parts,
            "era": ("run", [r["era"] for r in rows]),
            "system": ("run", [r["system"] for r in rows]),
            "moe": ("run", [bool(r["moe"]) for r in rows]),
        },
    )
    data.attrs["summary"] = json.dumps(summary(rows))
    data.attrs["refusals"] = json.dumps({r["name"]: r["refused"] for r in rows if r["refused"]})
    return data


__all__ = [
    "A100_RUNS",
    "MODERN_RUNS",
    "PUBLISHED_RUNS",
    "PublishedRun",
    "predict",
    "summary",
    "validation_dataset",
    "validation_table",
]
