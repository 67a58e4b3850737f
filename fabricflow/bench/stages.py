"""Benchmark section ``stages``: published pipeline configurations the step model must run.

* DeepSeek-V3 671B on 2,048 H800 (DeepSeek-V3 report, arXiv 2412.19437): 61 layers on
  PP 16 (an uneven split), EP 64, DP 128, fp8, sequences of 4,096, batch 15,360, DualPipe;
  against 1F1B with overlapped all-to-all. The report gives 180K H800 GPU hours per
  trillion training tokens; the section reports the model's figure and its error. The
  fabric is a stand-in (DeepSeek's is not published in detail): the ``meta-llama3-24k``
  Clos cut to one 3,072-GPU pod of 400G per GPU, NVLink at the H800's 400 GB/s.
* A job over two GPU types: Llama-3-70B on 1,024 GPUs of ``dgx-h100-superpod``, half the
  pipeline stages on H100 and half on H20, against each type alone.
"""

from __future__ import annotations

from typing import Any

from fabricflow.bench._measure import measured
from fabricflow.fabric.spec import load_fabric
from fabricflow.workload.layout import Layout
from fabricflow.workload.step import step_time

PUBLISHED_GPU_HOURS_PER_T_TOKENS = 180e3  # DeepSeek-V3 report, section 1 (H800 hours)


def run(args) -> dict:
    quick = bool(getattr(args, "quick", False))
    result: dict = {}
    with measured(result, "fabric_build"):
        h800 = load_fabric(
            "meta-llama3-24k",
            name="h800-pod",
            gpus=3072,
            scale_up={"bandwidth_bidirectional": "400GB/s"},
        )
    base: dict[str, Any] = dict(
        pp=16,
        dp=128,
        ep=64,
        micro_batch=1,
        global_batch=15360,
        seq_len=4096,
        precision="fp8",
        recompute="selective",
        zero=1,
    )
    cases = {"dualpipe": Layout(pipeline_schedule="dualpipe", **base)}
    if not quick:
        cases["1f1b_ep_overlap"] = Layout(ep_overlap=True, **base)
    deepseek = {}
    for name, layout in cases.items():
        entry: dict = {}
        with measured(entry, "step"):
            # the memory estimate is reported, not enforced: see "memory_gib_per_gpu"
            out = step_time("deepseek-v3", "h800", layout, h800, check_memory=False)
        hours = layout.num_gpus * 1e12 / out.tokens_per_s / 3600
        entry.update(
            step_time_s=out.step_time_s,
            tokens_per_s=out.tokens_per_s,
            mfu=out.mfu,
            gpu_hours_per_t_tokens=hours,
            error_pct=100 * (hours / PUBLISHED_GPU_HOURS_PER_T_TOKENS - 1),
            memory_gib_per_gpu=out.memory_gib_per_gpu,
            memory_rank=out.memory.rank,
            rank_layers=out.details["rank_layers"],
            breakdown=out.breakdown,
        )
        deepseek[name] = entry
    result["deepseek_v3_2048_h800"] = deepseek
    result["published_gpu_hours_per_t_tokens"] = PUBLISHED_GPU_HOURS_PER_T_TOKENS

    h100 = load_fabric("dgx-h100-superpod")
    layout = Layout(
        tp=8,
        pp=4,
        dp=32,
        micro_batch=1,
        global_batch=256,
        seq_len=8192,
        sequence_parallel=True,
    )
    mixed = {}
    for gpu in ("h100-sxm", "h100-sxm:512,h20:512", "h20"):
        entry = {}
        with measured(entry, "step"):
            out = step_time("llama3-70b", gpu, layout, h100)
        entry.update(
            step_time_s=out.step_time_s,
            mfu=out.mfu,
            rank_layers=out.details["rank_layers"],
            memory_gib_per_gpu=out.memory_gib_per_gpu,
        )
        mixed[gpu] = entry
    result["llama3_70b_1024_mixed"] = mixed
    times = [entry["step_time_s"] for entry in mixed.values()]
    result["meets_targets"] = bool(times[0] < times[1] < times[2])
    return result
