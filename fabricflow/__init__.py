"""fabricflow: flow-level network planning for AI-training clusters (JAX).

Public API (stable names)::

    import fabricflow as ff
    fabric = ff.load_fabric("clos-100k")
    routes = ff.route(fabric, src, dst, policy="ecmp", seed=0)
    rates = ff.max_min_rates(routes.links, fabric.capacity)

The public names are listed once, in the stub ``fabricflow/__init__.pyi``: type checkers
and IDEs read it, and this module reads the same lines to build its table of lazy names.
Names are loaded on first use (PEP 562): ``import fabricflow`` imports neither JAX, SciPy,
xarray nor matplotlib, so that the command line starts fast (``fabricflow presets``) and a
user pays for the solver only when calling it. Kernels and building blocks are imported
from their modules (``from fabricflow.solve.parameters import stack_params``).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

__version__ = "0.1.0"


def _read_stub(path: Path) -> dict[str, tuple[str, str]]:
    """Public name -> (module, attribute in it), from the stub's top-level statements:
    ``from MODULE import NAME as NAME`` makes ``NAME`` public. Anything else there (the
    docstring, ``__version__: str``) defines no lazy name."""
    public: dict[str, tuple[str, str]] = {}
    for node in ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                public[alias.asname or alias.name] = (node.module, alias.name)
    return public


# public name -> (module, attribute): the stub's list, read once at import (about 1 ms)
_EXPORTS = _read_stub(Path(__file__).with_suffix(".pyi"))
__all__ = sorted(_EXPORTS)


def _load(module_name: str, attribute: str):
    """``from module_name import attribute``: an attribute of the module, else its
    submodule of that name (``from fabricflow import errors``; this package's own
    attributes are not asked for, which would come back here)."""
    if module_name != __name__:
        module = importlib.import_module(module_name)
        if hasattr(module, attribute):
            return getattr(module, attribute)
    return importlib.import_module(f"{module_name}.{attribute}")


def __getattr__(name: str):
    if name in _EXPORTS:
        value = _load(*_EXPORTS[name])
    elif not name.startswith("_") and "." not in name and _is_submodule(name):
        # Direct submodules only: a dotted name ("solve.maxmin") is no attribute, and
        # caching it would plant a global that no import statement can reach.
        value = importlib.import_module(f"{__name__}.{name}")  # ff.workload, ff.traffic
    else:
        raise AttributeError(f"module 'fabricflow' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip __getattr__
    return value


def _is_submodule(name: str) -> bool:
    from importlib.util import find_spec

    try:
        return find_spec(f"{__name__}.{name}") is not None
    except ModuleNotFoundError:  # a parent package is missing: not a submodule either
        return False


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
