"""``fabricflow sweep``: run a SPEC's parameter grid into a resumable zarr store.

Examples::

    fabricflow sweep spec.yaml --out study.zarr               # local processes
    fabricflow sweep spec.yaml --out study.zarr --workers 0   # in this process
    fabricflow sweep spec.yaml --out study.zarr --scheduler tcp://10.0.0.5:8786 --json

Rerunning the same command computes only the points not done (failed ones again).
Exit codes: 0 every point done; 1 some points failed (their errors are in the store's
``error`` variable; rerun to retry them); 2 bad input (SPEC, a store of another SPEC);
130 interrupted (finished points stay in the store).
"""

from __future__ import annotations

from ._common import add_json_flag, output_folder, print_json


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="run a parameter sweep (SPEC.yaml) into a resumable zarr store",
        description="Evaluate a task (step, collective, optimize, maxmin, cc, module:function) "
        "at every point of a SPEC's grid; results go to a zarr store as points finish, and a "
        "rerun computes only the missing points.",
    )
    parser.add_argument("spec", help="SPEC file (YAML or JSON): task, fixed, grid, metrics")
    parser.add_argument(
        "--out",
        required=True,
        type=output_folder,
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
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    import warnings

    from ..study.sweep.run import failed_points, run_sweep

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        result = run_sweep(
            args.spec,
            args.out,
            workers=args.workers,
            scheduler=args.scheduler,
            overwrite=args.overwrite,
            progress=False if args.json else None,
        )
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
        failed = failed_points(result.dataset)
        for point in failed[:10]:
            error = point.pop("error")
            print(f"  failed {point}: {error}")
        if len(failed) > 10:
            print(f"  ... {len(failed) - 10} more failed points (variable 'error' of the store)")
    return 0 if (result.dataset["status"].values == 1).all() else 1
