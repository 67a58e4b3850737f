"""``ff.max_min_completion``: event-driven fluid flow completion times (the completion engine).

Flows arrive at ``start[f]`` with ``size[f]`` bytes and share the fabric max-min fairly;
rates are recomputed whenever a flow arrives or finishes (m3's flowSim,
docs/references.md §1). The event loop (:mod:`.completion_loop`) has two backends with
one contract, chosen like the max-min engine's (``method``: ``"auto"``, ``"numpy"``,
``"jax"``): the float64 numpy loop on a CPU, one jitted ``lax.while_loop`` around the flat
max-min kernel on an accelerator.

Modes:

- ``"exact"``: one event per arrival or completion (at most ``2 F`` events). Completions
  closer than a few float ulps are taken together. Matches the float64 event-by-event
  reference of the test suite.
- ``"batched"``: for millions of flows. Each solve completes every flow whose projected
  finish lies within a window ``(1 + eps)`` times the earliest one (plus ``window``
  seconds), at its projected time, before re-solving. Error bound: within a window the
  rates are held for at most ``eps * tau`` past the first completion (``tau`` = time to
  it), so each finish time is off by about ``eps`` relative to the flow's completion
  time (the tests check ``2 eps``). Arrivals are never batched. The number of solves
  drops from ``2 F`` to roughly ``log(T_max / T_min) / eps`` plus the arrivals.

Time base: times are computed relative to the earliest start, and each flow's elapsed
time (start to finish) is accumulated on its own, so completion times keep their
resolution at any start time (a 45 us transfer that starts at 1e9 s is still 45 us);
``MaxMinCompletion.elapsed`` holds them. Flows that can never finish (every path crosses a
failed link) get finish time ``inf``.
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import numpy as np

from fabricflow.errors import SolverError, SpecError, check_flag
from fabricflow.solve.completion_loop import jax_events, numpy_events
from fabricflow.solve.maxmin.engine import default_rtol, output_dtype, resolve_method
from fabricflow.solve.maxmin.entries import FlowEntries
from fabricflow.solve.maxmin.identical_flows import merge_identical_flows
from fabricflow.solve.maxmin.inputs import (
    check_count,
    check_problem,
    check_rtol,
    check_solve_memory,
    check_values,
)
from fabricflow.solve.maxmin.scaling import as_output_dtype, range_scaling
from fabricflow.solve.status import SolverStatus
from fabricflow.typing import CapacityLike, CoefLike, FlowValuesLike, LinkIdsLike

__all__ = ["MaxMinCompletion", "max_min_completion"]

MODES = ("exact", "batched")


class MaxMinCompletion(NamedTuple):
    """Result of :func:`max_min_completion`.

    Attributes:
        finish_time: ``[F]`` absolute seconds (``inf`` for flows that never finish).
        events: int: max-min solves run (one per event or window).
        rounds: int: water-filling rounds over all solves.
        status: int :class:`~fabricflow.solve.status.SolverStatus` code.
        elapsed: float64 ``[F]`` seconds from each flow's start to its finish (its
            completion time, at full resolution whatever the start; ``inf`` unfinished).
        method: the backend that ran (``"numpy"`` or ``"jax"``).
        remaining: float64 ``[F]`` bytes not yet sent when the loop stopped (0 for the
            finished flows; see ``stop_after``).
        stop_time: absolute seconds at which the loop stopped.
    """

    finish_time: np.ndarray
    events: np.ndarray
    rounds: np.ndarray
    status: np.ndarray
    elapsed: np.ndarray
    method: str
    remaining: np.ndarray
    stop_time: float


def max_min_completion(
    links: LinkIdsLike | FlowEntries,
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
    method: str = "auto",
    window: float = 0.0,
    stop_after: FlowValuesLike | None = None,
    first_rates: FlowValuesLike | None = None,
    solves: dict | None = None,
    dtype=None,
) -> MaxMinCompletion:
    """Finish time of every flow under max-min fair sharing, recomputed at each event.

    Args:
        links: int ``[F, H]`` link ids, ``-1`` padded (``Routes.links``), or
            :class:`~fabricflow.solve.maxmin.entries.FlowEntries` (``coef`` inside).
        capacity: ``[L]`` bytes/s (``Fabric.capacity``).
        size: ``[F]`` bytes to send per flow (finite, ``>= 0``).
        start: ``[F]`` arrival times in seconds (default all 0).
        weight, coef: as for :func:`fabricflow.max_min_rates`.
        mode: ``"exact"`` (one solve per arrival/completion) or ``"batched"`` (complete
            every flow within a relative window ``eps`` per solve; module docs).
        eps: the batched window (default 0.01); ignored in exact mode.
        max_events: bound on solves, an integer in ``1..2**31 - 1`` (default ``2 F + 1``).
        rtol: share tolerance of the max-min solves, in ``[0, 1e-3]`` (default a few
            float ulps), as for :func:`fabricflow.max_min_rates`.
        merge: merge flows with identical routes, start and ``size / weight`` first
            (exact: they finish together).
        throw: raise :class:`~fabricflow.errors.SolverError` on a bad status, else return
            it with NaN finish times for unfinished flows.
        method: the backend, ``"auto"`` (by size and device, as the max-min engine),
            ``"numpy"`` or ``"jax"``.
        window: seconds added to each batched window (``>= 0``; default 0): flows
            projected to finish within it of the earliest finish together.
        stop_after: bool ``[F]``: stop once every one of these flows has finished; the
            others report their bytes left in ``remaining`` (finish time ``inf``).
        first_rates: ``[F]`` max-min rates of every flow at the first event, when the
            caller has them (all flows must start at once); the first solve is skipped
            by the numpy backend.
        solves: a dict the caller keeps for one set of flows (the same routes,
            capacities and weights on every call): the numpy backend stores the rates of
            every subset of flows it solves in it and reuses them (replays of the same
            flows with other sizes often meet the same subsets). Used with
            ``merge=False``.
        dtype: float type of the solve and of ``finish_time`` (``float32``/``float64``),
            as for :func:`~fabricflow.solve.maxmin.engine.max_min`; default: float64 when
            the inputs are float64 and ``jax_enable_x64`` is on, else float32.

    Returns:
        :class:`MaxMinCompletion` with numpy arrays; ``finish_time`` in seconds: float32 by
        default when every flow starts at 0, float64 when the inputs are float64 with
        ``jax_enable_x64`` on, when starts differ (absolute times need the resolution),
        or when a finish time does not fit float32. ``elapsed`` is float64.

    Range: capacities and sizes are scaled by one power of two (exact; times do not
    change) and weights by another, as in :func:`fabricflow.max_min_rates`, so any
    magnitude works.

    Example:
        >>> max_min_completion([[0], [0]], [1.0], [1.0, 2.0]).finish_time   # 0.5 B/s each, then 1
        array([2., 3.], dtype=float32)
    """
    checked = _checked(links, capacity, size, start, weight, coef, mode, eps, window)
    problem, entries, sizes, starts = checked
    num_flows = entries.num_flows
    merge, throw = check_flag(merge, "merge"), check_flag(throw, "throw")
    max_events = check_count(max_events, "max_events", "bound on max-min solves")
    rtol = check_rtol(rtol)
    stop_after = _flags(stop_after, num_flows)
    first_rates = _first_rates(first_rates, num_flows, starts)
    check_solve_memory(
        entries.num_entries, num_flows, problem.capacity.shape[0], None, "max_min_completion"
    )
    out_dtype = output_dtype(dtype, problem.capacity, problem.weight, sizes, starts)
    # Times are size / rate: scaling capacities and sizes by the same power of two leaves
    # them unchanged, so the range scaling of max_min_rates applies with sizes as demands.
    scaling = range_scaling(problem.capacity, problem.weight, sizes, out_dtype)
    scaled = scaling.apply(problem._replace(demand=sizes))
    capacities = np.asarray(scaled.capacity, np.float64)
    amounts = np.asarray(scaled.demand, np.float64)
    weights = np.ones(num_flows) if scaled.weight is None else np.asarray(scaled.weight, np.float64)
    rates0 = None if first_rates is None else np.ldexp(first_rates, -scaling.amount_exponent)
    origin = float(starts.min(initial=0.0)) if num_flows else 0.0
    relative = starts - origin
    merged = (
        _merge(entries, weights, amounts, relative, stop_after) if merge and num_flows else None
    )
    solve = entries if merged is None else merged[0]
    if merged is not None:
        _, weights, amounts, relative, stop_after, inverse, first, _ = merged
        if rates0 is not None:
            rates0 = np.bincount(inverse, weights=rates0, minlength=first.size)
    backend = resolve_method(method, solve.num_entries)
    staggered = bool(np.any(relative > 0))
    solve_dtype = np.float64 if backend == "numpy" or scaling.float64 or staggered else out_dtype
    rtol = default_rtol(solve_dtype) if rtol is None else rtol
    window_eps = 4 * rtol if mode == "exact" else (0.01 if eps is None else float(eps))
    options = {
        "eps": window_eps,
        "window": float(window),
        "rtol": float(rtol),
        "max_events": 2 * solve.num_flows + 1 if max_events is None else max_events,
        "stop_after": stop_after,
    }
    result = _run_events(
        backend,
        solve,
        (capacities, amounts, relative, weights),
        first_rates=rates0,
        solves=None if merged is not None else solves,
        dtype=solve_dtype,
        options=options,
    )
    return _completion(result, merged, starts, staggered, out_dtype, scaling, backend, throw)


def _run_events(
    backend: str,
    solve: FlowEntries,
    arrays,
    *,
    first_rates,
    solves,
    dtype,
    options: dict[str, object],
):
    """The event loop's result on ``backend`` (``"numpy"`` or ``"jax"``) for the flows of
    ``solve``; ``arrays`` is ``(capacities [L], amounts [F], relative starts [F] s,
    weights [F])``, float64, scaled. The numpy backend drops the entries of links of
    infinite capacity (they constrain nothing), takes ``first_rates`` and the ``solves``
    cache; the jax one solves in ``dtype``. ``options``: ``eps``, ``window``, ``rtol``,
    ``max_events``, ``stop_after``."""
    capacities, amounts, relative, weights = arrays
    if backend == "numpy":
        keep = np.isfinite(capacities[solve.link])
        if not keep.all():  # links of infinite capacity constrain nothing
            solve = FlowEntries.from_rows(
                solve.flow_of_entry()[keep],
                solve.link[keep],
                solve.coef_or_ones()[keep],
                solve.num_flows,
                solve.num_links,
            )
        return numpy_events(
            solve,
            np.where(np.isfinite(capacities), capacities, 0.0),
            amounts,
            relative,
            weights,
            first_rates=first_rates,
            solves=solves,
            **options,  # type: ignore[arg-type]
        )
    return jax_events(
        solve,
        capacities,
        amounts,
        relative,
        weights,
        dtype=dtype,
        **options,  # type: ignore[arg-type]
    )


def _completion(result, merged, start, staggered, out_dtype, scaling, backend, throw):
    """The :class:`MaxMinCompletion` of an event loop's result (merged flows spread back)."""
    elapsed, remaining = result.elapsed, scaling.restore(result.remaining)
    if merged is not None:
        inverse, share = merged[5], merged[7]
        elapsed, remaining = elapsed[inverse], remaining[inverse] * share
    finish = np.where(np.isfinite(elapsed), start + elapsed, np.inf)
    status = SolverStatus(result.status)
    if status != SolverStatus.CONVERGED:
        if throw:
            # The loop bound of max_min_completion is max_events, not max_iters.
            message = status.message.replace("raise max_iters", "raise max_events")
            raise SolverError(
                f"max_min_completion: {message} (status {status.name}, {result.events} events)"
            )
        finish = np.where(np.isinf(finish), np.nan, finish)
    origin = float(start.min(initial=0.0)) if start.size else 0.0
    wide = staggered or origin != 0.0
    return MaxMinCompletion(
        finish if wide else as_output_dtype(finish, out_dtype),
        np.asarray(result.events),
        np.asarray(result.rounds),
        np.asarray(int(status)),
        elapsed,
        backend,
        remaining,
        origin + result.clock,
    )


def _checked(links, capacity, size, start, weight, coef, mode, eps, window):
    """Checked inputs: ``(FlowProblem, FlowEntries, size [F], start [F])`` (float64)."""
    if mode not in MODES:
        raise SpecError("mode", f"unknown mode {mode!r}; choose 'exact' or 'batched'")
    if isinstance(links, FlowEntries):
        if coef is not None:
            raise SpecError("coef", "FlowEntries carry their coefficients; leave coef None")
        entries = links
        problem = check_problem(
            np.zeros((entries.num_flows, 0), np.int32), capacity, weight, None, None
        )
    else:
        problem = check_problem(links, capacity, weight, None, coef)
        entries = None
    if problem.batch is not None:
        raise SpecError(
            "capacity",
            "max_min_completion takes one scenario ([L] capacities, [F] weights); loop over scenarios",
        )
    if entries is None:
        entries = FlowEntries.from_padded(problem.links, problem.coef, problem.capacity.shape[0])
    num_flows = entries.num_flows
    # One scenario: a [B, F] size or start would reach the event loop with the wrong shape.
    size, size_batch = check_values("size", size, (num_flows,), allow_inf=False)
    if size_batch is not None:
        raise SpecError(
            "size", f"must have shape [{num_flows}] (one per flow), got {list(size.shape)}"
        )
    if start is None:
        start = np.zeros(num_flows)
    else:
        start, start_batch = check_values("start", start, (num_flows,), allow_inf=False)
        if start_batch is not None:
            raise SpecError(
                "start", f"must have shape [{num_flows}] (one per flow), got {list(start.shape)}"
            )
    if mode == "batched" and eps is not None and not _number_in(eps, 0, 1, closed_high=False):
        raise SpecError(
            "eps", f"must be a number in [0, 1) (relative completion window), got {eps!r}"
        )
    if not _number_in(window, 0, np.inf, closed_high=False):
        raise SpecError("window", f"must be a finite number of seconds >= 0, got {window!r}")
    return problem, entries, np.asarray(size, np.float64), np.asarray(start, np.float64)


def _number_in(value, low, high, *, closed_high: bool) -> bool:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    value = float(value)
    return low <= value and (value <= high if closed_high else value < high)


def _flags(values, num_flows: int) -> np.ndarray | None:
    """``stop_after`` as bool ``[F]`` (or ``None``)."""
    if values is None:
        return None
    array = np.asarray(values)
    if array.dtype != bool or array.shape != (num_flows,):
        raise SpecError("stop_after", f"must be a bool array of shape [{num_flows}]")
    return array


def _first_rates(values, num_flows: int, start: np.ndarray) -> np.ndarray | None:
    """``first_rates`` as float64 ``[F]`` (or ``None``); every flow must start at once."""
    if values is None:
        return None
    rates, batch = check_values("first_rates", values, (num_flows,))
    if batch is not None or (start.size and np.ptp(start) > 0):
        raise SpecError(
            "first_rates", f"must have shape [{num_flows}], and every flow must start at once"
        )
    return np.asarray(rates, np.float64)


def _merge(entries, weight, size, relative, stop_after):
    """Identical flows (route, start, ``size / weight``, ``stop_after``) as one weighted
    flow: ``(entries, weight, size, start, stop_after, inverse, first, share)`` or
    ``None`` when nothing merges."""
    links, coef = entries.to_padded()
    keys = [relative, size / weight]
    if stop_after is not None:
        keys.append(stop_after.astype(np.float64))
    merged = merge_identical_flows(links, coef, weight, extra_keys=tuple(keys))
    if merged.num_unique == entries.num_flows:
        return None
    inverse = merged.inverse
    first = np.zeros(merged.num_unique, np.int64)
    first[inverse[::-1]] = np.arange(entries.num_flows)[::-1]
    unique = FlowEntries.from_padded(merged.links, merged.coef, entries.num_links)
    total = np.bincount(inverse, weights=size, minlength=merged.num_unique)
    share = np.divide(size, total[inverse], out=np.zeros_like(size), where=total[inverse] > 0)
    return (
        unique,
        np.asarray(merged.weight, np.float64),
        total,
        relative[first],
        None if stop_after is None else stop_after[first],
        inverse,
        first,
        share,
    )
