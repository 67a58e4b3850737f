"""Goodput gain of failure prediction over reactive restart: the Llama 3 failure mix on a
16,384-GPU job, at recall 0.5 and 0.8 and lead times of 5 and 30 minutes.

    python studies/cluster_prediction.py OUT [--days 54] [--fail-seeds 3]

One job of 16,384 H100 (llama3-405b, TP 8 x PP 16 x DP 128) on meta-llama3-24k, the failures
that restart it at the published Llama 3 MTBFs (GPU, NIC, node: 321 of the report's 419
unexpected interruptions; a job MTBF of 4.0 h), checkpoints every 30 minutes, restarts of
10 minutes, and the 8,192 other GPUs to move to. For a fast (60 s) and a slow (10 min)
checkpoint write it runs the reactive job (no predictor) and the job with a predictor of
precision 0.85 at each recall and lead, over ``--days`` of the job's life and ``--fail-seeds``
failure draws (the same draws for every predictor: common random numbers), and compares
the gain with the renewal-theory expectation
(:func:`fabricflow.cluster.prediction.expected_goodput_with_prediction`).

Writes ``OUT/prediction.json`` (one row per point) and ``OUT/prediction_gain.png`` (gain in
goodput points against recall, the expectation as curves per lead, the simulations as
points with their seed spread), and prints the rows.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

import fabricflow as ff
from fabricflow.cluster.failures import DEFAULT_MTBF_S, CheckpointPolicy, FailureModel, job_mtbf
from fabricflow.cluster.prediction import Predictor, expected_goodput_with_prediction
from fabricflow.cluster.simulate import simulate_cluster
from fabricflow.plots.cluster import plot_prediction_gain

GPUS = 16384
JOB = {
    "id": "llama3-405b",
    "model": "llama3-405b",
    "gpu": "h100-sxm",
    "gpus": GPUS,
    "layout": {"tp": 8, "pp": 16, "micro_batch": 1, "seq": 8192, "recompute": "full"},
    "steps": 10**9,  # runs to the horizon
}
INTERVAL_S, RESTART_S = 1800.0, 600.0
WRITES_S = (60.0, 600.0)
RECALLS = (0.5, 0.8)
LEADS_S = (300.0, 1800.0)
PRECISION = 0.85


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--days", type=float, default=54.0, help="the job's life (days)")
    parser.add_argument(
        "--fail-seeds", type=int, default=3, help="failure draws per point (seeds 0..N-1)"
    )
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    fabric = ff.load_fabric("meta-llama3-24k")
    model = FailureModel({kind: DEFAULT_MTBF_S[kind] for kind in ("gpu", "nic", "node")})
    mtbf = job_mtbf(GPUS, 8, model)
    rows = []
    for write in WRITES_S:
        policy = CheckpointPolicy(interval_s=INTERVAL_S, write_s=write, restart_s=RESTART_S)
        settings = [(None, None)] + [(r, lead) for r in RECALLS for lead in LEADS_S]
        for recall, lead in settings:
            goodputs, counts = [], []
            for seed in range(args.fail_seeds):
                predictor = (
                    None
                    if recall is None
                    else Predictor(recall=recall, precision=PRECISION, lead_s=lead)
                )
                run = simulate_cluster(
                    fabric,
                    [JOB],
                    scheduler="packed",
                    interference=False,
                    failures=model,
                    checkpoint=policy,
                    prediction=predictor,
                    horizon=args.days * 86400.0,
                    seed=seed,
                )
                (job,) = run.jobs
                goodputs.append(job["goodput"])
                counts.append(run.cluster.get("prediction", {}))
            expected = expected_goodput_with_prediction(
                INTERVAL_S,
                write,
                RESTART_S,
                mtbf,
                recall=0.0 if recall is None else recall,
                precision=PRECISION,
                lead_s=0.0 if lead is None else lead,
            )
            rows.append(
                {
                    "write_s": write,
                    "recall": recall,
                    "lead_s": lead,
                    "precision": None if recall is None else PRECISION,
                    "goodput_per_seed": goodputs,
                    "goodput": float(np.mean(goodputs)),
                    "expected_goodput": expected["goodput"],
                    "prediction_counts": counts,
                }
            )
    for row in rows:
        base = next(r for r in rows if r["write_s"] == row["write_s"] and r["recall"] is None)
        seeds = np.array(row["goodput_per_seed"]) - np.array(base["goodput_per_seed"])
        row["gain_points"] = float(100 * seeds.mean())
        row["gain_points_spread"] = [float(100 * seeds.min()), float(100 * seeds.max())]
        row["expected_gain_points"] = 100 * (row["expected_goodput"] - base["expected_goodput"])
    summary = {
        "job": {**JOB, "mtbf_s": mtbf},
        "fabric": fabric.name,
        "checkpoint": {"interval_s": INTERVAL_S, "restart_s": RESTART_S},
        "days": args.days,
        "fail_seeds": args.fail_seeds,
        "rows": rows,
    }
    with open(os.path.join(args.out, "prediction.json"), "w") as handle:
        json.dump(summary, handle, indent=2)
    plot_prediction_gain(
        os.path.join(args.out, "prediction_gain.png"),
        rows,
        interval_s=INTERVAL_S,
        restart_s=RESTART_S,
        mtbf_s=mtbf,
        precision=PRECISION,
    )
    for row in rows:
        print(
            f"write {row['write_s']:>5.0f} s recall {row['recall']!s:>4} lead "
            f"{row['lead_s']!s:>6} s: goodput {row['goodput']:.4f} (expected "
            f"{row['expected_goodput']:.4f}), gain {row['gain_points']:+.2f} points "
            f"(expected {row['expected_gain_points']:+.2f})"
        )
    return rows


if __name__ == "__main__":
    main()
