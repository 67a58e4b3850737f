"""fabricflow.layout_search: search parallel layouts, rank orders, placements and collective
algorithms for the shortest training step on a fabric (:func:`optimize_layout`); a list of
GPU counts gives the capacity sweep (:func:`capacity_sweep`, :mod:`.gpu_counts`)."""

from __future__ import annotations

from fabricflow.layout_search.optimize import (
    LayoutSearch,
    SearchInterrupted,
    capacity_sweep,
    optimize_layout,
)

__all__ = ["LayoutSearch", "SearchInterrupted", "capacity_sweep", "optimize_layout"]
