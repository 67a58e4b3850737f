"""``fabricflow fabric NAME|PATH``: build a fabric and print its summary.

``--out DIR`` also writes ``summary.json`` (the ``--json`` object), ``fabric_tiers.png``
(capacity per link kind; per switch tier, down vs up capacity with the oversubscription
and the ports used) and ``topology.png`` (a sketch: one row per tier with a few of its
switches and the links among them).
"""

from __future__ import annotations

from pathlib import Path

from ._common import add_json_flag, output_folder, print_json, write_json_file, write_outputs


def register(subparsers) -> None:
    parser = subparsers.add_parser("fabric", help="summary of a fabric preset or YAML spec")
    parser.add_argument(
        "fabric", help="preset name (see `fabricflow presets`) or path to a YAML spec"
    )
    parser.add_argument(
        "--out",
        default=None,
        type=output_folder,
        help="folder for summary.json, fabric_tiers.png and topology.png (created)",
    )
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    from ..fabric.spec import load_fabric

    fabric = load_fabric(args.fabric)
    summary = {**fabric.summary(), "transport": fabric.transport.to_dict()}
    if args.out is not None:
        # a file that cannot be written is reported after the result (exit 1)
        summary["files"] = write_outputs(args, "--out", _write_files, fabric, summary, args.out)
    if args.json:
        print_json(summary)
    else:
        print_summary(summary)
        if args.out is not None:
            print("  files: " + ", ".join(summary["files"]))
    return 0


def _write_files(fabric, summary: dict, folder: str) -> None:
    """summary.json and the two figures into ``folder`` (each file whole or absent)."""
    from ..study.fabric_plots import plot_tiers, plot_topology_sketch

    out = Path(folder)
    write_json_file(str(out / "summary.json"), summary)
    plot_tiers(fabric, out / "fabric_tiers.png")
    plot_topology_sketch(fabric, out / "topology.png")


def print_summary(summary: dict) -> None:
    from ..fabric.summary import port_usage_text
    from ..units import format_bandwidth

    scale_up = summary.get("scale_up_link_kind")
    print(f"{summary['name']}: {summary['description']}")
    domains = (
        f", {scale_up} scale-up domains of {summary['scale_up_domain_size']}" if scale_up else ""
    )
    print(f"  GPUs {summary['num_gpus']:,} ({summary['gpus_per_node']} per node{domains})")
    tiers = ", ".join(f"{t['switches']:,} {t['name']}" for t in summary["tiers"])
    print(
        f"  switches {summary['num_network_switches']:,} network"
        + (f" ({tiers})" if tiers else " (a direct chip-to-chip network)")
        + (
            f" + {summary['num_scale_up_switches']:,} scale-up (one per {scale_up} domain)"
            if summary["num_scale_up_switches"]
            else ""
        )
    )
    failed = (
        f"; failed: {summary['failed_cables']:,} cables ({summary['failed_links']:,} directed "
        "links down)"
        if summary["failed_links"] or summary["failed_cables"]
        else ""
    )
    print(f"  directed links {summary['num_links']:,} (a cable is two){failed}")
    for kind, count in summary["links_per_kind"].items():
        cables = summary["cables_per_kind"].get(kind, 0)
        bundled = f" in {count // 2:,} bundles" if cables > count // 2 and count % 2 == 0 else ""
        print(
            f"  {kind:<16} {cables:>9,} cables{bundled:<18} total "
            f"{format_bandwidth(summary['capacity_per_kind_Bps'][kind])} (both directions)"
        )
    for tier in summary["tiers"]:
        ratio = tier["oversubscription"]
        ratio_text = "top tier" if ratio is None else f"oversubscription {ratio:.3g}:1"
        print(
            f"  tier {tier['tier']} {tier['name']:<6} {tier['switches']:>6,} switches, "
            f"{ratio_text}, ports used {port_usage_text(tier)}"
        )
    transport = summary.get("transport")
    if transport is not None:
        print(
            f"  transport {transport['protocol']}: {transport['load_balancing']} load balancing, "
            f"lossless by {transport['lossless']}, congestion control: "
            f"{transport['congestion_control']}"
        )
    ratio = summary.get("bisection_ratio")
    print(
        f"  bisection bandwidth {format_bandwidth(summary['bisection_bandwidth_Bps'])} one "
        f"direction: {format_bandwidth(summary['bisection_per_gpu_Bps'])} per GPU over the "
        f"{summary['num_gpus'] // 2:,} GPUs of one half"
        + (f", {100 * ratio:.3g} % of full bisection" if ratio is not None else "")
    )
    for warning in summary.get("warnings", []):
        print(f"  warning: {warning}")
