"""Benchmark section ``report``: the design-review page of a default-size job.

Case (2-core machine target): Llama-3-70B on 1,024 H100 of ``dgx-h100-superpod``, the
command's defaults (30 s layout search, failures of 1, 2, 5 and 10 % of the leaf-spine
cables with 3 draws each): the whole report, computed and rendered, in <= 2 min.
Seconds per section, the peak memory and the page's size are reported. ``--quick``:
Llama-3-8B on 64 GPUs with a 5 s search and one draw per fraction.
"""

from __future__ import annotations

from fabricflow.bench._measure import measured
from fabricflow.fabric.spec import load_fabric
from fabricflow.report.build import build_report
from fabricflow.report.html import fabricflow_version, render_html

CASES = {
    "llama3_70b_1k": dict(
        fabric="dgx-h100-superpod", model="llama3-70b", gpu="h100-sxm", gpus=1024,
        budget_s=30.0, fail_seeds=3, target_s=120.0,
    ),
}  # fmt: skip
QUICK = {
    "llama3_8b_64": dict(
        fabric="dgx-h100-superpod", model="llama3-8b", gpu="h100-sxm", gpus=64,
        budget_s=5.0, fail_seeds=1, target_s=60.0,
    ),
}  # fmt: skip


def run_case(case: dict) -> dict:
    out: dict = {k: case[k] for k in ("fabric", "model", "gpu", "gpus", "budget_s", "fail_seeds")}
    with measured(out, "report"):
        report = build_report(
            load_fabric(case["fabric"]), case["model"], case["gpu"], case["gpus"],
            budget_s=case["budget_s"], fail_seeds=case["fail_seeds"],
        )  # fmt: skip
        page = render_html(report, version=fabricflow_version(), command="fabricflow bench report")
    out.update(
        sections_s={s["id"]: s["seconds"] for s in report["sections"]},
        figures=sum(len(s["figures"]) for s in report["sections"]),
        page_bytes=len(page.encode("utf-8")),
        layout=report["headline"]["layout"],
        step_time_s=report["headline"]["step_time_s"],
        worst_failure_slowdown=report["headline"].get("worst_failure_slowdown"),
        target_s=case["target_s"],
    )
    out["meets_target"] = bool(out["report_s"] <= case["target_s"])
    return out


def run(args) -> dict:
    cases = QUICK if getattr(args, "quick", False) else CASES
    return {name: run_case(case) for name, case in cases.items()}
