"""Small helpers shared by the CLI subcommands."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile

from fabricflow.atomic import describe_os_error, ensure_folder, write_text
from fabricflow.commands.interrupts import check, mark_reported
from fabricflow.errors import OutputError, SpecError
from fabricflow.fabric.spec import is_import, load_fabric
from fabricflow.files import to_jsonable


def add_json_flag(parser) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="print exactly one JSON object on stdout instead of a table",
    )


def add_fail_flag(parser) -> None:
    """``--fail KIND:FRACTION``: a failure what-if, applied by :func:`failed_fabric`."""
    parser.add_argument(
        "--fail",
        default=None,
        metavar="KIND:FRACTION",
        help="fail a random fraction of the cables of a link kind first "
        "(e.g. leaf:0.01 = 1%% of leaf-spine cables; seeded by --seed)",
    )


def failed_fabric(fabric, fail: str | None, seed: int):
    """``fabric`` with ``--fail KIND:FRACTION`` of its cables failed (seeded); the kind
    and the fraction are validated by ``Fabric.without``."""
    if not fail:
        return fabric

    kind, _, fraction = fail.partition(":")
    try:
        value = float(fraction)
    except ValueError:
        raise SpecError(
            "--fail", f"expected KIND:FRACTION such as leaf:0.01, got {fail!r}"
        ) from None
    return fabric.without(link_kind=kind, fraction=value, seed=seed)


# ----------------------------------------------------------------------------- fabrics
#
# Every command that takes a fabric reads it through these two: a preset, a YAML spec, or
# another tool's file (slurm:PATH, netlist:PATH) with the import flags.

IMPORT_FLAGS = ("gpus_per_node", "nic_bandwidth", "companion")


def add_fabric_flags(
    parser,
    *,
    positional: bool = False,
    default: str | None = None,
    optional: bool = False,
    help_suffix: str = "",
) -> None:
    """``--fabric F`` (or a positional ``fabric``) and the import flags of ``slurm:PATH``
    and ``netlist:PATH`` fabrics (``--gpus-per-node``, ``--nic-bandwidth``,
    ``--companion FILE``), read by :func:`load_fabric_flags`. ``default``: the fabric when
    ``--fabric`` is not given (else it is required, unless ``optional``: then None)."""
    what = "preset name, YAML spec path, slurm:PATH or netlist:PATH" + help_suffix
    if positional:
        parser.add_argument("fabric", help=what)
    elif optional:
        parser.add_argument("--fabric", default=None, help=what)
    elif default is None:
        parser.add_argument("--fabric", required=True, help=what)
    else:
        parser.add_argument("--fabric", default=default, help=f"{what} (default {default})")
    parser.add_argument(
        "--gpus-per-node",
        type=int,
        default=None,
        help="GPUs per node (slurm: and netlist: fabrics)",
    )
    parser.add_argument(
        "--nic-bandwidth",
        default=None,
        help="bandwidth of each GPU's NIC (slurm: and netlist: fabrics)",
    )
    parser.add_argument(
        "--companion",
        default=None,
        metavar="FILE",
        help="YAML with gpus_per_node, nic_bandwidth, oversubscription, switch_bandwidth, "
        "latency, scale_up, transport (slurm: and netlist: fabrics; flags win)",
    )


def load_fabric_flags(args):
    """The fabric of ``args.fabric`` with the import flags of :func:`add_fabric_flags`
    (:func:`fabricflow.fabric.spec.fabric_spec`: one reader for every command).

    Raises:
        SpecError: a bad fabric or file (named); an import flag given for a preset or
            YAML spec (``--gpus-per-node`` ... named).
    """
    options = {key: getattr(args, key, None) for key in IMPORT_FLAGS}
    given = {key: value for key, value in options.items() if value is not None}
    if given and (args.fabric is None or not is_import(args.fabric)):
        flag = "--" + next(iter(given)).replace("_", "-")
        raise SpecError(
            flag.lstrip("-"), f"{flag} applies to slurm:PATH and netlist:PATH fabrics only"
        )
    return load_fabric(args.fabric, **given)


def print_json(obj) -> None:
    """Print the command's one JSON object; an output that could not be written (see
    :func:`write_outputs`) is named in it as ``error`` and ``message`` beside the result."""
    check()  # an interrupt swallowed by library code still stops the report
    if _deferred and isinstance(obj, dict):
        obj = {**obj, "error": "OutputError", "message": "; ".join(_deferred)}
        _deferred_reported[:] = [True]
    text = json.dumps(to_jsonable(obj))
    mark_reported()
    sys.stdout.write(text + "\n")


def print_table(rows: list[dict], columns: list[tuple[str, str]], *, names: int = 0) -> None:
    """Print ``rows`` as an aligned table; ``columns`` = [(key, header)]; the first
    ``names`` columns (names) are aligned left, the others (numbers) right."""
    cells = [[header for _, header in columns]]
    for row in rows:
        cells.append([_fmt(row.get(key)) for key, _ in columns])
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for line in cells:
        print(
            "  ".join(
                cell.ljust(width) if i < names else cell.rjust(width)
                for i, (cell, width) in enumerate(zip(line, widths, strict=True))
            ).rstrip()
        )


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def mark_done(args, item) -> None:
    """Record a finished output (a file path, a section name) for the interrupt report.

    Files written through :func:`fabricflow.atomic.atomic_path` are recorded already
    (the CLI records them as they are renamed into place, in ``args.written``).
    """
    completed = args.__dict__.setdefault("completed", [])
    if item not in completed:
        completed.append(item)
    check()


# ----------------------------------------------------------------------------- outputs
#
# Every output flag takes its path through one of two argparse types, which the CLI finds
# on the parser: output_folder (--out DIR) and output_file (--plot FILE). Before a command
# runs, check_destinations checks every destination given:
#   - a folder that cannot be created or written into is refused then (OutputError,
#     exit 1): a long search never runs for an output it cannot write;
#   - a file whose folder cannot take it is dropped (its flag set to None) after a warning:
#     the command runs and prints its result, then the error, and exits 1.
# Files are written through fabricflow.atomic.atomic_path, which creates a missing folder.
# A write that fails after the work (a full disk) goes through write_outputs: the result
# is still printed, then the error (under --json: "error" and "message" in the result's
# object), and the exit code is 1. Finished work is never lost to an output.

_deferred: list[str] = []  # output errors to report after the command's result
_deferred_reported: list[bool] = []  # [True] once print_json put them in the object


def _non_empty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"an empty path {text!r}; give a file or folder name (e.g. 'out' or '.')"
        )
    return text


def output_folder(text: str) -> str:
    """argparse ``type`` of an output folder flag (``--out DIR``): refuses an empty path,
    which would otherwise name no folder or the current folder's parent. The CLI checks the
    folder before the command runs (:func:`check_destinations`)."""
    return _non_empty(text)


def output_file(text: str) -> str:
    """argparse ``type`` of an output file flag (``--plot FILE``): refuses an empty path.
    The CLI checks the file's folder before the command runs (:func:`check_destinations`)."""
    return _non_empty(text)


def output_store(text: str) -> str:
    """argparse ``type`` of a store flag (``sweep --out STORE``): refuses an empty path. The
    store checks itself when it is opened, before any point runs (a read-only store that
    has nothing left to compute is only read)."""
    return _non_empty(text)


def check_destinations(args, parser) -> None:
    """Check every output destination of ``args`` (flags typed :func:`output_folder` or
    :func:`output_file` on ``parser``, the command's parser) before the command runs.

    Raises:
        OutputError: an output folder cannot be created or written into (``--out: ...``).
    """
    for action in parser._actions:
        path = getattr(args, action.dest, None)
        if not path or action.type not in (output_folder, output_file):
            continue
        flag = max(action.option_strings, key=len)
        if action.type is output_folder:
            check_out_folder(path, flag)
            continue
        try:
            check_out_file(path, flag)
        except OutputError as error:
            defer_output_error(str(error))
            command = getattr(args, "command", None)
            print(
                f"fabricflow{' ' + command if command else ''}: warning: {error}; the result "
                "is printed without it (exit 1)",
                file=sys.stderr,
                flush=True,
            )
            setattr(args, action.dest, None)


def check_out_file(path: str, flag: str = "--plot") -> None:
    """Fail now if the file ``path`` cannot be written: it is a folder, or its folder cannot
    be created or written into (:func:`check_out_folder`)."""
    if os.path.isdir(path):
        raise OutputError(f"{flag}: cannot write {path!r}: it is a folder")
    check_out_folder(os.path.dirname(os.path.abspath(path)), flag)


def defer_output_error(message: str) -> None:
    """Report ``message`` (an output that could not be written) after the result."""
    _deferred.append(message)


def write_outputs(args, flag: str, write, *arguments, **keywords) -> list[str]:
    """Call ``write(*arguments, **keywords)``; an :class:`~fabricflow.errors.OutputError`
    stops it and is reported after the command's result (exit 1), so that a full disk does
    not lose the finished work. Returns the files it completed (whole on disk)."""
    written = args.__dict__.setdefault("written", [])
    before = len(written)
    try:
        write(*arguments, **keywords)
    except OutputError as error:
        message = str(error)
        defer_output_error(message if message.startswith(flag) else f"{flag}: {message}")
    return [str(path) for path in written[before:] if os.path.isfile(path)]


def finish_outputs(args, code: int) -> int:
    """The command's exit code once its result is out: 1 when an output was not written
    (said on stderr, unless its JSON object said it already). Clears the record."""
    errors = list(_deferred)
    in_json = bool(_deferred_reported)
    _deferred.clear()
    _deferred_reported.clear()
    if not errors:
        return code
    if not in_json:
        command = getattr(args, "command", None)
        for message in errors:
            print(
                f"fabricflow{' ' + command if command else ''}: error: {message}", file=sys.stderr
            )
    return 1 if code == 0 else code


def reset_outputs() -> None:
    """Forget deferred output errors (a new command starts)."""
    _deferred.clear()
    _deferred_reported.clear()


def check_out_folder(path: str, flag: str = "--out") -> None:
    """Fail now, before a long computation, if ``path`` cannot take output files.

    Creates the folder (and missing parents) and a probe file, then removes what it
    created, so that a later error or interrupt leaves no empty folder behind (the writer,
    :func:`fabricflow.atomic.atomic_path`, creates it again). Raises
    :class:`~fabricflow.errors.OutputError` ("--out: cannot ...") naming the reason.
    """
    if os.path.exists(path) and not os.path.isdir(path):
        raise OutputError(
            f"{flag}: cannot use {path!r} as output folder: it exists and is not a folder"
        )
    created = []  # deepest first, for removal
    existing = os.path.abspath(path)
    while not os.path.lexists(existing):
        created.append(existing)
        existing = os.path.dirname(existing)
    try:
        try:
            os.makedirs(path, exist_ok=True)
        except FileNotFoundError:
            # the deepest existing folder is there but refuses new entries (/proc, /sys)
            raise OutputError(
                f"{flag}: cannot create output folder {path!r}: {existing!r} "
                f"does not accept new folders"
            ) from None
        except OSError as error:
            raise OutputError(
                f"{flag}: cannot create output folder {path!r}: {describe_os_error(error)}"
            ) from None
        try:
            ensure_folder(path)
        except OutputError as error:
            raise OutputError(f"{flag}: {error}") from None
        try:
            handle, probe = tempfile.mkstemp(prefix=".fabricflow-probe.", dir=path)
        except OSError as error:
            raise OutputError(
                f"{flag}: cannot write into output folder {path!r}: {describe_os_error(error)}"
            ) from None
        os.close(handle)
        os.unlink(probe)
    finally:
        for folder in created:
            with contextlib.suppress(OSError):
                os.rmdir(folder)


def write_json_file(path: str, obj) -> None:
    """Write ``obj`` as indented JSON to ``path`` atomically (whole file or none)."""
    write_text(path, json.dumps(to_jsonable(obj), indent=1) + "\n")
