"""The max-min engine's JAX kernel: water-filling on flat (ragged, COO) route entries.

A problem is its *used* route entries only, in flow order: entry ``e`` puts
``coef[e]`` bytes of flow ``flow[e]`` on link ``link[e]`` per byte of the flow's progress
(:class:`~.entries.FlowEntries`). Nothing is padded to the widest row, so a collective
phase whose rows hold 2 to 1,000 links costs its entries, and one compiled program serves
every row width.

Algorithm: the exact parallel variant of progressive filling (local-bottleneck
water-filling; s-PERC, SIGMETRICS'19; Soroush, NSDI'24; docs/references.md §1). Every
active flow runs at ``weight * t``. A round computes, per link, ``share = residual /
active weight`` (the level at which it saturates; the residual is recomputed from the
frozen rates every round, so nothing drifts), per flow its ``level`` (the smallest share
on its entries, and its demand level ``demand / weight``), and freezes every flow that
crosses a *local bottleneck*: a link whose share is within ``rtol`` of the lowest level
among its active flows. The globally smallest share is always one, so every round
freezes some flow; the allocation is the one of sequential progressive filling, in far
fewer rounds (the length of the longest chain of dependent bottleneck levels).

One round: three scatter-adds over the entries (active weight; frozen load split into an
exactly summed high part and a small remainder in float32, see
:func:`exact_sum_quantum`), one scatter-min per link, two sorted segment-minima per flow,
and gathers of ``[E]``.

Shapes are static and padded to a few bucket sizes by the host
(:func:`~.entries.bucket_size`): entries ``E``, flows ``F`` (one spare slot at least: the
sentinel flow that padding entries belong to) and link slots ``L`` (one spare slot at
least: the sentinel link, of capacity 0, that no flow is ever limited by). A process
therefore compiles a bounded number of programs, which the persistent compilation cache
(:mod:`fabricflow.jax_cache`) keeps across runs.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from fabricflow.solve.status import SolverStatus

__all__ = [
    "FlatSolution",
    "constrained_links",
    "exact_sum_quantum",
    "flat_water_fill",
    "solve_batch",
    "solve_flat",
    "solve_flat_batch",
    "solve_stacked",
]


class FlatSolution(NamedTuple):
    """Device arrays of one flat solve (batched along axis 0 under ``vmap``).

    ``rates`` ``[F]`` (the unit of the capacities), ``bottleneck`` int32 ``[F]`` (the
    saturated link that fixed each rate; ``-1``: the demand, or nothing), ``rounds``
    int32 (water-filling rounds run), ``status`` int32 (a :class:`SolverStatus` code),
    ``unsettled`` bool ``[F]`` (flows still active when ``max_iters`` stopped the loop).
    """

    rates: jax.Array
    bottleneck: jax.Array
    rounds: jax.Array
    status: jax.Array
    unsettled: jax.Array


def exact_sum_quantum(capacity):
    """Grid step for exact float32 sums of link loads (``None`` for float64).

    Loads on a link never exceed its capacity, so loads rounded down to multiples of
    ``q = 2**(ceil(log2(max capacity)) - 23)`` add up exactly in float32 (every partial
    sum is a multiple of ``q`` below ``2**24 q``, in any order); only the small remainders
    (each ``< q``) are summed with rounding. This keeps ``capacity - load`` accurate when a
    link is nearly full, which is what makes float32 rates agree with float64 to ~1e-6.
    """
    if capacity.dtype != jnp.float32:
        return None
    finite = jnp.where(jnp.isfinite(capacity), capacity, 0)
    largest = jnp.maximum(jnp.max(finite, initial=0), jnp.finfo(jnp.float32).tiny * 2**24)
    return jnp.exp2(jnp.ceil(jnp.log2(largest)) - 23)


def _all_reduce(per_link, axis_name, how: str = "add"):
    """Sum or minimum of a per-link array across the devices of mesh axis ``axis_name``
    (inside ``shard_map``, flows split across devices); the array itself when ``None``."""
    if axis_name is None:
        return per_link
    return jax.lax.psum(per_link, axis_name) if how == "add" else jax.lax.pmin(per_link, axis_name)


def _link_sum(values, link, slots, quantum, axis_name):
    """``[slots]`` per-link sums of the entry values; exact high parts in float32 (their
    sum across devices is exact too, in any order)."""
    if quantum is None:
        return _all_reduce(jax.ops.segment_sum(values, link, slots), axis_name)
    high = jnp.floor(values / quantum) * quantum
    low = jnp.where(jnp.isfinite(values), values - high, 0)
    return _all_reduce(jax.ops.segment_sum(high, link, slots), axis_name) + _all_reduce(
        jax.ops.segment_sum(low, link, slots), axis_name
    )


def flat_water_fill(
    link, flow, coef, capacity, weight, demand, active, max_iters, rtol, axis_name=None
):
    """Max-min rates of the ``active`` flows of a flat problem (pure JAX, never raises).

    Args:
        link: int32 ``[E]`` link slot of each entry; entries that constrain nothing
            (padding, ``coef <= 0``, a link of infinite capacity) must point at the
            sentinel slot ``S - 1`` (:func:`constrained_links`).
        flow: int32 ``[E]`` flow of each entry, sorted ascending (padding entries at the
            end, on a flow slot that is not active).
        coef: ``[E]`` bytes on the link per byte of the flow's progress (0 on padding).
        capacity: ``[S]`` link capacities (finite, ``>= 0``), the sentinel last.
        weight, demand: ``[F]`` positive weights and rate caps (``inf``: none).
        active: bool ``[F]``: the flows to fill (the others get rate 0, load nothing).
        max_iters: int32 bound on rounds. rtol: relative tolerance for equal shares.
        axis_name: inside ``shard_map`` with the flows split across the devices of that
            mesh axis, the per-link sums and minima of a round are reduced across them
            (every device sees the whole network); ``None``: all flows are local.

    Returns:
        ``(rate [F], bottleneck [F], rounds, on [F])``; ``on`` marks the flows still
        active when ``max_iters`` stopped the loop (all False when every flow settled).
    """
    num_flows = weight.shape[0]
    slots = capacity.shape[0]
    num_entries = link.shape[0]
    dtype = capacity.dtype
    inf = jnp.asarray(jnp.inf, dtype)
    quantum = exact_sum_quantum(capacity)
    real = jnp.arange(slots) < slots - 1
    demand_level = jnp.where(demand == inf, inf, demand / weight)
    entry_index = jnp.arange(num_entries, dtype=jnp.int32)

    def per_flow_min(values):
        return jax.ops.segment_min(values, flow, num_flows, indices_are_sorted=True)

    def round_(state):
        rate, on, bottleneck, rounds = state
        on_entry = on[flow]
        active_weight = _all_reduce(
            jax.ops.segment_sum(jnp.where(on_entry, coef * weight[flow], 0), link, slots),
            axis_name,
        )
        frozen = _link_sum(
            jnp.where(on_entry, 0, coef * rate[flow]), link, slots, quantum, axis_name
        )
        residual = jnp.maximum(capacity - frozen, 0)
        crossed = (active_weight > 0) & real
        share = jnp.where(crossed, residual / jnp.where(crossed, active_weight, 1), inf)
        entry_share = share[link]
        link_level = per_flow_min(entry_share)
        level = jnp.minimum(link_level, demand_level)
        # A link is a local bottleneck when none of its active flows has a lower level.
        entry_level = jnp.where(on_entry, level[flow], inf)
        floor = _all_reduce(jax.ops.segment_min(entry_level, link, slots), axis_name, "min")
        is_bottleneck = crossed & (share <= floor * (1 + rtol))
        first = per_flow_min(jnp.where(is_bottleneck[link], entry_index, num_entries))
        hit = first < num_entries
        hit_link = jnp.where(hit, link[jnp.minimum(first, num_entries - 1)], -1)
        by_demand = demand_level <= link_level * (1 + rtol)
        freeze = on & (hit | by_demand | (level == inf))
        new_rate = jnp.where(by_demand & ~hit, demand, weight * level)
        return (
            jnp.where(freeze, new_rate, rate),
            on & ~freeze,
            jnp.where(freeze, hit_link, bottleneck),
            rounds + 1,
        )

    def any_active(on):
        if axis_name is None:
            return jnp.any(on)
        return jax.lax.psum(jnp.any(on).astype(jnp.int32), axis_name) > 0

    def more(state):
        _, on, _, rounds = state
        return any_active(on) & (rounds < max_iters)

    state = (
        jnp.zeros(num_flows, dtype),
        active,
        jnp.full(num_flows, -1, jnp.int32),
        jnp.int32(0),
    )
    rate, on, bottleneck, rounds = jax.lax.while_loop(more, round_, state)
    return rate, bottleneck, rounds, on


def constrained_links(link, coef, capacity):
    """``link`` with the entries that constrain nothing (``coef <= 0`` or a link of
    infinite capacity) moved to the sentinel slot ``S - 1``; the capacities with the
    sentinel at 0 and infinities at 0 (no entry reads them any more)."""
    slots = capacity.shape[0]
    unbounded = capacity == jnp.inf
    moved = jnp.where((coef > 0) & ~unbounded[link], link, slots - 1)
    real = jnp.arange(slots) < slots - 1
    return moved, jnp.where(real & ~unbounded, capacity, 0)


def status_of(unsettled, rate):
    """int32 :class:`SolverStatus`: MAX_ITERS_REACHED when flows stayed unsettled, NONFINITE
    for a NaN rate, else CONVERGED (inputs are checked on the host)."""
    return jnp.where(
        unsettled,
        SolverStatus.MAX_ITERS_REACHED,
        jnp.where(jnp.any(jnp.isnan(rate)), SolverStatus.NONFINITE, SolverStatus.CONVERGED),
    ).astype(jnp.int32)


def _solve(link, flow, coef, capacity, weight, demand, num_flows, max_iters, rtol, axis_name=None):
    active = jnp.arange(weight.shape[0]) < num_flows
    link, capacity = constrained_links(link, coef, capacity)
    rate, bottleneck, rounds, on = flat_water_fill(
        link, flow, coef, capacity, weight, demand, active, max_iters, rtol, axis_name
    )
    return FlatSolution(rate, bottleneck, rounds, status_of(jnp.any(on), rate), on)


@jax.jit
def solve_flat(link, flow, coef, capacity, weight, demand, num_flows, max_iters, rtol):
    """Jitted flat solve of the first ``num_flows`` flow slots (the rest are padding).

    Args as :func:`flat_water_fill`, with ``capacity`` ``[S]`` (``inf``: the link
    constrains nothing; the last slot is the sentinel) and ``num_flows`` an int32 scalar.
    Inputs are not checked here (:func:`fabricflow.solve.maxmin.engine.max_min` does).

    Shapes ``E``, ``F``, ``S`` and the float dtype are static (a new one compiles a new
    program); every value, ``num_flows`` and ``max_iters`` included, is not.
    Returns a :class:`FlatSolution`.
    """
    return _solve(link, flow, coef, capacity, weight, demand, num_flows, max_iters, rtol)


def solve_batch(link, flow, coef, capacity, weight, demand, num_flows, max_iters, rtol):
    """:func:`solve_flat` of ``B`` scenarios sharing the entries (not jitted; see
    :data:`solve_flat_batch`): ``capacity`` ``[B, S]``, ``weight`` / ``demand`` ``[B, F]``,
    vmapped (the loop runs until the slowest member is done; finished members keep their
    state). Returns a :class:`FlatSolution` with a leading ``B`` axis."""
    return jax.vmap(lambda c, w, d: _solve(link, flow, coef, c, w, d, num_flows, max_iters, rtol))(
        capacity, weight, demand
    )


solve_flat_batch = jax.jit(solve_batch)


@jax.jit
def solve_stacked(link, flow, coef, capacity, weight, demand, num_flows, max_iters, rtol):
    """:func:`solve_flat` vmapped over ``P`` independent problems padded to one shape:
    every array gains a leading ``P`` axis (``num_flows`` ``[P]``); ``max_iters`` and
    ``rtol`` are shared. Returns a :class:`FlatSolution` with a leading ``P`` axis."""

    def one(link, flow, coef, capacity, weight, demand, num_flows):
        return _solve(link, flow, coef, capacity, weight, demand, num_flows, max_iters, rtol)

    return jax.vmap(one)(link, flow, coef, capacity, weight, demand, num_flows)
