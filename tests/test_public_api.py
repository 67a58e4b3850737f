"""The public API of ``fabricflow``: every listed name resolves, lazily, and nothing else
does."""

from __future__ import annotations

import warnings

import pytest

import fabricflow
import fabricflow as ff


def _stub_names() -> set[str]:
    """The public names the stub ``fabricflow/__init__.pyi`` lists, read apart from the
    package's own reader: ``from M import A as A`` lines and ``NAME = _PRIVATE``."""
    import ast
    from pathlib import Path

    stub = Path(fabricflow.__file__).with_suffix(".pyi")
    names = set()
    for node in ast.parse(stub.read_text()).body:
        if isinstance(node, ast.ImportFrom):
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return {name for name in names if not name.startswith("_")}


def test_public_names_resolve_and_all_matches_the_stub():
    assert fabricflow.__all__ == sorted(fabricflow._EXPORTS) == sorted(_stub_names())
    assert len(fabricflow.__all__) >= 70  # the stub was read, not found empty
    assert "_Status" not in dir(fabricflow)  # a stub-private import is no public name
    for name in fabricflow.__all__:
        assert getattr(fabricflow, name) is not None, name
    assert set(fabricflow.__all__) <= set(dir(fabricflow))
    assert fabricflow.SolverStatus.__name__ == "SolverStatus"
    assert fabricflow.errors.SpecError is fabricflow.SpecError
    with pytest.raises(AttributeError, match="no_such_name"):
        fabricflow.no_such_name  # noqa: B018
    assert (
        fabricflow.traffic.patterns.__name__ == "fabricflow.traffic.patterns"
    )  # subpackages on demand


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("stack_params", "fabricflow.solve.parameters"),
        ("DCQCNResult", None),  # CCResult is its one name
        ("prepare_collective", "fabricflow.collective.timing"),
    ],
)
def test_former_kernel_exports_are_refused_and_live_in_their_modules(name, module):
    """Top-level names dropped before 0.1.0 (no shim): a plain AttributeError, and the
    kernels are imported from their modules."""
    import importlib

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused, not warned about
        with pytest.raises(AttributeError, match=f"no attribute {name!r}"):
            getattr(fabricflow, name)
    assert name not in fabricflow.__all__ and name not in dir(fabricflow)
    if module is not None:
        assert callable(getattr(importlib.import_module(module), name))


def test_the_stub_ships_with_the_package():
    """pyproject's package data names the stub: an installed fabricflow has its API list."""
    import tomllib
    from pathlib import Path

    root = Path(fabricflow.__file__).parent
    pyproject = tomllib.loads((root.parent / "pyproject.toml").read_text())
    assert "__init__.pyi" in pyproject["tool"]["setuptools"]["package-data"]["fabricflow"]
    assert (root / "__init__.pyi").is_file()


# --------------------------------------------------------- lazy package attributes


@pytest.mark.parametrize("name", ["x.y", "solve.maxmin", "fabric.spec", ".x", "..", "nosuch"])
def test_package_getattr_refuses_dotted_and_unknown_names(name):
    assert not hasattr(ff, name)
    with pytest.raises(AttributeError, match="no attribute"):
        getattr(ff, name)
    assert not [key for key in vars(ff) if "." in key]


def test_package_getattr_still_loads_direct_submodules():
    import fabricflow.traffic

    assert ff.traffic is fabricflow.traffic and hasattr(ff.traffic, "htsim")
    assert hasattr(ff, "solve") and hasattr(ff.solve, "maxmin")
