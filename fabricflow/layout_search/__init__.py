"""fabricflow.layout_search: search parallel layouts, rank orders, placements and collective
algorithms for the shortest training step on a fabric (:func:`optimize_layout`)."""

from __future__ import annotations

from typing import Any

__all__ = ["LayoutSearch", "SearchInterrupted", "capacity_sweep", "optimize_layout"]


def __getattr__(name: str) -> Any:
    # lazy: the package is imported by the CLI before any search is asked for
    if name in ("LayoutSearch", "SearchInterrupted", "optimize_layout"):
        from fabricflow.layout_search import optimize

        return getattr(optimize, name)
    if name == "capacity_sweep":
        from fabricflow.layout_search.gpu_counts import capacity_sweep

        return capacity_sweep
    raise AttributeError(f"module 'fabricflow.layout_search' has no attribute {name!r}")
