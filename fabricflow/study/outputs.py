"""Writing a study's outputs: its dataset, figures and key numbers, each atomically.

A study script computes an ``xarray.Dataset`` (one dimension per swept parameter), draws
figures from it and prints the numbers a design review quotes; :func:`save_study` writes
``OUT/<name>.nc``, ``OUT/<figure>.png`` and ``OUT/<name>.json`` so that an interrupted run
leaves no half-written file.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib

import xarray as xr

from fabricflow.atomic import atomic_path, ensure_folder, write_text
from fabricflow.files import to_jsonable
from fabricflow.plots.figures import save_figure


def parse_study_args(
    doc: str,
    argv: list[str] | None = None,
    *,
    fast_help: str = "small version (tests)",
    gpus_default: int | None = None,
    gpus_help: str | None = None,
    thumbnail_help: str | None = None,
) -> argparse.Namespace:
    """The command line the study scripts share: ``OUT [--fast] [--gpus N] [--thumbnail PNG]``.

    ``doc`` is the script's docstring (its first line describes the command); ``--gpus``
    is offered only with ``gpus_help`` and ``--thumbnail`` only with ``thumbnail_help``.
    ``out`` and ``thumbnail`` come back as :class:`pathlib.Path`.
    """
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("out", type=pathlib.Path, help="output folder")
    parser.add_argument("--fast", action="store_true", help=fast_help)
    if gpus_help is not None:
        parser.add_argument("--gpus", type=int, default=gpus_default, help=gpus_help)
    if thumbnail_help is not None:
        parser.add_argument("--thumbnail", type=pathlib.Path, default=None, help=thumbnail_help)
    return parser.parse_args(argv)


def save_dataset(out: str | os.PathLike, name: str, dataset: xr.Dataset) -> pathlib.Path:
    """Write ``dataset`` atomically as ``out/<name>.nc`` (creating ``out``); returns the path."""
    path = pathlib.Path(ensure_folder(out)) / f"{name}.nc"
    with atomic_path(path) as tmp:
        dataset.to_netcdf(tmp)
    return path


def write_plotted_study(
    args: argparse.Namespace, name: str, dataset: xr.Dataset, plots: dict, numbers: dict
) -> None:
    """Outputs of a study script whose figures draw themselves to a path: ``OUT/<name>.nc``,
    ``plots[suffix](dataset, OUT/<name>_<suffix>.png)`` for each figure, the first one
    again as a thumbnail at ``args.thumbnail`` when given, and the run's ``seconds`` with
    ``numbers`` printed as one JSON line on stdout."""
    save_dataset(args.out, name, dataset)
    for suffix, plot in plots.items():
        plot(dataset, pathlib.Path(args.out) / f"{name}_{suffix}.png")
    if args.thumbnail:
        next(iter(plots.values()))(dataset, args.thumbnail, thumbnail=True)
    print(json.dumps({"seconds": dataset.attrs["seconds"], **numbers}))


def save_study(
    out: str | os.PathLike, name: str, dataset: xr.Dataset, figures: dict, numbers: dict
) -> dict:
    """Write ``out/<name>.nc``, each ``figures[stem]`` as ``out/<stem>.png`` and
    ``numbers`` as ``out/<name>.json``; returns ``numbers`` made JSON-able."""
    folder = save_dataset(out, name, dataset).parent
    for stem, fig in figures.items():
        save_figure(fig, folder / f"{stem}.png")
    plain = to_jsonable(numbers, infinity_as_text=False)
    write_text(folder / f"{name}.json", json.dumps(plain, indent=1))
    return plain


__all__ = ["parse_study_args", "save_dataset", "save_study", "write_plotted_study"]
