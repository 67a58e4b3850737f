"""``fabricflow fabric NAME|PATH``: build a fabric and print its summary.

``--out DIR`` also writes ``summary.json`` (the ``--json`` object), ``fabric_tiers.png``
(capacity per link kind; per switch tier, down vs up capacity with the oversubscription
and the ports used) and ``topology.png`` (a sketch: one row per tier with a few of its
switches and the links among them).

``slurm:PATH`` reads a Slurm ``topology.conf`` and ``netlist:PATH`` a per-host
``host,tor,agg,core`` CSV (``--gpus-per-node``, ``--nic-bandwidth``, optionally
``--companion FILE``; docs/netlist.md); ``--export slurm-tree|slurm-block --out FILE`` writes the
fabric as one (to stdout without ``--out``; docs/slurm.md), and ``--export yaml`` as a
fabric spec that ``load_fabric`` reads back to the same fabric.
"""

from __future__ import annotations

import sys
from pathlib import Path

from fabricflow.atomic import write_text
from fabricflow.commands.common import (
    add_fabric_flags,
    add_json_flag,
    check_out_file,
    check_out_folder,
    load_fabric_flags,
    output_folder,
    print_json,
    write_json_file,
    write_outputs,
)
from fabricflow.errors import SpecError
from fabricflow.fabric.bom import bill_of_materials
from fabricflow.fabric.cost import fabric_cost
from fabricflow.fabric.cost_table import read_cost_file
from fabricflow.fabric.slurm import slurm_block_text, slurm_tree_text
from fabricflow.fabric.spec import spec_yaml_text
from fabricflow.fabric.summary import failure_text, port_usage_text
from fabricflow.plots.fabric import plot_tiers, plot_topology_sketch
from fabricflow.units import format_bandwidth


def register(parser) -> None:
    add_fabric_flags(parser, positional=True)
    parser.add_argument(
        "--out",
        default=None,
        type=_out_path,
        metavar="DIR|FILE",
        help="folder for summary.json, fabric_tiers.png and topology.png (created); "
        "with --export, the file to write",
    )
    parser.add_argument(
        "--export",
        choices=EXPORTS,
        default=None,
        help="write the fabric as a Slurm topology.conf (tree or block form) or as a YAML "
        "spec that reads back to the same fabric, to --out FILE (stdout without --out)",
    )
    parser.add_argument(
        "--bom",
        action="store_true",
        help="also print the bill of materials (switches, NICs, scale-up, optics, cables)",
    )
    parser.add_argument(
        "--cost",
        action="store_true",
        help="also print network capex and power, per tier and per GPU (implies --bom)",
    )
    parser.add_argument(
        "--cost-file",
        metavar="PATH",
        help="YAML/JSON price table overrides (the layout of a spec's cost: section)",
    )
    add_json_flag(parser)
    parser.set_defaults(func=run)


EXPORTS = ("slurm-tree", "slurm-block", "yaml")


def _out_path(text: str) -> str:
    """``--out``: a folder, or with ``--export`` a file; checked in :func:`run` once it
    is known which."""
    return output_folder(text)


def _export(args, fabric) -> int:
    """``--export``: the topology file to ``--out`` or stdout."""
    writer = {"slurm-tree": slurm_tree_text, "slurm-block": slurm_block_text}
    text = writer.get(args.export, spec_yaml_text)(fabric)
    if args.out is None:
        if args.json:
            print_json({"fabric": fabric.name, "export": args.export, "text": text})
        else:
            sys.stdout.write(text)
        return 0
    check_out_file(args.out, "--out")
    write_text(args.out, text)
    if args.json:
        print_json({"fabric": fabric.name, "export": args.export, "files": [args.out]})
    else:
        print(f"# {args.export} of {fabric.name} written to {args.out}")
    return 0


def run(args) -> int:
    if args.export is not None:
        # the export writes the topology file alone: a summary flag would be dropped
        for flag, given in (
            ("--bom", args.bom),
            ("--cost", args.cost),
            ("--cost-file", args.cost_file),
        ):
            if given:
                raise SpecError(
                    flag.lstrip("-"),
                    f"{flag} prints a summary; --export {args.export} writes the fabric's "
                    "file only: give one or the other",
                )
    fabric = load_fabric_flags(args)
    if args.export is not None:
        return _export(args, fabric)
    if args.out is not None:
        check_out_folder(args.out, "--out")
    summary = {**fabric.summary(), "transport": fabric.transport.to_dict()}
    overrides = read_cost_file(args.cost_file) if args.cost_file else None
    if args.cost_file and not (args.bom or args.cost):
        args.cost = True
    if args.cost:
        cost = fabric_cost(fabric, overrides)
        summary["bom"] = cost.bom.to_dict()
        summary["cost"] = cost.to_dict()
    elif args.bom:
        summary["bom"] = bill_of_materials(fabric, overrides).to_dict()
    if args.out is not None:
        # a file that cannot be written is reported after the result (exit 1)
        summary["files"] = write_outputs(args, "--out", _write_files, fabric, summary, args.out)
    if args.json:
        print_json(summary)
        return 0
    print_summary(summary)
    if "cost" in summary:
        print_cost(summary["cost"])
    elif "bom" in summary:
        print_bom(summary["bom"])
    if args.out is not None:
        print("  files: " + ", ".join(summary["files"]))
    return 0


def _write_files(fabric, summary: dict, folder: str) -> None:
    """summary.json and the two figures into ``folder`` (each file whole or absent)."""
    out = Path(folder)
    write_json_file(str(out / "summary.json"), summary)
    plot_tiers(fabric, out / "fabric_tiers.png")
    plot_topology_sketch(fabric, out / "topology.png")


def print_bom(bom: dict) -> None:
    print("  bill of materials:")
    for item in bom["items"]:
        print(
            f"    {item['category']:<11} {item['part']:<20} {item['tier']:<9} "
            f"{item['count']:>9,}  {item['detail']}"
        )


def print_cost(cost: dict) -> None:
    currency = cost["currency"]
    print(f"  bill of materials and cost ({currency}):")
    for line in cost["lines"]:
        print(
            f"    {line['category']:<11} {line['part']:<20} {line['tier']:<9} "
            f"{line['count']:>9,} x {line['unit_price']:>9,.0f} = {line['price']:>14,.0f}  "
            f"{line['power_W'] / 1e3:>9,.1f} kW"
        )
    for tier, entry in cost["per_tier"].items():
        print(
            f"  tier {tier:<9} capex {entry['capex']:>15,.0f}  power {entry['power_W'] / 1e3:>9,.1f} kW"
        )
    print(
        f"  network capex {cost['capex']:,.0f} {currency} ({cost['capex_per_gpu']:,.0f} per GPU), "
        f"power {cost['power_W'] / 1e3:,.1f} kW ({cost['power_W_per_gpu']:,.1f} W per GPU)"
    )


def print_summary(summary: dict) -> None:
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
        f"; failures: {failure_text(summary)}"
        if summary["failed_links"] or summary["failed_cables"] or summary["reduced_links"]
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
        loss = transport["lossless"]  # Ultra Ethernet's says it is not lossless
        loss = loss if loss.startswith("not lossless") else f"lossless by {loss}"
        print(
            f"  transport {transport['protocol']}: {transport['load_balancing']} load balancing, "
            f"{loss}, congestion control: {transport['congestion_control']}"
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
