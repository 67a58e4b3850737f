"""``fabricflow sweep``: run a SPEC's parameter grid into a resumable zarr store.

Examples::

    fabricflow sweep spec.yaml --out study.zarr               # local processes
    fabricflow sweep spec.yaml --out study.zarr --workers 0   # in this process
    fabricflow sweep spec.yaml --out study.zarr --scheduler tcp://10.0.0.5:8786 --json

Rerunning the same command computes only the points not done (failed ones again).
Exit codes: 0 every point done; 1 some points failed (their errors are in the store's
``error`` variable; rerun to retry them), or the store is damaged, read-only or its disk
full; 2 bad input (SPEC, a store of another SPEC or in use by another run); 130
interrupted (finished points stay in the store). Under ``--json`` every outcome is one
object, and an interrupt or a full disk says how many points the store holds.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import warnings

from fabricflow.commands.common import add_json_flag, output_store, print_json
from fabricflow.commands.interrupts import Interrupted
from fabricflow.errors import OutputError, SpecError
from fabricflow.sweeps.grid_spec import read_sweep_spec
from fabricflow.sweeps.run import MAX_POINTS, failed_points, run_sweep
from fabricflow.sweeps.store import ignore_zarr_notices, stored_counts
from fabricflow.workload.calibration import read_calibration


def register(parser) -> None:
    parser.description = (
        "Evaluate a task (step, collective, optimize, maxmin, cc, module:function) "
        "at every point of a SPEC's grid; results go to a zarr store as points finish, and a "
        "rerun computes only the missing points."
    )
    parser.add_argument("spec", help="SPEC file (YAML or JSON): task, fixed, grid, metrics")
    parser.add_argument(
        "--out",
        required=True,
        type=output_store,
        metavar="STORE",
        help="zarr store folder (created, or resumed when it holds this SPEC)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="local worker processes (default: one per core, at most one per "
        "point; 0 runs in this process)",
    )
    parser.add_argument(
        "--scheduler",
        default=None,
        metavar="tcp://HOST:PORT",
        help="run on a Dask distributed scheduler instead of local processes",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace a store written by another SPEC"
    )
    parser.add_argument(
        "--repair",
        action="store_true",
        help="rebuild the damaged parts of a store (from the SPEC) and compute their points "
        "again, keeping every intact point",
    )
    parser.add_argument(
        "--max-points",
        type=int,
        default=None,
        metavar="N",
        help="the largest grid this run takes (default 1,000,000); raise it to run a "
        "larger grid on purpose",
    )
    parser.add_argument(
        "--calibration",
        default=None,
        metavar="FILE",
        help="calibration YAML of 'fabricflow calibrate' for every point of a step, "
        "collective or optimize sweep (added to the SPEC's fixed arguments, so the store "
        "records it)",
    )
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    ignore_zarr_notices()  # for the process: zarr's I/O thread can warn after an interrupt
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            ignore_zarr_notices()  # before "default", which would show them again
            result = run_sweep(
                _with_calibration(args.spec, args.calibration),
                args.out,
                workers=args.workers,
                scheduler=args.scheduler,
                overwrite=args.overwrite,
                repair=args.repair,
                progress=False if args.json else None,
                max_points=MAX_POINTS if args.max_points is None else args.max_points,
            )
    except Interrupted:
        # the interrupt's one object says how many points the store holds now
        stored = _stored(args.out)
        if stored is not None:
            args.summary = {
                "message": f"{stored['done']:,} of {stored['points']:,} points are stored in "
                f"{args.out} ({stored['failed']:,} failed); the same command computes the "
                f"other {stored['points'] - stored['done']:,}",
                **stored,
            }
        raise
    except OutputError as error:  # damaged, read-only, full disk: with the points stored
        stored = _stored(args.out)
        if args.json:
            print_json({"error": "OutputError", "message": str(error), **(stored or {})})
        else:
            print(f"fabricflow sweep: error: {error}", file=sys.stderr)
        return 1
    summary = result.summary()
    if args.json:
        print_json(summary)
    else:
        print(
            f"sweep {args.spec}: {summary['points']} points, {summary['computed']} computed, "
            f"{summary['reused']} reused, {summary['failed']} failed in "
            f"{summary['seconds']:.1f} s ({summary['backend']}, {summary['workers']} workers)"
        )
        print(f"  store: {summary['store']}")
        if summary["missing_metrics"]:
            print(
                f"  {summary['missing_metrics']} points marked done had metrics missing from "
                "the store (deleted chunks): computed again"
            )
        for line in summary["repaired"]:
            print(f"  repaired: {line}")
        if summary["worker_restarts"]:
            print(f"  {summary['worker_restarts']} worker processes died and were replaced")
        failed = failed_points(result.dataset)
        for point in failed[:10]:
            reason = point.pop("error")
            print(f"  failed {point}: {reason}")
        if len(failed) > 10:
            print(f"  ... {len(failed) - 10} more failed points (variable 'error' of the store)")
    return 0 if summary["reused"] + summary["computed"] == summary["points"] else 1


def _with_calibration(spec: str, calibration: str | None):
    """The SPEC file, or the SPEC with ``calibration`` (an absolute path, checked by
    reading it) among its fixed arguments."""
    if calibration is None:
        return spec
    read_calibration(calibration)  # a bad file is bad input before any point runs
    parsed = read_sweep_spec(spec)
    if parsed.task not in ("step", "collective", "optimize"):
        raise SpecError(
            "--calibration", f"applies to step, collective and optimize sweeps, not {parsed.task!r}"
        )
    fixed = {**parsed.fixed, "calibration": os.path.abspath(calibration)}
    return dataclasses.replace(parsed, fixed=fixed)


def _stored(store: str) -> dict | None:
    """``points``, ``done``, ``failed``, ``pending`` and ``store`` as the store holds them
    now (read from disk), or None when it has no status yet."""
    try:
        return {**stored_counts(store), "store": store}
    except OSError:
        return None
