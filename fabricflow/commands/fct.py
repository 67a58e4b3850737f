"""``fabricflow fct``: flow completion times of a traffic pattern or an htsim matrix.

Example::

    fabricflow fct --fabric fat-tree-k16 --traffic permutation --size 2MB --json
    fabricflow fct --fabric fat-tree-k16 --traffic flows.cm --fidelity fluid --out run/

``--traffic`` is ``permutation`` (every host sends to one other, a random derangement),
``alltoall`` (every ordered pair of the first ``--hosts`` hosts), ``incast``
(``--senders`` random hosts to host 0) or the path of an htsim connection matrix
(``Nodes N`` / ``Connections M`` / ``SRC->DST id I start T_us size BYTES``). Hosts are
GPU indices of the fabric.

With ``--json`` it prints one object: ``flows``, ``fct_us`` (``p50``, ``p90``, ``p99``,
``max``, ``mean``; start to the last ACK at the sender), ``delivered_us`` (the same for
the last byte at the receiver), ``dominant`` (flows per dominant mechanism),
``seconds`` (``build``, ``route``, ``solve``, ``total`` of the command, ``process``
since the interpreter started) and the settings. ``--out DIR`` writes ``flows.csv``
(per flow, both fidelities), ``summary.json`` and ``fct_cdf.png`` (fluid against packet).
"""

from __future__ import annotations

import os
import time

import numpy as np

from fabricflow.atomic import ensure_folder, write_text
from fabricflow.commands.common import (
    add_fabric_flags,
    add_json_flag,
    load_fabric_flags,
    mark_done,
    output_folder,
    print_json,
    write_json_file,
    write_outputs,
)
from fabricflow.csv_tables import csv_text
from fabricflow.dynamics.flow_completion import flow_completion_times, percentiles
from fabricflow.errors import SpecError
from fabricflow.plots.figures import new_figure, save_figure
from fabricflow.routing.route import route
from fabricflow.solve.packet.overheads import PacketParams
from fabricflow.solve.parameters import parse_overrides
from fabricflow.solve.pfc.params import PFCParams
from fabricflow.traffic.htsim import read_connection_matrix
from fabricflow.traffic.patterns import alltoall_flows, incast_flows, permutation_flows
from fabricflow.units import parse_size

PATTERNS = ("permutation", "alltoall", "incast")


def register(parser) -> None:
    parser.description = (
        "Per-flow completion times on a fabric: max-min fluid, or packet "
        "fidelity (headers, store-and-forward, ACK path, PFC head-of-line blocking)."
    )
    add_fabric_flags(parser)
    parser.add_argument(
        "--traffic",
        required=True,
        help="permutation | alltoall | incast | FILE (htsim connection matrix)",
    )
    parser.add_argument("--size", default="2MB", help="bytes per flow for patterns")
    parser.add_argument(
        "--fidelity",
        default="packet",
        choices=["fluid", "packet"],
        help="packet: headers, store-and-forward, ACKs and PFC, what a packet simulator "
        "measures; fluid: max-min rates alone (the Python default of "
        "ff.flow_completion_times, the engine the planner builds on) (default: packet)",
    )
    parser.add_argument("--routing", default="ecmp", help="ecmp | spray | multipath | ...")
    parser.add_argument("--seed", type=int, default=0, help="traffic and ECMP hash seed")
    parser.add_argument("--pfc", default="on", choices=["on", "off"])
    parser.add_argument(
        "--cc",
        default="none",
        choices=["none", "dcqcn"],
        help="congestion control (none: senders at line rate, paced only by PFC; default: none)",
    )
    parser.add_argument(
        "--arbitration",
        default="fifo",
        choices=["fifo", "round_robin"],
        help="switch egress order in the PFC engine: one FIFO (shared-buffer switches, "
        "default) or round-robin among input ports",
    )
    parser.add_argument(
        "--hosts", type=int, default=None, help="hosts used by patterns (default: all GPUs)"
    )
    parser.add_argument("--senders", type=int, default=16, help="incast senders")
    parser.add_argument("--mtu", default="9000B", help="wire bytes per full packet")
    parser.add_argument("--header", default="64B", help="header bytes per packet")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a PFC threshold as 'fabricflow cc --set' does: pfc.xoff=50KB (XOFF "
        "per ingress, default 100KB), pfc.hysteresis=5KB (XON = XOFF - this, default 10KB)",
    )
    parser.add_argument(
        "--out", default=None, type=output_folder, help="directory for CSV, JSON and the figure"
    )
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    began = time.perf_counter()

    size_default = parse_size(args.size, "size", allow_zero=False)
    packet = PacketParams(
        mtu=parse_size(args.mtu, "mtu", allow_zero=False),
        header=parse_size(args.header, "header"),
    ).validate()
    law_overrides, pfc_overrides = parse_overrides(args.set)
    if law_overrides:
        raise SpecError(
            "--set",
            f"fct takes PFC thresholds only (pfc.xoff=..., pfc.hysteresis=...), "
            f"not {sorted(law_overrides)}",
        )
    pfc_params = PFCParams().replace(**pfc_overrides)
    fabric = load_fabric_flags(args)
    src, dst, size, start, traffic = _traffic(args, fabric.num_gpus, size_default)
    built = time.perf_counter()
    routes = route(fabric, src, dst, policy=args.routing, seed=args.seed)
    routed = time.perf_counter()
    options = {
        "pfc": args.pfc == "on",
        "pfc_params": pfc_params,
        "cc": None if args.cc == "none" else args.cc,
        "packet": packet,
        "arbitration": args.arbitration,
    }
    times = flow_completion_times(
        fabric, routes, size, start=start, fidelity=args.fidelity, **options
    )
    solved = time.perf_counter()
    other = None
    if args.out is not None:
        other_fidelity = "fluid" if args.fidelity == "packet" else "packet"
        try:
            other = flow_completion_times(
                fabric, routes, size, start=start, fidelity=other_fidelity, **options
            )
        except SpecError:  # e.g. spray routes in the PFC engine: the figure shows one curve
            other = None
    ended = time.perf_counter()
    summary = {
        "flows": int(routes.num_flows),
        "fct_us": times.percentiles(),
        "delivered_us": _percentiles(times.delivered),
        "seconds": {
            "build": built - began,
            "route": routed - built,
            "solve": solved - routed,
            "total": ended - began,
            "process": _process_seconds(),
        },
        "dominant": times.dominant_counts(),
        "fabric": fabric.name,
        "hosts": int(fabric.num_gpus),
        "traffic": traffic,
        "routing": args.routing,
        "seed": args.seed,
        "events": times.events,
        **times.settings,
    }
    if args.out is not None:  # one that cannot be written is reported after the result
        write_outputs(
            args, "--out", _write_outputs, args, fabric, routes, size, start, times, other, summary
        )
    if args.json:
        print_json(summary)
    else:
        p = summary["fct_us"]
        print(
            f"# fabricflow fct: {summary['flows']:,} flows ({traffic['kind']}) on "
            f"{fabric.name}, {args.fidelity} fidelity, pfc {args.pfc}, cc {args.cc}"
        )
        print(
            f"FCT us: p50 {p['p50']:.2f}  p90 {p['p90']:.2f}  p99 {p['p99']:.2f}  "
            f"max {p['max']:.2f}  mean {p['mean']:.2f}"
        )
        print("dominant: " + ", ".join(f"{k} {v}" for k, v in summary["dominant"].items()))
        s = summary["seconds"]
        print(
            f"seconds: build {s['build']:.2f}  route {s['route']:.2f}  "
            f"solve {s['solve']:.2f}  total {s['total']:.2f}"
        )
    return 0


def _traffic(args, num_hosts: int, size_default: float):
    """``(src, dst, size, start, description)`` from ``--traffic``."""
    kind = args.traffic
    if kind in PATTERNS:
        hosts = num_hosts if args.hosts is None else args.hosts
        if not 2 <= hosts <= num_hosts:
            raise SpecError("hosts", f"must lie in 2..{num_hosts} for this fabric, got {hosts}")
        if kind == "permutation":
            src, dst = permutation_flows(hosts, args.seed)
        elif kind == "alltoall":
            src, dst = alltoall_flows(np.arange(hosts)[None, :])
        else:
            src, dst = incast_flows(hosts, args.senders, 0, args.seed)
        size = np.full(src.size, size_default)
        return src, dst, size, None, {"kind": kind, "hosts": hosts, "size_bytes": size_default}
    if not os.path.exists(kind):
        raise SpecError(
            "traffic", f"{kind!r} is neither a pattern {list(PATTERNS)} nor an existing file"
        )

    matrix = read_connection_matrix(kind)
    if matrix.num_nodes > num_hosts:
        raise SpecError(
            "traffic",
            f"{kind}: 'Nodes {matrix.num_nodes}' exceeds the fabric's {num_hosts} hosts",
        )
    if matrix.src.size == 0:
        raise SpecError("traffic", f"{kind}: no flows ('Connections 0')")
    return (
        matrix.src,
        matrix.dst,
        matrix.size,
        matrix.start,
        {"kind": "file", "path": kind, "nodes": matrix.num_nodes},
    )


def _percentiles(values):
    return percentiles(values)


def _process_seconds() -> float | None:
    """Wall seconds since this process started (Linux ``/proc``), else None."""
    try:
        with open("/proc/self/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as handle:
            uptime = float(handle.read().split()[0])
        return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _write_outputs(args, fabric, routes, size, start, times, other, summary) -> None:
    ensure_folder(args.out)
    by = {times.fidelity: times}
    if other is not None:
        by[other.fidelity] = other
    num = routes.num_flows
    columns = {
        "flow": np.arange(num),
        "src": routes.src,
        "dst": routes.dst,
        "size_bytes": size,
        "start_us": np.zeros(num) if start is None else np.asarray(start) * 1e6,
    }
    for fidelity in ("fluid", "packet"):
        if fidelity in by:
            columns[f"fct_{fidelity}_us"] = by[fidelity].fct * 1e6
            columns[f"delivered_{fidelity}_us"] = by[fidelity].delivered * 1e6
    for name, value in times.components.items():
        columns[f"{name}_us"] = value * 1e6
    columns["dominant"] = times.dominant
    path = os.path.join(args.out, "flows.csv")
    write_text(path, csv_text(columns))
    mark_done(args, path)
    path = os.path.join(args.out, "summary.json")
    write_json_file(path, summary)
    mark_done(args, path)
    fig = new_figure(figsize=(6, 4))
    ax = fig.add_subplot()
    for fidelity, result in sorted(by.items()):
        values = np.sort(result.fct) * 1e6
        ax.step(values, np.arange(1, values.size + 1) / values.size, where="post", label=fidelity)
    ax.set_xlabel("flow completion time (us)")
    ax.set_ylabel("fraction of flows")
    ax.set_title(f"{summary['flows']:,} flows on {fabric.name}: fluid vs packet fidelity")
    ax.grid(alpha=0.3)
    ax.legend()
    path = os.path.join(args.out, "fct_cdf.png")
    save_figure(fig, path)
    mark_done(args, path)
