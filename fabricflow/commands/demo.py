"""``fabricflow demo``: the main job on the default preset, with plots written to disk.

Builds the default fabric (``clos-100k``), routes a ring over all GPUs and an MoE-style
all-to-all inside expert groups spread over the fabric (ECMP), computes max-min fair
rates for the all-to-all with the JAX solver, and writes design-review figures into
``--out``: link counts/capacity per kind, flows per link and utilization per tier.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from fabricflow.collective.groups import make_groups
from fabricflow.commands.common import (
    add_fabric_flags,
    add_json_flag,
    load_fabric_flags,
    output_folder,
    print_json,
    write_outputs,
)
from fabricflow.commands.fabric import print_summary
from fabricflow.errors import SpecError
from fabricflow.plots.fabric import plot_link_values_by_kind, plot_tiers
from fabricflow.routing.route import route
from fabricflow.solve.maxmin.checked import max_min_solution
from fabricflow.solve.maxmin.link_views import link_utilization, tier_summary
from fabricflow.traffic.patterns import alltoall_groups, ring

DEFAULT_PRESET = "clos-100k"
DEFAULT_GROUP_SIZE = 8


def register(parser) -> None:
    add_fabric_flags(parser, default=DEFAULT_PRESET)
    parser.add_argument(
        "--out",
        default="fabricflow-out",
        type=output_folder,
        help="output folder for figures (created)",
    )
    parser.add_argument(
        "--group-size",
        type=int,
        default=None,
        help="expert group size of the all-to-all; must divide the GPU count (default: the "
        f"largest divisor of the GPU count up to {DEFAULT_GROUP_SIZE}, or the GPU count "
        "when it has none)",
    )
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    out = Path(args.out)
    timings = {}
    start = time.perf_counter()
    fabric = load_fabric_flags(args)
    timings["build_s"] = time.perf_counter() - start
    args.group_size = _group_size(fabric, args.group_size)
    summary = fabric.summary()
    if not args.json:
        print_summary(summary)

    ring_routes, a2a_routes, solution, rates = _route_and_solve(fabric, args.group_size, timings)
    utilization = link_utilization(a2a_routes.links, fabric.capacity, rates)
    tiers = tier_summary(utilization, fabric.link_kind_id, fabric.link_kinds, fabric.link_up)

    flows_per_link = a2a_routes.link_load()
    # a figure that cannot be written is reported after the result (exit 1)
    figures = write_outputs(
        args,
        "--out",
        _write_figures,
        fabric,
        out,
        utilization,
        flows_per_link,
        a2a_routes,
        int(solution.rounds),
        args.group_size,
    )

    result = {
        "fabric": summary["name"],
        "num_gpus": fabric.num_gpus,
        "num_links": fabric.num_links,
        "bisection_bandwidth_Bps": summary["bisection_bandwidth_Bps"],
        "ring_flows": ring_routes.num_flows,
        "ring_hops_histogram": np.bincount(ring_routes.hop_count).tolist(),
        "alltoall_flows": a2a_routes.num_flows,
        "alltoall_max_flows_per_link": {
            kind: float(flows_per_link[fabric.links_of_kind(kind)].max())
            for kind in summary["links_per_kind"]
        },
        "alltoall_rate_Bps": {
            "min": float(rates.min()),
            "median": float(np.median(rates)),
            "max": float(rates.max()),
        },
        "alltoall_aggregate_Bps": float(rates.sum()),
        "alltoall_saturated_links_per_kind": {kind: t["saturated"] for kind, t in tiers.items()},
        "maxmin_rounds": int(solution.rounds),
        "timings": timings,
        "figures": figures,
    }
    if args.json:
        print_json(result)
    else:
        _print_text(result, args.group_size)
    return 0


def _route_and_solve(fabric, group_size: int, timings: dict):
    """``(ring_routes, alltoall_routes, solution, rates)``: a ring over every GPU routed,
    an all-to-all in groups of ``group_size`` routed (ECMP, seed 0) and its max-min rates
    solved (``rates`` float64 ``[F]`` bytes/s); the wall seconds of each step go into ``timings`` (``route_ring_s``,
    ``route_alltoall_s``, ``maxmin_alltoall_s``)."""
    start = time.perf_counter()
    ring_routes = route(fabric, *ring(fabric.num_gpus))
    timings["route_ring_s"] = time.perf_counter() - start
    src, dst = alltoall_groups(fabric.num_gpus, group_size)
    start = time.perf_counter()
    a2a_routes = route(fabric, src, dst, policy="ecmp", seed=0)
    timings["route_alltoall_s"] = time.perf_counter() - start

    start = time.perf_counter()
    solution = max_min_solution(a2a_routes.links, fabric.capacity)
    rates = np.asarray(solution.rates, dtype=np.float64)
    timings["maxmin_alltoall_s"] = time.perf_counter() - start
    return ring_routes, a2a_routes, solution, rates


def _print_text(result: dict, group_size: int) -> None:
    """The demo's answer as text: the ring's flows and hop counts, the all-to-all's flows
    and busiest links per kind, its max-min rates (GB/s) and saturated links, the wall
    seconds of each step and the figures written."""
    print(
        f"ring over {result['num_gpus']:,} GPUs: {result['ring_flows']:,} flows, "
        f"hop counts {dict(enumerate(result['ring_hops_histogram']))}"
    )
    print(
        f"all-to-all in groups of {group_size}: {result['alltoall_flows']:,} flows; "
        f"max flows per link by kind {result['alltoall_max_flows_per_link']}"
    )
    print(
        f"max-min fair rates: min {result['alltoall_rate_Bps']['min'] / 1e9:.3g} GB/s, median "
        f"{result['alltoall_rate_Bps']['median'] / 1e9:.3g} GB/s, max "
        f"{result['alltoall_rate_Bps']['max'] / 1e9:.3g} GB/s; aggregate "
        f"{result['alltoall_aggregate_Bps'] / 1e12:.4g} TB/s in {result['maxmin_rounds']} rounds; "
        f"saturated links {result['alltoall_saturated_links_per_kind']}"
    )
    print("timings: " + ", ".join(f"{k} {v:.2f}" for k, v in result["timings"].items()))
    print("figures: " + ", ".join(result["figures"]))


def _write_figures(fabric, out, utilization, flows_per_link, routes, rounds, group_size) -> None:
    """The demo's three figures into ``out``: capacity per tier, utilization and flows per
    link by kind."""
    plot_tiers(fabric, out / "fabric_tiers.png")
    plot_link_values_by_kind(
        fabric,
        utilization,
        out / "alltoall_utilization.png",
        xlabel="link utilization",
        title=f"{fabric.name}: max-min fair all-to-all, groups of {group_size} "
        f"({routes.num_flows:,} flows, {rounds} rounds)",
    )
    plot_link_values_by_kind(
        fabric,
        flows_per_link,
        out / "alltoall_flows_per_link.png",
        xlabel="flows per link",
        title=f"{fabric.name}: all-to-all in groups of {group_size}, ECMP "
        f"({routes.num_flows:,} flows)",
    )


def _group_size(fabric, group_size: int | None) -> int:
    """``--group-size``, checked as ``collective`` checks it (it must divide the GPU count:
    the all-to-all would silently leave the remaining GPUs out); the default is the
    largest divisor of the GPU count up to :data:`DEFAULT_GROUP_SIZE`, or the GPU count."""
    num_gpus = fabric.num_gpus
    if num_gpus < 2:
        raise SpecError(
            "fabric",
            f"demo needs at least 2 GPUs (a ring and an all-to-all); {fabric.name} has {num_gpus}",
        )
    if group_size is None:
        divisors = [d for d in range(2, DEFAULT_GROUP_SIZE + 1) if num_gpus % d == 0]
        return divisors[-1] if divisors else num_gpus
    make_groups(num_gpus, group_size)  # raises collective's SpecError on a bad size
    return group_size
