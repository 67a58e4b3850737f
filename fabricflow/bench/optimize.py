"""Benchmark section ``optimize``: the layout search at the scale of the question.

Cases (2-core machine targets):

* Llama-3-405B on 16,384 H100 of ``meta-llama3-24k`` (1:7 above the pods), global batch
  2,048 x 8,192 tokens, default space: >= 500,000 candidates considered, <= 5 min and
  <= 8 GiB peak; considered and timed per second; the winner against the same layout on
  the naive contiguous ``tp-cp-ep-dp-pp`` order.
* GPT-3 175B on 1,024 A100 of ``dgx-a100-superpod``, default space: <= 2 min.

The anchor is Calculon's ``llm-optimal-execution`` (about 1,000 layouts per second without
contention on such a machine). ``--quick``: Megatron 18.4B on 256 A100 only.
"""

from __future__ import annotations

from ._measure import measured

SECTION = "optimize"
DESCRIPTION = "layout search: Llama-3-405B on 16k H100 (meta-llama3-24k), GPT-3 175B on 1k A100"

CASES = {
    "llama3_405b_16k": dict(
        fabric="meta-llama3-24k", model="llama3-405b", gpu="h100-sxm", gpus=16384,
        global_batch=2048, seq_len=8192, budget_s=270.0, target_s=300.0,
        non_blocking="clos-100k",
    ),
    "gpt3_175b_1k": dict(
        fabric="dgx-a100-superpod", model="gpt3-175b", gpu="a100-80gb", gpus=1024,
        global_batch=1536, seq_len=2048, budget_s=105.0, target_s=120.0,
    ),
}  # fmt: skip
QUICK = {
    "megatron_18b_256": dict(
        fabric="dgx-a100-superpod", model="megatron-18.4b", gpu="a100-80gb", gpus=256,
        global_batch=1024, seq_len=2048, budget_s=60.0, target_s=60.0,
    ),
}  # fmt: skip


def _describe(kwargs: dict) -> dict:
    import dataclasses

    lay = dataclasses.asdict(kwargs["layout"])
    keep = ("tp", "cp", "pp", "vpp", "ep", "dp", "micro_batch", "recompute", "zero",
            "sequence_parallel", "tp_overlap", "dp_overlap")  # fmt: skip
    return {**{k: lay[k] for k in keep}, "order": kwargs["order"], "placement": kwargs["placement"]}


def run_case(case: dict) -> dict:
    from ..fabric.spec import load_fabric
    from ..optimize.search import optimize_layout
    from ..workload.step import DEFAULT_ORDER, step_time

    out: dict = {k: case[k] for k in ("fabric", "model", "gpu", "gpus", "global_batch", "seq_len")}
    fabric = load_fabric(case["fabric"])
    with measured(out, "search"):
        search = optimize_layout(
            case["model"], case["gpu"], fabric, gpus=case["gpus"],
            global_batch=case["global_batch"], seq_len=case["seq_len"],
            budget_s=case["budget_s"],
        )  # fmt: skip
    counts = search.counts
    out.update(
        space_size=search.space_size,
        counts=counts,
        exhaustive=search.exhaustive,
        stopped=search.stopped,
        considered_per_s=counts["considered"] / out["search_s"],
        evaluated_per_s=counts["evaluated"] / out["search_s"],
        best=_describe(search.best_kwargs),
        best_step_time_s=search.best.step_time_s,
        best_mfu=search.best.mfu,
        best_breakdown=search.best.breakdown,
    )
    naive = dict(search.best_kwargs, order=DEFAULT_ORDER, placement="contiguous")
    naive.pop("seed", None)
    result = step_time(case["model"], case["gpu"], fabric=fabric, **naive)
    out["naive_contiguous_default_order"] = {
        "step_time_s": result.step_time_s,
        "breakdown": result.breakdown,
        "slower_by_pct": 100 * (result.step_time_s / search.best.step_time_s - 1),
    }
    if case.get("non_blocking"):
        # The same two placements of the winner's layout on a non-blocking fabric of the
        # same NIC speed: the order and placement matter less there.
        flat = load_fabric(case["non_blocking"])
        kwargs = {k: v for k, v in search.best_kwargs.items()}
        best_flat = step_time(case["model"], case["gpu"], fabric=flat, **kwargs)
        naive_flat = step_time(case["model"], case["gpu"], fabric=flat, **naive)
        out["non_blocking"] = {
            "fabric": case["non_blocking"],
            "optimized_step_time_s": best_flat.step_time_s,
            "naive_step_time_s": naive_flat.step_time_s,
            "slower_by_pct": 100 * (naive_flat.step_time_s / best_flat.step_time_s - 1),
        }
    out["targets"] = {"search_s": case["target_s"], "peak_rss_bytes": 8 * 2**30}
    out["meets_targets"] = bool(
        out["search_s"] <= case["target_s"] and out["search_peak_rss_bytes"] <= 8 * 2**30
    )
    return out


def run(args) -> dict:
    cases = QUICK if getattr(args, "quick", False) else CASES
    return {name: run_case(case) for name, case in cases.items()}
