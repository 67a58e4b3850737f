"""Calibration of the collective model against measured NCCL numbers (nccl-tests style).

    python studies/collective_calibration.py OUT_DIR

Writes OUT_DIR/collective_calibration.png (busbw vs message size) and
collective_calibration.json. Reference measurements (docs/references.md §4): 8x H100 in one node
AllReduce busbw ~370 GB/s with rings and ~480 GB/s with NVLS; one 400G NDR NIC 46-48 GB/s;
multi-node DGX A100 (8x HDR 200G per node) AllReduce ~192 GB/s.
"""

from __future__ import annotations

import argparse
import json
import pathlib

import numpy as np

import fabricflow as ff
from fabricflow.atomic import ensure_folder, write_text
from fabricflow.collective import collective_sweep, nccl_sizes
from fabricflow.plots.figures import new_figure, save_figure

CASES = [
    # (label, preset, op, GPUs, algorithm, measured busbw GB/s)
    ("H100 node, ring", "dgx-h100-superpod", "all_reduce", 8, "ring", 370.0),
    ("H100 node, NVLS", "dgx-h100-superpod", "all_reduce", 8, "nvls", 480.0),
    ("H100 node, auto", "dgx-h100-superpod", "all_reduce", 8, "auto", None),
    ("400G NIC, 2 nodes x 1 GPU", "dgx-h100-superpod", "sendrecv", [0, 8], "auto", 47.0),
    ("A100, 4 nodes, auto", "dgx-a100-superpod", "all_reduce", 32, "auto", 192.0),
    ("A100, 16 nodes, ring", "dgx-a100-superpod", "all_reduce", 128, "ring", 192.0),
]


def calibration(sizes: np.ndarray) -> list[dict]:
    fabrics: dict = {}
    rows = []
    for label, preset, op, gpus, algorithm, measured in CASES:
        fabric = fabrics.setdefault(preset, ff.load_fabric(preset))
        groups = np.arange(gpus) if isinstance(gpus, int) else np.asarray(gpus)
        results = collective_sweep(fabric, op, groups, sizes, algorithm=algorithm)
        rows.append(
            {
                "label": label,
                "measured_busbw_GBps": measured,
                "busbw_GBps": [r.busbw_Bps / 1e9 for r in results],
                "algorithm": [r.algorithm for r in results],
                "protocol": [r.protocol for r in results],
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=pathlib.Path)
    args = parser.parse_args(argv)
    ensure_folder(args.out_dir)
    sizes = nccl_sizes(2**10, 2**33, 4)
    rows = calibration(sizes)
    fig = new_figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for i, row in enumerate(rows):
        color = f"C{i}"
        ax.plot(sizes, row["busbw_GBps"], marker=".", color=color, label=row["label"])
        if row["measured_busbw_GBps"]:
            ax.axhline(row["measured_busbw_GBps"], color=color, ls=":", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title("Model (lines) vs measured large-message busbw (dotted)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, args.out_dir / "collective_calibration.png")
    summary = [
        {
            "label": r["label"],
            "measured_GBps": r["measured_busbw_GBps"],
            "model_GBps_at_8GiB": r["busbw_GBps"][-1],
            "algorithm": r["algorithm"][-1],
        }
        for r in rows
    ]
    write_text(
        args.out_dir / "collective_calibration.json",
        json.dumps({"sizes": sizes.tolist(), "rows": rows}, indent=1),
    )
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
