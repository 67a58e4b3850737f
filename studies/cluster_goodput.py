"""Goodput against MTBF and checkpoint interval: simulation against renewal theory.

    python studies/cluster_goodput.py OUT [--write 60] [--restart 300]

One 128-GPU job (llama3-8b, TP 8) on dgx-h100-superpod cut to 256 GPUs, only GPU
failures, hot spares so it never waits: for job MTBFs of 1, 4 and 16 h and checkpoint
intervals of 1/4, 1 and 4 times Daly's optimum, the simulated goodput against
``expected_goodput`` (Daly's renewal formula). Writes ``OUT/goodput_map.png`` (the
expected goodput over MTBF x interval with the Young and Daly optima, the simulated
points labelled) and ``OUT/goodput.json`` (one row per point: MTBF, interval, simulated
and expected goodput, failures), and prints the rows.
"""

from __future__ import annotations

import argparse
import json
import os

import fabricflow as ff
from fabricflow.cluster.failures import (
    CheckpointPolicy,
    FailureModel,
    expected_goodput,
    young_daly_interval,
)
from fabricflow.cluster.simulate import simulate_cluster
from fabricflow.plots.cluster import goodput_map_axes, plot_goodput_map

GPUS = 128
JOB = {
    "id": "solo",
    "model": "llama3-8b",
    "gpu": "h100-sxm",
    "gpus": GPUS,
    "layout": {"tp": 8, "micro_batch": 1, "seq": 8192},
}


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--write", type=float, default=60.0, help="checkpoint write (s)")
    parser.add_argument("--restart", type=float, default=300.0, help="restart time (s)")
    parser.add_argument("--failures", type=int, default=1000, help="expected failures per point")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    fabric = ff.load_fabric("dgx-h100-superpod", gpus=256)
    rows = []
    for mtbf_h in (1.0, 4.0, 16.0):
        mtbf = mtbf_h * 3600.0
        daly = young_daly_interval(args.write, mtbf)
        for factor in (0.25, 1.0, 4.0):
            interval = daly * factor
            expected = expected_goodput(interval, args.write, args.restart, mtbf)
            # enough work for about ``failures`` failures
            work_s = args.failures * mtbf * expected
            standalone = 0.63  # about the job's standalone step (s); steps follow from it
            run = simulate_cluster(
                fabric,
                [{**JOB, "steps": max(1, int(work_s / standalone))}],
                scheduler="first-fit",
                interference=False,
                failures=FailureModel({"gpu": mtbf * GPUS}, mttr_s={"gpu": "1h"}),
                checkpoint=CheckpointPolicy(
                    interval_s=interval, write_s=args.write, restart_s=args.restart, spares=4
                ),
                seed=args.seed,
            )
            job = run.jobs[0]
            row = {
                "mtbf_s": mtbf,
                "interval_s": interval,
                "interval_over_daly": factor,
                "simulated_goodput": job["goodput"],
                "expected_goodput": expected,
                "relative_error": job["goodput"] / expected - 1.0,
                "failures": job["failures"],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    mtbf_axis, interval_axis = goodput_map_axes(
        args.write, [r["mtbf_s"] for r in rows], [r["interval_s"] for r in rows]
    )
    plot_goodput_map(
        os.path.join(args.out, "goodput_map.png"),
        write_s=args.write,
        restart_s=args.restart,
        mtbf_s=mtbf_axis,
        interval_s=interval_axis,
        simulated=[(r["mtbf_s"], r["interval_s"], r["simulated_goodput"]) for r in rows],
    )
    with open(os.path.join(args.out, "goodput.json"), "w") as handle:
        json.dump(rows, handle, indent=1)
    return rows


if __name__ == "__main__":
    main()
