"""The completion engine's event loop, in two backends with one contract.

Flows arrive at ``start`` (seconds, relative to the earliest start) with ``size`` bytes
and share the fabric max-min fairly; at every event (an arrival, or a window of
completions) the rates are solved again. One event:

- ``present`` = arrived and not finished; their max-min rates (the engine's kernel);
- ``to_finish`` = remaining / rate of each present flow; ``cut`` = the earliest
  ``to_finish`` times ``(1 + eps)`` plus ``window`` seconds, but never past the next
  arrival (arrivals are never batched);
- every present flow with ``to_finish <= cut`` finishes at its own projected time; the
  others move by the longest of those, and the clock advances by it.

Each flow's elapsed time (arrival to finish) is the sum of the steps it is present for,
accumulated apart from the clock: it keeps its resolution however late the flow starts
(a 45 us transfer that starts at 1e9 s still comes out as 45 us, not rounded to the
clock's float spacing there).

The loop stops when every flow has finished, when the rest can never finish (no
bandwidth and no arrival left: they get ``inf``), when every flow of ``stop_after`` has
finished (the others report the bytes they have left), or at ``max_events``.

Backends: :func:`numpy_events` (float64, a host loop around the engine's numpy rounds;
no compiles) and :func:`jax_events` (one ``lax.while_loop`` around the flat kernel).
"""

from __future__ import annotations

import hashlib

import numpy as np

from fabricflow.solve.event_result import EventResult
from fabricflow.solve.maxmin.entries import FlowEntries, compact_links
from fabricflow.solve.maxmin.numpy_fill import numpy_water_fill
from fabricflow.solve.status import SolverStatus

__all__ = ["jax_events", "numpy_events", "subset_key"]


def subset_key(mask: np.ndarray) -> str:
    """Digest of a bool ``[F]`` subset of flows (the key of a memo of solves)."""
    return hashlib.blake2b(np.packbits(mask).tobytes(), digest_size=16).hexdigest()


def numpy_events(
    entries: FlowEntries,
    capacity: np.ndarray,
    size: np.ndarray,
    start: np.ndarray,
    weight: np.ndarray,
    *,
    eps: float,
    window: float,
    rtol: float,
    max_events: int,
    stop_after: np.ndarray | None = None,
    first_rates: np.ndarray | None = None,
    solves: dict | None = None,
) -> EventResult:
    """The event loop in float64 numpy (module docs). ``entries``: only entries that
    constrain (``coef > 0``, finite capacity); ``capacity`` finite ``[L]``;
    ``first_rates``: the rates of the first event when every flow starts at once;
    ``solves``: rates of flow subsets already solved, by :func:`subset_key` (read and
    filled in)."""
    num_flows = entries.num_flows
    # every event's solve runs on the links some flow uses (same sums, fewer links)
    _, link, capacity = compact_links(entries.link, capacity)
    entries = FlowEntries(entries.start, link, entries.coef, capacity.shape[-1])
    remaining = np.asarray(size, np.float64).copy()
    elapsed = np.zeros(num_flows)
    done = np.zeros(num_flows, dtype=bool)
    live = _Present(entries)
    now, events, rounds, status = 0.0, 0, 0, SolverStatus.CONVERGED
    while not done.all():
        if stop_after is not None and done[stop_after].all():
            break
        if events >= max_events:
            status = SolverStatus.MAX_ITERS_REACHED
            break
        present = (start <= now) & ~done
        rate = np.zeros(num_flows)
        key = None if solves is None else subset_key(present)
        if first_rates is not None and events == 0:
            rate[present] = first_rates[present]
        elif solves is not None and key in solves:
            rate[present] = solves[key]
        elif present.any():
            live.update(present)
            solved, _, used, unsettled = numpy_water_fill(
                live.start,
                live.link,
                live.coef,
                capacity,
                weight[present],
                np.full(live.num_flows, np.inf),
                rtol=rtol,
                max_iters=live.num_flows + 1,
            )
            rate[present] = solved
            rounds += used
            if solves is not None:
                solves[key] = solved
        events += 1
        with np.errstate(divide="ignore", invalid="ignore"):
            to_finish = np.where(present, np.where(remaining > 0, remaining / rate, 0.0), np.inf)
        pending = ~done & ~present
        to_arrival = float((start[pending] - now).min(initial=np.inf))
        first = float(to_finish.min(initial=np.inf))
        cut = min(first * (1.0 + eps) + window, to_arrival)
        finishing = present & (to_finish <= cut)
        if not finishing.any() and not np.isfinite(to_arrival):
            break  # the rest can never finish
        step = float(to_finish[finishing].max()) if finishing.any() else to_arrival
        moving = present & ~finishing
        elapsed[finishing] += to_finish[finishing]
        elapsed[moving] += step
        remaining[moving] = np.maximum(remaining[moving] - rate[moving] * step, 0.0)
        remaining[finishing] = 0.0
        done |= finishing
        now += step
    elapsed = np.where(done, elapsed, np.where(remaining > 0, np.inf, elapsed))
    return EventResult(elapsed, remaining, now, events, rounds, int(status))


class _Present:
    """The entries of the present flows, kept from event to event: compacted in place
    when flows only leave (no arrival since), selected afresh otherwise."""

    def __init__(self, entries: FlowEntries):
        self.entries = entries
        self.flows = np.zeros(0, np.int64)  # the present flows, ascending
        self.start = np.zeros(1, np.int64)
        self.link = np.zeros(0, np.int64)
        self.coef = np.zeros(0)

    @property
    def num_flows(self) -> int:
        return int(self.flows.size)

    def update(self, present: np.ndarray) -> None:
        """Entries of the flows ``present`` (bool ``[F]``)."""
        was = np.zeros(present.shape, dtype=bool)
        was[self.flows] = True
        if np.array_equal(present, was):
            return
        flows = np.flatnonzero(present)
        if self.flows.size and not (present & ~was).any():
            keep = present[self.flows]  # only departures: drop their entries
            counts = np.diff(self.start)
            entry_keep = np.repeat(keep, counts)
            self.link, self.coef = self.link[entry_keep], self.coef[entry_keep]
            self.start = np.concatenate([[0], np.cumsum(counts[keep])]).astype(np.int64)
        else:
            part = self.entries.select(flows)
            self.link, self.coef, self.start = part.link, part.coef_or_ones(), part.start
        self.flows = flows


def jax_events(
    entries: FlowEntries,
    capacity: np.ndarray,
    size: np.ndarray,
    start: np.ndarray,
    weight: np.ndarray,
    *,
    eps: float,
    window: float,
    rtol: float,
    max_events: int,
    stop_after: np.ndarray | None = None,
    dtype=np.float32,
) -> EventResult:
    """The event loop as one jitted ``lax.while_loop`` around the flat kernel."""
    # lazy: completion_jax imports JAX; the numpy backend and its callers stay JAX-free
    from fabricflow.solve.completion_jax import run_events

    return run_events(
        entries,
        capacity,
        size,
        start,
        weight,
        eps=eps,
        window=window,
        rtol=rtol,
        max_events=max_events,
        stop_after=stop_after,
        dtype=dtype,
    )
