"""``fabricflow cc``: congestion control and PFC dynamics on a small scenario fabric.

Example::

    fabricflow cc --scenario incast --flows 8 --cc hpcc --pfc on --duration 20ms --json
    fabricflow cc --scenario dumbbell --flows 2 --set kmax=400KB --set pfc.xoff=50KB --out run/

With ``--json`` it prints one object: ``mean_rate_Bps`` (per flow, over the second
half), ``roles`` (flow ids per role) and ``role_summary``, ``queue_mean_bytes``,
``queue_p50_bytes``, ``queue_p99_bytes`` and ``bottleneck_utilization`` (bottleneck
link), ``jain_fairness`` (over the ``jain_flows`` flows that share the bottleneck link),
``pause_fraction``, ``convergence_time_s``,
``max_min_rate_Bps``, ``victim_flows``, ``deadlocks``, ``fct_s``, ``warnings`` (a
minimum rate above some flows' max-min share) and the settings.
``--out DIR`` writes ``<cc>.nc`` (netCDF), ``summary.json``, ``rates_queues.png`` and
``pause_spread.png``.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from fabricflow.atomic import atomic_path
from fabricflow.commands.common import (
    add_json_flag,
    output_folder,
    print_json,
    write_json_file,
    write_outputs,
)
from fabricflow.dynamics.congestion import simulate_cc
from fabricflow.dynamics.scenarios import SCENARIOS, SIZE_KNOB, build_scenario
from fabricflow.dynamics.summaries import role_summary, summarize, to_dataset
from fabricflow.errors import SpecError
from fabricflow.plots.congestion import plot_pause_spread, plot_rates_and_queues
from fabricflow.solve.cc.laws import resolve_law
from fabricflow.solve.cc.nscc import nscc_params
from fabricflow.solve.maxmin.engine import max_min as solve_max_min
from fabricflow.solve.parameters import parse_overrides
from fabricflow.solve.pfc.params import PFCParams
from fabricflow.units import parse_bandwidth, parse_size, parse_time

CC_CHOICES = ("dcqcn", "hpcc", "timely", "swift", "predictive", "nscc", "rccc")


def register(parser) -> None:
    parser.add_argument("--scenario", required=True, choices=SCENARIOS)
    knobs = "; ".join(f"{name}: {what}" for name, what in SIZE_KNOB.items())
    parser.add_argument(
        "--flows", type=int, default=2, help=f"scenario size (default: %(default)s). {knobs}"
    )
    parser.add_argument(
        "--cc", default="dcqcn", choices=CC_CHOICES, help="rate law (default: %(default)s)"
    )
    parser.add_argument(
        "--link-bandwidth",
        default="40Gbps",
        help="host link bandwidth (default: %(default)s)",
    )
    parser.add_argument(
        "--params",
        default=None,
        help="preset of the rate law (default: its first; DCQCN: paper or connectx, "
        "TIMELY: paper or patched; NSCC: spec or 800g, default set from the scenario's "
        "RTT and link rate as the reference code does)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a parameter of the rate law (DCQCN: kmax=400KB, rate_ai=10Mbps, "
        "g=1/256; HPCC: eta=0.9) or of PFC (pfc.xoff=50KB, pfc.hysteresis=5KB)",
    )
    parser.add_argument(
        "--delay", default="4us", help="extra feedback delay (default: %(default)s)"
    )
    parser.add_argument("--duration", default="50ms", help="simulated time (default: %(default)s)")
    parser.add_argument("--dt", default="1us", help="integration step (default: %(default)s)")
    parser.add_argument(
        "--pfc",
        default="on",
        choices=["on", "off", "static", "dynamic"],
        help="PFC thresholds (default: %(default)s = static)",
    )
    parser.add_argument(
        "--trim",
        default=None,
        metavar="SIZE",
        help="trim packets at switch egress queues above SIZE and retransmit them, the Ultra "
        "Ethernet way (use with --pfc off); default: no trimming",
    )
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
    bandwidth = parse_bandwidth(args.link_bandwidth, "--link-bandwidth")
    duration = parse_time(args.duration, "--duration", allow_zero=False)
    dt = parse_time(args.dt, "--dt", allow_zero=False)
    delay = parse_time(args.delay, "--delay")
    if args.flows < 1:
        raise SpecError("--flows", f"must be >= 1, got {args.flows}")
    law = resolve_law(args.cc)
    law_overrides, pfc_overrides = parse_overrides(args.set)
    params = law.preset(args.params, **law_overrides)  # names the preset or field
    pfc_params = PFCParams().replace(**pfc_overrides)
    scenario = build_scenario(args.scenario, args.flows, bandwidth=bandwidth)
    if law.name == "nscc" and args.params is None:
        # NSCC's constants scale with the network: set them from the scenario's largest
        # unloaded RTT and its link rate, as the reference implementation does
        latency = scenario.routes.path_latency(scenario.fabric.latency)
        params = nscc_params(2.0 * float(latency.max()), bandwidth, **law_overrides)
    size = None if args.size is None else parse_size(args.size, "--size", allow_zero=False)
    trim = None if args.trim is None else parse_size(args.trim, "--trim", allow_zero=False)
    result = simulate_cc(
        scenario.fabric,
        scenario.routes,
        cc=law,
        size=size,
        params=params,
        pfc=args.pfc,
        pfc_params=pfc_params,
        trim=trim,
        duration=duration,
        dt=dt,
        extra_delay=delay,
        max_work=args.max_work,
        progress=_progress_printer(duration),
    )
    max_min = solve_max_min(scenario.routes.links, scenario.fabric.capacity, dtype="float64").rates
    summary = summarize(result, bottleneck=scenario.bottleneck, max_min_rate=max_min)
    summary.pop("pause_fraction_per_link")
    report = {
        "scenario": args.scenario,
        "flows": scenario.routes.num_flows,
        "flow_roles": scenario.title,
        "cc": law.name,
        "link_bandwidth_Bps": bandwidth,
        "params": args.params
        or ("scenario" if law.name == "nscc" else next(iter(law.params_class.PRESETS))),
        "overrides": law_overrides,
        "params_values": params.as_dict(),
        "pfc": result.pfc_mode,
        "pfc_params": pfc_params.as_dict(),
        "trim_bytes": trim,
        "retransmitted_bytes": float(result.retransmitted.sum()),
        "delay_s": delay,
        "duration_s": duration,
        "dt_s": dt,
        "roles": scenario.roles,
        "role_summary": role_summary(summary["mean_rate_Bps"], max_min, scenario.roles),
        **summary,
        "warnings": min_rate_warnings(law.title, params, max_min),
    }
    if args.out:
        # an output that cannot be written is reported after the result (exit 1)
        write_outputs(args, "--out", _write_outputs, args.out, result, scenario, report)
        report["out"] = args.out
    if args.json:
        print_json(report)
        return 0
    _print_text(args, law, result, scenario, summary, report)
    return 0


def min_rate_warnings(title: str, params, max_min) -> list[str]:
    """A warning when some flows' max-min share is below the law's minimum rate: at that
    floor they offer their bottleneck more than it carries, and only PFC holds it back."""
    floor = float(getattr(params, "min_rate", 0.0))
    below = int(np.count_nonzero(np.asarray(max_min) < floor * (1 - 1e-9)))
    if floor <= 0 or below == 0:
        return []
    return [
        f"{below} of {len(max_min)} flows have a max-min share below the {title} minimum "
        f"rate of {floor * 8 / 1e6:g} Mb/s (smallest share "
        f"{float(np.min(max_min)) * 8 / 1e6:.3g} Mb/s): at that floor they overload their "
        "bottleneck and only PFC holds the queue; lower it with --set min_rate=RATE"
    ]


def _write_outputs(out: str, result, scenario, report: dict) -> None:
    """``<cc>.nc``, ``rates_queues.png``, ``pause_spread.png`` and ``summary.json``."""
    with atomic_path(os.path.join(out, f"{result.cc}.nc")) as tmp:
        to_dataset(result).to_netcdf(tmp)
    plot_rates_and_queues(
        result,
        roles=scenario.roles,
        links=_links_to_plot(result, scenario),
        path=os.path.join(out, "rates_queues.png"),
    )
    plot_pause_spread(result, scenario.fabric, path=os.path.join(out, "pause_spread.png"))
    write_json_file(os.path.join(out, "summary.json"), report)


def _links_to_plot(result, scenario):
    """The scenario's bottleneck first, then the links with the largest peak queues."""
    order = [int(link) for link in np.argsort(result.queue.max(axis=0))[::-1]]
    if scenario.bottleneck is not None:
        order = [scenario.bottleneck] + [link for link in order if link != scenario.bottleneck]
    return order[:4]


def _print_text(args, law, result, scenario, summary, report) -> None:
    rate = np.asarray(summary["mean_rate_Bps"])
    ideal = np.asarray(summary["max_min_rate_Bps"])
    victims = [int(v) for v in summary["victim_flows"]]
    print(
        f"{args.scenario} ({scenario.title}), {law.title} ({report['params']}), "
        f"PFC {result.pfc_mode}, {args.duration}"
        + (
            f", trimming above {args.trim}: {report['retransmitted_bytes'] / 1e3:,.1f} KB "
            "retransmitted"
            if result.trim
            else ""
        )
    )
    for role, entry in report["role_summary"].items():
        if "ids" in entry:  # small roles: every flow
            for flow in entry["ids"]:
                mark = "  <- victim" if flow in victims else ""
                print(
                    f"  {role:>8} flow {flow:3d}: {_gbps(rate[flow])} Gb/s "
                    f"(max-min {_gbps(ideal[flow])}){mark}"
                )
        else:
            print(
                f"  {role:>8} {entry['flows']} flows: mean {_gbps(entry['mean_Bps'])} Gb/s, "
                f"min {_gbps(entry['min_Bps'])}, max {_gbps(entry['max_Bps'])} "
                f"(max-min mean {_gbps(entry['max_min_mean_Bps'])}; --json for each)"
            )
    settled = summary["convergence_time_s"]
    print(
        f"  bottleneck link {summary['bottleneck_link']}: utilization "
        f"{summary['bottleneck_utilization']:.3f}, queue mean "
        f"{summary['queue_mean_bytes'] / 1e3:.1f} KB, p50 {summary['queue_p50_bytes'] / 1e3:.1f}"
        f" KB, p99 {summary['queue_p99_bytes'] / 1e3:.1f} KB"
    )
    print(
        f"  Jain fairness {summary['jain_fairness']:.4f} over the {summary['jain_flows']} flows "
        f"sharing the bottleneck, pause fraction "
        f"{summary['pause_fraction']:.4f}, settled "
        f"{'never' if settled is None else f'at {settled * 1e3:.3g} ms'}, "
        f"victims {_short(victims)}, deadlocks {summary['deadlocks']}"
    )
    for warning in report["warnings"]:
        print(f"  warning: {warning}")


def _gbps(value: float) -> str:
    return f"{value * 8 / 1e9:8.3f}"


def _progress_printer(duration: float, *, after_s: float = 3.0):
    """A ``progress(fraction, elapsed_s)`` callback printing a line on stderr while the run
    is projected to need more than ``after_s`` seconds more (stdout stays clean for
    --json). The first piece includes the compilation, so the time left is projected from
    the pieces after it (from the first piece alone until there are any). Once a line
    was printed, the end of the run is printed too (100 %)."""
    first: list[tuple[float, float]] = []  # (fraction, elapsed) at the end of piece 1
    printed: list[bool] = []

    def progress(fraction: float, elapsed: float) -> None:
        if not first:
            first.append((fraction, elapsed))
        done0, spent0 = first[0]
        if fraction > done0:  # the pace of the compiled pieces
            left = (elapsed - spent0) / (fraction - done0) * (1.0 - fraction)
        else:
            left = elapsed / max(fraction, 1e-12) * (1.0 - fraction)
        done = f"cc: simulated {fraction * duration * 1e3:.4g} of {duration * 1e3:.4g} ms"
        if left > after_s:
            printed.append(True)
            print(
                f"{done} ({fraction:.0%}), {elapsed:.0f} s elapsed, about {left:.0f} s left",
                file=sys.stderr,
                flush=True,
            )
        elif printed and fraction >= 1.0:
            print(f"{done} (100%) in {elapsed:.0f} s", file=sys.stderr, flush=True)

    return progress


def _short(items: list, shown: int = 16) -> str:
    """``items`` as a list, cut to the first ``shown`` with a count (--json has them all)."""
    if len(items) <= shown:
        return str(items)
    return f"{str(items[:shown])[:-1]}, ... ({len(items)} in all)]"
