"""The JAX backend of the completion engine: the event loop of :mod:`.completion_loop`
as one bounded ``lax.while_loop``, each iteration one solve of the flat max-min kernel
(:func:`~fabricflow.solve.maxmin.flat.flat_water_fill`) over the present flows.

Arrays are padded to the max-min engine's buckets (:mod:`.maxmin.jax_backend`), so a
process compiles a few shapes; values (sizes, starts, windows, bounds) never recompile.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from fabricflow.jax_cache import ensure_persistent_cache
from fabricflow.solve.event_result import EventResult
from fabricflow.solve.maxmin.entries import FlowEntries
from fabricflow.solve.maxmin.flat import constrained_links, flat_water_fill
from fabricflow.solve.maxmin.jax_backend import pad_problem, x64_mode
from fabricflow.solve.status import SolverStatus

__all__ = ["run_events", "simulate_events"]


@jax.jit
def simulate_events(
    link, flow, coef, capacity, weight, size, start, stop_after, num_flows, eps, window, rtol,
    max_events,
):  # fmt: skip
    """Jitted event loop over flat padded arrays (``[E]`` entries, ``[S]`` link slots,
    ``[F]`` flow slots of which the first ``num_flows`` are real; ``start`` relative
    seconds; ``stop_after`` bool ``[F]``). Returns ``(elapsed, remaining, clock, events,
    rounds, status)``; see :mod:`.completion_loop` for the semantics."""
    dtype = capacity.dtype
    inf = jnp.asarray(jnp.inf, dtype)
    real = jnp.arange(weight.shape[0]) < num_flows
    link, capacity = constrained_links(link, coef, capacity)
    demand = jnp.full(weight.shape, inf)
    solve_bound = num_flows + 1

    def event(state):
        now, remaining, elapsed, done, events, rounds, unsettled, _ = state
        present = real & (start <= now) & ~done
        rate, _, used, on = flat_water_fill(
            link, flow, coef, capacity, weight, demand, present, solve_bound, rtol
        )
        to_finish = jnp.where(present, jnp.where(remaining > 0, remaining / rate, 0), inf)
        pending = real & ~done & ~present
        to_arrival = jnp.min(jnp.where(pending, start - now, inf), initial=inf)
        cut = jnp.minimum(jnp.min(to_finish, initial=inf) * (1 + eps) + window, to_arrival)
        finishing = present & (to_finish <= cut)
        any_finishing = jnp.any(finishing)
        step = jnp.where(
            any_finishing, jnp.max(jnp.where(finishing, to_finish, 0), initial=0), to_arrival
        )
        moving = present & ~finishing
        stalled = ~any_finishing & (to_arrival == inf)  # the rest can never finish
        step = jnp.where(stalled, 0, step)
        elapsed = jnp.where(
            finishing, elapsed + to_finish, jnp.where(moving, elapsed + step, elapsed)
        )
        remaining = jnp.where(
            moving, jnp.maximum(remaining - rate * step, 0), jnp.where(finishing, 0, remaining)
        )
        return (
            now + step,
            remaining,
            elapsed,
            done | finishing,
            events + 1,
            rounds + used,
            unsettled | jnp.any(on),
            stalled,
        )

    def more(state):
        _, _, _, done, events, _, unsettled, stalled = state
        left = real & ~done
        waiting = jnp.any(left & stop_after) | ~jnp.any(stop_after)
        return jnp.any(left) & waiting & ~stalled & ~unsettled & (events < max_events)

    state = (
        jnp.zeros((), dtype),
        size,
        jnp.zeros(weight.shape, dtype),
        ~real,
        jnp.int32(0),
        jnp.int32(0),
        jnp.zeros((), bool),
        jnp.zeros((), bool),
    )
    now, remaining, elapsed, done, events, rounds, unsettled, stalled = jax.lax.while_loop(
        more, event, state
    )
    left = real & ~done
    waiting = jnp.any(left & stop_after) | (~jnp.any(stop_after) & jnp.any(left))
    status = jnp.where(
        unsettled | (waiting & ~stalled),
        SolverStatus.MAX_ITERS_REACHED,
        jnp.where(jnp.any(jnp.isnan(elapsed)), SolverStatus.NONFINITE, SolverStatus.CONVERGED),
    ).astype(jnp.int32)
    elapsed = jnp.where(done, elapsed, jnp.where(remaining > 0, inf, elapsed))
    return elapsed, remaining, now, events, rounds, status


def run_events(
    entries: FlowEntries,
    capacity,
    size,
    start,
    weight,
    *,
    eps: float,
    window: float,
    rtol: float,
    max_events: int,
    stop_after=None,
    dtype=np.float32,
):
    """Pad, run :func:`simulate_events`, unpad: an :class:`~.event_result.EventResult`."""
    ensure_persistent_cache()
    padded = pad_problem(entries, capacity, weight, np.full(entries.num_flows, np.inf), dtype)
    flow_slots = padded.weight.shape[0]

    def per_flow(values, fill, kind=None):
        out = np.full(flow_slots, fill, kind or dtype)
        out[: entries.num_flows] = values
        return out

    stop = per_flow(False if stop_after is None else stop_after, False, bool)
    with x64_mode(dtype):
        out = jax.device_get(
            simulate_events(
                jnp.asarray(padded.link),
                jnp.asarray(padded.flow),
                jnp.asarray(padded.coef),
                jnp.asarray(padded.capacity),
                jnp.asarray(padded.weight),
                jnp.asarray(per_flow(size, 0.0)),
                jnp.asarray(per_flow(start, 0.0)),
                jnp.asarray(stop),
                jnp.int32(entries.num_flows),
                jnp.asarray(eps, dtype),
                jnp.asarray(window, dtype),
                jnp.asarray(rtol, dtype),
                jnp.int32(max_events),
            )
        )
    elapsed, remaining, clock, events, rounds, status = out
    real = slice(0, entries.num_flows)
    return EventResult(
        np.asarray(elapsed, np.float64)[real],
        np.asarray(remaining, np.float64)[real],
        float(clock),
        int(events),
        int(rounds),
        int(status),
    )
