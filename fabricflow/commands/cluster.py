"""``fabricflow cluster``: simulate a trace of training jobs on a fabric.

Example::

    fabricflow cluster --fabric dgx-h100-superpod --trace studies/cluster_trace.yaml \\
        --scheduler topology --mtbf default --checkpoint-interval 30m \\
        --checkpoint-write-time 60s --restart-time 10m --spares 2 --json
    fabricflow cluster --fabric clos-100k --synthetic 1000 --horizon 30d --mtbf default --out run/

``--mtbf COMPONENT=DURATION`` (repeatable; ``COMPONENT`` one of ``gpu``, ``nic``,
``link``, ``switch``, ``node``; the MTBF of ONE such component, e.g. ``gpu=50000h``)
turns on failures of that class; ``--mtbf default`` turns on every class at the
published defaults (docs/cluster.md), later ``--mtbf`` items override. No ``--mtbf``: no
failures. ``--mttr COMPONENT=DURATION`` sets repair times.

With ``--json`` it prints one object: ``jobs`` (per job ``id``, ``start_s``, ``end_s``,
``gpus``, ``steps_done``, ``standalone_step_s``, ``mean_step_s``, ``slowdown``,
``failures``, ``restarts``, ``lost_work_s``, ``goodput``, ...), ``cluster``
(``utilization``, ``goodput``, ``failures``, ``fragmentation``, ``queue_wait_s`` p50/p99,
...), ``settings`` and ``seconds``. ``--out DIR`` writes ``timeline.nc``, ``jobs.csv``,
``summary.json`` and the figures ``gantt.png``, ``utilization.png``,
``slowdown_cdf.png`` and, with failures and checkpoints, ``goodput_map.png``.
"""

from __future__ import annotations

import math
import os
import sys
import time

from fabricflow.assignments import key_values
from fabricflow.atomic import atomic_path, ensure_folder, write_text
from fabricflow.cluster.failures import (
    DEFAULT_MTBF_S,
    CheckpointPolicy,
    FailureModel,
    parse_component_durations,
)
from fabricflow.cluster.jobspec import LoadedTrace
from fabricflow.cluster.prediction import Predictor
from fabricflow.cluster.simulate import check_simulated_jobs, estimated_run_bytes, simulate_cluster
from fabricflow.cluster.trace import load_trace, synthetic_trace
from fabricflow.commands.calibration_flags import calibration_from_args
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
from fabricflow.commands.interrupts import check
from fabricflow.csv_tables import csv_text
from fabricflow.errors import SpecError
from fabricflow.memory_budget import check_memory
from fabricflow.plots.cluster import (
    goodput_map_axes,
    plot_gantt,
    plot_goodput_map,
    plot_slowdown_cdf,
    plot_utilization,
)

SCHEDULER_NAMES = ("first-fit", "packed", "topology", "block")
BACKFILL_NAMES = ("easy", "greedy", "none")
PREDICT_KEYS = {
    "recall": "recall",
    "precision": "precision",
    "lead": "lead_s",
    "checkpoint": "checkpoint_s",
    "drain": "drain_s",
    "classes": "classes",
}
TRACE_FORMATS = ("auto", "fabricflow", "pai-2020", "pai-2023", "philly", "helios", "acme")
JOB_COLUMNS = (
    "id",
    "gpus",
    "priority",
    "state",
    "start_s",
    "end_s",
    "steps",
    "steps_done",
    "standalone_step_s",
    "mean_step_s",
    "slowdown",
    "failures",
    "restarts",
    "preemptions",
    "lost_work_s",
    "goodput",
    "queue_wait_s",
    "first_wait_s",
    "requeue_wait_s",
    "alarms",
    "migrations",
    "mtbf_s",
    "best_checkpoint_interval_s",
)


def register(parser) -> None:
    """The flags of ``fabricflow cluster``, group by group (the order ``--help`` lists them)."""
    parser.description = (
        "Event-driven simulation of training jobs sharing a fabric: placement "
        "by a scheduler, step times with co-located jobs' traffic, component failures, "
        "checkpoints, restarts and hot spares; per-job and cluster goodput."
    )
    add_fabric_flags(parser)
    _add_trace_flags(parser)
    _add_scheduler_flags(parser)
    _add_failure_flags(parser)
    _add_run_flags(parser)
    parser.add_argument(
        "--calibration",
        default=None,
        metavar="FILE",
        help="calibration YAML of 'fabricflow calibrate': its GPU and network parameters "
        "time every job; job rows give calibrated intervals",
    )
    add_json_flag(parser)
    parser.set_defaults(func=run)


def _add_trace_flags(parser) -> None:
    """The jobs: ``--trace FILE`` (and how to read a public trace) or ``--synthetic N``."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", help="trace file (YAML or CSV; see docs/cluster.md)")
    source.add_argument(
        "--synthetic", type=int, metavar="N", help="a synthetic trace of N jobs (seeded)"
    )
    parser.add_argument(
        "--trace-format",
        default="auto",
        choices=TRACE_FORMATS,
        help="format of --trace: this project's YAML/CSV or a public cluster trace "
        "(docs/cluster-traces.md); auto: by its columns (auto)",
    )
    parser.add_argument(
        "--trace-gpu",
        default="h100-sxm",
        help="GPU type of the jobs of a public trace, which names none (h100-sxm)",
    )
    parser.add_argument(
        "--fractional",
        default="skip",
        choices=("skip", "round-up"),
        help="public-trace rows asking for part of a GPU: skip them (counted) or round "
        "each instance up to whole GPUs (skip)",
    )


def _add_scheduler_flags(parser) -> None:
    """The scheduler that places the jobs, and its backfill."""
    parser.add_argument(
        "--scheduler", default="topology", choices=SCHEDULER_NAMES, help="(topology)"
    )
    parser.add_argument(
        "--backfill",
        default="easy",
        choices=BACKFILL_NAMES,
        help="queue policy: easy = EASY backfill with a reservation for the first job that "
        "cannot start; greedy = every job that fits starts; none = first come, first "
        "served (easy)",
    )


def _add_failure_flags(parser) -> None:
    """Component failures and the recovery from them: MTBF/MTTR, failure prediction,
    checkpoints, restarts and hot spares."""
    parser.add_argument(
        "--mtbf",
        action="append",
        default=None,
        metavar="COMPONENT=DURATION",
        help="MTBF of one component (gpu, nic, link, switch, node), e.g. gpu=50000h; "
        "'default' = the published defaults for all; repeatable",
    )
    parser.add_argument(
        "--mttr",
        action="append",
        default=None,
        metavar="COMPONENT=DURATION",
        help="repair time of a component class (defaults in docs/cluster.md); repeatable",
    )
    parser.add_argument(
        "--predict",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="failure prediction: 'default' (recall 0.6, precision 0.85, lead 3m), or "
        "recall=R, precision=P, lead=T, checkpoint=T, drain=T, classes=gpu+node; "
        "repeatable (needs --mtbf)",
    )
    parser.add_argument(
        "--checkpoint-interval", default=None, help="compute time between checkpoints (none)"
    )
    parser.add_argument("--checkpoint-write-time", default="0s", help="time to write one (0s)")
    parser.add_argument("--restart-time", default="0s", help="failure to computing again (0s)")
    parser.add_argument("--spares", type=int, default=0, help="hot spare nodes (0)")


def _add_run_flags(parser) -> None:
    """The simulated time, the seed, interference between jobs and the output folder."""
    parser.add_argument("--horizon", default=None, help="stop time, e.g. 30d (all jobs done)")
    parser.add_argument("--seed", type=int, default=0, help="failures and synthetic trace (0)")
    parser.add_argument(
        "--no-interference",
        action="store_true",
        help="every job at its standalone step time (no contention model)",
    )
    parser.add_argument(
        "--out", default=None, type=output_folder, help="directory for the dataset and figures"
    )


def failure_options(mtbf_items, mttr_items):
    """The :class:`FailureModel` of ``--mtbf``/``--mttr`` items, or None without ``--mtbf``."""
    if not mtbf_items:
        if mttr_items:
            raise SpecError("--mttr", "needs --mtbf (no component fails without an MTBF)")
        return None
    use_default = "default" in mtbf_items
    mtbf = dict(DEFAULT_MTBF_S) if use_default else {}
    mtbf.update(parse_component_durations([m for m in mtbf_items if m != "default"], "--mtbf"))
    mttr = parse_component_durations(mttr_items, "--mttr")
    return FailureModel(mtbf, mttr_s=mttr) if mttr else FailureModel(mtbf)


def prediction_options(items):
    """The :class:`~fabricflow.cluster.prediction.Predictor` of ``--predict`` items, or
    None without them."""
    if not items:
        return None
    options: dict = {}
    pairs = key_values(
        [item for item in items if item != "default"],
        "--predict",
        example="'default' or KEY=VALUE",
        keys=PREDICT_KEYS,
    )
    for key, value in pairs.items():
        if key in ("recall", "precision"):
            try:
                options[PREDICT_KEYS[key]] = float(value)
            except ValueError:
                raise SpecError("--predict", f"{key} must be a number, got {value!r}") from None
        elif key == "classes":
            options["classes"] = tuple(part.strip() for part in value.split("+") if part.strip())
        else:
            options[PREDICT_KEYS[key]] = value.strip()
    try:
        return Predictor(**options)
    except SpecError as error:
        raise SpecError("--predict", str(error)) from None


def run(args) -> int:
    began = time.perf_counter()

    failures = failure_options(args.mtbf, args.mttr)
    predictor = prediction_options(args.predict)
    if predictor is not None and failures is None:
        raise SpecError("--predict", "needs --mtbf (there are no failures to predict)")
    if args.spares < 0:
        raise SpecError("--spares", f"must be >= 0 nodes, got {args.spares}")
    policy = CheckpointPolicy(
        interval_s=args.checkpoint_interval,
        write_s=args.checkpoint_write_time,
        restart_s=args.restart_time,
        spares=args.spares,
    )
    fabric = load_fabric_flags(args)
    usable = fabric.num_gpus - args.spares * max(1, int(fabric.gpus_per_node))
    if usable <= 0:
        raise SpecError(
            "--spares",
            f"{args.spares} spare nodes leave none of the {fabric.num_gpus} GPUs for jobs",
        )
    say = _progress_printer()
    if args.synthetic is not None:
        if args.synthetic < 1:
            raise SpecError("--synthetic", f"must be >= 1 jobs, got {args.synthetic}")
        # refused before drawing a job when the run would not fit in memory
        check_memory(
            estimated_run_bytes(args.synthetic),
            f"simulating {args.synthetic:,} synthetic jobs",
            hint="give fewer jobs",
        )
        check_simulated_jobs(args.synthetic, "--synthetic")
        trace = synthetic_trace(args.synthetic, seed=args.seed, fabric=fabric, usable_gpus=usable)
    else:
        trace = load_trace(
            args.trace,
            fabric=fabric,
            usable_gpus=usable,
            format=args.trace_format,
            gpu=args.trace_gpu,
            fractional=args.fractional,
            progress=lambda done, total: say(f"read {done:,} of about {total:,} trace rows"),
        )
    loaded = time.perf_counter()
    result = simulate_cluster(
        fabric,
        trace,
        scheduler=args.scheduler,
        backfill=args.backfill,
        failures=failures,
        checkpoint=policy,
        prediction=predictor,
        horizon=args.horizon,
        seed=args.seed,
        interference=not args.no_interference,
        calibration=calibration_from_args(args),
        progress=lambda t, done, total: say(
            f"simulated {t / 86400:,.2f} days, {done:,} of {total:,} jobs done"
        ),
    )
    simulated = time.perf_counter()
    report = result.to_json()
    if isinstance(trace, LoadedTrace):
        report["trace"] = trace.report()
    report["seconds"] = {
        "load": loaded - began,
        "simulate": simulated - loaded,
        "total": time.perf_counter() - began,
    }
    if args.out is not None:  # one that cannot be written is reported after the result
        write_outputs(args, "--out", _write_outputs, args, result, report)
    if args.json:
        print_json(report)
    else:
        print(
            f"# fabricflow cluster: {len(result.jobs)} jobs on {fabric.name}, scheduler "
            f"{args.scheduler}, backfill {args.backfill}, interference "
            f"{'off' if args.no_interference else 'on'}"
        )
        print(result.summary())
    return 0


def _progress_printer(*, after_s: float = 3.0, every_s: float = 10.0):
    """``say(text)``: checks for Ctrl-C, and prints ``text`` on stderr (stdout stays one
    JSON object) once the command has run ``after_s`` seconds, then every ``every_s``."""
    began = time.perf_counter()
    last = [-math.inf]

    def say(text: str) -> None:
        check()
        now = time.perf_counter() - began
        if now >= after_s and now - last[0] >= every_s:
            last[0] = now
            print(f"cluster: {text}, {now:,.0f} s elapsed", file=sys.stderr, flush=True)

    return say


def _write_outputs(args, result, report) -> None:
    ensure_folder(args.out)
    path = os.path.join(args.out, "timeline.nc")
    with atomic_path(path) as tmp:
        result.timeline.to_netcdf(tmp)
    mark_done(args, path)
    path = os.path.join(args.out, "jobs.csv")
    write_text(path, jobs_csv(result.jobs))
    mark_done(args, path)
    path = os.path.join(args.out, "summary.json")
    write_json_file(path, report)
    mark_done(args, path)
    for name, plot in (("gantt.png", plot_gantt), ("utilization.png", plot_utilization)):
        path = os.path.join(args.out, name)
        plot(result, path)
        mark_done(args, path)
    path = os.path.join(args.out, "slowdown_cdf.png")
    plot_slowdown_cdf({args.scheduler: result}, path)
    mark_done(args, path)
    policy = result.settings["checkpoint"]
    mtbfs = [j["mtbf_s"] for j in result.jobs if j["mtbf_s"] is not None]
    if mtbfs and policy["interval_s"] is not None and policy["write_s"] > 0:
        mtbf_axis, interval_axis = goodput_map_axes(
            policy["write_s"], mtbfs, [policy["interval_s"]]
        )
        path = os.path.join(args.out, "goodput_map.png")
        plot_goodput_map(
            path,
            write_s=policy["write_s"],
            restart_s=policy["restart_s"],
            mtbf_s=mtbf_axis,
            interval_s=interval_axis,
            simulated=[
                (j["mtbf_s"], policy["interval_s"], j["goodput"])
                for j in result.jobs
                if j["mtbf_s"] is not None and j["goodput"] is not None and j["failures"]
            ][:20],
        )
        mark_done(args, path)


def jobs_csv(jobs: list[dict]) -> str:
    """The per-job rows as CSV text through the project's one table exporter
    (:func:`fabricflow.csv_tables.csv_text`: empty cells for None, numbers that read back
    exactly, text quoted where it holds a comma)."""
    return csv_text({column: [job.get(column) for job in jobs] for column in JOB_COLUMNS})
