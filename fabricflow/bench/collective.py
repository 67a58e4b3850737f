"""Benchmark section ``collective``: the reduce-scatter of all data-parallel groups of a
16,384-GPU job on a 3-tier fabric, routed and solved together.

Target (2-core machine): at most 30 s for the whole collective (routing every
hop of every ring channel, one max-min solve, pricing), with ``algorithm="ring"`` and with
``algorithm="auto"`` (every applicable algorithm solved). The job is the first 16,384 GPUs of
``clos-100k`` (3 tiers); data parallelism over 8 nodes apart: 2,048 groups of 8 GPUs,
``GPU i, i + 2048, ...`` (the layout of a job with 2,048-way model parallelism).
"""

from __future__ import annotations

from fabricflow.bench._measure import measured
from fabricflow.collective import make_groups, prepare_collective
from fabricflow.fabric.spec import load_fabric

TARGET_S = 30.0


def run(args) -> dict:
    quick = bool(getattr(args, "quick", False))
    gpus = 4096 if quick else 16384
    group_size = 8
    result: dict = {
        "preset": "clos-100k",
        "gpus": gpus,
        "group_size": group_size,
        "op": "reduce_scatter",
        "size_bytes": 2**30,
    }
    with measured(result, "build"):
        fabric = load_fabric("clos-100k", gpus=gpus)
    groups = make_groups(gpus, group_size, layout="strided")
    result["num_groups"] = int(groups.shape[0])
    for algorithm, routing in (("ring", "ecmp"), ("ring", "multipath"), ("auto", "ecmp")):
        key = f"{algorithm}_{routing}"
        with measured(result, key):
            # What collective_time does, keeping the phases to report their solvers.
            prepared = prepare_collective(
                fabric, "reduce_scatter", groups, algorithm=algorithm, routing=routing
            )
            res = prepared.evaluate([2**30])[0]
        result[f"{key}_algorithm"] = res.algorithm
        result[f"{key}_solvers"] = solvers_used(prepared)
        result[f"{key}_flows"] = res.num_flows
        result[f"{key}_busbw_GBps"] = res.busbw_Bps / 1e9
        result[f"{key}_group_time_spread"] = float(res.group_time_s.max() / res.group_time_s.min())
        result[f"{key}_bottleneck_kinds"] = sorted(set(res.bottleneck_kinds))
    result["target_s"] = TARGET_S
    result["meets_target"] = bool(max(result["ring_ecmp_s"], result["auto_ecmp_s"]) <= TARGET_S)
    return result


def solvers_used(prepared) -> list[str]:
    """Sorted names of the max-min backends (``numpy``, ``jax``) that solved the phases of
    a :class:`~fabricflow.collective.timing.PreparedCollective` (every candidate algorithm)."""
    return sorted({sp.solver for s in prepared.solved for sp in s.phases})
