"""``fabricflow bench``: run the scale benchmarks (all sections, or those named)."""

from __future__ import annotations

import json
import os
import platform
import time

from fabricflow.bench import SECTIONS, load
from fabricflow.commands.common import add_json_flag, mark_done, print_json
from fabricflow.errors import SpecError
from fabricflow.files import to_jsonable


def register(parser) -> None:
    parser.add_argument("sections", nargs="*", help="sections to run (default: all)")
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, for a smoke test of the benchmark itself"
    )
    parser.add_argument(
        "--gpu",
        action="store_true",
        help="with no section named: the prepared GPU run (section gpu, 8 minutes, one JSON; "
        "skipped without a GPU); with sections: also their accelerator-sized cases",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="also write the report to this JSON file (section gpu: "
        "rewritten after each of its cases)",
    )
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    # section gpu runs when asked for (by name, or --gpu with no section named), never
    # as part of "all": it is the 8-minute accelerator run
    default = ["gpu"] if args.gpu else [name for name in SECTIONS if name != "gpu"]
    chosen = list(args.sections) or default
    unknown = [name for name in chosen if name not in SECTIONS]
    if unknown:
        raise SpecError("sections", f"unknown section(s) {unknown}; choose from {list(SECTIONS)}")
    if "gpu" in chosen and "XLA_PYTHON_CLIENT_PREALLOCATE" not in os.environ:
        # each gpu case runs in its own process: this one must not reserve the device's
        # memory (JAX takes 75% of it at start by default), only look at it; the cases
        # get JAX's default back
        os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
        args.case_env_drop = ("XLA_PYTHON_CLIENT_PREALLOCATE",)
    # the sections asked for, and JAX, imported once the environment above is set
    sections = {name: load(name) for name in chosen}
    import jax

    report = {
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "jax": jax.__version__,
            "devices": [str(d) for d in jax.devices()],
        },
        "quick": bool(args.quick),
    }
    for name in chosen:
        start = time.perf_counter()
        section = sections[name].run(args)
        section.setdefault("section_wall_s", time.perf_counter() - start)
        report[name] = section
        mark_done(args, name)
        args.__dict__.setdefault("partial", {})[name] = section  # reported if interrupted
        if not args.json:
            print(f"== {name}")
            for key, value in section.items():
                print(f"  {key}: {value}")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(to_jsonable(report), handle)
    if args.json:
        print_json(report)
    return 0
