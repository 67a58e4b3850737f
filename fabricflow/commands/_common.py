"""Small helpers shared by the CLI subcommands."""

from __future__ import annotations

import json
import sys

import numpy as np


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
    from ..errors import SpecError

    kind, _, fraction = fail.partition(":")
    try:
        value = float(fraction)
    except ValueError:
        raise SpecError(
            "--fail", f"expected KIND:FRACTION such as leaf:0.01, got {fail!r}"
        ) from None
    return fabric.without(link_kind=kind, fraction=value, seed=seed)


def to_jsonable(value, *, infinity_as_text: bool = True):
    """Convert numpy scalars/arrays (recursively) into plain Python for json.dumps.

    NaN becomes ``None``; an infinity becomes ``"inf"``/``"-inf"``, or ``None`` with
    ``infinity_as_text=False`` (the study scripts' key numbers). Numpy scalars are
    converted first, so a ``np.float64`` NaN is caught as a Python one is.
    """
    if isinstance(value, dict):
        return {str(k): to_jsonable(v, infinity_as_text=infinity_as_text) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v, infinity_as_text=infinity_as_text) for v in value]
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist(), infinity_as_text=infinity_as_text)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        if np.isnan(value) or not infinity_as_text:
            return None
        return "inf" if value > 0 else "-inf"
    return value


def print_json(obj) -> None:
    from ._interrupt import check, mark_reported

    check()  # an interrupt swallowed by library code still stops the report
    text = json.dumps(to_jsonable(obj))
    mark_reported()
    sys.stdout.write(text + "\n")


def print_table(rows: list[dict], columns: list[tuple[str, str]]) -> None:
    """Print ``rows`` as an aligned table; ``columns`` = [(key, header)]."""
    cells = [[header for _, header in columns]]
    for row in rows:
        cells.append([_fmt(row.get(key)) for key, _ in columns])
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for line in cells:
        print("  ".join(cell.rjust(width) for cell, width in zip(line, widths)))


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def mark_done(args, item) -> None:
    """Record a finished output (a file path, a section name) for the interrupt report."""
    from ._interrupt import check

    args.__dict__.setdefault("completed", []).append(item)
    check()


def output_path(text: str) -> str:
    """argparse ``type`` of output flags (``--out``, ``--plot``): refuse an empty path, which
    would otherwise name no file (nothing written, exit 0) or the current folder's parent."""
    import argparse

    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"an empty path {text!r}; give a file or folder name (e.g. 'out' or '.')"
        )
    return text


def check_out_folder(path: str, flag: str = "--out") -> None:
    """Fail now, before a long computation, if ``path`` cannot take output files.

    Creates the folder (and missing parents) and a probe file, then removes what it
    created, so that a later error or interrupt leaves no empty folder behind. Raises
    :class:`~fabricflow.errors.OutputError` ("--out: cannot ...") naming the reason.
    """
    import contextlib
    import os
    import tempfile

    from ..atomic import describe_os_error, ensure_folder
    from ..errors import OutputError

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
    from ..atomic import write_text

    write_text(path, json.dumps(to_jsonable(obj), indent=1) + "\n")
