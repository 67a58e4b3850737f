"""``fabricflow fabric NAME|PATH``: build a fabric and print its summary."""

from __future__ import annotations

from ._common import add_json_flag, print_json


def register(subparsers) -> None:
    parser = subparsers.add_parser("fabric", help="summary of a fabric preset or YAML spec")
    parser.add_argument(
        "fabric", help="preset name (see `fabricflow presets`) or path to a YAML spec"
    )
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    from ..fabric.spec import load_fabric

    fabric = load_fabric(args.fabric)
    summary = {**fabric.summary(), "transport": fabric.transport.to_dict()}
    if args.json:
        print_json(summary)
    else:
        print_summary(summary)
    return 0


def print_summary(summary: dict) -> None:
    from ..units import format_bandwidth

    print(f"{summary['name']}: {summary['description']}")
    print(
        f"  GPUs {summary['num_gpus']:,} ({summary['gpus_per_node']} per node, scale-up domains of "
        f"{summary['scale_up_domain_size']}), switches {summary['num_switches']:,}, "
        f"directed links {summary['num_links']:,}"
        + (f" ({summary['failed_links']} failed)" if summary["failed_links"] else "")
    )
    for kind, count in summary["links_per_kind"].items():
        print(
            f"  links {kind:<8} {count:>9,}  total {format_bandwidth(summary['capacity_per_kind_Bps'][kind])}"
        )
    for tier in summary["tiers"]:
        ratio = tier["oversubscription"]
        ratio_text = "top tier" if ratio is None else f"oversubscription {ratio:.3g}:1"
        print(
            f"  tier {tier['tier']} {tier['name']:<6} {tier['switches']:>6,} switches, {ratio_text}"
        )
    transport = summary.get("transport")
    if transport is not None:
        print(
            f"  transport {transport['protocol']}: {transport['load_balancing']} load balancing, "
            f"lossless by {transport['lossless']}, congestion control: "
            f"{transport['congestion_control']}"
        )
    print(
        f"  bisection bandwidth {format_bandwidth(summary['bisection_bandwidth_Bps'])} "
        f"({summary['bisection_bandwidth_Bps'] / 1e12:.4g} TB/s, one direction)"
    )
