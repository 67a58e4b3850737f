"""The residual table behind uncalibrated prediction intervals (``presets/step_intervals.json``).

    python -m fabricflow.study.step_intervals            # rewrites the shipped table
    python -m fabricflow.study.step_intervals --out F    # writes it elsewhere

Predicts every run of the step-validation study (:data:`~.step_validation.PUBLISHED_RUNS`,
whatever rows it holds) and stores, per run, its class (GPU generation, dense or MoE,
precision), its GPU and software release, and ``log(measured / predicted)``; and the
same log-ratio for each published nccl-tests bus bandwidth of :data:`COLLECTIVE_CASES`.
:mod:`fabricflow.workload.intervals` turns these into intervals. Run it again after the
model changes (about 2 min of CPU for the study's runs); nothing in it is random.
"""

from __future__ import annotations

import argparse
import json
import math
from importlib import resources

import numpy as np

from fabricflow.atomic import write_text
from fabricflow.collective.ops import busbw_factor
from fabricflow.collective.timing import prepare_collective
from fabricflow.fabric.spec import load_fabric
from fabricflow.study.step_validation import PUBLISHED_RUNS, predict
from fabricflow.workload.intervals import INTERVALS_FILE, gpu_generation

__all__ = ["COLLECTIVE_CASES", "interval_rows", "main"]

COLLECTIVE_CASES = (
    # (label, preset, op, GPUs, algorithm, published busbw GB/s at large sizes; references §4)
    ("H100 node, ring", "dgx-h100-superpod", "all_reduce", 8, "ring", 370.0),
    ("H100 node, NVLS", "dgx-h100-superpod", "all_reduce", 8, "nvls", 480.0),
    ("400G NIC, 2 nodes x 1 GPU", "dgx-h100-superpod", "sendrecv", (0, 8), "auto", 47.0),
    ("A100, 4 nodes", "dgx-a100-superpod", "all_reduce", 32, "auto", 192.0),
    ("A100, 16 nodes, ring", "dgx-a100-superpod", "all_reduce", 128, "ring", 192.0),
)
"""Published nccl-tests bus bandwidths (at 8 GiB) the collective intervals come from."""


def _release(run) -> str:
    return getattr(run, "release", None) or run.source


def interval_rows(runs=PUBLISHED_RUNS) -> dict:
    """The table: ``steps`` (one row per run that ran), ``collectives``, and
    ``calibrated_log_sigma``: ``{"dense", "moe", "all": spread}``, the pooled spread of
    log-ratios within each (GPU, release) group around the group's mean, over the dense
    runs, the MoE runs, and all."""
    steps = []
    for run in runs:
        row = predict(run, interval_level=None)  # the table is what it makes
        if row["refused"]:
            continue
        steps.append(
            {
                "name": run.name,
                "gpu": run.gpu,
                "release": _release(run),
                "generation": gpu_generation(run.gpu),
                "moe": bool(run.moe),
                "precision": run.layout.get("precision", "bf16"),
                "log_ratio": math.log(run.measured_step_s / row["predicted_step_s"]),
            }
        )
    spreads = {}
    for label, keep in (("dense", False), ("moe", True), ("all", None)):
        groups: dict = {}
        for row in steps:
            if keep is None or row["moe"] == keep:
                groups.setdefault((row["gpu"], row["release"]), []).append(row["log_ratio"])
        squares = sum(
            ((np.array(v) - np.mean(v)) ** 2).sum() for v in groups.values() if len(v) > 1
        )
        dof = sum(len(v) - 1 for v in groups.values() if len(v) > 1)
        if dof:
            spreads[label] = float(math.sqrt(squares / dof))
    if "all" not in spreads:
        raise ValueError("no (GPU, release) group of the study has two runs that ran")
    collectives = []
    fabrics: dict = {}
    for label, preset, op, gpus, algorithm, measured in COLLECTIVE_CASES:
        if preset not in fabrics:  # each preset built once
            fabrics[preset] = load_fabric(preset)
        fabric = fabrics[preset]
        groups_ = np.arange(gpus) if isinstance(gpus, int) else np.asarray(gpus)
        result = prepare_collective(fabric, op, groups_, algorithm=algorithm).evaluate([2.0**33])[0]
        predicted = busbw_factor(op, result.group_size) * result.algbw_Bps / 1e9
        collectives.append(
            {"name": label, "log_ratio": math.log(predicted / measured)}  # time ratio
        )
    return {
        "generated_by": "python -m fabricflow.study.step_intervals",
        "steps": steps,
        "calibrated_log_sigma": spreads,
        "collectives": collectives,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        default=str(resources.files("fabricflow.workload") / "presets" / INTERVALS_FILE),
        help="where to write the table (default: the shipped one)",
    )
    args = parser.parse_args(argv)
    write_text(args.out, json.dumps(interval_rows(), indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
