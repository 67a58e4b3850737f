"""Benchmark section ``fabric``: build the 100k-GPU preset and ECMP-route 1M flows.

Targets (2-core machine): build ``clos-100k`` in <= 20 s and <= 4 GiB peak;
ECMP-route 1,000,000 flows (all-to-all in groups spread over the fabric) in <= 10 s.
"""

from __future__ import annotations

from fabricflow.bench._measure import measured
from fabricflow.fabric.spec import load_fabric
from fabricflow.routing.route import route
from fabricflow.traffic.patterns import alltoall_groups


def run(args) -> dict:
    quick = bool(getattr(args, "quick", False))
    result: dict = {"preset": "clos-100k"}
    with measured(result, "build"):
        fabric = load_fabric("clos-100k", **({"gpus": 4096} if quick else {}))
    result.update(gpus=fabric.num_gpus, nodes=fabric.num_nodes, links=fabric.num_links)
    with measured(result, "summary"):
        summary = fabric.summary()
    result["bisection_bandwidth_Bps"] = summary["bisection_bandwidth_Bps"]

    # 16-GPU expert groups strided across the whole fabric: 4,167 groups x 240 pairs.
    group_size, num_groups = 16, (4167 if not quick else 64)
    src, dst = alltoall_groups(fabric.num_gpus, group_size, num_groups)
    result["flows"] = int(src.size)
    with measured(result, "route_ecmp"):
        routes = route(fabric, src, dst, policy="ecmp", seed=0)
    result["route_ecmp_flows_per_s"] = src.size / result["route_ecmp_s"]
    result["max_hops"] = routes.max_hops
    failed = fabric.without(link_kind="spine", fraction=0.01, seed=1)
    with measured(result, "route_ecmp_1pct_spine_failed"):
        route(failed, src, dst, policy="ecmp", seed=0)
    with measured(result, "route_multipath_k4"):
        multipath = route(fabric, src, dst, policy="multipath", k=4, seed=0)
    result["multipath_max_entries"] = multipath.max_hops
    result["targets"] = {"build_s": 20.0, "build_peak_rss_bytes": 4 * 2**30, "route_ecmp_s": 10.0}
    result["meets_targets"] = bool(
        result["build_s"] <= 20
        and result["build_peak_rss_bytes"] <= 4 * 2**30
        and result["route_ecmp_s"] <= 10
    )
    return result
