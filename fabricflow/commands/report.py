"""``fabricflow report``: a self-contained HTML design review of one job on one fabric.

Example::

    fabricflow report --fabric dgx-h100-superpod --model llama3-70b --gpu h100-sxm \\
        --gpus 1024 --out review

writes ``review/report.html``: fabric summary and bisection, the best layouts, the step
breakdown, per-tier utilization under the job's collectives and failure sensitivity.
"""

from __future__ import annotations

import math
import os
import shlex
import sys

from fabricflow.atomic import write_text
from fabricflow.commands.calibration_flags import add_calibration_flags, calibration_from_args
from fabricflow.commands.common import (
    IMPORT_FLAGS,
    add_fabric_flags,
    add_json_flag,
    load_fabric_flags,
    output_folder,
    print_json,
    write_outputs,
)
from fabricflow.commands.interrupts import check
from fabricflow.errors import SpecError
from fabricflow.report.build import build_report
from fabricflow.report.html import fabricflow_version, render_html
from fabricflow.workload.gpu import load_gpu
from fabricflow.workload.layout import Layout
from fabricflow.workload.model_spec import load_model
from fabricflow.workload.step_command import step_command

# Layout flags: giving any of them fixes the job's layout instead of taking the optimizer's.
# The report command's options, in the order of --help, for the page's command line.
_PARSER_ACTIONS: list = []
_LAYOUT_FLAGS = ("tp", "pp", "cp", "ep", "vpp", "micro_batch", "recompute", "zero")
_LAYOUT_SWITCHES = ("no_sequence_parallel",)


def register(parser) -> None:
    parser.description = (
        "Compute a design review of one training job (fabric summary and "
        "bisection, best layouts, step breakdown, per-tier utilization, failure "
        "sensitivity) and write it as one self-contained HTML page, OUT/report.html."
    )
    add_fabric_flags(parser)
    parser.add_argument("--model", required=True, help="model preset or config.json/YAML path")
    parser.add_argument("--gpu", required=True, help="GPU preset (a100-80gb, h100-sxm, ...)")
    parser.add_argument("--gpus", type=int, required=True, help="GPUs in the job")
    parser.add_argument(
        "--global-batch", type=int, default=None, help="sequences per step (default: --gpus)"
    )
    parser.add_argument("--seq", type=int, default=4096, help="sequence length (default 4096)")
    parser.add_argument("--precision", default="bf16", choices=["bf16", "fp8"])
    layout = parser.add_argument_group(
        "job layout",
        "give any of these to fix the layout (the others take 'fabricflow step' defaults: "
        "1, micro-batch 1, no recompute, ZeRO 1, sequence parallelism on); without them the "
        "layout optimizer's best is the job's",
    )
    for flag in ("tp", "pp", "cp", "ep", "vpp"):
        layout.add_argument(f"--{flag}", type=int, default=None)
    layout.add_argument("--micro-batch", type=int, default=None)
    layout.add_argument("--recompute", default=None, choices=["none", "selective", "full"])
    layout.add_argument("--zero", type=int, default=None, choices=[0, 1, 2, 3])
    layout.add_argument(
        "--no-sequence-parallel",
        action="store_true",
        help="turn sequence parallelism off (on by default, as in 'fabricflow step')",
    )
    layout.add_argument("--order", default=None, help="rank order (default tp-cp-ep-dp-pp)")
    layout.add_argument(
        "--placement",
        default=None,
        choices=["deployed", "contiguous", "scattered", "topology-aware", "domain-aligned"],
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=30.0,
        help="seconds the layout optimizer may time candidates (default 30; 0 skips the "
        "search and needs a given layout)",
    )
    parser.add_argument("--top-k", type=int, default=5, help="layouts listed (default 5)")
    parser.add_argument(
        "--fail-kind",
        default=None,
        help="link kind whose cables fail in the failure section (default: leaf, the "
        "leaf-to-spine cables, else the fabric's first switch-to-switch kind, else ici on a "
        "torus)",
    )
    parser.add_argument(
        "--fail-fractions",
        default="0.01,0.02,0.05,0.1",
        metavar="F,F,...",
        help="fractions of those cables failed (default 0.01,0.02,0.05,0.1)",
    )
    parser.add_argument(
        "--fail-seeds", type=int, default=3, help="random failure draws per fraction (default 3)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the scattered placement, first failure seed"
    )
    parser.add_argument(
        "--out",
        type=output_folder,
        default=".",
        help="folder for report.html (default: the current folder)",
    )
    add_calibration_flags(parser)
    add_json_flag(parser)
    parser.set_defaults(func=run)
    _PARSER_ACTIONS[:] = [action for action in parser._actions if action.option_strings]


def _fractions(text: str) -> list[float]:
    values = []
    for word in (w.strip() for w in text.split(",")):
        try:
            value = float(word)
        except ValueError:
            raise SpecError(
                "--fail-fractions", f"expected numbers in (0, 1) such as 0.01,0.05, got {text!r}"
            ) from None
        if not (math.isfinite(value) and 0 < value < 1):
            raise SpecError("--fail-fractions", f"each must lie in (0, 1), got {word!r}")
        values.append(value)
    return values


def _layout(args):
    """The :class:`Layout` of the layout flags, or ``None`` when none is given."""
    given = [flag for flag in _LAYOUT_FLAGS if getattr(args, flag) is not None]
    if not given and not any(getattr(args, flag) for flag in _LAYOUT_SWITCHES):
        for flag in ("order", "placement"):
            if getattr(args, flag) is not None:
                raise SpecError(f"--{flag}", "applies to a given layout; give --tp, --pp, ...")
        return None
    values = {
        flag: 1 if getattr(args, flag) is None else getattr(args, flag)
        for flag in ("tp", "pp", "cp", "ep", "vpp")
    }
    for flag, value in values.items():
        if value < 1:
            raise SpecError(f"--{flag}", f"must be an integer >= 1, got {value}")
    micro = 1 if args.micro_batch is None else args.micro_batch
    if micro < 1:
        raise SpecError("--micro-batch", f"must be an integer >= 1, got {micro}")
    denominator = values["tp"] * values["cp"] * values["pp"]
    if args.gpus % denominator:
        raise SpecError("--gpus", f"{args.gpus} is not divisible by tp x cp x pp = {denominator}")
    # every field not given keeps the Layout default, which is what 'fabricflow step'
    # gives without its flag: the two commands time the same layout for the same flags
    return Layout(
        tp=values["tp"],
        pp=values["pp"],
        cp=values["cp"],
        ep=values["ep"],
        vpp=values["vpp"],
        dp=args.gpus // denominator,
        micro_batch=micro,
        global_batch=args.global_batch or args.gpus,
        seq_len=args.seq,
        sequence_parallel=not args.no_sequence_parallel,
        recompute=args.recompute or "none",
        precision=args.precision,
        zero=1 if args.zero is None else args.zero,
    )


def step_command_of(args, job: dict) -> str:
    """The ``fabricflow step`` command that times the report's job again (its headline
    step time): the report's fabric, model, GPU and GPU count as given, then the job's
    layout and options (:func:`~fabricflow.workload.step_command.step_command`)."""
    fields = dict(job["layout"])
    if fields.get("pp_split") is not None:
        fields["pp_split"] = tuple(fields["pp_split"])
    options = {k: job[k] for k in ("order", "placement", "placement_seed", "routing", "algorithms")}
    options["collectives"] = job["collectives"]
    options["calibration"] = getattr(args, "calibration", None)  # calibrated numbers too
    fabric_flags = {key: getattr(args, key, None) for key in IMPORT_FLAGS}
    return step_command(
        args.fabric, args.model, args.gpu, args.gpus, Layout(**fields), fabric_flags, **options
    )


def command_line(args) -> str:
    """The command that reproduces the report: every flag with its value, defaults
    included (so that a later change of a default does not change what it means)."""
    words = ["fabricflow", "report"]
    for action in _PARSER_ACTIONS:
        value = getattr(args, action.dest, None)
        if value is None or value is False or action.dest in ("json", "help"):
            continue
        flag = action.option_strings[-1]
        words += [flag] if value is True else [flag, str(value)]
    return " ".join(shlex.quote(word) for word in words)


def run(args) -> int:
    _check_counts(args)
    fractions = _fractions(args.fail_fractions)
    fabric = load_fabric_flags(args)
    model = load_model(args.model)
    gpu = load_gpu(args.gpu)
    if args.gpus > fabric.num_gpus:
        raise SpecError(
            "--gpus",
            f"{args.gpus:,} GPUs do not fit {fabric.name!r}, which has {fabric.num_gpus:,}",
        )
    layout = _layout(args)
    if layout is not None:
        layout = layout.validate(model, num_gpus=args.gpus)
    say = None if args.json else (lambda line: print(line, file=sys.stderr, flush=True))
    try:
        report = build_report(
            fabric,
            model,
            gpu,
            args.gpus,
            layout=layout,
            order=args.order,
            placement=args.placement,
            global_batch=args.global_batch,
            seq_len=args.seq,
            budget_s=args.budget,
            top_k=args.top_k,
            fail_kind=args.fail_kind,
            fail_fractions=fractions,
            fail_seeds=args.fail_seeds,
            seed=args.seed,
            progress=say,
            calibration=calibration_from_args(args),
            interval_level=args.interval_level,
        )
    except KeyboardInterrupt:
        # the layout search answers Ctrl-C with a plain KeyboardInterrupt: report the
        # signal that arrived (exit 130) as every command does

        check()
        raise
    except SpecError as error:  # name the command's flag, not the library's argument
        _raise_as_flag(error)
    path = os.path.join(args.out, "report.html")
    report["step_command"] = step_command_of(args, report["job"])
    html = render_html(report, version=fabricflow_version(), command=command_line(args))
    # a report that cannot be written is said after its headline (exit 1), not lost unseen
    written = write_outputs(args, "--out", write_text, path, html)
    _print_answer(args, report, path if written else None)
    return 0


def _check_counts(args) -> None:
    """Checks the counts that need no fabric: ``--gpus``, ``--global-batch`` and ``--seq``
    (integers >= 1; ``--global-batch`` may be absent), in that order.

    Raises:
        SpecError: naming the first flag below 1.
    """
    if args.gpus < 1:
        raise SpecError("--gpus", f"must be an integer >= 1, got {args.gpus}")
    if args.global_batch is not None and args.global_batch < 1:
        raise SpecError("--global-batch", f"must be an integer >= 1, got {args.global_batch}")
    if args.seq < 1:
        raise SpecError("--seq", f"must be an integer >= 1, got {args.seq}")


def _raise_as_flag(error: SpecError):
    """Raises ``error`` again, renamed after the command's flag where the library's argument
    has one (``budget_s`` -> ``--budget``, ...); as it is otherwise.

    Raises:
        SpecError: always.
    """
    flags = {
        "budget_s": "--budget",
        "top_k": "--top-k",
        "fail_kind": "--fail-kind",
        "fail_seeds": "--fail-seeds",
        "gpus": "--gpus",
    }
    if error.field in flags:
        raise SpecError(flags[error.field], str(error).split(": ", 1)[-1]) from None
    raise error


def _print_answer(args, report: dict, path: str | None) -> None:
    """The answer on stdout: with ``--json`` the report's file (``path``, ``None`` when it
    could not be written), title, seconds, sections, figure count, headline, job and the
    equivalent ``step`` command; else the headline in three or four lines of text."""
    head = report["headline"]
    if args.json:
        print_json(
            {
                "report": path,
                "title": report["title"],
                "seconds": report["seconds"],
                "sections": [s["id"] for s in report["sections"]],
                "figures": sum(len(s["figures"]) for s in report["sections"]),
                **head,
                "job": report["job"],
                "step_command": report["step_command"],
            }
        )
    else:
        print(f"{report['title']}: {head['layout']}")
        print(
            f"  step {head['step_time_s']:.4g} s, MFU {100 * head['mfu']:.1f}%, "
            f"{head['memory_gib_per_gpu']:.1f} GiB per GPU"
            + (
                f"; worst slowdown under failures {100 * head['worst_failure_slowdown']:.2f}%"
                if "worst_failure_slowdown" in head
                else ""
            )
        )
        print(f"  the same step: {report['step_command']}")
        if path is not None:
            print(f"  wrote {path} ({report['seconds']:.0f} s)")
