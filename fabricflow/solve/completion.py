"""``ff.complete_flows``: event-driven fluid flow completion times (jitted).

Flows arrive at ``start[f]`` with ``size[f]`` bytes and share the fabric max-min fairly
(:func:`~fabricflow.solve.maxmin.kernel.water_fill`); rates are recomputed whenever a flow
arrives or finishes (m3's flowSim, docs/references.md §1). The whole event loop is one
``lax.while_loop`` (each iteration = one max-min solve) bounded by ``max_events``.

Modes:

- ``"exact"``: one event per arrival or completion (at most ``2 F`` events). Completions
  closer than a few float ulps are taken together. Matches the float64 event-by-event
  reference of the test suite (``fluid_completion`` in ``tests/reference_solvers.py``).
- ``"batched"``: for millions of flows. Each solve completes every flow whose projected
  finish lies within a window ``(1 + eps)`` times the earliest one, at its projected
  time, before re-solving. Error bound: within a window the rates are held for at most
  ``eps * tau`` past the first completion (``tau`` = time to it), so each re-solve comes
  at most ``eps`` (relative to the time since the previous one) late; the delays add up
  to at most ``eps * T`` over a flow's lifetime ``T``, and each finish time is off by
  about ``eps`` relative to the flow's completion time (the tests check ``2 eps``).
  Arrivals are never batched (a window is cut at the next arrival). The number of
  solves drops from ``2 F`` to roughly ``log(T_max / T_min) / eps`` plus the arrivals.

Flows that can never finish (every path crosses a failed link) get finish time ``inf``.
"""

from __future__ import annotations

import contextlib
import numbers
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import SolverError, SpecError
from ..typing import CapacityLike, CoefLike, FlowValuesLike, LinkIdsLike
from ._kernel import default_rtol, final_status, float_dtype, input_status
from .maxmin.identical_flows import merge_identical_flows
from .maxmin.inputs import (
    check_count,
    check_flag,
    check_problem,
    check_rtol,
    check_solve_memory,
    check_values,
)
from .maxmin.kernel import prepare_network, water_fill
from .maxmin.scaling import FLOAT32_MAX_SPAN, as_output_dtype, range_scaling
from .status import Status


class Completion(NamedTuple):
    """Result of :func:`complete_flows` / :func:`simulate_completion`.

    Attributes:
        finish_time: ``[F]`` seconds (``inf`` for flows that never finish).
        events: int32: max-min solves run (one per event or window).
        rounds: int32: water-filling rounds over all solves.
        status: int32 :class:`~fabricflow.solve.status.Status` code.
    """

    finish_time: jax.Array | np.ndarray
    events: jax.Array | np.ndarray
    rounds: jax.Array | np.ndarray
    status: jax.Array | np.ndarray


def simulate_completion(
    links,
    capacity,
    size,
    start=None,
    weight=None,
    coef=None,
    *,
    eps=None,
    max_events=None,
    rtol=None,
) -> Completion:
    """Pure-JAX flow completion kernel (no host checks; bad input shows in ``status``).

    Args:
        links: int ``[F, H]``, ``-1`` padded. capacity: ``[L]`` (bytes/s).
        size: ``[F]`` bytes. start: ``[F]`` seconds (default 0). weight, coef: as for
            :func:`~fabricflow.solve.maxmin.kernel.solve_max_min`.
        eps: completion window (relative). A few ulps gives the exact mode.
        max_events: bound on solves (default ``2 F + 1``, enough for the exact mode).
        rtol: share tolerance of the inner max-min solves.

    Returns:
        :class:`Completion` of device arrays. Shapes are static, values are not.
    """
    dtype = float_dtype(capacity, size, start, weight, coef)
    num_flows = links.shape[0]
    rtol = default_rtol(dtype) if rtol is None else rtol
    eps = 4 * rtol if eps is None else eps
    max_events = 2 * num_flows + 1 if max_events is None else max_events

    def as_dtype(a):
        return None if a is None else jnp.asarray(a, dtype)

    return _simulate(
        jnp.asarray(links),
        jnp.asarray(capacity, dtype),
        jnp.asarray(size, dtype),
        jnp.zeros(num_flows, dtype) if start is None else as_dtype(start),
        as_dtype(weight),
        as_dtype(coef),
        jnp.asarray(eps, dtype),
        jnp.asarray(max_events, jnp.int32),
        jnp.asarray(rtol, dtype),
    )


@jax.jit
def _simulate(links, capacity, size, start, weight, coef, eps, max_events, rtol) -> Completion:
    net = prepare_network(links, capacity, weight, None, coef)
    num_flows = links.shape[0]
    dtype = capacity.dtype
    inf = jnp.asarray(jnp.inf, dtype)
    size_status = input_status(
        nonfinite=[~jnp.isfinite(size), jnp.isnan(start)], infeasible=[size < 0, start < 0]
    )
    start_status = jnp.maximum(net.start_status, size_status)
    solve_bound = jnp.int32(num_flows + 1)

    def event(state):
        now, remaining, finish, done, events, rounds, unsettled, _ = state
        present = (start <= now) & ~done
        rate, _, used, stuck = water_fill(net, present, solve_bound, rtol)
        to_finish = jnp.where(present, jnp.where(remaining > 0, remaining / rate, 0), inf)
        to_arrival = jnp.min(jnp.where(~done & (start > now), start - now, inf), initial=inf)
        cut = jnp.minimum(jnp.min(to_finish, initial=inf) * (1 + eps), to_arrival)
        finishing = present & (to_finish <= cut)
        any_finishing = jnp.any(finishing)
        step = jnp.where(
            any_finishing, jnp.max(jnp.where(finishing, to_finish, 0), initial=0), to_arrival
        )
        moving = present & ~finishing
        remaining = jnp.where(
            moving, jnp.maximum(remaining - rate * step, 0), jnp.where(finishing, 0, remaining)
        )
        finish = jnp.where(finishing, now + to_finish, finish)
        stalled = ~any_finishing & (to_arrival == inf)  # the rest can never finish
        return (
            jnp.where(stalled, now, now + step),
            remaining,
            finish,
            done | finishing,
            events + 1,
            rounds + used,
            unsettled | stuck,
            stalled,
        )

    def more(state):
        _, _, _, done, events, _, unsettled, stalled = state
        return (
            (start_status == Status.CONVERGED)
            & ~jnp.all(done)
            & ~stalled
            & ~unsettled
            & (events < max_events)
        )

    first_arrival = jnp.min(start, initial=inf) if num_flows else jnp.zeros((), dtype)
    state = (
        first_arrival,
        size,
        jnp.full(num_flows, inf),
        jnp.zeros(num_flows, bool),
        jnp.int32(0),
        jnp.int32(0),
        jnp.zeros((), bool),
        jnp.zeros((), bool),
    )
    _, _, finish, done, events, rounds, unsettled, stalled = jax.lax.while_loop(more, event, state)
    unfinished = ~jnp.all(done) & ~stalled
    status = final_status(start_status, unsettled | unfinished, finish)
    return Completion(finish, events, rounds, status)


def complete_flows(
    links: LinkIdsLike,
    capacity: CapacityLike,
    size: FlowValuesLike,
    *,
    start: FlowValuesLike | None = None,
    weight: FlowValuesLike | None = None,
    coef: CoefLike | None = None,
    mode: str = "exact",
    eps: float | None = None,
    max_events: int | None = None,
    rtol: float | None = None,
    merge: bool = True,
    throw: bool = True,
) -> Completion:
    """Finish time of every flow under max-min fair sharing, recomputed at each event.

    Args:
        links: int ``[F, H]`` link ids, ``-1`` padded (``Routes.links``).
        capacity: ``[L]`` bytes/s (``Fabric.capacity``).
        size: ``[F]`` bytes to send per flow (finite, ``>= 0``).
        start: ``[F]`` arrival times in seconds (default all 0).
        weight, coef: as for :func:`fabricflow.max_min_rates`.
        mode: ``"exact"`` (one solve per arrival/completion) or ``"batched"`` (complete
            every flow within a relative window ``eps`` per solve; see the module docs
            for the error bound).
        eps: the batched window (default 0.01); ignored in exact mode.
        max_events: bound on solves, an integer in ``1..2**31 - 1`` (default ``2 F + 1``).
        rtol: share tolerance of the max-min solves, in ``[0, 1e-3]`` (default a few
            float ulps), as for :func:`fabricflow.max_min_rates`.
        merge: merge flows with identical routes, start and ``size / weight`` first
            (exact: they finish together).
        throw: raise :class:`~fabricflow.errors.SolverError` on a bad status, else return
            it with NaN finish times for unfinished flows.

    Returns:
        :class:`Completion` with numpy arrays; ``finish_time`` in seconds (flow
        completion time = ``finish_time - start``): float32 by default, float64 when the
        inputs are float64 with ``jax_enable_x64`` on, or when a finish time does not fit
        float32.

    Range: capacities and sizes are scaled by one power of two (exact; times do not
    change) and weights by another, as in :func:`fabricflow.max_min_rates`, so any
    magnitude works; when they span more than float32 can resolve, or start times lie
    beyond ``2**96`` s, the solve runs in float64.

    Example:
        >>> complete_flows([[0], [0]], [1.0], [1.0, 2.0]).finish_time   # 0.5 B/s each, then 1
        array([2., 3.], dtype=float32)
    """
    if mode not in ("exact", "batched"):
        raise SpecError("mode", f"unknown mode {mode!r}; choose 'exact' or 'batched'")
    problem = check_problem(links, capacity, weight, None, coef)
    if problem.batch is not None:
        raise SpecError(
            "capacity",
            "complete_flows takes one scenario ([L] capacities, [F] weights); loop over scenarios",
        )
    num_flows, num_hops = problem.links.shape
    merge, throw = check_flag(merge, "merge"), check_flag(throw, "throw")
    # One scenario: a [B, F] size or start (accepted by check_values for batched solves)
    # would reach the event loop with the wrong carry shape.
    size, size_batch = check_values("size", size, (num_flows,), allow_inf=False)
    if size_batch is not None:
        raise SpecError(
            "size", f"must have shape [{num_flows}] (one per flow), got {list(size.shape)}"
        )
    if start is not None:
        start, start_batch = check_values("start", start, (num_flows,), allow_inf=False)
        if start_batch is not None:
            raise SpecError(
                "start", f"must have shape [{num_flows}] (one per flow), got {list(start.shape)}"
            )
    if (
        mode == "batched"
        and eps is not None
        and (isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0 <= eps < 1)
    ):
        raise SpecError(
            "eps", f"must be a number in [0, 1) (relative completion window), got {eps!r}"
        )
    max_events = check_count(max_events, "max_events", "bound on max-min solves")
    rtol = check_rtol(rtol)
    check_solve_memory(
        num_flows * num_hops, num_flows, problem.capacity.shape[0], None, "complete_flows"
    )
    out_dtype = float_dtype(problem.capacity, problem.weight, size, start)
    # Times are size / rate: scaling capacities and sizes by the same power of two leaves
    # them unchanged, so the range scaling of max_min_rates applies with sizes as demands.
    scaling = range_scaling(problem.capacity, problem.weight, size, out_dtype)
    scaled = scaling.apply(problem._replace(demand=size))
    problem, size = scaled._replace(demand=None), scaled.demand
    use_float64 = scaling.float64 or not _times_fit_float32(start, out_dtype)
    links_, coef_, weight_, size_, start_ = problem.links, problem.coef, problem.weight, size, start
    merged = None
    if merge and num_flows:
        weight_arr = np.ones(num_flows) if problem.weight is None else problem.weight
        keys = (np.zeros(num_flows) if start is None else start, np.asarray(size) / weight_arr)
        merged = merge_identical_flows(problem.links, problem.coef, problem.weight, extra_keys=keys)
        if merged.num_unique == num_flows:
            merged = None
        else:
            first = np.zeros(merged.num_unique, np.int64)
            first[merged.inverse[::-1]] = np.arange(num_flows)[::-1]
            links_, coef_, weight_ = merged.links, merged.coef, merged.weight
            size_ = np.bincount(merged.inverse, weights=size, minlength=merged.num_unique)
            start_ = None if start is None else start[first]
    window = None if mode == "exact" else (0.01 if eps is None else eps)
    with jax.enable_x64(True) if use_float64 else contextlib.nullcontext():
        result = simulate_completion(
            links_,
            problem.capacity,
            size_,
            start_,
            weight_,
            coef_,
            eps=window,
            max_events=max_events,
            rtol=rtol,
        )
        result = jax.block_until_ready(result)
    finish = np.asarray(result.finish_time, np.float64)
    if merged is not None:
        finish = merged.spread(finish)
    status = Status(int(result.status))
    if status != Status.CONVERGED:
        if throw:
            # The loop bound of complete_flows is max_events, not max_iters.
            message = status.message.replace("raise max_iters", "raise max_events")
            raise SolverError(
                f"complete_flows: {message} (status {status.name}, {int(result.events)} events)"
            )
        finish = np.where(np.isinf(finish), np.nan, finish)
    return Completion(
        as_output_dtype(finish, out_dtype),
        np.asarray(result.events),
        np.asarray(result.rounds),
        np.asarray(result.status),
    )


def _times_fit_float32(start, dtype) -> bool:
    """Whether start times (seconds) lie in float32's comfortable range (or the solve is
    not float32 anyway); beyond ``2**FLOAT32_MAX_SPAN`` s, or nonzero below its inverse,
    finish times would lose their meaning in float32."""
    if start is None or jnp.dtype(dtype) != jnp.float32:
        return True
    positive = start[start > 0]
    if positive.size == 0:
        return True
    return 2.0**-FLOAT32_MAX_SPAN <= positive.min() and positive.max() <= 2.0**FLOAT32_MAX_SPAN
