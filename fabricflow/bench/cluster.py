"""Benchmark section ``cluster``: a 30-day trace of 1,000 jobs on clos-100k with failures.

``synthetic_trace(1000)`` (Poisson arrivals over 30 days, power-of-two sizes 1-16,384 GPUs
equally likely per power of two, which offers about half the month's GPU-hours, the
synthetic model mix) on the ``clos-100k`` preset with the ``topology`` scheduler,
interference on, every component class failing at the published default MTBFs,
checkpoints every 30 min (60 s writes), 10 min restarts and 16 hot spare nodes. Reports
the wall time (target on the 2-core machine: <= 600 s), events, the cost per scheduling
pass and per placement call, the cost per interference re-evaluation, jobs done,
utilization, goodput and failures. ``--quick``: 100 jobs of up to 512 GPUs over 3 days
on dgx-h100-superpod with 2 spare nodes.
"""

from __future__ import annotations

import time

SECTION = "cluster"
DESCRIPTION = "cluster simulation: 1,000-job 30-day trace on clos-100k with failures"
TARGET_S = 600.0


def run(args) -> dict:
    quick = bool(getattr(args, "quick", False))
    if quick:
        return _case("dgx-h100-superpod", jobs=100, days=3.0, largest=512, spares=2)
    result = _case("clos-100k", jobs=1000, days=30.0, largest=16384, spares=16)
    result["targets"] = {"total_s": TARGET_S}
    result["meets_targets"] = bool(result["total_s"] <= TARGET_S)
    return result


def _case(fabric_name: str, *, jobs: int, days: float, largest: int, spares: int) -> dict:
    from ..cluster.failures import CheckpointPolicy
    from ..cluster.simulate import simulate_cluster
    from ..cluster.standalone import clear_cache
    from ..cluster.trace import synthetic_trace
    from ..fabric.spec import load_fabric

    began = time.perf_counter()
    fabric = load_fabric(fabric_name)
    horizon = days * 86400.0
    # sizes 1..16,384 GPUs, equally likely per power of two: about half the GPU-hours of
    # clos-100k offered over the month (the default size mix would offer ~2%)
    sizes = tuple(2**k for k in range(largest.bit_length()))
    trace = synthetic_trace(
        jobs,
        seed=0,
        mean_interarrival_s=horizon / jobs,
        sizes=sizes,
        size_exponent=0.0,
        fabric=fabric,
    )
    built = time.perf_counter()
    clear_cache()  # standalone step times are part of the cost
    policy = CheckpointPolicy(interval_s=1800.0, write_s=60.0, restart_s=600.0, spares=spares)
    run = simulate_cluster(
        fabric,
        trace,
        scheduler="topology",
        failures="default",
        checkpoint=policy,
        horizon=horizon,
        seed=0,
    )
    ended = time.perf_counter()
    cluster = run.cluster
    stats = cluster["stats"]
    slowdowns = [job["slowdown"] for job in run.jobs if job["slowdown"] is not None]
    return {
        "fabric": fabric_name,
        "gpus": fabric.num_gpus,
        "jobs": jobs,
        "days": days,
        "build_s": built - began,
        "simulate_s": ended - built,
        "total_s": ended - began,
        "events": cluster["events"],
        "schedule_passes": stats["schedule_passes"],
        "place_calls": stats["place_calls"],
        "schedule_s": stats["schedule_s"],
        "per_schedule_pass_ms": 1e3 * stats["schedule_s"] / max(1, stats["schedule_passes"]),
        "per_place_call_ms": 1e3 * stats["schedule_s"] / max(1, stats["place_calls"]),
        "reevaluations": stats["reevaluations"],
        "reevaluate_s": stats["reevaluate_s"],
        "per_reevaluation_ms": 1e3 * stats["reevaluate_s"] / max(1, stats["reevaluations"]),
        "fabric_updates": stats["fabric_updates"],
        "per_fabric_update_ms": 1e3 * stats["fabric_update_s"] / max(1, stats["fabric_updates"]),
        "interference_stats": stats.get("interference"),
        "jobs_done": cluster["jobs_done"],
        "utilization": cluster["utilization"],
        "goodput": cluster["goodput"],
        "failures": cluster["failures_by_component"],
        "fragmentation": cluster["fragmentation"],
        "queue_wait_s": cluster["queue_wait_s"],
        "mean_slowdown": sum(slowdowns) / len(slowdowns) if slowdowns else None,
    }
