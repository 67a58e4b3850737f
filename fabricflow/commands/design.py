"""``fabricflow design``: search fabric designs for a workload (see docs/cost.md).

Example::

    fabricflow design --gpu h100-sxm --job llama3-405b:16384:2048:8192 \\
        --space attachment=rail,rail-only --out design-405b

writes ``DIR/designs.zarr`` (the sweep store: a rerun resumes it; ``DIR/designs-common.zarr``
when some layout search did not finish and the designs' best layouts were timed on each),
``DIR/designs.csv`` (one row per design, best first: its layout, whether its search
finished, the GPUs built) and ``DIR/pareto.png`` (cost per million tokens against step
time, the Pareto front and the winners labelled).
"""

from __future__ import annotations

import csv
import json
import os

from fabricflow.assignments import key_values
from fabricflow.atomic import atomic_path
from fabricflow.commands.calibration_flags import calibration_from_args
from fabricflow.commands.common import (
    add_json_flag,
    output_folder,
    print_json,
    print_table,
)
from fabricflow.design.search import common_store, design_fabric, plot_design_front
from fabricflow.design.space import design_spec
from fabricflow.errors import SpecError
from fabricflow.fabric.cost_table import read_cost_file
from fabricflow.fabric.spec import spec_text
from fabricflow.layout_search.layout_codes import describe

DESIGN_COLUMNS = [
    ("design", "design"),
    ("layout", "layout (first job)"),
    ("search", "search"),
    ("fabric_gpus", "GPUs built"),
    ("step_time_s", "step s"),
    ("tokens_per_s", "tokens/s"),
    ("network_capex_per_gpu", "net/job GPU"),
    ("network_power_W", "net W"),
    ("cost_per_million_tokens", "per Mtok"),
    ("pareto", "pareto"),
]
# designs.csv: these first, then every other metric (each job's layout as one line)
CSV_FIRST = ("design", "layout", "search", "layout_from", "gpus", "fabric_gpus")


def register(parser) -> None:
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
        "nic_speed, scale_up, transport (ib|roce|uet); others take the default space",
    )
    parser.add_argument(
        "--fix",
        action="append",
        default=[],
        metavar="KNOB=V",
        help="pin a layout knob of every job's layout search (e.g. tp=8)",
    )
    parser.add_argument(
        "--capex-budget", type=float, default=None, help="most total capex a winner may cost"
    )
    parser.add_argument(
        "--objective",
        default="tokens_per_dollar",
        choices=["tokens_per_dollar", "cost_per_million_tokens", "step_time", "capex", "power"],
    )
    parser.add_argument(
        # default: fabricflow.design.space.DEFAULT_LAYOUT_BUDGET_WORK
        "--layout-budget-work", type=int, default=512, metavar="N",
        help="work of each job's layout search per design: group structures solved plus "
        "candidates timed (the same answer on every run, unlike seconds); where a search "
        "stops short, every design's best layouts are timed on that design",
    )  # fmt: skip
    parser.add_argument("--cost-file", metavar="PATH", help="price table overrides (YAML/JSON)")
    parser.add_argument("--out", required=True, type=output_folder, metavar="DIR")
    parser.add_argument("--workers", type=int, default=None, metavar="N")
    parser.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace a store of another search"
    )
    parser.add_argument("--top-k", type=int, default=10, help="designs printed (default 10)")
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
    """``KNOB=V1,V2`` (or ``KNOB=V``) flags as a mapping; numbers read as numbers. A knob
    given twice with different values is refused (:func:`fabricflow.assignments.key_values`).
    """
    example = "KNOB=VALUE[,VALUE...]" if lists else "KNOB=VALUE"
    out: dict = {}
    for key, value in key_values(items, flag, example=example, lists=lists).items():
        if not value.strip():
            raise SpecError(f"{flag} {key}", f"expected {example}, got an empty value")
        out[key] = [_number(v.strip()) for v in value.split(",")] if lists else _number(value)
    return out


def _number(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def run(args) -> int:
    fixed = parse_assignments(args.fix, "--fix", lists=False)
    jobs = [parse_job(text, fixed) for text in args.job]
    space = parse_assignments(args.space, "--space", lists=True)
    search = design_fabric(
        {"gpu": args.gpu, "jobs": jobs},
        space=space,
        capex_budget=args.capex_budget,
        objective=args.objective,
        store=os.path.join(args.out, "designs.zarr"),
        layout_budget_work=args.layout_budget_work,
        cost=read_cost_file(args.cost_file) if args.cost_file else None,
        workers=args.workers,
        scheduler=args.scheduler,
        overwrite=args.overwrite,
        calibration=calibration_from_args(args),
        progress=not args.json,
    )
    figure = plot_design_front(search, os.path.join(args.out, "pareto.png"))
    table = write_csv(search, os.path.join(args.out, "designs.csv"))
    stores = [os.path.join(args.out, "designs.zarr")]
    if search.common is not None:
        stores.append(common_store(stores[0]))
    rows = search.rows
    fabrics = write_fabrics(search, os.path.join(args.out, "fabrics"))
    out = {
        "designs": len(search.rows),
        "infeasible": search.infeasible,
        "failed": search.failed,
        "best": search.best,
        "objective": search.objective,
        "currency": search.currency,
        "pareto": [r["design"] for r in search.rows if r["pareto"]],
        "searches_finished": sum(r["search"] == "finished" for r in search.rows),
        "top": rows[: args.top_k],
        "files": [str(figure), table, *stores, *fabrics],
    }
    if args.json:
        print_json(out)
    else:
        print_text(search, args.top_k)
        print(f"wrote {json.dumps(out['files'])}")
    return 1 if search.failed else 0


def print_text(search, top: int) -> None:
    """The ranked table, what the columns mean, and every infeasible or failed design."""
    shown = [
        {**r, "fabric_gpus": int(r["fabric_gpus"]), "network_capex_per_gpu":
         round(r["network_capex_per_gpu"]), "network_power_W": round(r["network_power_W"])}
        for r in search.rows[:top]
    ]  # fmt: skip
    print_table(shown, DESIGN_COLUMNS)
    rows = search.rows
    gpus = int(rows[0]["gpus"]) if rows else 0
    finished = sum(r["search"] == "finished" for r in rows)
    common = sum(r.get("layout_from") == "common" for r in rows)
    print(
        f"costs in {search.currency or 'the price table currency'}; net/job GPU: network "
        f"capex over the workload's {gpus:,} GPUs (the fabric is built for 'GPUs built')"
    )
    print(
        f"layout searches finished on {finished} of {len(rows)} designs"
        + (
            f"; where one stopped, the designs' best layouts were timed on it "
            f"({common} design(s) took a layout another design's search found)"
            if finished < len(rows)
            else ""
        )
    )
    best = search.best
    print(
        f"best by {search.objective}: {best['design'] if best else 'none within the capex budget'}"
    )
    print(f"{len(rows)} designs evaluated, {len(search.infeasible)} infeasible, "
          f"{len(search.failed)} failed")  # fmt: skip
    for code, reason in search.infeasible.items():
        print(f"  infeasible {code}: {reason.removeprefix('design: ')}")
    for code, reason in search.failed.items():
        print(f"  failed {code}: {reason}")


def write_fabrics(search, folder: str) -> list[str]:
    """``FOLDER/<design>.yaml``: each evaluated design's fabric as a YAML spec (what
    ``--fabric FILE`` and :func:`fabricflow.load_fabric` read), built for the GPUs it was
    evaluated with; ``/`` and ``:`` of the design code become ``_`` and ``-``."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for row in search.rows:
        code = row["design"]
        spec = design_spec(code, int(row["gpus"]))
        path = os.path.join(folder, code.replace("/", "_").replace(":", "-") + ".yaml")
        text = spec_text(spec, f"fabric of design {code} (written by fabricflow design)")
        with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
        paths.append(path)
    return paths


def write_csv(search, path: str) -> str:
    """``designs.csv``: one row per design, best first (each job's layout as one line)."""
    rows = []
    for row in search.rows:
        flat = {k: v for k, v in row.items() if not (k.startswith("job") and k[3:].isdigit())}
        for key, value in row.items():
            if key.startswith("job") and key[3:].isdigit() and key != "job0":
                flat[f"layout_{key}"] = describe(value)
        rows.append(flat)
    keys = list(CSV_FIRST) + [k for k in (rows[0] if rows else {}) if k not in CSV_FIRST]
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=keys if rows else ["design"])
        writer.writeheader()
        writer.writerows(rows)
    return path
