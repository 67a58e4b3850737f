"""Event-driven completion over the lossless steady-state rates of :mod:`.pfc_hol`.

Rates are recomputed (warm-started fixed point) whenever a flow arrives or finishes, as
in the fluid engine; every solve completes the flows whose projected finish lies within
``(1 + eps)`` of the earliest one (the batched mode of
:func:`fabricflow.solve.completion.complete_flows`, with the same error bound: each
finish is off by at most about ``eps`` of the flow's transfer time). The loop runs over
events on the host (at most ``2 F`` of them, usually ``log(T_max / T_min) / eps``); each
event is one jitted fixed-point solve over fixed shapes (one compilation per flow set).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...errors import SolverError
from .pfc_hol import build_groups, steady_rates


class LosslessCompletion(NamedTuple):
    """``finish_time`` ``[F]`` s (transfer only), solves run, fixed-point sweeps in all."""

    finish_time: np.ndarray
    events: int
    sweeps: int


def complete_lossless(
    links: np.ndarray,
    capacity: np.ndarray,
    size: np.ndarray,
    start: np.ndarray,
    *,
    eps: float = 0.002,
    max_iters: int = 500,
    tol: float = 1e-5,
) -> LosslessCompletion:
    """Transfer finish times of ``size`` wire bytes under the PFC/HOL steady state.

    Args:
        links: int ``[F, H]`` (``-1`` padded). capacity: ``[L]`` bytes/s (> 0 on used links).
        size: ``[F]`` bytes (> 0). start: ``[F]`` seconds (>= 0).
        eps: relative completion window per solve. max_iters, tol: of each fixed point.

    Raises:
        SolverError: a fixed point that did not converge within ``max_iters`` sweeps.
    """
    import jax

    num_flows = links.shape[0]
    groups = build_groups(links, capacity.shape[0])
    remaining = np.asarray(size, np.float64).copy()
    start = np.asarray(start, np.float64)
    finish = np.full(num_flows, np.inf)
    done = np.zeros(num_flows, bool)
    rate = np.zeros(num_flows)
    now = float(start.min()) if num_flows else 0.0
    events = sweeps = 0
    while not done.all():
        active = (start <= now) & ~done
        if active.any():
            solved = jax.block_until_ready(
                steady_rates(rate, active, groups, capacity, max_iters=max_iters, tol=tol)
            )
            events += 1
            sweeps += int(solved.iterations)
            if float(solved.residual) > tol:
                raise SolverError(
                    f"lossless steady state did not converge in {max_iters} sweeps "
                    f"(residual {float(solved.residual):.3g}); raise max_iters"
                )
            rate = np.asarray(solved.rate, np.float64)
        with np.errstate(divide="ignore"):
            to_finish = np.where(active, remaining / np.where(active, rate, 1.0), np.inf)
        waiting = ~done & (start > now)
        to_arrival = (start[waiting] - now).min() if waiting.any() else np.inf
        cut = min(to_finish.min(initial=np.inf) * (1 + eps), to_arrival)
        finishing = active & (to_finish <= cut)
        if finishing.any():
            step = to_finish[finishing].max()
        elif np.isfinite(to_arrival):
            step = to_arrival
        else:
            raise SolverError("lossless completion stalled: a flow has rate 0 (failed link?)")
        moving = active & ~finishing
        remaining = np.where(moving, np.maximum(remaining - rate * step, 0.0), remaining)
        remaining[finishing] = 0.0
        finish[finishing] = now + to_finish[finishing]
        done |= finishing
        rate = np.where(done, 0.0, rate)
        now += step
    return LosslessCompletion(finish, events, sweeps)
