"""The import graph of the package: every import goes down the floors or stays in its
package, and no name with a leading underscore crosses a package boundary.

The floors, lowest first (docs/architecture.md, "Floors"): the base modules, fabric,
routing and the traffic patterns, solve, collective, workload (and the public wrappers
``fct`` / ``cc``), optimize, cluster, study, bench, commands (with ``cli``), and the
top-level ``fabricflow/__init__.py``. ``solve`` takes arrays only: it imports nothing
from fabric, routing or traffic either.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "fabricflow"

FLOORS = {
    **dict.fromkeys(
        [
            "errors",
            "assignments",
            "units",
            "typing",
            "atomic",
            "files",
            "schema",
            "memory_budget",
            "jax_cache",
            "link_loads",
            "csv_tables",
        ],
        0,
    ),
    **dict.fromkeys(["fabric", "topologies"], 1),
    **dict.fromkeys(["routing", "traffic"], 2),
    "solve": 3,
    "routing_optimizer": 4,
    "collective": 5,
    **dict.fromkeys(["workload", "dynamics"], 6),
    **dict.fromkeys(["layout_search", "fitting"], 7),
    **dict.fromkeys(["cluster", "sweeps"], 8),
    "plots": 9,
    **dict.fromkeys(["design", "report"], 10),
    "study": 11,
    "bench": 12,
    **dict.fromkeys(["commands", "cli"], 13),
    "": 14,  # fabricflow/__init__.py: the public API over everything
}
"""The floor of each top-level module or subpackage of ``fabricflow``."""

ROOMS = {"cli": "commands"}  # cli.py is the commands package's entry point
"""Top-level modules that belong to a package's room (private names may pass between)."""

SOLVE_TAKES_ARRAYS = {"fabric", "topologies", "routing", "traffic"}

UPWARD_EXCEPTIONS: set[tuple[str, str]] = set()
"""Known upward imports, each with its reason; the test fails when one disappears too."""


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        yield path, ".".join(parts), is_package


def _imports(path: Path, module: str, is_package: bool):
    """``(target module, names, line)`` of every fabricflow import of a module, relative
    ones resolved; ``target`` is relative to the package (``""`` for fabricflow itself)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("fabricflow"):
                    yield alias.name.removeprefix("fabricflow").lstrip("."), [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if module else []
                if not is_package:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").startswith("fabricflow"):
                target = node.module.removeprefix("fabricflow").lstrip(".")
            else:
                continue
            names = [alias.name for alias in node.names]
            if target == "":  # from fabricflow import errors: the modules themselves
                for name in names:
                    yield name, [], node.lineno
            else:
                yield target, names, node.lineno


def _room(module: str) -> str:
    top = module.split(".")[0] if module else ""
    return ROOMS.get(top, top)


@functools.cache
def _edges() -> tuple:
    """``(module, target, names, "file:line")`` of every fabricflow import (parsed once)."""
    return tuple(
        (module, target, tuple(names), f"fabricflow/{path.relative_to(PACKAGE)}:{line}")
        for path, module, is_package in _modules()
        for target, names, line in _imports(path, module, is_package)
    )


def test_every_module_has_a_floor():
    rooms = {module.split(".")[0] for _, module, _ in _modules()}
    assert rooms - set(FLOORS) == set(), "give each new top-level module a floor in FLOORS"


def test_imports_go_down_the_floors():
    upward, seen = [], set()
    for module, target, _, where in _edges():
        source, dest = _room(module), _room(target)
        if source == dest or FLOORS[dest] <= FLOORS[source]:
            continue
        if (module, target) in UPWARD_EXCEPTIONS:
            seen.add((module, target))
            continue
        upward.append(f"{where}: {module} (floor {FLOORS[source]}) imports {target} "
                      f"(floor {FLOORS[dest]})")  # fmt: skip
    assert upward == []
    assert seen == UPWARD_EXCEPTIONS, "an exception that no longer happens: remove it"


def test_the_solvers_take_arrays_only():
    found = [
        f"{where}: {module} imports {target}"
        for module, target, _, where in _edges()
        if _room(module) == "solve" and _room(target) in SOLVE_TAKES_ARRAYS
    ]
    assert found == []


def test_no_private_name_crosses_a_package():
    found = []
    for module, target, names, where in _edges():
        if _room(module) == _room(target):
            continue
        private = [part for part in target.split(".") if part.startswith("_")]
        private += [name for name in names if name.startswith("_")]
        if private:
            found.append(f"{where}: {module} takes {', '.join(private)} from {target}")
    assert found == []


@pytest.mark.parametrize(
    ("source", "module", "is_package", "expected"),
    [
        ("from ..optimize import search\n", "routing.route", False, [("optimize", ["search"])]),
        ("from ...workload.step import _compose\n", "solve.maxmin.engine", False,
         [("workload.step", ["_compose"])]),
        ("import fabricflow.report.build\n", "fabric.fabric", False, [("report.build", [])]),
        ("from . import inputs\n", "solve.maxmin", True, [("solve.maxmin", ["inputs"])]),
        ("from .. import errors\n", "solve.status", False, [("errors", [])]),
        ("import numpy\nfrom jax import lax\n", "solve.status", False, []),
    ],
)  # fmt: skip
def test_the_walker_resolves_relative_and_absolute_imports(
    tmp_path, source, module, is_package, expected
):
    """The checks above see what they must: relative imports resolved from the module's
    own package (a package's ``__init__`` from itself), other libraries left out."""
    path = tmp_path / "m.py"
    path.write_text(source)
    found = [(target, names) for target, names, _ in _imports(path, module, is_package)]
    assert found == expected
