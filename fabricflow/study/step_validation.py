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

from fabricflow.errors import FabricflowError
from fabricflow.fabric.spec import load_fabric
from fabricflow.workload.compute import BREAKDOWN_KEYS
from fabricflow.workload.gpu_memory import GIB, memory_per_gpu
from fabricflow.workload.model_spec import load_model
from fabricflow.workload.stack import list_stacks, load_stack
from fabricflow.workload.step import step_time

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
        placement: rank placement on the fabric: the step model's default ``deployed``
            (on NVL72 racks 64 GPUs of each rack run the job, 8 are spares, and no TP / EP
            group straddles two racks).
        stack: the software release that ran it (``nemo-25.11``, ``megatron-2021``, ...):
            the ``--stack`` preset it runs on (every release but Meta's, which names no
            software choice and runs on the default stack).
        published_precision: the precision as published: ``bf16``, ``fp8-cs`` (FP8
            per-tensor current scaling), ``mxfp8`` (32-element blocks), ``fp8-block``
            (128 x 128 weight / 1 x 128 activation blocks) or ``fp8`` (scaling not named:
            the release stack's default); the layout runs ``precision="fp8"`` with the
            matching ``fp8_recipe`` (:data:`FP8_RECIPE`).
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
    placement: str = "deployed"
    stack: str = ""
    published_precision: str = ""
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


# published precision -> the layout's precision and FP8 scaling recipe
PRECISION = {"bf16": "bf16", "fp8-cs": "fp8", "mxfp8": "fp8", "fp8-block": "fp8", "fp8": "fp8"}
# The FP8 scaling recipe a published precision names; "fp8" (a table that names FP8
# without its scaling) runs the recipe of its release's stack: delayed scaling in NeMo
# 24.07 and 25.02, whose performance scripts default to it.
FP8_RECIPE = {
    "fp8-cs": "tensorwise",
    "mxfp8": "mxfp8",
    "fp8-block": "blockwise",
}


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
    stack="nemo-25.11",
    published_precision="",
    **layout,
):
    tp = layout.get("tp", 1)
    fp8 = layout.get("precision", "bf16") == "fp8"
    if not published_precision:
        published_precision = ("mxfp8" if "MXFP8" in notes else "fp8-cs") if fp8 else "bf16"
    if fp8 and published_precision in FP8_RECIPE:  # the FP8 scaling recipe the row ran
        layout.setdefault("fp8_recipe", FP8_RECIPE[published_precision])
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
        stack=stack,
        published_precision=published_precision,
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
        stack="nemo-25.09",
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
        dispatcher="deepep",
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
        notes="MXFP8, with MTP",
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
        notes="MXFP8",
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
        notes="MXFP8",
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
        dispatcher="hybridep",
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
        notes="MXFP8, without MTP",
        **FORCED,
        cuda_graph_scope="moe_router,moe_preprocess",
        dispatcher="hybridep",
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
        notes="MXFP8",
        **FORCED,
        cuda_graph_scope="moe_router,moe_preprocess",
        dispatcher="hybridep",
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
        dispatcher="hybridep",
    ),
)


ARCHIVE = (
    "https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/main/docs/performance-summary-archive.md"
)
SUMMARY = "https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/main/docs/performance-summary.md"
# the NeMo releases before Megatron-Bridge published their tables in NeMo itself
NEMO_DOCS = {
    "24.07": "https://github.com/NVIDIA/NeMo/blob/8e3d65dcfe/docs/source/performance/"
    "performance_summary.md (NeMo 24.07 container, DGX-H100, FP8)",
    "25.02": "https://docs.nvidia.com/nemo-framework/user-guide/latest/performance/"
    "performance_summary.html (NeMo 25.02 container, DGX-B200, FP8)",
    "25.04": "https://docs.nvidia.com/nemo-framework/user-guide/latest/performance/archive/"
    "25.04-performance-summary.html (NeMo 25.04 container, DGX-GB200, FP8 current scaling)",
    "25.07": "https://docs.nvidia.com/nemo-framework/user-guide/latest/performance/"
    "performance-summary.html (NeMo 25.07 container, DGX-GB200)",
}
SYSTEMS = {"h100": H100, "b200": B200, "gb200": GB200}
MODELS = {
    "8b": "llama3-8b",
    "70b": "llama3-70b",
    "405b": "llama3-405b",
    "dsv3": "deepseek-v3",
    "oss": "gpt-oss-120b",
    "q30": "qwen3-30b-a3b",
    "q235": "qwen3-235b-a22b",
    "gpt175": "gpt3-175b",
    "mx7": "mixtral-8x7b",
}


# The Megatron-Bridge performance recipes of each release from 26.02 on (tags v0.3.0 /
# v0.3.1 for 26.02 / 26.02.01, v0.4.0 / v0.4.1 for 26.04 / 26.04.01, v0.5.0 and the r0.5.0
# branch for 26.06 / 26.06.01, v0.6.0 for 26.08: scripts/performance/configs/<model>/
# *_workload_base_configs.py and *_llm_pretrain.py, from 0.6.0 src/megatron/bridge/
# perf_recipes/<model>/<system>/): the MoE settings they set per model and system, by
# Megatron-Bridge minor release. ``graphs``: ``full`` = Megatron's full-iteration CUDA graph
# (dropless shapes padded to a per-rank capacity with paged stashing: no host sync), else the
# Transformer Engine graph scope. Up to 0.3.0 a recipe without a flex backend keeps the
# model's NCCL all-to-all (apply_flex_dispatcher_backend skips a missing backend).
# 25.09 (0.1.0rc3, scripts/performance/configs/<model>/*_llm_pretrain.yaml perf_matrix and
# run_script.py): the token-drop runs (static shapes) set Megatron's enable_cuda_graph, which
# captures whole transformer layers; DeepEP is off with token drop.
LAYER_GRAPHS = "attn,mlp,moe"
_MB_MOE: dict = {
    ("deepseek-v3", "gb200"): {
        "0.1": dict(dispatcher="alltoall", graphs=""),
        "0.3": dict(
            dispatcher="hybridep", graphs="attn,moe_router,moe_preprocess", modules="mla_up_proj"
        ),
        "0.4": dict(dispatcher="hybridep", graphs="attn,moe_router,moe_preprocess", modules="mlp"),
        "0.5": dict(dispatcher="hybridep", graphs="full", modules="mla_up_proj", ep_overlap=True),
        "0.6": dict(dispatcher="hybridep", graphs="full", modules="mla_up_proj", ep_overlap=True),
    },
    ("deepseek-v3", "b200"): {
        "0.1": dict(dispatcher="alltoall", graphs=LAYER_GRAPHS),
        **{
            v: dict(dispatcher="hybridep", graphs="", modules="mla_up_proj") for v in ("0.3", "0.4")
        },
    },
    ("qwen3-30b-a3b", "gb200"): {
        "0.1": dict(dispatcher="alltoall", graphs=LAYER_GRAPHS),
        "0.3": dict(dispatcher="hybridep", graphs="moe_router,moe_preprocess"),
        "0.4": dict(dispatcher="hybridep", graphs="moe_router,moe_preprocess"),
        "0.5": dict(dispatcher="hybridep", graphs="full", ep_overlap=True),
        "0.6": dict(dispatcher="hybridep", graphs="full", ep_overlap=True),
    },
    ("qwen3-30b-a3b", "b200"): {
        "0.1": dict(dispatcher="alltoall", graphs=LAYER_GRAPHS),
        "0.3": dict(dispatcher="alltoall", graphs="moe_router,moe_preprocess"),
        "0.3.1": dict(dispatcher="hybridep", graphs="attn,moe_router,moe_preprocess"),
        "0.4": dict(dispatcher="hybridep", graphs="attn,moe_router,moe_preprocess"),
    },
    ("qwen3-30b-a3b", "h100"): {
        "0.3": dict(dispatcher="deepep", graphs="", ep_overlap=True),
        "0.3.1": dict(dispatcher="hybridep", graphs=""),
        "0.4": dict(dispatcher="hybridep", graphs=""),
        "0.5": dict(dispatcher="hybridep", graphs=""),
    },
    ("qwen3-235b-a22b", "gb200"): {
        "0.1": dict(dispatcher="alltoall", graphs=LAYER_GRAPHS),
        "0.3": dict(dispatcher="hybridep", graphs="attn,moe_router,moe_preprocess"),
        "0.4": dict(dispatcher="hybridep", graphs="attn,moe_router,moe_preprocess"),
        "0.5": dict(dispatcher="hybridep", graphs="full", ep_overlap=True),
        "0.6": dict(dispatcher="hybridep", graphs="full", ep_overlap=True),
    },
    ("qwen3-235b-a22b", "b200"): {
        v: dict(dispatcher="alltoall", graphs="") for v in ("0.1", "0.3", "0.4")
    },
    ("qwen3-235b-a22b", "h100"): {
        v: dict(dispatcher="alltoall", graphs="", ep_overlap=True) for v in ("0.3", "0.4")
    },
    ("gpt-oss-120b", "gb200"): {
        "0.3": dict(dispatcher="alltoall", graphs="", modules="layernorm,moe_act"),
        "0.4": dict(dispatcher="hybridep", graphs="", modules="layernorm,moe_act", ep_overlap=True),
        "0.5": dict(dispatcher="hybridep", graphs="full", modules="", ep_overlap=True),
        "0.6": dict(dispatcher="hybridep", graphs="full", modules="", ep_overlap=True),
    },
    ("gpt-oss-120b", "b200"): {
        "0.3": dict(dispatcher="alltoall", graphs="", modules="layernorm,moe_act"),
        "0.4": dict(dispatcher="hybridep", graphs="", modules="layernorm,moe_act"),
    },
    ("gpt-oss-120b", "h100"): {
        v: dict(dispatcher="alltoall", graphs="", modules="layernorm,moe_act")
        for v in ("0.3", "0.4")
    },
}
# NeMo release -> Megatron-Bridge minor release of its performance recipes
_MB_RELEASE = {
    "25.09": "0.1",
    "26.02": "0.3",
    "26.02.01": "0.3.1",
    "26.04": "0.4",
    "26.04.01": "0.4",
    "26.06": "0.5",
    "26.06.01": "0.5",
    "26.08": "0.6",
}


def _mb_moe_recipe(model: str, system: str, release: str) -> dict:
    """Layout fields of the MoE settings :data:`_MB_MOE` gives ``model`` on ``system`` in
    ``release`` ({} where the table has none)."""
    version = _MB_RELEASE.get(release, "")
    entries = _MB_MOE.get((model, system), {})
    # a patch release keeps its minor release's settings unless the table names it
    entry = entries.get(version, entries.get(version[:3]))
    if entry is None:
        return {}
    out: dict = {"dispatcher": entry["dispatcher"], "ep_overlap": entry.get("ep_overlap", False)}
    if entry["graphs"] == "full":
        out.update(cuda_graphs=True, cuda_graph_scope="")
    else:
        out.update(cuda_graphs=False, cuda_graph_scope=entry["graphs"])
    if "modules" in entry:
        modules = entry["modules"]
        out.update(recompute="selective" if modules else "none", recompute_modules=modules)
    return out


def _recipe(model: str, system: str, fsdp: bool, capacity: bool, release: str = "25.11") -> dict:
    """Layout settings the tables do not print, per model and system, as the 25.11
    recipes set them (the rows above): recompute, CUDA-graph scopes, all-to-all overlap,
    force-balanced dropless routing (``capacity``: a token-drop row, capacity factor 1,
    as the 25.09 token-drop recipes set it); from 26.02 on the MoE settings of
    ``release``'s own recipes (:data:`_MB_MOE`: dispatcher, graphs, overlap, recompute)."""
    out: dict = {}
    if model in ("gpt3-175b", "mixtral-8x7b"):  # no setting beyond the table's is known
        return out
    if model.startswith("llama3"):
        if system == "h100" and model == "llama3-8b" and fsdp:
            out.update(recompute="full", recompute_layers=5)
        if system != "h100" and model == "llama3-8b":
            out.update(cuda_graphs=True)
        if fsdp:
            out.update(zero=3)
        if fsdp and system == "gb200" and model == "llama3-70b":
            out.update(offload_activations=40 / 80)  # 40 layers' activations on the Grace CPU
        if fsdp and system == "gb200" and model == "llama3-405b":
            out.update(offload_activations=92 / 126)
        return out
    out.update(moe_capacity_factor=1.0) if capacity else out.update(FORCED)
    if model == "gpt-oss-120b":
        out.update(recompute="selective", recompute_modules="layernorm,moe_act")
    elif model == "deepseek-v3":
        modules = "mla_up_proj,mlp" if system == "h100" else "mla_up_proj"
        out.update(recompute="selective", recompute_modules=modules)
    elif model == "qwen3-30b-a3b" and system != "h100":
        out.update(cuda_graph_scope="moe_router,moe_preprocess")
    elif model == "qwen3-235b-a22b" and system == "gb200":
        out.update(cuda_graph_scope="attn,moe_router,moe_preprocess")
    if model in ("qwen3-235b-a22b", "deepseek-v3") and system == "h100":
        out.update(ep_overlap=True)
    if model == "qwen3-30b-a3b" and system == "h100":
        out.update(ep_overlap=True)
    out.update(_mb_moe_recipe(model, system, release))
    return out


# release, system, model, precision, GPUs, GBS, MBS, sequence, FSDP, TP, PP, CP, VP, EP,
# tokens / s / GPU; "td" after the model: a token-drop run. The 25.11 rows not above are its
# parenthesised MXFP8 figures; 25.09's table has no precision column: its main figures are
# FP8 current scaling, the parenthesised ones MXFP8 (B200, GB200). Its 70B GB200 MXFP8 row
# runs micro-batch 1 (the release's LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_MX_BASE_CONFIG sets
# no micro-batch: the default 1; the table prints one MBS column for both variants).
_NEMO = """
24.07 h100 8b fp8 8 128 1 8192 0 1 1 2 1 1 12273
24.07 h100 70b fp8 64 128 1 8192 0 4 4 2 5 1 1524
24.07 h100 gpt175 fp8 128 256 1 2048 0 4 8 1 6 1 716
24.07 h100 gpt175 fp8 512 2048 2 2048 0 4 8 1 6 1 825
25.02 b200 gpt175 fp8 512 2048 2 2048 0 4 4 1 6 1 1600
25.02 b200 8b fp8 8 128 2 8192 0 1 1 1 1 1 26006
25.02 b200 70b fp8 64 128 1 8192 0 2 4 2 5 1 3062
25.02 b200 405b fp8 128 64 1 8192 0 4 8 2 8 1 625
25.02 b200 mx7 fp8 64 256 2 4096 0 1 1 1 1 8 15457
25.04 gb200 gpt175 fp8-cs 128 256 2 2048 0 4 4 1 12 1 1804
25.04 gb200 8b fp8-cs 8 128 2 8192 0 1 1 1 1 1 33099
25.04 gb200 70b fp8-cs 64 128 1 8192 1 1 1 1 1 1 4035
25.04 gb200 405b fp8-cs 128 64 1 8192 0 4 8 2 8 1 665
25.04 gb200 mx7 fp8-cs 64 256 2 4096 0 1 1 1 1 8 19275
25.07 gb200 8b fp8-cs 8 128 2 8192 0 1 1 1 1 1 31737
25.07 gb200 8b mxfp8 8 128 2 8192 0 1 1 1 1 1 30341
25.07 gb200 70b fp8-cs 64 128 1 8192 1 1 1 1 1 1 4066
25.07 gb200 70b mxfp8 64 128 1 8192 0 2 4 2 5 1 2605
25.07 gb200 405b fp8-cs 128 64 1 8192 1 2 1 1 1 1 706
25.07 gb200 405b mxfp8 128 64 1 8192 0 4 8 2 8 1 638
25.09 gb200 8b fp8-cs 8 128 2 8192 0 1 1 1 1 1 31357
25.09 gb200 8b mxfp8 8 128 2 8192 0 1 1 1 1 1 29925
25.09 gb200 70b fp8-cs 64 128 2 8192 1 1 1 1 1 1 3986
25.09 gb200 70b mxfp8 64 128 1 8192 0 2 4 1 5 1 3546
25.09 gb200 405b fp8-cs 128 64 1 8192 1 2 1 1 1 1 729
25.09 gb200 405b mxfp8 128 64 1 8192 0 4 8 2 8 1 578
25.09 gb200 dsv3td fp8-cs 256 2048 1 4096 0 1 4 1 4 64 3454
25.09 gb200 dsv3td mxfp8 256 2048 1 4096 0 1 8 1 2 64 2835
25.09 gb200 q30td fp8-cs 8 512 4 4096 0 1 1 1 1 8 22775
25.09 gb200 q30td mxfp8 8 512 4 4096 0 1 1 1 1 8 23723
25.09 gb200 q235td fp8-cs 64 1024 1 4096 0 2 1 1 1 64 4452
25.09 gb200 q235td mxfp8 64 1024 1 4096 0 2 1 1 1 64 4416
25.09 b200 8b fp8-cs 8 128 2 8192 0 1 1 1 1 1 29994
25.09 b200 8b mxfp8 8 128 2 8192 0 1 1 1 1 1 29388
25.09 b200 405b fp8-cs 128 64 1 8192 0 4 8 2 8 1 664
25.09 b200 405b mxfp8 128 64 1 8192 0 4 8 2 8 1 622
25.09 b200 dsv3td fp8-cs 256 2048 1 4096 0 1 16 1 1 8 2265
25.09 b200 dsv3td mxfp8 256 2048 1 4096 0 1 16 1 1 8 2159
25.09 b200 q30td fp8-cs 8 512 1 4096 0 1 1 1 1 8 18066
25.09 b200 q235td fp8-cs 64 1024 1 4096 0 1 8 1 2 8 4104
25.09 b200 q235td mxfp8 64 1024 1 4096 0 1 8 1 2 8 4275
25.09 h100 8b fp8-cs 8 128 1 8192 1 1 1 1 1 1 14079
25.09 h100 70b fp8-cs 64 128 1 8192 0 4 8 1 5 1 1619
25.09 h100 405b fp8-cs 1024 512 1 8192 0 8 8 2 8 1 302
25.09 h100 q30td fp8-cs 16 512 2 4096 0 1 2 1 24 8 10494
25.09 h100 q235td fp8-cs 256 2048 1 4096 0 2 8 1 4 32 1204
25.11 gb200 8b mxfp8 8 128 2 8192 0 1 1 1 1 1 29789
25.11 b200 8b mxfp8 8 128 2 8192 0 1 1 1 1 1 29521
25.11 b200 405b mxfp8 128 64 1 8192 0 4 8 2 8 1 624
26.02 gb200 70b mxfp8 64 256 1 8192 0 2 4 1 5 1 3613
26.02 gb200 70b fp8-cs 64 256 2 8192 1 1 1 1 1 1 4040
26.02 h100 70b fp8-cs 64 256 1 8192 0 4 8 1 5 1 1621
26.02 gb200 405b mxfp8 256 1536 1 8192 0 4 16 1 8 1 786
26.02 gb200 405b fp8-cs 256 1536 1 8192 0 4 16 1 4 1 793
26.02 h100 405b fp8-cs 1024 1536 1 8192 0 8 8 2 8 1 311
26.02 gb200 dsv3 mxfp8 256 4096 1 4096 0 1 4 1 4 64 3955
26.02 b200 dsv3 mxfp8 256 4096 1 4096 0 1 16 1 1 8 2689
26.02 gb200 oss bf16 64 1280 4 4096 0 1 1 1 1 64 15784
26.02 b200 oss bf16 64 1280 4 4096 0 1 1 1 1 64 8047
26.02 h100 oss bf16 64 1280 1 4096 0 1 4 1 1 8 5993
26.02 gb200 q30 mxfp8 8 512 4 4096 0 1 1 1 1 8 26084
26.02 b200 q30 mxfp8 8 512 1 4096 0 1 1 1 1 8 9691
26.02 h100 q30 fp8-cs 16 1024 1 4096 0 1 2 1 12 8 5113
26.02 gb200 q235 mxfp8 256 8192 1 4096 0 1 8 1 1 32 5448
26.02 b200 q235 mxfp8 256 8192 1 4096 0 1 8 1 1 8 3805
26.02 h100 q235 fp8-cs 256 8192 1 4096 0 2 8 1 4 32 1633
26.02.01 gb200 70b mxfp8 64 256 1 8192 0 2 4 1 5 1 3837
26.02.01 gb200 70b fp8-cs 64 256 2 8192 1 1 1 1 1 1 4357
26.02.01 h100 70b fp8-cs 64 256 1 8192 0 4 8 1 5 1 1639
26.02.01 gb200 405b mxfp8 256 1536 1 8192 0 4 16 1 8 1 775
26.02.01 gb200 405b fp8-cs 256 1536 1 8192 0 4 16 1 4 1 818
26.02.01 gb200 dsv3 mxfp8 256 4096 1 4096 0 1 4 1 4 64 4021
26.02.01 b200 dsv3 mxfp8 256 4096 1 4096 0 1 16 1 1 8 2790
26.02.01 gb200 oss bf16 64 1280 4 4096 0 1 1 1 1 64 15754
26.02.01 b200 oss bf16 64 1280 4 4096 0 1 1 1 1 8 13722
26.02.01 h100 oss bf16 64 1280 1 4096 0 1 4 1 1 8 5984
26.02.01 gb200 q30 mxfp8 8 512 4 4096 0 1 1 1 1 8 26373
26.02.01 b200 q30 mxfp8 8 512 4 4096 0 1 1 1 1 8 26695
26.02.01 h100 q30 fp8-cs 16 1024 1 4096 0 1 2 1 12 8 9058
26.02.01 gb200 q235 mxfp8 256 8192 1 4096 0 1 8 1 1 32 5530
26.02.01 h100 q235 fp8-cs 256 8192 1 4096 0 2 8 1 4 32 1611
26.04 gb200 70b mxfp8 64 256 1 8192 0 2 4 1 5 1 3828
26.04 gb200 70b fp8-cs 64 256 2 8192 1 1 1 1 1 1 4143
26.04 h100 70b fp8-cs 64 256 1 8192 0 4 8 1 5 1 1633
26.04 gb200 405b mxfp8 256 1536 1 8192 0 4 16 1 8 1 793
26.04 gb200 405b fp8-cs 256 1536 1 8192 0 4 16 1 4 1 842
26.04 gb200 dsv3 mxfp8 256 4096 1 4096 0 1 4 1 4 64 4193
26.04 b200 dsv3 mxfp8 256 4096 1 4096 0 1 16 1 1 8 2815
26.04 gb200 oss bf16 64 1280 4 4096 0 1 1 1 1 64 15938
26.04 b200 oss bf16 64 1280 4 4096 0 1 1 1 1 8 13045
26.04 h100 oss bf16 64 1280 1 4096 0 1 4 1 1 8 5810
26.04 gb200 q30 mxfp8 8 512 4 4096 0 1 1 1 1 8 26032
26.04 b200 q30 mxfp8 8 512 4 4096 0 1 1 1 1 8 26859
26.04 h100 q30 fp8-cs 16 1024 1 4096 0 1 1 1 1 16 8901
26.04 gb200 q235 mxfp8 256 8192 1 4096 0 1 8 1 3 32 5672
26.04 h100 q235 fp8-cs 256 8192 1 4096 0 2 8 1 4 32 1686
26.04.01 gb200 70b mxfp8 64 256 1 8192 0 2 4 1 5 1 3712
26.04.01 gb200 70b fp8-cs 64 256 2 8192 1 1 1 1 1 1 4224
26.04.01 h100 70b fp8-cs 64 256 1 8192 0 4 8 1 5 1 1664
26.04.01 gb200 405b mxfp8 256 1536 1 8192 0 4 16 1 8 1 800
26.04.01 gb200 405b fp8-cs 256 1536 1 8192 0 4 16 1 4 1 864
26.04.01 h100 405b fp8-cs 1024 1536 1 8192 0 8 8 2 8 1 328
26.04.01 gb200 dsv3 mxfp8 256 4096 1 4096 0 1 4 1 4 64 4256
26.04.01 b200 dsv3 mxfp8 256 4096 1 4096 0 1 8 1 2 32 3328
26.04.01 gb200 oss bf16 64 1280 4 4096 0 1 1 1 1 64 16640
26.04.01 b200 oss bf16 64 1280 4 4096 0 1 1 1 1 8 13568
26.04.01 h100 oss bf16 64 1280 1 4096 0 1 4 1 1 8 5824
26.04.01 gb200 q30 mxfp8 8 512 4 4096 0 1 1 1 1 8 26112
26.04.01 b200 q30 mxfp8 8 512 4 4096 0 1 1 1 1 8 27136
26.04.01 h100 q30 fp8-cs 16 1024 1 4096 0 1 1 1 1 16 8960
26.04.01 gb200 q235 mxfp8 256 8192 1 4096 0 1 8 1 3 32 5680
26.04.01 b200 q235 mxfp8 256 8192 1 4096 0 1 8 1 1 8 3776
26.04.01 h100 q235 fp8-cs 256 8192 1 4096 0 2 8 1 4 32 1712
26.06 gb200 405b fp8-cs 256 1536 1 8192 0 4 16 1 4 1 843
26.06 gb200 405b mxfp8 256 1536 1 8192 0 4 16 1 8 1 783
26.06 h100 405b fp8-cs 1024 1536 1 8192 0 8 8 2 8 1 326
26.06 gb200 dsv3 mxfp8 256 4096 1 4096 0 1 4 1 4 64 4969
26.06 gb200 oss mxfp8 64 1280 4 4096 0 1 1 1 1 64 28947
26.06 gb200 q30 mxfp8 8 512 4 4096 0 1 1 1 1 8 40706
26.06 h100 q30 fp8-cs 16 1024 1 4096 0 1 1 1 1 16 8826
26.06 gb200 q235 mxfp8 256 8192 1 4096 0 1 8 1 3 32 7376
26.06.01 gb200 dsv3 mxfp8 256 4096 1 4096 0 1 4 1 4 64 4928
26.06.01 gb200 oss mxfp8 64 1280 4 4096 0 1 1 1 1 64 18304
26.06.01 gb200 q30 mxfp8 8 512 4 4096 0 1 1 1 1 8 40960
26.06.01 gb200 q235 mxfp8 256 8192 1 4096 0 1 8 1 3 32 7360
26.08 gb200 dsv3 mxfp8 256 4096 1 4096 0 1 4 1 4 64 4912
26.08 gb200 oss mxfp8 64 1280 4 4096 0 1 1 1 1 64 28672
26.08 gb200 q30 mxfp8 8 512 4 4096 0 1 1 1 1 8 39936
26.08 gb200 q235 mxfp8 256 8192 1 4096 0 1 8 1 3 32 7280
"""


def _nemo_row(line: str) -> PublishedRun:
    fields = line.split()
    release, system, key, precision = fields[:4]
    gpus, gbs, mbs, seq, fsdp, tp, pp, cp, vp, ep = (int(v) for v in fields[4:14])
    tokens = float(fields[14])
    token_drop = key.endswith("td")
    model = MODELS[key.removesuffix("td")]
    layout: dict = dict(tp=tp, pp=pp, cp=cp, vpp=vp, ep=ep, global_batch=gbs, micro_batch=mbs)
    layout.update(seq_len=seq, precision=PRECISION[precision])
    layout.update(_recipe(model, system, bool(fsdp), token_drop, release))
    overrides = {}
    if model == "deepseek-v3" and system == "gb200":
        overrides = {"num_nextn_predict_layers": 0}  # the GB200 recipes run it without MTP
    where = SUMMARY if release == "26.08" else f"{ARCHIVE} ({release} NeMo container)"
    where = NEMO_DOCS.get(release, where)
    notes = "token-drop (capacity factor 1)" if token_drop else ""
    if model == "gpt-oss-120b" and release == "26.06.01":
        notes = "the release notes a cuDNN regression for this model (cudnn-frontend issue 256)"
    name = f"{key.removesuffix('td')}{' td' if token_drop else ''} {system} {precision} {release}"
    if model == "gpt3-175b":  # published at two scales
        name = f"{name} {gpus}"
    return _modern(
        name,
        *SYSTEMS[system],
        model,
        gpus,
        tokens,
        source=where,
        notes=notes,
        model_overrides=overrides,
        stack=f"nemo-{release}",
        published_precision=precision,
        **layout,
    )


RECIPE_RUNS = tuple(_nemo_row(line) for line in _NEMO.strip().splitlines())


# The Llama 3 paper's Table 4 counts 405e9 parameters; FLOPs per token 6 N + 6 L s h (causal
# attention, forward and backward), so its TFLOP/s per GPU give the step time.
_LLAMA3_FLOPS_PER_STEP = 2048 * 8192 * (6 * 405e9 + 6 * 126 * 8192 * 16384)
# DeepSeek-V3: 180K H800 GPU hours per trillion tokens (report, section 1), batches of
# 15,360 sequences of 4,096 tokens on 2,048 GPUs
_DEEPSEEK_STEP_S = 180e3 * 3600 / 1e12 * 15360 * 4096 / 2048

PAPER_RUNS = tuple(
    PublishedRun(
        name=f"llama3-405b meta {gpus}",
        era="modern",
        system="Meta H100 (RoCE)",
        fabric="meta-llama3-24k",
        gpu="h100-sxm",
        model="llama3-405b",
        gpus=gpus,
        layout=dict(
            tp=8,
            pp=16,
            vpp=vpp,
            micro_batch=1,
            global_batch=2048,
            seq_len=8192,
            zero=2,
            grad_reduce_dtype="fp32",
        ),
        measured_step_s=_LLAMA3_FLOPS_PER_STEP / (tflops * 1e12 * gpus),
        source=LLAMA3,
        notes="TP 8, PP 16, FSDP over DP (optimizer state and gradients sharded, weights "
        "kept after the forward pass), bf16; Meta's own interleaved schedule (a flexible "
        "number N of micro-batches per virtual-stage group, production N not published) is "
        "timed as Megatron-Core's with N = pp; virtual stages not published (vpp "
        f"{vpp} assumed); gradients reduced in fp32",
        stack="meta-llama3-2024",
        published_precision="bf16",
    )
    for gpus, tflops, vpp in ((8192, 430.0, 2), (16384, 400.0, 2))
) + (
    PublishedRun(
        name="deepseek-v3 h800 2048",
        era="modern",
        system="DeepSeek H800 (IB)",
        fabric="meta-llama3-24k",
        fabric_overrides=dict(
            name="h800-pod", gpus=3072, scale_up={"bandwidth_bidirectional": "400GB/s"}
        ),
        gpu="h800",
        model="deepseek-v3",
        gpus=2048,
        layout=dict(
            pp=16,
            ep=64,
            micro_batch=1,
            global_batch=15360,
            seq_len=4096,
            precision="fp8",
            pipeline_schedule="dualpipe",
            recompute="selective",
            recompute_modules="layernorm,mla_up_proj,moe_act",
            grad_reduce_dtype="fp32",
            adam_moments_dtype="bf16",
            fp8_activation_cache=True,
            fp8_recipe="blockwise",
            zero=1,
        ),
        measured_step_s=_DEEPSEEK_STEP_S,
        source=DEEPSEEK,
        notes="PP 16, EP 64 over 8 nodes, ZeRO-1 DP 128, DualPipe, fp8 (128 x 128 weight / "
        "1 x 128 activation blocks), RMSNorm, MLA up-projections and the MoE SwiGLU output "
        "recomputed, SwiGLU inputs cached in FP8, bf16 Adam moments, fp32 gradients; the step is the 180K GPU hours per trillion tokens of the whole run; "
        "micro-batch 1 assumed; the fabric is a stand-in (Clos of 400G per GPU, NVLink "
        "400 GB/s)",
        stack="deepseek-v3",
        published_precision="fp8-block",
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
        stack="megatron-2021",
        published_precision="fp16",
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
        stack="megatron-2022",
        published_precision="fp16",
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

PUBLISHED_RUNS = A100_RUNS + MODERN_RUNS + RECIPE_RUNS + PAPER_RUNS
# GPU generation of each GPU preset the runs use
GENERATION = {
    "a100-80gb": "ampere",
    "h100-sxm": "hopper",
    "h800": "hopper",
    "b200": "blackwell",
    "gb200": "blackwell",
}


def run_setup(run: PublishedRun) -> tuple:
    """``(model, layout, stack)`` of ``run`` as :func:`predict` times it: the published
    layout with ``dp`` derived from the GPU count, on the row's own software stack where a
    preset exists (its choices are the defaults the row's settings override), else on the
    step model's default stack."""
    kwargs = dict(run.layout)
    tp, pp, cp = kwargs.get("tp", 1), kwargs.get("pp", 1), kwargs.get("cp", 1)
    kwargs["dp"] = run.gpus // (tp * pp * cp)
    stack = load_stack(run.stack if run.stack in list_stacks() else None)
    return load_model(run.model, **run.model_overrides), stack.layout_for(**kwargs), stack


def predict(run: PublishedRun, **step_kwargs) -> dict:
    """The step model's prediction of ``run``: ``predicted_step_s``, ``error`` (predicted /
    measured - 1), the breakdown, memory, and ``refused`` (the layout was refused, with the
    reason)."""
    model, layout, stack = run_setup(run)
    fabric = load_fabric(run.fabric, **run.fabric_overrides)
    out = {
        "name": run.name,
        "era": run.era,
        "system": run.system,
        "moe": run.moe,
        "stack": run.stack,
        "generation": GENERATION[run.gpu],
        "precision": run.published_precision,
        "class": run_class(run),
        "stack_preset": stack.name,
        "measured_step_s": run.measured_step_s,
    }
    try:
        result = step_time(
            model,
            run.gpu,
            layout,
            fabric,
            **({"placement": run.placement, "stack": stack} | step_kwargs),
        )
    except FabricflowError as error:
        refused = {"refused": str(error), "predicted_step_s": math.nan, "error": math.nan}
        try:  # how far over the memory check the estimate is, when that was the reason
            refused["memory_gib"] = memory_per_gpu(model, layout).total / GIB
        except FabricflowError:
            pass
        return out | refused
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


def run_class(run: PublishedRun) -> str:
    """``'<generation> <dense|moe> <precision>'``, e.g. ``'blackwell moe mxfp8'``: the
    classes the validation reports its errors by."""
    kind = "moe" if run.moe else "dense"
    return f"{GENERATION[run.gpu]} {kind} {run.published_precision}"


def residuals(rows: list[dict]) -> list[dict]:
    """One record per row of :func:`validation_table`, machine-readable: ``name``,
    ``class`` (:func:`run_class`), ``generation``, ``moe``, ``precision``, ``stack``,
    ``measured_step_s``, ``predicted_step_s`` (NaN when refused), ``log_ratio`` (ln of
    predicted / measured, NaN when refused) and ``refused`` (the reason, "" when it ran).
    Held-out data: nothing in the step model is fitted to it."""
    keys = ("name", "class", "generation", "moe", "precision", "stack", "measured_step_s")
    return [
        {key: row[key] for key in keys}
        | {
            "predicted_step_s": row["predicted_step_s"],
            "log_ratio": math.log(row["predicted_step_s"] / row["measured_step_s"])
            if not row["refused"]
            else math.nan,
            "refused": row["refused"],
        }
        for row in rows
    ]


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
            "refused_runs": len(selected) - len(ran),
        }

    for era in ("a100", "modern"):
        mine = [r for r in rows if r["era"] == era]
        groups = {era: mine}
        for system in sorted({r["system"] for r in mine}):
            groups[f"{era} {system}"] = [r for r in mine if r["system"] == system]
        for kind, flag in (("dense", False), ("moe", True)):
            groups[f"{era} {kind}"] = [r for r in mine if r["moe"] == flag]
        for key in ("generation", "precision", "class"):
            for value in sorted({r.get(key, "") for r in mine} - {""}):
                groups[f"{era} {value}"] = [r for r in mine if r.get(key) == value]
        out.update({name: stats(chosen) for name, chosen in groups.items() if chosen})
    return out


def validation_dataset(rows: list[dict]) -> xr.Dataset:
    """The rows of :func:`validation_table` as an :class:`xarray.Dataset` over ``run``:
    ``measured_step_s``, ``predicted_step_s`` (NaN when refused), ``error``, ``refused``
    and ``breakdown_s`` (``run`` x ``part``), with ``era``, ``system``, ``moe``, ``class``
    (:func:`run_class`) and ``stack`` as coordinates; :func:`summary` in the attributes as JSON."""
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
            "class": ("run", [r.get("class", "") for r in rows]),
            "stack": ("run", [r.get("stack", "") for r in rows]),
        },
    )
    data.attrs["summary"] = json.dumps(summary(rows))
    data.attrs["refusals"] = json.dumps({r["name"]: r["refused"] for r in rows if r["refused"]})
    return data


__all__ = [
    "A100_RUNS",
    "MODERN_RUNS",
    "PUBLISHED_RUNS",
    "PAPER_RUNS",
    "PublishedRun",
    "RECIPE_RUNS",
    "predict",
    "residuals",
    "run_class",
    "run_setup",
    "summary",
    "validation_dataset",
    "validation_table",
]
