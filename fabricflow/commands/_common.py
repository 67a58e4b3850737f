"""Small helpers shared by the CLI subcommands."""

from __future__ import annotations

import json
import sys

import numpy as np


def add_json_flag(parser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print exactly one JSON object on stdout instead of a table")


def to_jsonable(value):
    """Convert numpy scalars/arrays (recursively) into plain Python for json.dumps."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None if np.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def print_json(obj) -> None:
    json.dump(to_jsonable(obj), sys.stdout)
    sys.stdout.write("\n")


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
