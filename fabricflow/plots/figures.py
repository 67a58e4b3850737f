"""Figures without global matplotlib state, saved whole or not at all.

Plot modules build a :class:`matplotlib.figure.Figure` directly (:func:`new_figure`)
instead of going through ``pyplot``: no backend is switched, no figure registry grows,
and library users keep whatever backend their notebook or GUI chose. :func:`save_figure`
renders through :func:`fabricflow.atomic.atomic_path`, so a Ctrl-C or a full disk leaves
no truncated image and an unwritable path gives :class:`~fabricflow.errors.OutputError`.

Matplotlib is imported inside these functions only: model code never imports it.
"""

from __future__ import annotations

import os
from pathlib import Path

from fabricflow.atomic import atomic_path
from fabricflow.errors import SpecError


def new_figure(**options):
    """A :class:`matplotlib.figure.Figure` (``figsize=`` etc. as there), not registered
    with ``pyplot``; it is garbage-collected like any object."""
    from matplotlib.figure import Figure

    return Figure(**options)


def image_formats() -> list[str]:
    """File extensions matplotlib can write (``png``, ``pdf``, ``svg``, ...)."""
    from matplotlib.figure import Figure

    return sorted(Figure().canvas.get_supported_filetypes())


def save_figure(fig, path: str | os.PathLike, *, dpi: int = 120) -> Path:
    """Render ``fig`` to ``path`` (format from the extension; none: PNG) atomically.

    Raises:
        SpecError: the extension is not an image format matplotlib writes.
        OutputError: the folder cannot take the file (read-only, full disk, missing).
    """
    path = Path(path)
    extension = path.suffix.lstrip(".").lower() or "png"
    formats = image_formats()
    if extension not in formats:
        raise SpecError(
            "path", f"unknown image format {extension!r} in {str(path)!r}; use one of {formats}"
        )
    # The temporary file has a ``.tmp`` suffix, so the format is passed explicitly.
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format=extension)
    return path


__all__ = ["image_formats", "new_figure", "save_figure"]
