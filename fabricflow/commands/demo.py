"""``fabricflow demo``: the main job on the default preset, with plots written to disk.

Builds the default fabric (``clos-100k``), routes a ring over all GPUs and an MoE-style
all-to-all inside expert groups spread over the fabric, computes max-min fair rates for
the all-to-all, and writes design-review figures into ``--out``.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ._common import add_json_flag, print_json

DEFAULT_PRESET = "clos-100k"


def register(subparsers) -> None:
    parser = subparsers.add_parser("demo", help="route and solve traffic on the default preset, write plots")
    parser.add_argument("--fabric", default=DEFAULT_PRESET, help=f"preset or YAML (default {DEFAULT_PRESET})")
    parser.add_argument("--out", default="fabricflow-out", help="output folder for figures (created)")
    parser.add_argument("--group-size", type=int, default=8, help="expert group size of the all-to-all")
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    from ..fabric.spec import load_fabric
    from ..routing.route import route
    from ..study.fabric_plots import plot_link_values_by_kind, plot_tiers
    from ..traffic import alltoall_groups, ring
    from .fabric import print_summary

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    timings = {}
    start = time.perf_counter()
    fabric = load_fabric(args.fabric)
    summary = fabric.summary()
    timings["build_s"] = time.perf_counter() - start
    if not args.json:
        print_summary(summary)

    start = time.perf_counter()
    ring_routes = route(fabric, *ring(fabric.num_gpus))
    timings["route_ring_s"] = time.perf_counter() - start
    src, dst = alltoall_groups(fabric.num_gpus, args.group_size)
    start = time.perf_counter()
    a2a_routes = route(fabric, src, dst, policy="ecmp", seed=0)
    timings["route_alltoall_s"] = time.perf_counter() - start

    figures = [str(plot_tiers(fabric, out / "fabric_tiers.png"))]
    flows_per_link = a2a_routes.link_load()
    figures.append(str(plot_link_values_by_kind(
        fabric, flows_per_link, out / "alltoall_flows_per_link.png", xlabel="flows per link",
        title=f"{fabric.name}: all-to-all in groups of {args.group_size}, ECMP "
              f"({a2a_routes.num_flows:,} flows)")))

    result = {
        "fabric": summary["name"], "num_gpus": fabric.num_gpus, "num_links": fabric.num_links,
        "bisection_bandwidth_Bps": summary["bisection_bandwidth_Bps"],
        "ring_flows": ring_routes.num_flows,
        "ring_hops_histogram": np.bincount(ring_routes.hop_count).tolist(),
        "alltoall_flows": a2a_routes.num_flows,
        "alltoall_max_flows_per_link": {kind: float(flows_per_link[fabric.links_of_kind(kind)].max())
                                        for kind in summary["links_per_kind"]},
        "timings": timings, "figures": figures,
    }
    if args.json:
        print_json(result)
    else:
        print(f"ring over {fabric.num_gpus:,} GPUs: {ring_routes.num_flows:,} flows, "
              f"hop counts {dict(enumerate(result['ring_hops_histogram']))}")
        print(f"all-to-all in groups of {args.group_size}: {a2a_routes.num_flows:,} flows; "
              f"max flows per link by kind {result['alltoall_max_flows_per_link']}")
        print("timings: " + ", ".join(f"{k} {v:.2f}" for k, v in timings.items()))
        print("figures: " + ", ".join(figures))
    return 0
