"""docs/architecture.md is true to the tree.

The page lists every package of ``fabricflow`` under a heading of its own
(``### `fabricflow/solve/cc/` ``, ``### `fabricflow/` `` for the top-level modules) and,
below it, one line per module: ``- `name.py`: what it holds``. A command module's line
names its command (``- `step.py`: `fabricflow step`: ...``), a benchmark module's line
its section (``- `cluster_90d.py`: section `cluster-90d`: ...``). These tests read that
form and compare it with the tree, both ways: a package, module, command or benchmark
section missing from the page fails, and so does a line or path of the page that names
something the tree no longer has. Each failure says the exact line to add or remove
(a missing module's line is drafted from its docstring; rewrite it if it reads badly).

The floors table of the page is compared with ``FLOORS`` of the architecture test, and
every ``fabricflow/...`` path, ``fabricflow.x.y`` dotted name and package-relative
module path (``layout_search/branch_and_bound.py``) in README.md and docs/*.md must exist.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fabricflow"
PAGE = ROOT / "docs" / "architecture.md"
MARKDOWN = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ARCHITECTURE_TESTS = [ROOT / "tests" / "test_architecture.py"]

_HEADING = re.compile(r"^#{1,6} ")
_PACKAGE_HEADING = re.compile(r"^### `fabricflow/((?:\w+/)*)`\s*$")
_MODULE_LINE = re.compile(r"^- `(\w+\.py)`: (.+)$")
_FLOOR_ROW = re.compile(r"^\| (\d+) \| (.+) \|\s*$")


def _heading(package: str) -> str:
    """The page's heading of a package (``""`` is the top level, ``"solve/cc"`` a subpackage)."""
    return f"### `fabricflow/{package + '/' if package else ''}`"


# -- the tree ---------------------------------------------------------------------------


@functools.cache
def _tree() -> dict[str, tuple[str, ...]]:
    """Package (``""``, ``"fabric"``, ``"solve/cc"``) -> its module file names, sorted
    (``__init__.py`` is the package itself and is not listed)."""
    packages = {}
    for init in sorted(PACKAGE.rglob("__init__.py")):
        folder = init.parent
        if "__pycache__" in folder.parts:
            continue
        package = folder.relative_to(PACKAGE).as_posix()
        packages["" if package == "." else package] = tuple(
            sorted(path.name for path in folder.glob("*.py") if path.name != "__init__.py")
        )
    return packages


def _source(package: str, module: str) -> Path:
    return PACKAGE / package / module


def _docstring_line(path: Path) -> str:
    """The first sentence of a module's docstring, as a draft line for the page."""
    text = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    text = " ".join(text.split("\n\n")[0].split())
    text = re.sub(r":\w+:`~?\.?([^`]+)`", r"`\1`", text)  # :func:`~.x.f` -> `x.f`
    text = text.replace("``", "`")
    return text or "WHAT IT HOLDS"


def _assignment(node: ast.stmt, name: str) -> ast.expr | None:
    """The value a top-level statement assigns to ``name`` (``NAME = ...`` or
    ``NAME: type = ...``), else None."""
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign):
        targets = [node.target]
    else:
        return None
    return node.value if any(isinstance(t, ast.Name) and t.id == name for t in targets) else None


def _commands() -> dict[str, str]:
    """Command module file name -> the command it adds: from the table ``COMMANDS`` of
    ``commands/__init__.py`` (``launch-args`` lives in ``launch_args.py``) where there is
    one, and from each module's ``add_parser("NAME")``."""
    found = {}
    init = ast.parse((PACKAGE / "commands" / "__init__.py").read_text(encoding="utf-8"))
    for node in init.body:
        table = _assignment(node, "COMMANDS")
        if isinstance(table, ast.Dict):
            for key in table.keys:
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    found[key.value.replace("-", "_") + ".py"] = key.value
    for module in _tree()["commands"]:
        tree = ast.parse(_source("commands", module).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_parser"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found[module] = node.args[0].value
                break
    return found


def _sections() -> dict[str, str]:
    """Benchmark module file name -> its section, from the table ``SECTIONS`` of
    ``fabricflow/bench/__init__.py`` (section ``NAME`` lives in module ``NAME``, ``-`` as
    ``_``)."""
    init = ROOT / "fabricflow" / "bench" / "__init__.py"
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        table = _assignment(node, "SECTIONS")
        if isinstance(table, ast.Dict):
            names = [key.value for key in table.keys if isinstance(key, ast.Constant)]
            return {f"{name.replace('-', '_')}.py": name for name in names}
    pytest.fail("no SECTIONS table in fabricflow/bench/__init__.py")


def _draft(package: str, module: str) -> str:
    """The line to add for a module missing from the page."""
    holds = _docstring_line(_source(package, module))
    if package == "commands" and module in _commands():
        return f"- `{module}`: `fabricflow {_commands()[module]}`: {holds}"
    if package == "bench" and module in _sections():
        return f"- `{module}`: section `{_sections()[module]}`: {holds}"
    return f"- `{module}`: {holds}"


# -- the page ---------------------------------------------------------------------------


@functools.cache
def _page() -> tuple[dict[str, dict[str, str]], tuple[str, ...]]:
    """(package -> {module file name: its line}, headings given twice) as the page has them."""
    listed: dict[str, dict[str, str]] = {}
    twice = []
    current = None
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        if _HEADING.match(line):
            match = _PACKAGE_HEADING.match(line)
            current = match.group(1).rstrip("/") if match else None
            if current is not None:
                if current in listed:
                    twice.append(line)
                listed.setdefault(current, {})
        elif current is not None and (match := _MODULE_LINE.match(line)):
            listed[current][match.group(1)] = line
    return listed, tuple(twice)


def test_the_page_has_the_form_these_tests_read():
    listed, twice = _page()
    assert "" in listed and "fabric" in listed, (
        f"{PAGE.name}: no package headings such as {_heading('fabric')!r} found"
    )
    assert sum(len(modules) for modules in listed.values()) > 100
    assert not twice, f"{PAGE.name}: give each package one heading; twice: {list(twice)}"


def test_every_package_has_its_heading():
    listed, _ = _page()
    missing = [package for package in _tree() if package not in listed]
    stale = [package for package in listed if package not in _tree()]
    message = []
    for package in missing:
        lines = "\n".join(_draft(package, module) for module in _tree()[package])
        message.append(
            f"add to docs/architecture.md, in floor order under '## Packages and modules':\n"
            f"{_heading(package)}\n\n{_docstring_line(PACKAGE / package / '__init__.py')}\n\n"
            f"{lines}\n"
        )
    for package in stale:
        message.append(
            f"remove from docs/architecture.md the heading {_heading(package)} and its lines: "
            f"fabricflow/{package}/ is no longer a package"
        )
    assert not message, "\n".join(message)


def test_every_module_has_its_line():
    listed, _ = _page()
    message = []
    for package, modules in _tree().items():
        if package not in listed:
            continue  # test_every_package_has_its_heading drafts the whole block
        for module in modules:
            if module not in listed[package]:
                message.append(
                    f"add under {_heading(package)} (fabricflow/{package + '/' if package else ''}"
                    f"{module} exists):\n{_draft(package, module)}"
                )
        for module, line in listed[package].items():
            if module not in modules:
                message.append(
                    f"remove under {_heading(package)} (no fabricflow/"
                    f"{package + '/' if package else ''}{module}):\n{line}"
                )
    assert not message, "docs/architecture.md is not true to the tree:\n" + "\n".join(message)


def test_every_command_is_named():
    listed, _ = _page()
    lines = listed.get("commands", {})
    commands = {m: c for m, c in _commands().items() if m in _tree()["commands"]}
    assert {"step", "optimize", "bench", "launch-args"} <= set(commands.values())
    message = [
        f"under {_heading('commands')}, the line of {module} must start "
        f"'- `{module}`: `fabricflow {command}`', not:\n{lines[module]}"
        for module, command in commands.items()
        if module in lines
        and not re.match(
            rf"- `{re.escape(module)}`: `fabricflow {re.escape(command)}[ `]", lines[module]
        )
    ]
    message += [
        f"add under {_heading('commands')}:\n{_draft('commands', module)}"
        for module in commands
        if module not in lines
    ]
    assert not message, "\n".join(message)


def test_every_bench_section_is_named():
    listed, _ = _page()
    lines = listed.get("bench", {})
    sections = _sections()
    assert {"fabric", "maxmin", "cluster-90d", "gpu"} <= set(sections.values())
    message = [
        f"under {_heading('bench')}, the line of {module} must start "
        f"'- `{module}`: section `{section}`:', not:\n{lines[module]}"
        for module, section in sections.items()
        if module in lines and not lines[module].startswith(f"- `{module}`: section `{section}`:")
    ]
    message += [
        f"add under {_heading('bench')}:\n{_draft('bench', module)}"
        for module in sections
        if module not in lines
    ]
    assert not message, "\n".join(message)


# -- the floors -------------------------------------------------------------------------


def _floors_of_the_architecture_test() -> dict[str, int]:
    for path in ARCHITECTURE_TESTS:
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (floors := _assignment(node, "FLOORS")) is not None:
                # a literal built with dict.fromkeys: evaluated with nothing else in reach
                expression = ast.Expression(floors)
                return eval(compile(expression, str(path), "eval"), {"dict": dict})
    pytest.fail(f"no FLOORS found in {[str(p.relative_to(ROOT)) for p in ARCHITECTURE_TESTS]}")


def _floors_of_the_page() -> dict[str, int]:
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("## Floors", 1)[1].split("\n## ", 1)[0]
    floors = {}
    for line in section.splitlines():
        if match := _FLOOR_ROW.match(line):
            for name in re.findall(r"`([^`]+)`", match.group(2)):
                floors["" if name == "fabricflow/__init__.py" else name] = int(match.group(1))
    return floors


def test_the_floors_table_is_the_architecture_tests():
    page, test = _floors_of_the_page(), _floors_of_the_architecture_test()
    assert len(test) > 10
    wrong = [
        f"floor {test[name]}: `{name or 'fabricflow/__init__.py'}` "
        + (f"(the page says {page[name]})" if name in page else "(missing from the page)")
        for name in sorted(test, key=lambda n: (test[n], n))
        if page.get(name) != test[name]
    ]
    wrong += [
        f"`{name}` is in the page's table but has no floor" for name in page if name not in test
    ]
    assert not wrong, "docs/architecture.md, '## Floors' table:\n" + "\n".join(wrong)


# -- the public API --------------------------------------------------------------------


def _api_of_the_page() -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("## Public API", 1)[1].split("\n## ", 1)[0]
    names = []
    for line in section.splitlines():
        cells = line.split(" | ")
        if line.startswith("| ") and len(cells) >= 3 and not line.startswith(("| area", "| ---")):
            names += re.findall(r"`([A-Za-z_]\w*)`", cells[1])
    return names


def test_the_public_api_table_is_fabricflow_all():
    import fabricflow

    public, listed = set(fabricflow.__all__), _api_of_the_page()
    assert len(listed) > 50
    wrong = [f"add `{name}` to the row of its area" for name in sorted(public - set(listed))]
    wrong += [
        f"remove `{name}`: it is not in fabricflow.__all__" for name in sorted(set(listed) - public)
    ]
    wrong += [
        f"`{name}` is in the table twice" for name in sorted(set(listed)) if listed.count(name) > 1
    ]
    assert not wrong, "docs/architecture.md, '## Public API' table:\n" + "\n".join(wrong)


# -- paths named in the documentation -------------------------------------------------

_FILE_PATH = re.compile(r"(?<![\w./-])fabricflow/[\w./-]*[\w/]")
_DOTTED = re.compile(r"(?<![\w./-])fabricflow(?:\.[A-Za-z_]\w*)+")
_RELATIVE_MODULE = re.compile(r"(?<![\w./-])((?:\w+/)+\w+\.py)\b")


def _top_folders() -> set[str]:
    return {path.name for path in PACKAGE.iterdir() if path.is_dir() and path.name != "__pycache__"}


@functools.cache
def _defined_names(path: Path) -> frozenset[str]:
    """Names a module defines at its top level, and the identifiers it lists as strings
    (``__all__``, a lazy package's map of exports); with its stub (``__init__.pyi``) too."""
    stub = path.with_suffix(".pyi")
    names = set(_defined_names(stub)) if path.suffix == ".py" and stub.exists() else set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.isidentifier():
                names.add(node.value)
    return frozenset(names)


def _dotted_exists(dotted: str) -> bool:
    """``fabricflow.a.b.name``: a module path, then at most a name it defines (and one of
    that name's attributes, which is not checked)."""
    parts = dotted.split(".")[1:]
    path = PACKAGE
    while parts and (path / parts[0] / "__init__.py").exists():
        path = path / parts.pop(0)
    if parts and (path / f"{parts[0]}.py").exists():
        path = path / f"{parts.pop(0)}.py"
    module = path / "__init__.py" if path.is_dir() else path
    return not parts or (len(parts) <= 2 and parts[0] in _defined_names(module))


def _stale_paths(markdown: Path) -> list[str]:
    stale = []
    folders = _top_folders()
    for number, line in enumerate(markdown.read_text(encoding="utf-8").splitlines(), 1):
        found = [
            (match.start(), match.group(0))
            for match in _FILE_PATH.finditer(line)
            if not (ROOT / match.group(0)).exists()
        ]
        found += [
            (match.start(), match.group(0))
            for match in _DOTTED.finditer(line)
            if not _dotted_exists(match.group(0))
        ]
        found += [
            (match.start(), f"fabricflow/{match.group(1)}")
            for match in _RELATIVE_MODULE.finditer(line)
            if match.group(1).split("/")[0] in folders and not (PACKAGE / match.group(1)).exists()
        ]
        stale += [f"{markdown.name}:{number}: {path} does not exist" for _, path in sorted(found)]
    return stale


@pytest.mark.parametrize("markdown", MARKDOWN, ids=lambda path: path.name)
def test_the_documentation_names_only_paths_that_exist(markdown):
    stale = _stale_paths(markdown)
    assert not stale, "rename or remove:\n" + "\n".join(stale)


def test_the_path_checker_sees_a_stale_path(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "`fabricflow/solve/maxmin/engine.py`, fabricflow.solve.maxmin.engine.max_min,\n"
        "`layout_search/branch_and_bound.py`, `presets/stacks.json`, megatron/core/x.py\n"
        "`fabricflow/optimize/visit.py`, fabricflow.solve.maxmin.engine.no_such_name,\n"
        "`collective/cost.py`, fabricflow.study.sweep.run\n"
    )
    assert [line.split(": ", 1)[1] for line in _stale_paths(page)] == [
        "fabricflow/optimize/visit.py does not exist",
        "fabricflow.solve.maxmin.engine.no_such_name does not exist",
        "fabricflow/collective/cost.py does not exist",
        "fabricflow.study.sweep.run does not exist",
    ]
