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
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

import fabricflow
import fabricflow as ff

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


HEAVY = ("jax", "scipy", "xarray", "matplotlib")


# ------------------------------------------------------------------ import scheme
def test_import_and_parser_load_no_heavy_module():
    code = (
        f"import sys, json, fabricflow; a = [m for m in {HEAVY!r} if m in sys.modules]; "
        "import fabricflow.cli as c; c.build_parser(); "
        f"print(json.dumps([a, [m for m in {HEAVY!r} if m in sys.modules]]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == [[], []]


@pytest.mark.parametrize("args", [["--help"], ["presets"]])
def test_help_and_presets_start_fast(args):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, "-m", "fabricflow.cli", *args], capture_output=True, text=True
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert proc.returncode == 0, proc.stderr
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    # ~0.2-0.3 s on the 2-core dev machine (was ~2 s when `import fabricflow` loaded JAX);
    # the margin absorbs a loaded machine
    assert cpu < 1.5, cpu


def test_no_module_imports_the_top_level_package():
    """Subpackages import what they use from its module, never through ``fabricflow``."""
    import ast

    root = os.path.dirname(fabricflow.__file__)
    offenders = []
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".py") or path == fabricflow.__file__:
                continue
            with open(path) as handle:
                tree = ast.parse(handle.read())
            depth = os.path.relpath(folder, root).count(os.sep) + (folder != root)
            for node in ast.walk(tree):
                top_level = (  # `import fabricflow`, `from fabricflow import x`, `from .. import x`
                    isinstance(node, ast.Import)
                    and any(a.name == "fabricflow" for a in node.names)
                    or isinstance(node, ast.ImportFrom)
                    and node.module == "fabricflow"
                    and not all(  # `from fabricflow import errors`: a module, not the API
                        os.path.exists(os.path.join(root, a.name + ".py"))
                        or os.path.exists(os.path.join(root, a.name))
                        for a in node.names
                    )
                    or isinstance(node, ast.ImportFrom)
                    and node.module is None
                    and node.level == depth + 1
                    and not all(
                        # a subpackage or a module of the package, not a name of its API
                        os.path.exists(os.path.join(root, a.name))
                        or os.path.exists(os.path.join(root, a.name + ".py"))
                        for a in node.names
                    )
                )
                if top_level:
                    offenders.append(f"{path}:{node.lineno}")
    assert offenders == []


def test_collective_bench_imports_no_jax_to_report_its_solver():
    import fabricflow.bench.collective as bench

    assert not hasattr(bench, "_jitted_solver_available")
    assert not hasattr(bench, "jitted_solver_available")


def test_no_module_outside_study_imports_matplotlib():
    import ast
    from pathlib import Path

    root = Path(ff.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        if {"study", "plots"} & set(path.relative_to(root).parts):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            if any(name.split(".")[0] == "matplotlib" for name in names):
                offenders.append(str(path.relative_to(root)))
    assert offenders == []


# ---------------------------------------------------------------------------- figures


def _modules_after_import(statement: str) -> set[str]:
    import subprocess
    import sys

    code = f"{statement}\nimport sys\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return set(out.stdout.split())


def test_model_packages_do_not_import_matplotlib():
    loaded = _modules_after_import(
        "import fabricflow.workload, fabricflow.collective, fabricflow.traffic.patterns\n"
        "import fabricflow.workload.step, fabricflow.collective.timing"
    )
    assert "matplotlib" not in loaded


def test_plot_modules_leave_the_matplotlib_backend_alone():
    loaded = _modules_after_import(
        "import matplotlib\nmatplotlib.use('svg')\n"
        "import fabricflow.plots.fabric, fabricflow.plots.rates\n"
        "import fabricflow.plots.congestion, fabricflow.plots.step\n"
        "from fabricflow.plots.figures import new_figure, save_figure\n"
        "assert matplotlib.get_backend() == 'svg', matplotlib.get_backend()"
    )
    assert "matplotlib.pyplot" not in loaded


def test_importing_the_solvers_pulls_no_scipy():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import fabricflow.solve.cc.dcqcn_analysis, fabricflow.solve.pfc.deadlock\n"
        "import fabricflow.solve.cc.run_cc, fabricflow.dynamics.congestion, fabricflow.solve.maxmin.checked\n"
        "import fabricflow.solve.completion\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
