"""The calibration data of the step model: Megatron-LM SC21 Table 1 (docs/references.md §5).

Six GPT runs on Selene (A100 80GB, 312 TFLOP/s peak, 8 GPUs per DGX A100 with 8x HDR
200G), sequence 2048, vocabulary 51200, full recompute, fp16; "achieved TFLOP/s per GPU"
counts the recomputed forward (Megatron eq. 3). Micro-batch sizes, interleaving and the
DDP implementation are those of Megatron-LM ``examples/sc21/run_table_1.sh``: PyTorch DDP
(gradient all-reduce overlapped with backward) up to 18.4B, Megatron's local DDP (after
backward, not overlapped) from 39.1B; 76.1B uses 5 layers per virtual stage (v = 3).

:func:`calibration_table` predicts every row on a fabric and reports the error. Nothing
is fitted to these rows: every kernel time comes from measurements (docs/references.md §14)
and the framework efficiency stays at 1. The remaining error, and where it comes from, is
in docs/step-validation.md.
"""

from __future__ import annotations

from fabricflow.workload.layout import FRAMEWORK_EFFICIENCY, Layout
from fabricflow.workload.step import step_time

# model preset, tp, pp, gpus, micro-batch, global batch, vpp, overlapped DDP, TFLOP/s per GPU
MEGATRON_SC21_TABLE1 = (
    ("megatron-1.7b", 1, 1, 32, 16, 512, 1, True, 137.0),
    ("megatron-3.6b", 2, 1, 64, 16, 512, 1, True, 138.0),
    ("megatron-7.5b", 4, 1, 128, 16, 512, 1, True, 142.0),
    ("megatron-18.4b", 8, 1, 256, 8, 1024, 1, True, 135.0),
    ("megatron-39.1b", 8, 2, 512, 4, 1536, 1, False, 138.0),
    ("megatron-76.1b", 8, 4, 1024, 2, 1792, 3, False, 140.0),
)


def table1_layout(row, framework_efficiency: float = FRAMEWORK_EFFICIENCY) -> Layout:
    """The :class:`Layout` of one Table 1 row (fp16 gradients all-reduced, no ZeRO)."""
    _, tp, pp, gpus, micro, batch, vpp, overlap, _ = row
    return Layout(
        tp=tp,
        pp=pp,
        dp=gpus // (tp * pp),
        vpp=vpp,
        micro_batch=micro,
        global_batch=batch,
        seq_len=2048,
        recompute="full",
        precision="bf16",
        zero=0,
        grad_reduce_dtype="bf16",
        dp_overlap=overlap,
        # the Megatron-LM of examples/sc21 (2021-08): blocking pipeline send / receive, no
        # sequence parallelism or TP overlap, waiting TP backward collectives, unfused
        # gradient accumulation, fp32 vocab-parallel loss (docs/step-validation.md)
        sequence_parallel=False,
        tp_overlap=False,
        pp_overlap=False,
        tp_backward_overlap=False,
        grad_accum_fusion=False,
        fused_cross_entropy=False,
        framework_efficiency=framework_efficiency,
    )


def calibration_table(
    fabric, framework_efficiency: float = FRAMEWORK_EFFICIENCY, gpu: str = "a100-80gb"
) -> list[dict]:
    """Predicted vs published TFLOP/s per GPU for every row; ``error`` = predicted/published - 1."""
    rows = []
    for row in MEGATRON_SC21_TABLE1:
        result = step_time(row[0], gpu, table1_layout(row, framework_efficiency), fabric)
        predicted = result.hardware_tflops_per_gpu
        rows.append(
            {
                "model": row[0],
                "tp": row[1],
                "pp": row[2],
                "gpus": row[3],
                "published_tflops": row[-1],
                "predicted_tflops": predicted,
                "error": predicted / row[-1] - 1.0,
                "step_time_s": result.step_time_s,
                "breakdown": result.breakdown,
            }
        )
    return rows


__all__ = ["MEGATRON_SC21_TABLE1", "calibration_table", "table1_layout"]
