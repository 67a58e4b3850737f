"""SolverStatus codes of the bounded solver loops (returned inside jit, never raised there)."""

from __future__ import annotations

import enum


class SolverStatus(enum.IntEnum):
    """Outcome of a jitted solver loop, stored as an int32 in its ``Solution``.

    ``CONVERGED``: every flow is settled. ``MAX_ITERS_REACHED``: the loop bound was hit
    with flows still unsettled. ``NONFINITE``: a NaN or an infinity appeared where a
    finite number was expected (NaN inputs, infinite capacities on used links).
    ``INFEASIBLE``: the input admits no valid answer (a negative capacity, size or
    demand, or a non-positive weight).
    """

    CONVERGED = 0
    MAX_ITERS_REACHED = 1
    NONFINITE = 2
    INFEASIBLE = 3

    @property
    def message(self) -> str:
        return {
            SolverStatus.CONVERGED: "converged",
            SolverStatus.MAX_ITERS_REACHED: "loop bound reached before every flow was settled; "
            "raise max_iters",
            SolverStatus.NONFINITE: "a non-finite value (NaN or inf) appeared; check the inputs",
            SolverStatus.INFEASIBLE: "infeasible input (negative capacity, size or demand, or a "
            "non-positive weight)",
        }[self]
