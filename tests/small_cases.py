"""Small inputs that several test files share (plain helpers, not fixtures)."""

from __future__ import annotations

# One congestion-control run configuration for every test that uses it, so that the kernel
# compiles once for all of them.
SHORT_RUN = {"pfc": "static", "duration": 2e-3, "records": 37}


def small_dumbbell():
    """The 2-flow dumbbell scenario of the congestion-control tests."""
    from fabricflow.dynamics.scenarios import dumbbell

    return dumbbell(2)


def small_figure():
    """A 2 x 2 inch figure with one line, to be saved."""
    from fabricflow.plots.figures import new_figure

    fig = new_figure(figsize=(2, 2))
    fig.subplots().plot([0, 1], [0, 1])
    return fig
