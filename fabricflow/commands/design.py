"""``fabricflow design``: search fabric designs for a workload (see docs/cost.md).

Example::

    fabricflow design --gpu h100-sxm --job llama3-405b:16384:2048:8192 \\
        --space attachment=rail,rail-only --out design-405b

writes ``DIR/designs.zarr`` (the sweep store: a rerun resumes it), ``DIR/designs.csv``
(one row per design, best first) and ``DIR/pareto.png`` (cost per million tokens against
step time, the Pareto front and the winners labelled).
"""

from __future__ import annotations

import json

from ._common import (
    add_json_flag,
    calibration_from_args,
    output_folder,
    print_json,
    print_table,
)

DESIGN_COLUMNS = [
    ("design", "design"),
    ("step_time_s", "step s"),
    ("tokens_per_s", "tokens/s"),
    ("network_capex_per_gpu", "net $/GPU"),
    ("network_power_W", "net W"),
    ("cost_per_million_tokens", "$/Mtok"),
    ("pareto", "pareto"),
]


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "design",
        help="search fabric designs (tiers, oversubscription, attachment, planes, NIC speed, "
        "scale-up, IB/RoCE) for a workload; Pareto front of cost vs step time",
    )
    parser.add_argument("--gpu", required=True, help="GPU preset (also priced: cost.gpus)")
    parser.add_argument(
        "--job",
        action="append",
        required=True,
        metavar="MODEL:GPUS:GLOBAL_BATCH:SEQ",
        help="a job of the workload (repeat for a mix), e.g. llama3-405b:16384:2048:8192",
    )
    parser.add_argument(
        "--space",
        action="append",
        default=[],
        metavar="KNOB=V1,V2",
        help="values of a design knob: tiers, oversubscription, attachment, planes, "
        "nic_speed, scale_up, transport (ib|roce); others take the default space",
    )
    parser.add_argument(
        "--fix",
        action="append",
        default=[],
        metavar="KNOB=V",
        help="pin a layout knob of every job's layout search (e.g. tp=8)",
    )
    parser.add_argument(
        "--budget", type=float, default=None, help="most total capex a winner may cost"
    )
    parser.add_argument(
        "--objective",
        default="tokens_per_dollar",
        choices=["tokens_per_dollar", "cost_per_million_tokens", "step_time", "capex", "power"],
    )
    parser.add_argument(
        "--layout-budget", type=float, default=10.0, metavar="S",
        help="seconds of layout search per job and design (default 10)",
    )  # fmt: skip
    parser.add_argument("--cost-file", metavar="PATH", help="price table overrides (YAML/JSON)")
    parser.add_argument("--out", required=True, type=output_folder, metavar="DIR")
    parser.add_argument("--workers", type=int, default=None, metavar="N")
    parser.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace a store of another search"
    )
    parser.add_argument("--top", type=int, default=10, help="designs printed (default 10)")
    parser.add_argument(
        "--calibration",
        default=None,
        metavar="FILE",
        help="calibration YAML of 'fabricflow calibrate': its GPU and network parameters "
        "time every design's layouts",
    )
    add_json_flag(parser)
    parser.set_defaults(func=run)


def parse_job(text: str, fixed: dict) -> dict:
    from ..errors import SpecError

    parts = text.split(":")
    if len(parts) != 4:
        raise SpecError("--job", f"expected MODEL:GPUS:GLOBAL_BATCH:SEQ, got {text!r}")
    try:
        gpus, batch, seq = (int(p) for p in parts[1:])
    except ValueError:
        raise SpecError("--job", f"GPUS, GLOBAL_BATCH and SEQ are integers, got {text!r}") from None
    job = {"model": parts[0], "gpus": gpus, "global_batch": batch, "seq_len": seq}
    if fixed:
        job["fixed"] = fixed
    return job


def parse_assignments(items: list[str], flag: str, *, lists: bool) -> dict:
    """``KNOB=V1,V2`` (or ``KNOB=V``) flags as a mapping; numbers read as numbers."""
    from ..errors import SpecError

    out: dict = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise SpecError(
                flag, f"expected KNOB=VALUE{'[,VALUE...]' if lists else ''}, got {item!r}"
            )
        values = [_number(v) for v in value.split(",")] if lists else _number(value)
        out[key] = values
    return out


def _number(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def run(args) -> int:
    import os

    from ..atomic import atomic_path
    from ..study.design import design_fabric, plot_design_front
    from .fabric import read_cost_file

    fixed = parse_assignments(args.fix, "--fix", lists=False)
    jobs = [parse_job(text, fixed) for text in args.job]
    space = parse_assignments(args.space, "--space", lists=True)
    search = design_fabric(
        {"gpu": args.gpu, "jobs": jobs},
        space=space,
        budget=args.budget,
        objective=args.objective,
        store=os.path.join(args.out, "designs.zarr"),
        layout_budget_s=args.layout_budget,
        cost=read_cost_file(args.cost_file) if args.cost_file else None,
        workers=args.workers,
        scheduler=args.scheduler,
        overwrite=args.overwrite,
        calibration=calibration_from_args(args),
    )
    figure = plot_design_front(search, os.path.join(args.out, "pareto.png"))
    table = os.path.join(args.out, "designs.csv")
    keys = list(search.rows[0]) if search.rows else ["design"]
    with atomic_path(table) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        handle.write(",".join(keys) + "\n")
        for row in search.rows:
            handle.write(",".join(str(row[k]) for k in keys) + "\n")
    out = {
        "designs": len(search.rows),
        "infeasible": search.infeasible,
        "failed": search.failed,
        "best": search.best,
        "objective": search.objective,
        "pareto": [r["design"] for r in search.rows if r["pareto"]],
        "top": search.rows[: args.top],
        "files": [str(figure), table, os.path.join(args.out, "designs.zarr")],
    }
    if args.json:
        print_json(out)
    else:
        print_table(search.rows[: args.top], DESIGN_COLUMNS)
        best = search.best
        print(f"best by {search.objective}: {best['design'] if best else 'none within the budget'}")
        print(f"{len(search.rows)} designs evaluated, {len(search.infeasible)} infeasible, "
              f"{len(search.failed)} failed; wrote {json.dumps(out['files'])}")  # fmt: skip
    return 1 if search.failed else 0
