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
import traceback

from . import commands
from .errors import FabricflowError


class UsageError(Exception):
    """A command line argparse rejects (missing flag, invalid choice, bad int)."""

    def __init__(self, parser: argparse.ArgumentParser, message: str):
        self.parser = parser
        super().__init__(message)


class _ArgumentParser(argparse.ArgumentParser):
    """Raises :class:`UsageError` instead of exiting, so that ``--json`` can report it."""

    def error(self, message):
        raise UsageError(self, message)


def _wants_json(argv: list[str]) -> bool:
    return any(len(arg) >= 4 and "--json".startswith(arg) for arg in argv)


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(
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
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parser.parse_args(argv)
    except UsageError as error:
        if _wants_json(argv):
            print(json.dumps({"error": "UsageError", "message": f"{error.parser.prog}: {error}"}))
        else:
            error.parser.print_usage(sys.stderr)
            print(f"{error.parser.prog}: error: {error}", file=sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except FabricflowError as error:
        if getattr(args, "json", False):
            print(json.dumps({"error": type(error).__name__, "message": str(error)}))
        else:
            print(f"fabricflow {args.command}: error: {error}", file=sys.stderr)
        return 2
    except Exception as error:   # a bug, not bad input: --json still gets one object
        if not getattr(args, "json", False) or isinstance(error, BrokenPipeError):
            raise
        traceback.print_exc()
        print(json.dumps({"error": "InternalError", "message": f"{type(error).__name__}: {error}"}))
        return 1


if __name__ == "__main__":
    sys.exit(main())
