"""``fabricflow bench``: scale benchmarks, one module per section.

A section module provides ``SECTION`` (its name), ``DESCRIPTION`` and
``run(options) -> dict`` returning JSON-able figures (times in s, memory in bytes, sizes).
``options`` is the argparse namespace (``quick``, ``gpu`` flags, ...). Sections are found
by module discovery: a new benchmark is a new file here, with no registry to edit.
"""

from __future__ import annotations

import importlib
import pkgutil


def sections() -> dict:
    """Map section name -> module, in module-name order."""
    found = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        found[module.SECTION] = module
    return found
