"""Benchmark section ``design``: ``fabricflow design`` for Llama-3-405B on 16,384 H100.

Case (2-core machine target): the 72 three-tier InfiniBand and RoCE designs of the default space
(oversubscription 1/3/7, rail / ToR / rail-only, 1 or 2 planes, 400G or 800G per GPU,
InfiniBand-AR or RoCE-ECMP) for one job (global batch 2,048, sequence 8,192, TP pinned
to 8, a layout search of 512 units of work per design), into a fresh sweep store with two local workers:
the whole search in <= 30 min. Seconds, designs done and the winner are reported.
``--quick``: Llama-3-8B on 256 GPUs, 2-tier designs of one plane at 400G, 16 units of work.
"""

from __future__ import annotations

import tempfile

from fabricflow.bench._measure import measured
from fabricflow.design.search import design_fabric

CASES = {
    "llama3_405b_16k": dict(
        job={"model": "llama3-405b", "gpus": 16384, "global_batch": 2048, "seq_len": 8192,
             "fixed": {"tp": 8}},
        space={"tiers": [3], "transport": ["ib", "roce"]}, layout_budget_work=512, workers=2, target_s=1800.0,
    ),
}  # fmt: skip
QUICK = {
    "llama3_8b_256": dict(
        job={"model": "llama3-8b", "gpus": 256, "global_batch": 256, "seq_len": 4096,
             "fixed": {"tp": 8}},
        space={"tiers": [2], "planes": [1], "nic_speed": ["400Gbps"]}, layout_budget_work=16,
        workers=2, target_s=600.0,
    ),
}  # fmt: skip


def run_case(case: dict) -> dict:
    out: dict = {"job": case["job"], "space": case["space"], "workers": case["workers"]}
    with tempfile.TemporaryDirectory(prefix="fabricflow-bench-design-") as folder:
        with measured(out, "design"):
            search = design_fabric(
                {"gpu": "h100-sxm", "jobs": [case["job"]]}, space=case["space"],
                store=f"{folder}/designs.zarr", layout_budget_work=case["layout_budget_work"],
                workers=case["workers"], progress=False,
            )  # fmt: skip
    out.update(
        designs=len(search.rows),
        infeasible=len(search.infeasible),
        failed=len(search.failed),
        best=search.best["design"] if search.best else None,
        pareto=[r["design"] for r in search.rows if r["pareto"]],
        searches_finished=sum(r["search"] == "finished" for r in search.rows),
        target_s=case["target_s"],
    )
    out["meets_target"] = bool(out["design_s"] <= case["target_s"])
    return out


def run(args) -> dict:
    cases = QUICK if getattr(args, "quick", False) else CASES
    return {name: run_case(case) for name, case in cases.items()}
