"""Design-review figures for the collective model: what users come for.

    python studies/collective_effects.py OUT_DIR [--gpus 512]

Writes into OUT_DIR:
  collective_ecmp_vs_spray.png   ring AllReduce busbw vs leaf oversubscription, ECMP (several
                                 hash seeds) against ideal spraying
  collective_rail_vs_tor.png     same-rail and cross-rail send/recv, and direct vs PXN
                                 all-to-all, on rail-optimized and ToR attachment (4:1 leaves)
  collective_failed_links.png    busbw as the busiest leaf-spine cables fail one by one
  collective_shared_jobs.png     a job's busbw when 1..8 jobs interleave on the fabric
  collective_effects.json        the numbers behind the figures
Each figure is computed by fabricflow.study.collective_effects (the tests run the same functions
on small fabrics).
"""

from __future__ import annotations

import argparse
import json
import pathlib

import numpy as np

from fabricflow.atomic import ensure_folder, write_text
from fabricflow.collective import make_groups
from fabricflow.plots.figures import new_figure, save_figure
from fabricflow.study.collective_effects import (
    alltoall_attachment,
    attachment_comparison,
    ecmp_vs_spray,
    failed_link_effect,
    interleaved_jobs,
    shared_jobs,
    small_clos,
)

GB = 1e9


def ecmp_figure(out: pathlib.Path, gpus: int) -> dict:
    ups = [16, 8, 4]  # 16 down ports: 1:1, 2:1, 4:1
    rows = []
    for up in ups:
        fabric = small_clos(attachment="tor", gpus=gpus, leaf_down=16, leaf_up=up)
        result = ecmp_vs_spray(fabric, make_groups(gpus, 32), seeds=range(6))
        rows.append(
            {
                "oversubscription": 16 / up,
                "ecmp_GBps": (result["ecmp_Bps"] / GB).tolist(),
                "spray_GBps": result["spray_Bps"] / GB,
            }
        )
    fig = new_figure(figsize=(5.5, 3.8))
    ax = fig.subplots()
    x = np.arange(len(ups))
    ecmp = np.array([r["ecmp_GBps"] for r in rows])
    ax.bar(x - 0.2, [r["spray_GBps"] for r in rows], 0.4, label="spray (ideal)")
    ax.bar(
        x + 0.2,
        ecmp.mean(axis=1),
        0.4,
        label="ECMP (mean of 6 seeds)",
        yerr=[ecmp.mean(axis=1) - ecmp.min(axis=1), ecmp.max(axis=1) - ecmp.mean(axis=1)],
        capsize=3,
    )
    ax.set_xticks(x, [f"{16 / u:g}:1" for u in ups])
    ax.set_xlabel("leaf oversubscription (ToR attachment)")
    ax.set_ylabel("ring AllReduce busbw (GB/s)")
    ax.set_title(f"ECMP hash collisions, {gpus} GPUs, groups of 32")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, out / "collective_ecmp_vs_spray.png")
    return {"ecmp_vs_spray": rows}


def attachment_figure(out: pathlib.Path, gpus: int) -> dict:
    fabrics = {
        "rail-optimized": small_clos(attachment="rail", gpus=gpus, leaf_down=16, leaf_up=4),
        "ToR": small_clos(attachment="tor", gpus=gpus, leaf_down=16, leaf_up=4),
    }
    result = attachment_comparison(fabrics, shifts=(0, 1))
    alltoall = alltoall_attachment(fabrics, group_size=64)
    fig = new_figure(figsize=(10, 3.8))
    (left, right) = fig.subplots(1, 2)
    x = np.arange(2)
    for i, (label, values) in enumerate(result.items()):
        left.bar(x + (i - 0.5) * 0.4, [values[0] / GB, values[1] / GB], 0.4, label=label)
    left.set_xticks(x, ["same rail (GPU j -> j)", "cross rail (GPU j -> j+1)"])
    left.set_ylabel("send/recv busbw per GPU (GB/s)")
    left.set_title("Node-pair traffic, 4:1 leaves")
    left.set_ylim(0, 1.3 * max(max(v.values()) for v in result.values()) / GB)
    left.legend(ncol=2, loc="upper right")
    for i, (label, values) in enumerate(alltoall.items()):
        right.bar(
            x + (i - 0.5) * 0.4,
            [values["direct"] / GB, values["hierarchical"] / GB],
            0.4,
            label=label,
        )
    right.set_xticks(x, ["direct", "hierarchical (PXN)"])
    right.set_ylabel("all-to-all busbw (GB/s)")
    right.set_title("All-to-all in groups of 64 GPUs, 4:1 leaves")
    right.set_ylim(0, 1.3 * max(max(v.values()) for v in alltoall.values()) / GB)
    right.legend(ncol=2, loc="upper left")
    fig.tight_layout()
    save_figure(fig, out / "collective_rail_vs_tor.png")
    return {
        "attachment": {k: {str(s): v / GB for s, v in d.items()} for k, d in result.items()},
        "alltoall_attachment": {k: {a: v / GB for a, v in d.items()} for k, d in alltoall.items()},
    }


def failure_figure(out: pathlib.Path, gpus: int) -> dict:
    fabric = small_clos(attachment="tor", gpus=gpus, leaf_down=16, leaf_up=8)
    groups = make_groups(gpus, 32, layout="strided")
    curves = {}
    for routing in ("spray", "ecmp"):
        result = failed_link_effect(fabric, groups, routing=routing, max_failed=4)
        curves[routing] = (result["busbw_Bps"] / GB).tolist()
    fig = new_figure(figsize=(5.5, 3.8))
    ax = fig.subplots()
    for routing, values in curves.items():
        ax.plot(range(len(values)), values, marker="o", label=routing)
    ax.set_xticks(range(len(next(iter(curves.values())))))
    ax.set_xlabel("failed leaf-spine cables (busiest first)")
    ax.set_ylabel("ring AllReduce busbw (GB/s)")
    ax.set_title(f"Failed spine links, 2:1 leaves, {gpus} GPUs")
    ax.set_ylim(bottom=0)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, out / "collective_failed_links.png")
    return {"failed_links": curves}


def shared_jobs_figure(out: pathlib.Path, gpus: int) -> dict:
    # 8 nodes per leaf, 4:1: job j owns nodes m with m % 8 == j, so every leaf holds one
    # node of each running job and their uplinks fill up as jobs arrive.
    fabric = small_clos(attachment="tor", gpus=gpus, leaf_down=64, leaf_up=16, spine_radix=64)
    counts = [1, 2, 4, 8]
    slots = interleaved_jobs(gpus, 8, 8)
    together = []
    for count in counts:
        result = shared_jobs(fabric, slots[:count], routing="spray")
        together.append(float(result["together_Bps"][0] / GB))
    fig = new_figure(figsize=(5.5, 3.8))
    ax = fig.subplots()
    ax.plot(counts, together, marker="o")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("jobs interleaved node by node")
    ax.set_ylabel("job 0 ring AllReduce busbw (GB/s)")
    ax.set_title("Jobs sharing 4:1 leaves (one node per leaf each, spray)")
    ax.set_ylim(bottom=0)
    fig.tight_layout()
    save_figure(fig, out / "collective_shared_jobs.png")
    return {"shared_jobs": {"jobs": counts, "job0_busbw_GBps": together}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=pathlib.Path)
    parser.add_argument("--gpus", type=int, default=512, help="fabric size (multiple of 256)")
    args = parser.parse_args(argv)
    ensure_folder(args.out_dir)
    numbers = {}
    for figure in (ecmp_figure, attachment_figure, failure_figure, shared_jobs_figure):
        numbers.update(figure(args.out_dir, args.gpus))
    write_text(args.out_dir / "collective_effects.json", json.dumps(numbers, indent=1))
    print(json.dumps(numbers))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
