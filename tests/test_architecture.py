"""The architecture rules of the package, all in this file.

- **Floors**: every import goes down the floors or stays in its package. The floors, lowest
  first (docs/architecture.md, "Floors"): the base modules, fabric, routing and the
  traffic patterns, solve, the routing optimizer, collective, workload and dynamics, layout
  search and fitting, cluster and sweeps, plots, design and report, study, bench, commands
  (with ``cli``), and the top-level ``fabricflow/__init__.py``. ``solve`` takes arrays only:
  it imports nothing from fabric, routing or traffic either.
- **Private stays private**: no name or module with a leading underscore is imported from
  another directory (``fabricflow/solve/maxmin`` -> ``fabricflow/solve/cc`` is a crossing).
- **No import circle**: the module graph, imports inside functions counted (those under
  ``if TYPE_CHECKING:`` are not), has no strongly connected component.
- **In-function imports** of the package's own modules only where loading must wait (JAX,
  zarr, dask, matplotlib), each with a ``# lazy: <why>`` comment on its line or the lines
  just above, at most ``MAX_LAZY_IMPORTS`` in the package.
- **File names** unique where meanings differ (``MIRRORS`` and ``TOPOLOGY_PAIRS`` repeat a
  subject's name on purpose).
- **Through modules, not the package**: no module imports ``fabricflow`` itself; heavy
  libraries (JAX, SciPy, xarray, matplotlib) load only when used; matplotlib only in
  ``plots/`` (the studies' figures use it through ``plots.figures``), never ``pyplot``.

The graph checks run on a package folder given as an argument, so each is also tested on a
small tree written under ``tmp_path`` (one that keeps the rule and one that breaks it).
"""

from __future__ import annotations

import ast
import collections
import functools
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

import fabricflow
import fabricflow as ff

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fabricflow"

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
    "fabric": 1,
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
"""Top-level modules that belong to a package's floor."""

SOLVE_TAKES_ARRAYS = {"fabric", "routing", "traffic"}

UPWARD_EXCEPTIONS: set[tuple[str, str]] = set()
"""Known upward imports, each with its reason; the test fails when one disappears too."""


MAX_LAZY_IMPORTS = 50
"""In-function imports of the package's own modules allowed in all of ``fabricflow``."""

LAZY_COMMENT = "# lazy:"
"""How the comment that says why an import waits for its function begins."""

MIRRORS = {"commands", "bench", "plots"}
"""Folders whose modules mirror a subject and take its name (``commands/step.py`` runs
``workload/step.py``, ``plots/step.py`` draws it)."""

TOPOLOGY_PAIRS = ("fabric", "routing")
"""``fabric/<t>.py`` builds topology ``t``, ``routing/<t>.py`` routes over it."""


def _modules(package: Path = PACKAGE):
    """``(path, dotted module relative to the package, is_package)`` of every module."""
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        yield path, ".".join(parts), is_package


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST, in_function=False, type_checking=False):
    """``(node, in_function, type_checking)`` of every import statement of a module."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, in_function, type_checking
            continue
        function = in_function or isinstance(
            child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
        )
        if isinstance(child, ast.If) and _is_type_checking(child):
            for node in child.body:
                yield from _import_nodes(ast.Module(body=[node], type_ignores=[]), function, True)
            for node in child.orelse:
                yield from _import_nodes(
                    ast.Module(body=[node], type_ignores=[]), function, type_checking
                )
            continue
        yield from _import_nodes(child, function, type_checking)


def _statements(path: Path, module: str, is_package: bool):
    """``(target, names, node, in_function, type_checking)`` of every fabricflow import of a
    module, relative ones resolved; ``target`` is relative to the package (``""`` for
    fabricflow itself)."""
    for node, in_function, type_checking in _import_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "fabricflow":
                    target = alias.name.removeprefix("fabricflow").lstrip(".")
                    yield target, [], node, in_function, type_checking
            continue
        if node.level:
            base = module.split(".") if module else []
            if not is_package:
                base = base[:-1]
            base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
            target = ".".join(base + ([node.module] if node.module else []))
        elif (node.module or "").split(".")[0] == "fabricflow":
            target = node.module.removeprefix("fabricflow").lstrip(".")
        else:
            continue
        names = [alias.name for alias in node.names]
        if target == "":  # from fabricflow import errors: the modules themselves
            for name in names:
                yield name, [], node, in_function, type_checking
        else:
            yield target, names, node, in_function, type_checking


def _imports(path: Path, module: str, is_package: bool):
    """``(target module, names, line)`` of every fabricflow import of a module."""
    for target, names, node, _, _ in _statements(path, module, is_package):
        yield target, names, node.lineno


def _room(module: str) -> str:
    top = module.split(".")[0] if module else ""
    return ROOMS.get(top, top)


@functools.cache
def _parsed(package: Path = PACKAGE) -> tuple:
    """``(module, target, names, node, in_function, type_checking, "file:line", path)`` of
    every fabricflow import of the package (parsed once)."""
    return tuple(
        (module, target, tuple(names), node, in_function, type_checking,
         f"fabricflow/{path.relative_to(package).as_posix()}:{node.lineno}", path)
        for path, module, is_package in _modules(package)
        for target, names, node, in_function, type_checking in _statements(path, module, is_package)
    )  # fmt: skip


def _edges(package: Path = PACKAGE) -> tuple:
    """``(module, target, names, "file:line")`` of every fabricflow import."""
    return tuple((m, t, n, where) for m, t, n, _, _, _, where, _ in _parsed(package))


def _folder(package: Path, module: str) -> Path:
    """The directory that holds ``module`` (a package's own folder for a package)."""
    path = package.joinpath(*module.split(".")) if module else package
    return path if path.is_dir() else path.parent


def private_crossings(package: Path = PACKAGE) -> list[str]:
    """Imports that take a ``_name`` or ``_module`` from another directory, as
    ``file:line: module takes names from target``."""
    found = []
    for path, module, is_package in _modules(package):
        for target, names, node, _, _ in _statements(path, module, is_package):
            private = [part for part in target.split(".") if part.startswith("_")]
            private += [name for name in names if name.startswith("_")]
            private = [name for name in private if not name.startswith("__")]
            if private and _folder(package, target) != path.parent:
                where = f"fabricflow/{path.relative_to(package).as_posix()}:{node.lineno}"
                found.append(f"{where}: {module} takes {', '.join(private)} from {target}")
    return found


def _module_graph(package: Path) -> nx.DiGraph:
    """Modules and their imports (``if TYPE_CHECKING:`` left out); each edge keeps the
    ``file:line`` of its import statements and whether one sits in a function."""
    known = {module for _, module, _ in _modules(package)}
    graph = nx.DiGraph()
    graph.add_nodes_from(known)
    for module, target, names, _, in_function, type_checking, where, _ in _parsed(package):
        if type_checking:
            continue
        dests = {f"{target}.{name}" if f"{target}.{name}" in known else target for name in names}
        for dest in dests or {target}:
            if dest == module or dest not in known:
                continue
            if not graph.has_edge(module, dest):
                graph.add_edge(module, dest, where=[])
            graph.edges[module, dest]["where"].append(
                where + (" (in a function)" if in_function else "")
            )
    return graph


def import_circles(package: Path = PACKAGE) -> list[str]:
    """Each import circle (a strongly connected component of the module graph) with the
    imports that close it, as ``file:line: module -> module``."""
    graph = _module_graph(package)
    circles = []
    for component in sorted(nx.strongly_connected_components(graph), key=sorted):
        if len(component) < 2:
            continue
        lines = [f"circle of {len(component)} modules: {', '.join(sorted(component))}"]
        for source, dest in sorted(graph.subgraph(component).edges):
            for where in graph.edges[source, dest]["where"]:
                lines.append(f"  {where}: {source or 'fabricflow'} -> {dest or 'fabricflow'}")
        circles.append("\n".join(lines))
    return circles


def lazy_imports(package: Path = PACKAGE) -> list[tuple[str, bool]]:
    """``("file:line: module imports target", says_why)`` of every import of the package's
    own modules inside a function; ``says_why`` when a ``# lazy:`` comment is on its line
    or in the comment lines just above."""
    found, seen = [], set()
    for module, target, _, node, in_function, _, where, path in _parsed(package):
        if not in_function or id(node) in seen:
            continue
        seen.add(id(node))  # one statement counts once, whatever it imports
        lines = path.read_text().splitlines()
        says_why = LAZY_COMMENT in lines[node.lineno - 1]
        above = node.lineno - 2
        while not says_why and above >= 0 and lines[above].strip().startswith("#"):
            says_why = lines[above].strip().startswith(LAZY_COMMENT)
            above -= 1
        found.append((f"{where}: {module} imports {target or 'fabricflow'}", says_why))
    return found


def lazy_import_problems(package: Path = PACKAGE, cap: int = MAX_LAZY_IMPORTS) -> list[str]:
    """What breaks the in-function import rule: each import without its reason, and the
    count when it is over ``cap``."""
    found = lazy_imports(package)
    problems = [f"{where}: no `{LAZY_COMMENT}` comment says why" for where, why in found if not why]
    if len(found) > cap:
        problems.append(f"{len(found)} in-function imports of fabricflow modules, at most {cap}")
    return problems


def repeated_file_names(package: Path = PACKAGE) -> list[str]:
    """Module file names used twice with different meanings, as ``name: file, file``;
    ``__init__.py``, the ``MIRRORS`` folders and the ``TOPOLOGY_PAIRS`` left out."""
    by_name = collections.defaultdict(set)
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).parts
        if path.name in ("__init__.py", "__main__.py") or parts[0] in MIRRORS:
            continue
        if len(parts) == 2 and parts[0] in TOPOLOGY_PAIRS:
            parts = ("fabric|routing", parts[1])  # the pair counts as one
        by_name[path.name].add("/".join(parts))
    return [
        f"{name}: {', '.join(sorted(paths))}"
        for name, paths in sorted(by_name.items())
        if len(paths) > 1
    ]


# ------------------------------------------------------------------ floors


def test_every_module_has_a_floor():
    rooms = {module.split(".")[0] for _, module, _ in _modules()}
    assert rooms - set(FLOORS) == set(), "give each new top-level module a floor in FLOORS"


def test_imports_go_down_the_floors():
    upward, seen = [], set()
    for module, target, _, where in _edges():
        source, dest = _room(module), _room(target)
        # down, or between the base modules of floor 0; packages on one floor are
        # independent of each other (a cycle between them would pass the module graph)
        if source == dest or FLOORS[dest] < FLOORS[source] or FLOORS[dest] == FLOORS[source] == 0:
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


# ------------------------------------------------------------------ private names


def test_no_private_name_crosses_a_package():
    """A package is a directory: ``_name`` and ``_module`` are used only beside them."""
    found = private_crossings()
    assert not found, "\n" + "\n".join(found)


def _tree(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (path under ``fabricflow/`` -> source) under ``root``; the package."""
    package = root / "fabricflow"
    for name, source in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    for folder in [package, *[p for p in package.rglob("*") if p.is_dir()]]:
        (folder / "__init__.py").touch()
    return package


def test_private_crossings_are_seen_at_the_directory_level(tmp_path):
    package = _tree(tmp_path, {
        "solve/cc/law.py": "def _step(): ...\n",
        "solve/cc/run.py": "from fabricflow.solve.cc.law import _step\n",  # same folder
        "solve/maxmin/engine.py": "from fabricflow.solve.cc.law import _step\n",
        "solve/maxmin/inputs.py": "import fabricflow.solve.cc._kernel\n",
        "solve/cc/_kernel.py": "",
        "solve/maxmin/ok.py": "from fabricflow.solve.cc import law\n",
    })  # fmt: skip
    assert private_crossings(package) == [
        "fabricflow/solve/maxmin/engine.py:1: solve.maxmin.engine takes _step from solve.cc.law",
        "fabricflow/solve/maxmin/inputs.py:1: solve.maxmin.inputs takes _kernel from solve.cc._kernel",
    ]


# ------------------------------------------------------------------ circles


def test_no_import_circle():
    """No strongly connected component in the module graph, imports inside functions
    counted: a circle hidden by an in-function import is still a circle."""
    circles = import_circles()
    assert not circles, "\n" + "\n".join(circles)


def test_a_circle_closed_inside_a_function_is_found(tmp_path):
    package = _tree(tmp_path, {
        "fabric/spec.py": "from fabricflow.fabric.clos import build\n",
        "fabric/clos.py": "def build():\n    from fabricflow.fabric import spec\n",
        "routing/route.py": "from fabricflow.fabric.spec import x\n",
    })  # fmt: skip
    assert import_circles(package) == [
        "circle of 2 modules: fabric.clos, fabric.spec\n"
        "  fabricflow/fabric/clos.py:2 (in a function): fabric.clos -> fabric.spec\n"
        "  fabricflow/fabric/spec.py:1: fabric.spec -> fabric.clos"
    ]


def test_type_checking_imports_close_no_circle(tmp_path):
    package = _tree(tmp_path, {
        "fabric/spec.py": "from fabricflow.fabric.clos import build\n",
        "fabric/clos.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from fabricflow.fabric.spec import Spec\n"
        ),
        "routing/route.py": "from fabricflow.fabric import spec\nfrom fabricflow import fabric\n",
    })  # fmt: skip
    assert import_circles(package) == []


# ------------------------------------------------------------------ in-function imports


def test_in_function_imports_say_why():
    """An import inside a function of the package's own module waits for a reason (a
    heavy library it loads: JAX, zarr, dask); a ``# lazy:`` comment says which."""
    silent = [where for where, says_why in lazy_imports() if not says_why]
    assert not silent, (
        f"{len(silent)} in-function imports without a `{LAZY_COMMENT}` comment:\n"
        + "\n".join(silent)
    )


def test_at_most_50_in_function_imports():
    found = [where for where, _ in lazy_imports()]
    per_package = collections.Counter(where.split("/")[1].removesuffix(".py") for where in found)
    assert len(found) <= MAX_LAZY_IMPORTS, (
        f"{len(found)} in-function imports of fabricflow modules (at most {MAX_LAZY_IMPORTS}): "
        f"{dict(per_package.most_common())}\n" + "\n".join(found)
    )


def test_lazy_imports_are_found_with_their_comments(tmp_path):
    package = _tree(tmp_path, {
        "solve/run.py": (
            "import numpy\n"
            "from fabricflow.errors import SpecError\n"  # at the top: not lazy
            "def solve():\n"
            "    # lazy: JAX loads on the first solve\n"
            "    from fabricflow.solve import kernel\n"
            "    import numpy as np  # another library: not counted\n"
            "    import fabricflow.solve.kernel  # lazy: the same, spelled as a module\n"
            "def plot():\n"
            "    # matplotlib is heavy\n"
            "    from fabricflow.plots import draw\n"
            "    class Inner:\n"
            "        def method(self):\n"
            "            # lazy: first line of the reason\n"
            "            # and its second line\n"
            "            from fabricflow import errors\n"
        ),
        "solve/kernel.py": "",
        "plots/draw.py": "",
        "errors.py": "",
    })  # fmt: skip
    assert lazy_imports(package) == [
        ("fabricflow/solve/run.py:5: solve.run imports solve", True),
        ("fabricflow/solve/run.py:7: solve.run imports solve.kernel", True),
        ("fabricflow/solve/run.py:10: solve.run imports plots", False),
        ("fabricflow/solve/run.py:15: solve.run imports errors", True),
    ]


def test_the_lazy_import_rule_passes_a_clean_tree_and_fails_a_broken_one(tmp_path):
    files = {
        "solve/kernel.py": "",
        "solve/run.py": (
            "def solve():\n"
            "    # lazy: JAX loads on the first solve\n"
            "    from fabricflow.solve import kernel\n"
            "def batch():\n"
            "    from fabricflow.solve import kernel  # lazy: the same\n"
        ),
    }
    clean = _tree(tmp_path / "clean", files)
    assert lazy_import_problems(clean, cap=2) == []
    assert lazy_import_problems(clean, cap=1) == [
        "2 in-function imports of fabricflow modules, at most 1"
    ]
    files["solve/run.py"] += "def plot():\n    from fabricflow.solve import kernel\n"
    broken = _tree(tmp_path / "broken", files)
    assert lazy_import_problems(broken, cap=3) == [
        "fabricflow/solve/run.py:7: solve.run imports solve: no `# lazy:` comment says why"
    ]


# ------------------------------------------------------------------ file names


def test_file_names_are_unique_where_meanings_differ():
    found = repeated_file_names()
    assert not found, "\n" + "\n".join(found)


def test_repeated_file_names_are_found_outside_mirrors_and_topology_pairs(tmp_path):
    package = _tree(tmp_path, {
        "workload/memory.py": "", "memory_budget.py": "", "cluster/memory.py": "",
        "workload/step.py": "", "commands/step.py": "", "plots/step.py": "", "bench/step.py": "",
        "fabric/clos.py": "", "routing/clos.py": "", "routing_optimizer/clos.py": "",
    })  # fmt: skip
    assert repeated_file_names(package) == [
        "clos.py: fabric|routing/clos.py, routing_optimizer/clos.py",
        "memory.py: cluster/memory.py, workload/memory.py",
    ]


# ------------------------------------------------------------------ through modules, lazily


def _modules_after_import(statement: str) -> set[str]:
    import subprocess
    import sys

    code = f"{statement}\nimport sys\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return set(out.stdout.split())


HEAVY = ("jax", "scipy", "xarray", "matplotlib")


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


def test_only_the_plots_package_imports_matplotlib():
    import ast
    from pathlib import Path

    root = Path(ff.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        if path.relative_to(root).parts[0] == "plots":
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
    # and at run time: the model packages load no matplotlib through another library either
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


def test_typing_module_imports_no_jax():
    # Load the file on its own, so that the package __init__ does not count.
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('ff_typing', {str(ROOT / 'fabricflow' / 'typing.py')!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'scipy', 'xarray', 'matplotlib')]\n"
        "print(len(module.__all__), heavy)\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


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


# -- the programs around the package -----------------------------------------------------


def _user_sources() -> list[tuple[str, str]]:
    """``(where, source)`` of the Python that uses the package from outside it: the runnable
    studies, the notebooks' code cells and the README's and docs' python blocks."""
    import re
    import textwrap

    sources = [
        (str(p.relative_to(ROOT)), p.read_text()) for p in sorted((ROOT / "studies").glob("*.py"))
    ]
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        sources += [
            (f"{path.relative_to(ROOT)} cell {i}", "".join(cell["source"]))
            for i, cell in enumerate(cells)
            if cell["cell_type"] == "code"
        ]
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        blocks = re.findall(r"```python\n(.*?)```", path.read_text(), re.S)
        sources += [
            (f"{path.relative_to(ROOT)} block {i}", textwrap.dedent(block))
            for i, block in enumerate(blocks)
        ]
    return sources


def _outside_imports(source: str):
    """``(line, module, name or None)`` of each fabricflow import of a program (IPython
    magics and shell lines skipped)."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    for node in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "fabricflow":
            yield from ((node.lineno, node.module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "fabricflow":
                    yield node.lineno, alias.name, None


def test_the_programs_around_the_package_import_what_exists_and_is_public():
    """Studies, notebooks and documented snippets are run by users, not by every test: each
    fabricflow import they write resolves now, and none takes a private name (a study
    that imported a renamed private helper failed only when someone ran it)."""
    import importlib

    found, checked = [], 0
    for where, source in _user_sources():
        for line, module, name in _outside_imports(source):
            checked += 1
            if any(part.startswith("_") for part in module.split(".")) or (name or "x")[0] == "_":
                found.append(f"{where}:{line}: private {module} {name or ''}")
                continue
            try:
                value = importlib.import_module(module)
            except ImportError as error:
                found.append(f"{where}:{line}: {error}")
                continue
            if name and not hasattr(value, name):
                try:
                    importlib.import_module(f"{module}.{name}")
                except ImportError:
                    found.append(f"{where}:{line}: {module} has no {name}")
    assert checked > 50  # the studies, notebooks and docs were read
    assert found == []


def test_the_outside_import_reader_sees_magics_and_every_form():
    source = "%matplotlib inline\nimport fabricflow.fabric.spec\nfrom fabricflow.x import _y, z\n"
    assert list(_outside_imports(source)) == [
        (1, "fabricflow.fabric.spec", None),
        (2, "fabricflow.x", "_y"),
        (2, "fabricflow.x", "z"),
    ]
