"""The public API of ``fabricflow``: every listed name resolves, lazily, and nothing else
does."""

from __future__ import annotations

import pytest

import fabricflow
import fabricflow as ff


def test_public_names_resolve_and_all_matches_the_map():
    assert fabricflow.__all__ == sorted(fabricflow._EXPORTS)
    for name in fabricflow.__all__:
        assert getattr(fabricflow, name) is not None, name
    assert set(fabricflow.__all__) <= set(dir(fabricflow))
    assert fabricflow.SolverStatus.__name__ == "Status"
    assert fabricflow.errors.SpecError is fabricflow.SpecError
    with pytest.raises(AttributeError, match="no_such_name"):
        fabricflow.no_such_name  # noqa: B018
    assert (
        fabricflow.traffic.patterns.__name__ == "fabricflow.traffic.patterns"
    )  # subpackages on demand


@pytest.mark.parametrize("name", sorted(fabricflow._DEPRECATED))
def test_former_kernel_exports_still_resolve_with_a_warning(name):
    with pytest.warns(DeprecationWarning, match=name):
        value = getattr(fabricflow, name)
    assert callable(value)
    assert name not in fabricflow.__all__


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
