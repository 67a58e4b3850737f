"""``fabricflow collective``: nccl-tests-like table for a collective on a fabric.

Example::

    fabricflow collective --fabric dgx-h100-superpod --op all_reduce --gpus 8
    fabricflow collective --fabric dgx-a100-superpod --op all_reduce --gpus 128 \\
        --group-size 16 --layout strided --algorithm ring --routing spray --json
"""

from __future__ import annotations

import math
import os
import re
import sys

from fabricflow.atomic import ensure_folder, write_text
from fabricflow.collective import make_groups
from fabricflow.collective.cc_rates import as_cc_rates
from fabricflow.collective.nccl_tests import NCCL_TESTS_OPS, format_nccl_tests
from fabricflow.collective.size_sweep import collective_sweep, nccl_sizes, table_rows
from fabricflow.collective.timing import MAX_CHANNELS
from fabricflow.commands.calibration_flags import add_calibration_flags, calibration_from_args
from fabricflow.commands.cc import CC_CHOICES
from fabricflow.commands.common import (
    add_fabric_flags,
    add_fail_flag,
    add_json_flag,
    failed_fabric,
    load_fabric_flags,
    output_file,
    output_folder,
    print_json,
    print_table,
    write_outputs,
)
from fabricflow.commands.step import _check_plot_format
from fabricflow.csv_tables import csv_text
from fabricflow.errors import SpecError
from fabricflow.fabric.summary import failure_counts, failure_text
from fabricflow.plots.collective import plot_collective
from fabricflow.routing.transport_policy import routing_for
from fabricflow.units import format_size, parse_size
from fabricflow.workload.intervals import collective_interval

OPS_HELP = "all_reduce|reduce_scatter|all_gather|all_to_all|broadcast|sendrecv"


def register(parser) -> None:
    """The flags of ``fabricflow collective``, group by group (the order ``--help`` lists them)."""
    parser.description = (
        "Time a collective run by all groups at once on a fabric; prints an "
        "nccl-tests-style table (size, count, time, algbw, busbw)."
    )
    add_fabric_flags(parser)
    _add_group_flags(parser)
    _add_size_flags(parser)
    _add_transport_flags(parser)
    _add_output_flags(parser)
    add_fail_flag(parser)
    add_calibration_flags(parser)
    add_json_flag(parser)
    parser.set_defaults(func=run)


def _add_group_flags(parser) -> None:
    """The collective and who runs it: ``--op``, ``--gpus``, ``--group-size``, ``--layout``."""
    parser.add_argument("--op", required=True, help=OPS_HELP)
    parser.add_argument("--gpus", type=int, required=True, help="GPUs of the job (the first N)")
    parser.add_argument(
        "--group-size",
        type=int,
        default=None,
        help="ranks per communicator (default: all --gpus in one group)",
    )
    parser.add_argument(
        "--layout",
        default="contiguous",
        choices=("contiguous", "strided"),
        help="contiguous: group i = GPUs i*G..; strided: GPUs i, i+N/G, ... "
        "(data-parallel style, one member per node)",
    )


def _add_size_flags(parser) -> None:
    """The message sizes swept, as nccl-tests takes them: ``-b``, ``-e``, ``-f``."""
    parser.add_argument("--minbytes", "-b", default="8MiB", help="smallest size (default 8MiB)")
    parser.add_argument("--maxbytes", "-e", default="8GiB", help="largest size (default 8GiB)")
    parser.add_argument(
        "--stepfactor",
        "-f",
        type=float,
        default=2.0,
        help="size multiplier between rows (default 2)",
    )


def _add_transport_flags(parser) -> None:
    """How the collective runs on the fabric: algorithm, protocol, routing, congestion
    control, channels, rail awareness and the ECMP seed."""
    parser.add_argument(
        "--algorithm",
        default="auto",
        help="auto|ring|tree|halving_doubling|hierarchical|nvls|sharp|direct",
    )
    parser.add_argument("--protocol", default="auto", help="auto|LL|LL128|Simple")
    parser.add_argument(
        "--routing",
        default="auto",
        help="auto|ecmp|multipath|spray|adaptive|optimized (default auto: what the fabric's "
        "transport does, an even split over all equal-cost paths under adaptive routing on "
        "a Clos, per-flow ECMP otherwise; optimized: paths chosen by the routing optimizer)",
    )
    parser.add_argument(
        "--cc",
        default=None,
        choices=CC_CHOICES,
        help="congestion control: each phase's rates are its max-min rates times its flows' "
        "efficiency under this rate law, from the congestion-control fluid (default: ideal "
        "max-min rates; see docs/cc.md)",
    )
    parser.add_argument(
        "--channels",
        type=int,
        default=None,
        help="channels per group (default: 2 per rail; 1 per pair for p2p)",
    )
    parser.add_argument(
        "--no-rail-aware",
        action="store_true",
        help="rings cross rails between nodes instead of using PXN",
    )
    parser.add_argument("--seed", type=int, default=0, help="ECMP hash seed")


def _add_output_flags(parser) -> None:
    """``--plot FILE`` and ``--out DIR``."""
    parser.add_argument(
        "--plot",
        default=None,
        type=output_file,
        help="write bus bandwidth and time against the message size, one line per "
        "algorithm (the chosen one bold); format from the extension (png, pdf, svg, ...)",
    )
    parser.add_argument(
        "--out",
        default=None,
        type=output_folder,
        metavar="DIR",
        help="folder for collective.csv (the table, exact numbers) and nccl-tests.txt (the "
        "table in nccl-tests' output format, for tools that read nccl-tests logs)",
    )


def run(args) -> int:
    calibration = _check_flags(args)
    fabric, routing = _fabric_flags(args)
    group_size = args.gpus if args.group_size is None else args.group_size
    groups = make_groups(args.gpus, group_size, layout=args.layout)
    sizes = _sizes(args)
    solver = None
    if args.cc is not None:
        # deferred: the congestion-control fluid is JAX

        solver = as_cc_rates(fabric, args.cc, None)
    results = collective_sweep(
        fabric,
        args.op,
        groups,
        sizes,
        algorithm=args.algorithm,
        protocol=args.protocol,
        routing=args.routing,
        seed=args.seed,
        channels=args.channels,
        rail_aware=not args.no_rail_aware,
        progress=_progress,
        **({} if calibration is None else {"cost": calibration.cost_model()}),
        solver=solver,
    )
    rows = table_rows(results)
    _add_intervals(rows, args.interval_level, calibration)
    header = {
        "fabric": fabric.name,
        "op": results[0].op,
        "gpus": args.gpus,
        "group_size": group_size,
        "num_groups": int(groups.shape[0]),
        "layout": args.layout,
        "routing": routing,
        "transport": fabric.transport.to_dict(),
        **failure_counts(fabric),
        "cc": args.cc,
        "failed_links": int(fabric.meta.get("failed_links", 0)),
        "interval_level": args.interval_level,
        "calibration": args.calibration,
    }
    _write_files(args, header, results, rows)
    if args.json:
        print_json({**header, "rows": rows})
        return 0
    _print_text(args, header, rows, fabric, calibration)
    return 0


def _check_flags(args):
    """The calibration of ``--calibration`` (``None`` without it), after checking the flags
    that need no fabric, in this order: the ``--plot`` format (before the sweep, not after
    it), ``--channels`` (1..MAX_CHANNELS), the calibration, ``--stepfactor`` (finite).

    Raises:
        SpecError: the first flag out of range.
    """
    if args.plot is not None:
        _check_plot_format(args.plot)  # before the sweep, not after it
    if args.channels is not None and not 1 <= args.channels <= MAX_CHANNELS:
        # checked here too so the error names the flag; the model checks the same range
        raise SpecError(
            "--channels", f"must lie in 1..{MAX_CHANNELS} channels per group, got {args.channels}"
        )
    calibration = calibration_from_args(args)
    if not math.isfinite(args.stepfactor):
        raise SpecError("--stepfactor", f"must be a finite number > 1, got {args.stepfactor}")
    return calibration


def _fabric_flags(args):
    """``(fabric, routing)``: the fabric of the flags with its ``--fail`` failures applied,
    and the routing policy (``auto`` resolved from the fabric's transport).

    Raises:
        SpecError: a fabric of fewer than 2 GPUs, or ``--gpus`` outside 2..its GPUs.
    """
    fabric = load_fabric_flags(args)
    routing = routing_for(fabric) if args.routing == "auto" else args.routing
    fabric = failed_fabric(fabric, args.fail, args.seed)
    if fabric.num_gpus < 2:  # "must lie in 2..1" would name no valid value
        raise SpecError(
            "fabric", f"a collective needs at least 2 GPUs; {fabric.name} has {fabric.num_gpus}"
        )
    if args.gpus < 2 or args.gpus > fabric.num_gpus:
        raise SpecError(
            "gpus", f"must lie in 2..{fabric.num_gpus} for {fabric.name}, got {args.gpus}"
        )
    return fabric, routing


def _sizes(args):
    """The message sizes in bytes, ``--minbytes`` to ``--maxbytes`` by ``--stepfactor``.

    Raises:
        SpecError: a size that does not parse, or ``--maxbytes`` below ``--minbytes``.
    """
    smallest, largest = _size(args.minbytes, "minbytes"), _size(args.maxbytes, "maxbytes")
    if largest < smallest:
        raise SpecError(
            "--maxbytes",
            f"must be >= --minbytes ({format_size(smallest)}), got {format_size(largest)}",
        )
    return nccl_sizes(smallest, largest, args.stepfactor)


def _add_intervals(rows: list[dict], level: float, calibration) -> None:
    """Adds to each row its prediction interval at ``level`` (a fraction):
    ``time_interval_s`` (``[low, high]`` seconds) and ``busbw_interval_GBps``."""
    for row in rows:
        interval = collective_interval(row["time_s"], level=level, calibration=calibration)
        row["time_interval_s"] = interval.to_list()
        # bus bandwidth is bytes over time: the slow end of the time is its low end
        row["busbw_interval_GBps"] = [
            row["busbw_GBps"] * row["time_s"] / interval.high,
            row["busbw_GBps"] * row["time_s"] / interval.low,
        ]


def _write_files(args, header: dict, results, rows: list[dict]) -> None:
    """Writes the ``--plot`` figure and the ``--out`` tables when asked, and names them in
    ``header`` (``plot``, ``files``); a file that cannot be written is reported after the
    result (exit 1)."""
    if args.plot is not None:
        title = (
            f"{header['op']} on {header['fabric']}: "
            f"{groups_text(header['num_groups'], header['group_size'])}"
            + (f" ({args.layout})" if header["num_groups"] > 1 else "")
            + f", routing {header['routing']}"
            + (f", {args.cc}" if args.cc else "")
        )
        # a plot that cannot be written is reported after the result (exit 1)
        if write_outputs(args, "--plot", plot_collective, results, args.plot, title=title):
            header["plot"] = args.plot
    if args.out is not None:
        # files that cannot be written are reported after the result (exit 1)
        header["files"] = write_outputs(args, "--out", _write_tables, rows, header, args.out)


def _print_text(args, header: dict, rows: list[dict], fabric, calibration) -> None:
    """The text answer: a commented header (fabric, groups, routing, congestion control,
    failures, the interval's source), the nccl-tests-like table, and the files written."""
    print(
        f"# fabricflow collective: {header['op']} on {fabric.name}, {args.gpus} GPUs in "
        f"{groups_text(header['num_groups'], header['group_size'])} ({args.layout}), "
        f"routing {header['routing']}"
        + (f" (auto: {_transport_text(fabric.transport)})" if args.routing == "auto" else "")
        + (
            f", congestion control {args.cc} (max-min rates x its flows' efficiency)"
            if args.cc
            else ""
        )
    )
    if args.fail:
        print(f"# failures: --fail {args.fail}: {failure_text(failure_counts(fabric))}")
    print("# time, algbw and busbw of the slowest group; busbw factor as nccl-tests")
    print(
        f"# busbw range: {100 * args.interval_level:.0f}% prediction interval "
        + ("(from the calibration)" if calibration is not None else "(from published runs)")
    )
    for row in rows:
        low, high = row["busbw_interval_GBps"]
        row["busbw_range"] = f"{low:.1f}-{high:.1f}"
    print_table(
        rows,
        [
            ("bytes", "size(B)"),
            ("count", "count(float)"),
            ("time_us", "time(us)"),
            ("algbw_GBps", "algbw(GB/s)"),
            ("busbw_GBps", "busbw(GB/s)"),
            ("busbw_range", "busbw range"),
            ("algorithm", "algo"),
            ("protocol", "proto"),
            ("bottleneck", "bottleneck"),
        ],
    )
    if "plot" in header:
        print(f"# plot written to {header['plot']}")
    if header.get("files"):
        print("# files: " + ", ".join(header["files"]))


def groups_text(num_groups: int, group_size: int) -> str:
    """``'one group of 64 GPUs'``, ``'8 groups of 8 GPUs'``: the groups of a header or title."""
    if num_groups == 1:
        return f"one group of {group_size} GPUs"
    return f"{num_groups:,} groups of {group_size} GPUs"


def _write_tables(rows: list[dict], header: dict, folder: str) -> None:
    """``collective.csv`` and ``nccl-tests.txt`` of the table into ``folder``."""
    ensure_folder(folder)
    scalars = [key for key in rows[0] if not isinstance(rows[0][key], list)] if rows else []
    columns = {key: [row[key] for row in rows] for key in scalars}
    write_text(os.path.join(folder, "collective.csv"), csv_text(columns))
    if header["op"] in NCCL_TESTS_OPS:
        title = (
            f"{header['fabric']}, {groups_text(header['num_groups'], header['group_size'])} "
            f"({header['layout']}), routing {header['routing']}"
        )
        text = format_nccl_tests(rows, header["op"], gpus=header["group_size"], title=title)
        write_text(os.path.join(folder, "nccl-tests.txt"), text)


def _transport_text(transport) -> str:
    """One line for the header: ``infiniband, adaptive routing``."""
    return f"{transport.protocol}, {'adaptive routing' if transport.adaptive_routing else 'per-flow ECMP'}"


def _progress(line: str) -> None:
    """Progress of a long collective, on stderr (stdout stays the table or the JSON)."""
    print(line, file=sys.stderr, flush=True)


def _size(value: str, field: str) -> float:
    """``parse_size`` for -b/-e; nccl-tests style ``8M`` gets a hint (``8MB`` or ``8MiB``)."""
    try:
        return parse_size(value, field, allow_zero=False)
    except SpecError as error:
        bare = re.fullmatch(r"\s*([0-9.]+)\s*([kKmMgGtT])\s*", str(value))
        if bare is None:
            raise
        number, prefix = bare.group(1), bare.group(2).upper()
        raise SpecError(
            field,
            f"{error.args[0].partition(': ')[2]}; nccl-tests' {value!r} "
            f"means {number}{prefix}iB (2^{dict(K=10, M=20, G=30, T=40)[prefix]}"
            f" bytes): write {number}{prefix}iB, or {number}{prefix}B for "
            f"10^{dict(K=3, M=6, G=9, T=12)[prefix]}",
        ) from None
