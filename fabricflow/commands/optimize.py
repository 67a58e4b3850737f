"""``fabricflow optimize``: the layout, rank order and placement with the shortest step."""

from __future__ import annotations

import json
import os
import sys

from fabricflow.atomic import atomic_path
from fabricflow.commands.calibration_flags import add_calibration_flags, calibration_from_args
from fabricflow.commands.common import (
    add_fabric_flags,
    add_json_flag,
    load_fabric_flags,
    output_folder,
    print_json,
    write_outputs,
)
from fabricflow.commands.interrupts import mark_reported
from fabricflow.commands.step import stack_from_args
from fabricflow.errors import SpecError
from fabricflow.files import to_jsonable
from fabricflow.layout_search import layout_codes
from fabricflow.layout_search.explain import why_best
from fabricflow.layout_search.knobs import parse_assignments
from fabricflow.layout_search.layout_codes import candidate_of
from fabricflow.layout_search.optimize import SearchInterrupted, flatten_kwargs, optimize_layout
from fabricflow.layout_search.uncertainty import indistinguishable
from fabricflow.plots.layout_search import plot_breakdown_top, plot_pareto, plot_sweep
from fabricflow.units import format_time
from fabricflow.workload.gpu import load_gpu
from fabricflow.workload.model_spec import load_model


def register(parser) -> None:
    """The flags of ``fabricflow optimize``, group by group (the order ``--help`` lists them)."""
    add_fabric_flags(parser)
    _add_job_flags(parser)
    _add_search_flags(parser)
    _add_ranking_flags(parser)
    add_calibration_flags(parser)
    add_json_flag(parser)
    parser.set_defaults(func=run)


def _add_job_flags(parser) -> None:
    """The job: GPU, model, GPU count, batch, sequence length, precision and stack."""
    parser.add_argument("--gpu", required=True, help="GPU preset (a100-80gb, h100-sxm, ...)")
    parser.add_argument("--model", required=True, help="model preset or config.json/YAML path")
    parser.add_argument(
        "--gpus",
        required=True,
        help="GPUs in the job; a comma list (512,1024,2048) sweeps the GPU count",
    )
    parser.add_argument("--global-batch", type=int, required=True, help="sequences per step")
    parser.add_argument("--seq", type=int, required=True, help="sequence length (tokens)")
    parser.add_argument(
        "--precision",
        default=None,
        choices=["bf16", "fp8"],
        help="GEMM precision (default: the stack's, else bf16)",
    )
    parser.add_argument(
        "--stack",
        default=None,
        help="software stack preset or .json/.yaml file: its choices are the values of the "
        "knobs neither searched nor pinned, its parameters time every candidate "
        "(default: megatron-core)",
    )


def _add_search_flags(parser) -> None:
    """What the search varies and fixes, what it minimizes, how many answers it shows
    and its budget."""
    parser.add_argument(
        "--fix",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="pin a knob, e.g. tp=8, zero=1, order=tp-cp-ep-dp-pp (repeatable)",
    )
    parser.add_argument(
        "--space",
        action="append",
        default=[],
        metavar="KNOB=V1,V2",
        help="search exactly these values of a knob (repeatable); with --space only the "
        "product of the given knobs is searched",
    )
    parser.add_argument(
        "--objective",
        default="step_time",
        choices=["step_time", "tokens_per_gpu", "step_time_upper"],
        help="step_time_upper: the best answers ranked again by an upper quantile of their "
        "step time (over ECMP hash seeds and the prediction interval at --interval-level)",
    )
    parser.add_argument("--top-k", type=int, default=10, help="how many of the best to show")
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds to search at most (default: no limit, every candidate is timed or bounded)",
    )
    parser.add_argument(
        "--budget-work",
        type=int,
        default=None,
        metavar="N",
        help="most group structures solved plus candidates timed (default: no limit); "
        "unlike --budget, the answer does not depend on the machine's load",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the scattered placement (>= 0)"
    )


def _add_ranking_flags(parser) -> None:
    """How candidates are timed and ranked, and the output folder."""
    parser.add_argument(
        "--collectives",
        default="fabric",
        choices=["fabric", "alpha-beta"],
        help="time collectives on the fabric with contention, or alpha-beta (none)",
    )
    parser.add_argument(
        "--ranking",
        default="bound",
        choices=["bound", "class"],
        help="bound: every candidate timed or ruled out by a lower bound (exact); class: "
        "also skip candidates whose class-level estimate (link classes, ECMP hash "
        "collisions) cannot win (faster on hashed fabrics, not exhaustive)",
    )
    parser.add_argument(
        "--out",
        type=output_folder,
        default=None,
        help="folder for best.json (the --json object: 'fabricflow launch-args' reads it), "
        "candidates.nc and the figures (Pareto front, top-K breakdown)",
    )


def _gpu_counts(text: str) -> int | list[int]:
    words = [w.strip() for w in str(text).split(",") if w.strip()]
    try:
        counts = [int(w) for w in words]
    except ValueError:
        raise SpecError("--gpus", f"expected an integer or a comma list, got {text!r}") from None
    if not counts or any(c < 1 for c in counts):
        raise SpecError("--gpus", f"GPU counts must be integers >= 1, got {text!r}")
    return counts[0] if len(counts) == 1 and "," not in text else counts


def run(args) -> int:
    gpus = _gpu_counts(args.gpus)
    fixed = parse_assignments(args.fix, many=False, field="--fix")
    space = parse_assignments(args.space, many=True, field="--space") if args.space else None
    model = load_model(args.model)
    gpu = load_gpu(args.gpu)
    fabric = load_fabric_flags(args)
    quiet = args.json
    try:
        search = _search(args, model, gpu, fabric, gpus, fixed, space, quiet)
    except SearchInterrupted as stop:
        return _interrupted_before_any(args, stop)
    interrupted = search.stopped == "interrupted"
    written = []
    out = search.to_dict()
    # what the winner was searched for, so that launch-args checks it against the model
    out["model"] = model.name
    if isinstance(gpus, int):
        out["num_gpus"] = gpus
    out["why"] = explain(search)
    if getattr(search, "sweep", None) is not None:
        out["sweep"] = _sweep_rows(search.sweep)
    if args.out:  # a file that cannot be written is reported after the result (exit 1)
        written = write_outputs(args, "--out", _write_out, search, args.out, dict(out))
    if written:
        out["written"] = written
    if interrupted:
        # Ctrl-C: the best found so far is the answer; report it and leave with 130.

        if args.json:
            sys.stdout.write(json.dumps(to_jsonable(out)) + "\n")
            mark_reported()
        else:
            print_text(search, out["why"])
        print("fabricflow optimize: interrupted; the best found so far is shown", file=sys.stderr)
        return 130
    if args.json:
        print_json(out)
    else:
        print_text(search, out["why"])
        for path in written:
            print(f"  wrote {path}")
    return 0


def _search(args, model, gpu, fabric, gpus, fixed, space, quiet):
    """The layout search the flags ask for (progress lines on stderr unless ``--json``)."""
    stack = stack_from_args(args)
    return optimize_layout(
        model,
        gpu,
        fabric,
        gpus=gpus,
        global_batch=args.global_batch,
        seq_len=args.seq,
        precision=args.precision or stack.choices.get("precision", "bf16"),
        stack=stack,
        fixed=fixed,
        space=space,
        objective=args.objective,
        top_k=args.top_k,
        budget_s=args.budget,
        budget_work=args.budget_work,
        placement_seed=args.seed,
        collectives=args.collectives,
        ranking=args.ranking,
        calibration=calibration_from_args(args),
        interval_level=args.interval_level,
        progress=None if quiet else (lambda line: print(line, file=sys.stderr, flush=True)),
    )


def _interrupted_before_any(args, stop) -> int:
    """Ctrl-C before any candidate was timed: say how far the search got; exit 130."""
    out = stop.to_dict()
    if args.json:
        sys.stdout.write(json.dumps(to_jsonable(out)) + "\n")
        mark_reported()
    else:
        print(stop.message())
    print("fabricflow optimize: interrupted; no candidate was timed", file=sys.stderr)
    return 130


def _sweep_rows(sweep) -> list[dict]:
    rows = []
    for i in range(sweep.sizes["gpus"]):
        rows.append({name: sweep[name].values[i].item() for name in sweep.data_vars} | {
            "gpus": int(sweep["gpus"].values[i])
        })  # fmt: skip
    return rows


def _write_out(search, folder: str, result: dict) -> list[str]:
    """``best.json`` (``result``: the object ``--json`` prints, which ``launch-args``
    reads), ``candidates.nc`` and the figures into ``folder``."""
    paths = []
    best = os.path.join(folder, "best.json")
    with atomic_path(best) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        json.dump(to_jsonable(result), handle, indent=1)
        handle.write("\n")
    paths.append(best)
    nc = os.path.join(folder, "candidates.nc")
    with atomic_path(nc) as tmp:
        search.candidates.to_netcdf(tmp)
    paths.append(nc)
    paths.append(plot_pareto(search, os.path.join(folder, "pareto.png")))
    paths.append(plot_breakdown_top(search, os.path.join(folder, "top_breakdown.png")))
    sweep = getattr(search, "sweep", None)
    if sweep is not None:
        data = os.path.join(folder, "gpu_sweep.nc")
        with atomic_path(data) as tmp:
            sweep.to_netcdf(tmp)
        paths.append(data)
        paths.append(plot_sweep(sweep, os.path.join(folder, "gpu_sweep.png")))
    return [str(p) for p in paths]


def describe(kwargs: dict) -> str:
    """The table's layout column: complete but for the order and placement columns."""
    return layout_codes.describe(candidate_of(kwargs), where=False)


def explain(search) -> str:
    """One line: why the winner wins (what the runner-up loses, and where on the fabric)."""
    return why_best(search)


def print_text(search, why: str) -> None:
    best = search.best
    counts = search.counts
    unexamined = f", {counts['unexamined']:,} not yet examined" if counts.get("unexamined") else ""
    unvisited = f", {counts['unvisited']:,} left untimed" if counts.get("unvisited") else ""
    print(
        f"best of {counts['considered']:,} candidates ({counts['evaluated']:,} timed with "
        f"contention, {counts['pruned']:,} pruned by the bound, {counts['infeasible']:,} "
        f"infeasible{unvisited}{unexamined}; "
        f"{'exhaustive' if search.exhaustive else 'stopped: ' + search.stopped}, "
        f"{search.seconds:.1f} s)"
    )
    band = best.interval
    print(
        f"  step {format_time(best.step_time_s)}"
        + (
            f" ({100 * band.level:.0f}% interval {format_time(band.low)} .. "
            f"{format_time(band.high)})"
            if band is not None
            else ""
        )
        + f", MFU {100 * best.mfu:.1f}%, {best.memory_gib_per_gpu:.1f} GiB per GPU"
    )
    if search.upper_s:
        print(f"  robust objective: upper step time {format_time(search.upper_s[0])}")
    header = f"{'#':>3}  {'layout':<44} {'order':<15} {'placement':<11} {'step':>9} {'MFU':>6} {'GiB':>6}  largest exposed comm"
    print(header)
    for i, (kwargs, result) in enumerate(search.top, 1):
        comm = {k: v for k, v in result.breakdown.items() if k in ("tp", "cp", "ep", "pp", "dp")}
        part = max(comm, key=lambda k: comm[k]) if comm else "-"
        exposed = f"{part} {format_time(comm[part])}" if comm and comm[part] > 0 else "none"
        print(
            f"{i:>3}  {describe(kwargs):<44} {kwargs['order']:<15} {kwargs['placement']:<11} "
            f"{format_time(result.step_time_s):>9} {100 * result.mfu:5.1f}% "
            f"{result.memory_gib_per_gpu:6.1f}  {exposed}"
        )
    print(f"why: {why}")

    close = indistinguishable(
        search.top,
        search.interval_level,
        best.details["rank_gpus"][0],
        search.calibration,
        flatten_kwargs,
        None if search.model is None else search.model.is_moe,
    )
    if close:
        print(
            f"indistinguishable from the best at {100 * search.interval_level:.0f}% "
            f"(the model's error between layouts of one job):"
        )
        for entry in close:
            knobs = ", ".join(f"{k}={v}" for k, v in entry["knobs"].items()) or "same knobs"
            parts = ", ".join(f"{k} {v:+.3g} s" for k, v in entry["parts"].items())
            print(f"  x{entry['ratio']:.3f}: {knobs}; differs in {parts or 'nothing'}")
