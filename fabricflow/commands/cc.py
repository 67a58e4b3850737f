"""``fabricflow cc``: DCQCN + PFC dynamics on a small scenario fabric.

Example::

    fabricflow cc --scenario incast --flows 8 --pfc on --duration 20ms --json
    fabricflow cc --scenario dumbbell --flows 2 --set kmax=400KB --set pfc.xoff=50KB --out run/

With ``--json`` it prints one object: ``mean_rate_Bps`` (per flow, over the second
half), ``queue_mean_bytes``, ``queue_p50_bytes``, ``queue_p99_bytes`` (bottleneck link),
``jain_fairness``, ``pause_fraction``, ``max_min_rate_Bps``, ``victim_flows``,
``deadlocks``, ``fct_s`` and the settings. ``--out DIR`` writes ``dcqcn.nc`` (netCDF),
``summary.json``, ``rates_queues.png`` and ``pause_spread.png``.
"""

from __future__ import annotations

import os

from ._common import add_json_flag, output_folder, print_json, write_json_file, write_outputs


def register(subparsers) -> None:
    from ..study.cc_scenarios import SCENARIOS

    parser = subparsers.add_parser("cc", help="DCQCN/PFC congestion-control dynamics")
    parser.add_argument("--scenario", required=True, choices=SCENARIOS)
    parser.add_argument(
        "--flows",
        type=int,
        default=2,
        help="scenario size: flows (dumbbell, incast), hosts (alltoall), "
        "switches (ring), hops (parking_lot)",
    )
    parser.add_argument("--link-bandwidth", default="40Gbps", help="host link bandwidth")
    parser.add_argument("--params", default="paper", help="DCQCN preset: paper or connectx")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a DCQCN parameter (kmax=400KB, rate_ai=10Mbps, g=1/256) "
        "or a PFC one (pfc.xoff=50KB, pfc.hysteresis=5KB)",
    )
    parser.add_argument("--delay", default="4us", help="extra CNP feedback delay")
    parser.add_argument("--duration", default="50ms", help="simulated time")
    parser.add_argument("--dt", default="1us", help="integration step")
    parser.add_argument("--pfc", default="on", choices=["on", "off", "static", "dynamic"])
    parser.add_argument("--size", default=None, help="bytes per flow (default: long-lived)")
    parser.add_argument(
        "--out", default=None, type=output_folder, help="directory for netCDF, JSON and plots"
    )
    parser.add_argument(
        "--max-work",
        type=float,
        default=None,
        metavar="ENTRY_STEPS",
        help="allow runs estimated above this much work (flow hops x steps; "
        "default 3e11, about an hour on 2 cores)",
    )
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    import numpy as np

    from ..errors import SpecError
    from ..solve.dcqcn.params import PFCParams, parse_overrides
    from ..solve.dcqcn.simulate import simulate_dcqcn
    from ..solve.maxmin.incremental_filling import progressive_filling_incremental
    from ..study.cc_scenarios import build_scenario
    from ..study.congestion import summarize
    from ..units import parse_bandwidth, parse_size, parse_time

    bandwidth = parse_bandwidth(args.link_bandwidth, "--link-bandwidth")
    duration = parse_time(args.duration, "--duration", allow_zero=False)
    dt = parse_time(args.dt, "--dt", allow_zero=False)
    delay = parse_time(args.delay, "--delay")
    if args.flows < 1:
        raise SpecError("--flows", f"must be >= 1, got {args.flows}")
    dcqcn_overrides, pfc_overrides = parse_overrides(args.set)
    pfc_params = PFCParams().replace(**pfc_overrides)
    scenario = build_scenario(args.scenario, args.flows, bandwidth=bandwidth)
    size = None if args.size is None else parse_size(args.size, "--size", allow_zero=False)
    result = simulate_dcqcn(
        scenario.fabric,
        scenario.routes,
        size=size,
        params=args.params,
        overrides=dcqcn_overrides,
        pfc=args.pfc,
        pfc_params=pfc_params,
        duration=duration,
        dt=dt,
        extra_delay=delay,
        max_work=args.max_work,
        progress=_progress_printer(duration),
    )
    max_min = progressive_filling_incremental(scenario.routes.links, scenario.fabric.capacity)
    summary = summarize(result, bottleneck=scenario.bottleneck, max_min_rate=max_min)
    summary.pop("pause_fraction_per_link")
    report = {
        "scenario": args.scenario,
        "flows": scenario.routes.num_flows,
        "link_bandwidth_Bps": bandwidth,
        "params": args.params,
        "overrides": dcqcn_overrides,
        "pfc": result.pfc_mode,
        "pfc_params": pfc_params.as_dict(),
        "delay_s": delay,
        "duration_s": duration,
        "dt_s": dt,
        "roles": scenario.roles,
        **summary,
    }
    if args.out:
        # an output that cannot be written is reported after the result (exit 1)
        write_outputs(args, "--out", _write_outputs, args.out, result, scenario, report)
        report["out"] = args.out
    if args.json:
        print_json(report)
        return 0
    rate = np.asarray(summary["mean_rate_Bps"])
    print(
        f"{args.scenario}: {report['flows']} flows, PFC {result.pfc_mode}, "
        f"params {args.params}, {duration * 1e3:.3g} ms"
    )
    shown = min(rate.shape[0], 16)
    if shown < rate.shape[0]:
        print(f"  (first {shown} of {rate.shape[0]} flows; --json for all)")
    for flow, (value, ideal) in enumerate(zip(rate[:shown], max_min[:shown], strict=True)):
        print(f"  flow {flow:3d}: {value * 8 / 1e9:8.3f} Gb/s   (max-min {ideal * 8 / 1e9:.3f})")
    print(
        f"  bottleneck link {summary['bottleneck_link']}: queue mean {summary['queue_mean_bytes'] / 1e3:.1f} KB"
        f", p99 {summary['queue_p99_bytes'] / 1e3:.1f} KB"
    )
    print(
        f"  Jain fairness {summary['jain_fairness']:.4f}, pause fraction "
        f"{summary['pause_fraction']:.4f}, victims {_short([int(v) for v in summary['victim_flows']])}, "
        f"deadlocks {summary['deadlocks']}"
    )
    return 0


def _write_outputs(out: str, result, scenario, report: dict) -> None:
    """``dcqcn.nc``, ``rates_queues.png``, ``pause_spread.png`` and ``summary.json``."""
    from ..atomic import atomic_path
    from ..study.congestion import to_dataset
    from ..study.congestion_plots import plot_pause_spread, plot_rates_and_queues

    with atomic_path(os.path.join(out, "dcqcn.nc")) as tmp:
        to_dataset(result).to_netcdf(tmp)
    plot_rates_and_queues(result, path=os.path.join(out, "rates_queues.png"))
    plot_pause_spread(result, scenario.fabric, path=os.path.join(out, "pause_spread.png"))
    write_json_file(os.path.join(out, "summary.json"), report)


def _progress_printer(duration: float, *, after_s: float = 3.0):
    """A ``progress(fraction, elapsed_s)`` callback printing a line on stderr once the run
    is projected to take more than ``after_s`` seconds (stdout stays clean for --json)."""
    import sys

    def progress(fraction: float, elapsed: float) -> None:
        projected = elapsed / max(fraction, 1e-12)
        if projected > after_s:
            print(
                f"cc: simulated {fraction * duration * 1e3:.4g} of {duration * 1e3:.4g} ms "
                f"({fraction:.0%}), {elapsed:.0f} s elapsed, about "
                f"{projected - elapsed:.0f} s left",
                file=sys.stderr,
                flush=True,
            )

    return progress


def _short(items: list, shown: int = 16) -> str:
    """``items`` as a list, cut to the first ``shown`` with a count (--json has them all)."""
    if len(items) <= shown:
        return str(items)
    return f"{str(items[:shown])[:-1]}, ... ({len(items)} in all)]"
