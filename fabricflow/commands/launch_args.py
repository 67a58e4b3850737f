"""``fabricflow launch-args RESULT.json``: the layout of a step or optimize result as the
arguments that launch it with Megatron-LM or NeMo.

Example::

    fabricflow optimize --fabric dgx-h100-superpod ... --json > best.json
    fabricflow launch-args best.json                 # Megatron-LM flags
    fabricflow launch-args best.json --framework nemo

``RESULT`` is the object ``fabricflow step --json`` or ``fabricflow optimize --json``
printed (``-``: read it from stdin); it is read as strictly as any spec file (duplicate
keys, NaN, depth) and its layout checked as the step model checks one. With ``--json`` it
prints ``{"framework", "arguments", "argv", "notes", "layout", "order", "placement",
"num_gpus", "model"}`` (``argv``: the arguments as single tokens).
"""

from __future__ import annotations

import os
import sys

from fabricflow.commands.common import add_json_flag, print_json
from fabricflow.errors import SpecError
from fabricflow.files import parse_structured, read_structured
from fabricflow.workload.launch_args import result_arguments


def register(parser) -> None:
    parser.description = (
        "The layout of 'fabricflow step --json' or 'optimize --json' as the "
        "command-line arguments that launch it (docs/launch-args.md)."
    )
    parser.add_argument("result", help="JSON file of a step or optimize result ('-': stdin)")
    parser.add_argument("--framework", default="megatron", choices=["megatron", "nemo"])
    parser.add_argument(
        "--model",
        default=None,
        help="model preset or config file to check the layout against (default: the "
        "result's model when it is a preset)",
    )
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    if args.result == "-":
        result = parse_structured(sys.stdin.read(), what="result", source="<stdin>", syntax="json")
    elif os.path.isdir(args.result):
        raise SpecError(
            "result",
            f"{args.result} is a folder; give the JSON object that 'fabricflow step --json' or "
            "'fabricflow optimize --json' printed, saved to a file ('optimize --out' writes "
            "candidates and plots, no result object)",
        )
    else:
        result = read_structured(args.result, what="result", syntax="json")
    arguments, notes, launched = result_arguments(result, args.framework, model=args.model)
    if args.json:
        argv = [token for argument in arguments for token in argument.split(" ", 1)]
        print_json(
            {
                "framework": args.framework,
                "arguments": arguments,
                "argv": argv,
                "notes": notes,
                **launched,
            }
        )
        return 0
    print(" \\\n  ".join(arguments))
    for note in notes:
        print(f"# {note}")
    return 0
