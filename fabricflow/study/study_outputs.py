"""Writing a study's outputs: its dataset, figures and key numbers, each atomically.

A study script computes an ``xarray.Dataset`` (one dimension per swept parameter), draws
figures from it and prints the numbers a design review quotes; :func:`save_study` writes
``OUT/<name>.nc``, ``OUT/<figure>.png`` and ``OUT/<name>.json`` so that an interrupted run
leaves no half-written file.
"""

from __future__ import annotations

import json
import os
import pathlib

import numpy as np
import xarray as xr

from ..atomic import atomic_path, ensure_folder, write_text
from .figures import save_figure


def _plain(value):
    """JSON-able copy of numbers, arrays and nested containers (NaN -> None)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def save_study(
    out: str | os.PathLike, name: str, dataset: xr.Dataset, figures: dict, numbers: dict
) -> dict:
    """Write ``out/<name>.nc``, each ``figures[stem]`` as ``out/<stem>.png`` and
    ``numbers`` as ``out/<name>.json``; returns ``numbers`` made JSON-able."""
    folder = pathlib.Path(ensure_folder(out))
    with atomic_path(folder / f"{name}.nc") as tmp:
        dataset.to_netcdf(tmp)
    for stem, fig in figures.items():
        save_figure(fig, folder / f"{stem}.png")
    plain = _plain(numbers)
    write_text(folder / f"{name}.json", json.dumps(plain, indent=1))
    return plain


__all__ = ["save_study"]
