"""Docstrings and comments of the package name only modules that exist.

A module renamed or moved leaves its old name behind in prose that no import checks. Two
forms are resolved here, in every docstring (any string statement: module, class,
function and attribute docstrings) and every comment under ``fabricflow/``:

* a dotted name ``fabricflow.x.y`` (or ``fabricflow.x.y:f``): its longest leading part
  that is a module must be followed by at most names, and the first of those must be an
  attribute of that module (imported, then ``getattr``); what lies past it (a method, a
  field of an instance) is not checked;
* a relative Sphinx role (``:mod:`.x```, ``:func:`.x.f```, ``:class:`~..x.C```): the dots
  name the package (one: the module's own package, two: its parent, ...), and the leading
  part after them must be a module of that package; a role to a module (``:mod:``) must
  name a module through and through, any other role a module and then one of its
  attributes. A one-part role to a function or class (``:func:`.f```) may also name an
  attribute of the module it is written in. Sphinx would resolve a stale ``.netbound`` by
  suffix to whatever module ends so, or to nothing, without a warning by default.

Names of other libraries (``numpy.ndarray``, ``xarray.Dataset``) are not looked at.
"""

from __future__ import annotations

import ast
import importlib
import io
import re
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_ROLE = re.compile(
    r":(mod|func|class|meth|attr|data|exc|obj):`~?(?:[^`<]*<)?~?(?P<dots>\.+)(?P<name>[A-Za-z_][\w.]*)>?`"
)


def _dotted(package: str) -> re.Pattern:
    return re.compile(rf"(?<![\w.]){package}(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_]\w*)?")


def _prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string statement (docstrings, attribute docstrings) and every
    comment of ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            for offset, line in enumerate(node.value.value.splitlines()):
                found.append((node.lineno + offset, line))
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found.append((token.start[0], token.string))
    return sorted(found)


def _module_path(root: Path, dotted: str) -> Path | None:
    """The file of module ``dotted`` under ``root`` (a package's ``__init__.py``), else None."""
    base = root.joinpath(*dotted.split("."))
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _has(module: str, name: str) -> bool:
    """Whether module ``module`` (importable) has attribute ``name``."""
    return hasattr(importlib.import_module(module), name)


def _resolves(root: Path, parts: list[str], *, modules_only: bool) -> bool:
    """``parts`` (absolute) are a module under ``root``, then (unless ``modules_only``) at
    most an attribute of it followed by names not checked."""
    depth = len(parts)
    while depth and _module_path(root, ".".join(parts[:depth])) is None:
        depth -= 1
    if depth == 0:
        return False
    if depth == len(parts):
        return True
    if modules_only:
        return False
    return _has(".".join(parts[:depth]), parts[depth])


def stale_references(root: Path, package: str) -> list[str]:
    """``path:line: reference`` of every dotted name and relative role under
    ``root/package`` that names no module (or no attribute of one; see the module doc).
    ``root`` must be on ``sys.path`` for the attributes to be checked."""
    dotted = _dotted(package)
    problems = []
    for path in sorted((root / package).rglob("*.py")):
        relative = path.relative_to(root)
        here = list(relative.with_suffix("").parts)
        own_package = here[:-1]  # the package of a module; of __init__.py: itself
        if here[-1] == "__init__":
            here = here[:-1]
        for line, text in _prose(path.read_text(encoding="utf-8")):
            for match in dotted.finditer(text):
                name = match.group(0).rstrip(".")
                if name.endswith((".py", ".pyi")):
                    name = name.rsplit(".", 1)[0]
                parts = name.replace(":", ".").split(".")
                if not _resolves(root, parts, modules_only=False):
                    problems.append(f"{relative}:{line}: {match.group(0)}")
            for match in _ROLE.finditer(text):
                role, up = match.group(1), len(match.group("dots")) - 1
                name = match.group("name").rstrip(".")
                base = own_package[: len(own_package) - up] if up else own_package
                parts = [*base, *name.split(".")]
                if _resolves(root, parts, modules_only=role == "mod"):
                    continue
                if role != "mod" and "." not in name and _has(".".join(here), name):
                    continue  # :func:`.f`: a name of this module
                problems.append(f"{relative}:{line}: {match.group(0)}")
    return problems


def test_the_package_names_only_modules_that_exist():
    problems = stale_references(ROOT, "fabricflow")
    assert not problems, (
        "docstrings or comments name a module (or a module's attribute) that does not "
        "exist; write the module's current name:\n" + "\n".join(problems)
    )


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_checker_sees_a_stale_reference(tmp_path, monkeypatch):
    """A tiny package with one stale name of each form and the valid forms around them:
    exactly the stale ones are reported."""
    _write(
        tmp_path,
        {
            "refpkg/__init__.py": '"""Top: :mod:`.sub` and :func:`refpkg.sub.bound.lower`."""\n',
            "refpkg/sub/__init__.py": "",
            "refpkg/sub/bound.py": (
                '"""Bounds; see :mod:`.search` and :func:`~.search.run` (``x.shape``).\n\n'
                "Not checked: :class:`numpy.ndarray`, :attr:`Thing.field`.\n"
                '"""\n\n\ndef lower():\n    """Below :func:`.lower` and :func:`..sub.bound.lower`."""\n'
            ),
            "refpkg/sub/search.py": (
                '"""Search: uses :mod:`.netbound` (gone) and refpkg.sub.bound.lower."""\n\n'
                "# The old refpkg.sub.visit module is gone too.\n"
                "NAME = 'refpkg.not_in_prose'  # a string in code, not prose\n\n\n"
                "def run():\n"
                '    """:class:`~.bound.Nothing`: no such class."""\n'
            ),
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        problems = stale_references(tmp_path, "refpkg")
    finally:
        for name in [m for m in sys.modules if m == "refpkg" or m.startswith("refpkg.")]:
            del sys.modules[name]
    assert problems == [
        "refpkg/sub/search.py:1: :mod:`.netbound`",
        "refpkg/sub/search.py:3: refpkg.sub.visit",
        "refpkg/sub/search.py:8: :class:`~.bound.Nothing`",
    ]
