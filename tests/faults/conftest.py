"""Fixtures of the fault suite (helpers are in ``fault_helpers.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fault_helpers import mount_tmpfs, unmount


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(options) -> Path``: a real tmpfs mounted under ``tmp_path`` (``size=16k``,
    ``ro``), unmounted after; skipped where mounting is not allowed."""
    mounted: list[Path] = []

    def mount(options: str, name: str = "mnt") -> Path:
        path = tmp_path / name
        mount_tmpfs(path, options)
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        unmount(path)


@pytest.fixture(scope="module")
def fabric():
    """The ``dgx-h100-superpod`` preset, built once per module."""
    import fabricflow as ff

    return ff.load_fabric("dgx-h100-superpod")


@pytest.fixture(scope="module")
def dumbbell():
    """The two-flow dumbbell congestion-control scenario, built once per module."""
    from fabricflow.dynamics.scenarios import dumbbell

    return dumbbell(2)
