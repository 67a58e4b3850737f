"""``fabricflow launch-args RESULT.json``: the layout of a step or optimize result as the
arguments that launch it with Megatron-LM or NeMo.

Example::

    fabricflow optimize --fabric dgx-h100-superpod ... --json > best.json
    fabricflow launch-args best.json                 # Megatron-LM flags
    fabricflow launch-args best.json --framework nemo

``RESULT`` is the object ``fabricflow step --json`` or ``fabricflow optimize --json``
printed (``-``: read it from stdin). With ``--json`` it prints ``{"framework",
"arguments", "argv", "notes", "layout"}`` (``argv``: the arguments as single tokens).
"""

from __future__ import annotations

import json
import sys

from ._common import add_json_flag, print_json


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "launch-args",
        help="a step/optimize result's layout as Megatron-LM or NeMo arguments",
        description="The layout of 'fabricflow step --json' or 'optimize --json' as the "
        "command-line arguments that launch it (docs/launch-args.md).",
    )
    parser.add_argument("result", help="JSON file of a step or optimize result ('-': stdin)")
    parser.add_argument("--framework", default="megatron", choices=["megatron", "nemo"])
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    from ..errors import SpecError
    from ..launch_args import launch_arguments, layout_of

    try:
        if args.result == "-":
            result = json.load(sys.stdin)
        else:
            with open(args.result, encoding="utf-8") as handle:
                result = json.load(handle)
    except (OSError, UnicodeDecodeError) as error:
        raise SpecError("result", f"cannot read {args.result!r}: {error}") from None
    except json.JSONDecodeError as error:
        raise SpecError(
            "result", f"{args.result}: line {error.lineno}: not JSON ({error.msg})"
        ) from None
    layout = layout_of(result)
    arguments, notes = launch_arguments(layout, args.framework)
    if args.json:
        argv = [token for argument in arguments for token in argument.split(" ", 1)]
        print_json(
            {
                "framework": args.framework,
                "arguments": arguments,
                "argv": argv,
                "notes": notes,
                "layout": layout,
            }
        )
        return 0
    print(" \\\n  ".join(arguments))
    for note in notes:
        print(f"# {note}")
    return 0
