"""The ``fabricflow`` command.

Each subcommand lives in its own module under ``fabricflow/commands/`` and provides
``register(subparsers)`` (adds its parser and sets ``func``) so that commands stay small
and independent. Every command accepts ``--json`` and then prints exactly one JSON object.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys

from . import commands
from .errors import FabricflowError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fabricflow",
        description="Flow-level network planning for AI-training clusters.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        importlib.import_module(f"{commands.__name__}.{info.name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except FabricflowError as error:
        if getattr(args, "json", False):
            print(json.dumps({"error": type(error).__name__, "message": str(error)}))
        else:
            print(f"fabricflow {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
