"""Exact weighted max-min fair rates: parallel local-bottleneck water-filling in JAX.

Algorithm (the exact parallel variant of progressive filling; s-PERC, SIGMETRICS'19;
Soroush, NSDI'24, see docs/references.md §1). Every active flow ``f`` runs at
``weight[f] * t`` for a fill level ``t``. In one round, for every link ``l``:

- ``share[l] = residual[l] / W[l]``: the level at which ``l`` saturates, where
  ``residual`` = capacity minus the load of the already-frozen flows (recomputed from
  their rates every round, so float32 bookkeeping does not drift) and ``W`` = the
  coefficient-weighted sum of the weights of its active flows;
- a flow's level ``level[f]`` is the minimum ``share`` over its links (and its demand
  level ``demand[f] / weight[f]``, a virtual link of its own);
- ``l`` is a *local bottleneck* when ``share[l] <= level[f]`` for every active flow on it
  (within a relative tolerance): no neighbouring link can saturate before it. Every flow
  crossing a local bottleneck freezes at ``weight[f] * level[f]``.

The globally smallest share is always a local bottleneck, so each round freezes at least
one link's flows; the result equals sequential progressive filling, in far fewer rounds
(about 100-130 on fat-tree all-to-all instead of one per distinct level).

One round costs three scatter-adds (active weight; frozen load split into an exactly
summed high part and a small remainder, see :func:`exact_sum_quantum`) and one scatter-min
over the ``F * H`` route entries, plus ``2 H`` gathers of per-link values. Entries are
kept hop-major (``[H, F]``) and scattered one hop at a time: the per-flow minimum over
hops is then ``H`` elementwise minima of contiguous vectors, and no ``[F, H]`` float
temporaries are built (on 2 CPU cores a round over 1M flows x 6 hops takes ~40-80 ms;
clos-100k MoE all-to-all needs ~45 rounds).

Conventions: link ids ``-1`` are padding (they map to a sentinel link ``L`` of infinite
capacity inside the kernel). A link of capacity 0 (failed) that carries a flow gives that
flow rate 0. A flow that crosses no link and has no demand is unconstrained: rate ``inf``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._kernel import (
    all_reduce,
    default_rtol,
    exact_sum_quantum,
    final_status,
    float_dtype,
    gather,
    hop_major,
    input_status,
    min_over_hops,
    residual_capacity,
    scatter_hops,
)
from ..status import Status

__all__ = [
    "MaxMinSolution",
    "Network",
    "default_rtol",
    "float_dtype",
    "prepare_network",
    "solve_max_min",
    "water_fill",
]


class MaxMinSolution(NamedTuple):
    """Result of :func:`solve_max_min` (a pytree; batched along axis 0 under ``vmap``).

    Attributes:
        rates: ``[F]`` rates in the unit of ``capacity`` (float32 or float64).
        bottleneck: int32 ``[F]``: the saturated link that fixed each flow's rate, or
            ``-1`` when the flow is limited by its demand (or by nothing: rate ``inf``).
        rounds: int32 scalar: water-filling rounds run.
        status: int32 scalar, a :class:`~fabricflow.solve.status.Status` code.
    """

    # jax arrays from the kernel; numpy arrays once the checked wrapper has post-processed them.
    rates: jax.Array | np.ndarray
    bottleneck: jax.Array | np.ndarray
    rounds: jax.Array | np.ndarray
    status: jax.Array | np.ndarray


def solve_max_min(
    links, capacity, weight=None, demand=None, coef=None, *, max_iters=None, rtol=None
) -> MaxMinSolution:
    """Weighted, demand-capped max-min fair rates; pure JAX (jit/vmap/grad-free).

    This is the low-level kernel: it validates nothing on the host and never raises;
    bad input shows in ``status``. :func:`fabricflow.max_min_rates` is the checked
    wrapper. ``vmap`` it over ``capacity``, ``weight`` or ``demand`` to solve many
    scenarios in one call (the loop runs until the slowest member converges).

    Args:
        links: int ``[F, H]`` link ids, ``-1`` padded.
        capacity: ``[L]`` link capacities; the rates come out in the same unit.
        weight: ``[F]`` positive weights, or ``None`` (all 1).
        demand: ``[F]`` rate caps (``inf`` = none), or ``None``.
        coef: ``[F, H]`` fraction of the flow on each entry (multipath splits), or
            ``None`` (all 1). Entries with ``coef <= 0`` do not constrain the flow.
        max_iters: bound on rounds (default ``F + 1``, always enough: every round
            freezes at least one flow).
        rtol: relative tolerance for equal shares (default :func:`default_rtol`).

    Returns:
        :class:`MaxMinSolution`. Shapes ``F``, ``H``, ``L`` and the presence of
        ``weight`` / ``demand`` / ``coef`` are static (a new one compiles anew); values
        (capacities, weights, demands, ``max_iters``, ``rtol``) are not.

    Example:
        >>> sol = solve_max_min(jnp.array([[0, 1], [0, -1], [1, -1]]), jnp.ones(2))
        >>> sol.rates   # parking lot: every flow gets 1/2
        Array([0.5, 0.5, 0.5], dtype=float32)
    """
    return _solve(*solver_arguments(links, capacity, weight, demand, coef, max_iters, rtol))


def solver_arguments(links, capacity, weight, demand, coef, max_iters, rtol) -> tuple:
    """The jitted solvers' arguments, in order: defaults filled in (``max_iters`` ``F + 1``,
    :func:`default_rtol`) and every value a jax array of one float dtype (``links`` and
    ``max_iters`` int). ``None`` stays ``None`` (an absent ``weight``/``demand``/``coef``
    is static: it compiles a different program)."""
    dtype = float_dtype(capacity, weight, demand, coef)
    if max_iters is None:
        max_iters = links.shape[0] + 1
    if rtol is None:
        rtol = default_rtol(dtype)
    return (
        jnp.asarray(links),
        jnp.asarray(capacity, dtype),
        None if weight is None else jnp.asarray(weight, dtype),
        None if demand is None else jnp.asarray(demand, dtype),
        None if coef is None else jnp.asarray(coef, dtype),
        jnp.asarray(max_iters, jnp.int32),
        jnp.asarray(rtol, dtype),
    )


@jax.jit
def _solve(links, capacity, weight, demand, coef, max_iters, rtol) -> MaxMinSolution:
    net = prepare_network(links, capacity, weight, demand, coef)
    present = jnp.ones(links.shape[0], bool)
    rate, bottleneck, rounds, unsettled = water_fill(
        net, present, max_iters, rtol, net.start_status == Status.CONVERGED
    )
    status = final_status(net.start_status, unsettled, rate)
    return MaxMinSolution(rate, bottleneck, rounds, status)


class Network(NamedTuple):
    """Kernel-ready arrays of a max-min problem (built inside jit by :func:`prepare_network`)."""

    ids: jax.Array  # int32 [H, F] link ids, sentinel L for padding
    coef: jax.Array | None  # [H, F] or None
    capacity: jax.Array  # [L + 1], sentinel slot 0 (never crossed)
    is_real: jax.Array  # bool [L + 1]
    quantum: jax.Array | None  # exact-sum grid step (float32 only)
    weight: jax.Array  # [F]
    demand: jax.Array  # [F] (inf = none)
    demand_level: jax.Array  # [F] demand / weight
    start_status: jax.Array  # int32: NONFINITE / INFEASIBLE inputs, else CONVERGED


def prepare_network(links, capacity, weight, demand, coef) -> Network:
    """Hop-major ids, sentinel slot, defaults and input status (inside jit)."""
    dtype = capacity.dtype
    num_flows = links.shape[0]
    num_links = capacity.shape[0]
    inf = jnp.asarray(jnp.inf, dtype)
    ids, coef_hm, out_of_range = hop_major(links, coef, capacity)
    weight = jnp.ones(num_flows, dtype) if weight is None else weight
    if demand is None:
        demand = demand_level = jnp.full(num_flows, inf)
    else:
        demand_level = jnp.where(demand == inf, inf, demand / weight)
    start_status = input_status(
        nonfinite=[jnp.isnan(capacity), jnp.isnan(weight), jnp.isnan(demand)]
        + ([] if coef is None else [jnp.isnan(coef)]),
        infeasible=[capacity < 0, ~(weight > 0), demand < 0, out_of_range],
    )
    return Network(
        ids,
        coef_hm,
        jnp.concatenate([capacity, jnp.zeros(1, dtype)]),
        jnp.arange(num_links + 1) < num_links,
        exact_sum_quantum(capacity),
        weight,
        demand,
        demand_level,
        start_status,
    )


def water_fill(net: Network, present, max_iters, rtol, go=True, axis_name=None):
    """Max-min rates of the ``present`` flows (others get rate 0 and load nothing).

    Returns ``(rate [F], bottleneck [F], rounds, unsettled)`` where ``unsettled`` is True
    when ``max_iters`` stopped the loop with flows still active. ``go=False`` skips the
    loop (bad input).

    ``axis_name``: inside ``shard_map`` with the flows split across the devices of that
    mesh axis (:mod:`.sharded`), the per-link sums and minima of a round (active weight,
    frozen load, lowest active level) and the "any flow active" test are reduced across
    the devices, so every device sees the whole network's links; ``None`` (default): all
    flows are local and nothing is reduced.
    """
    num_hops, num_flows = net.ids.shape
    slots = net.capacity.shape[0]
    dtype = net.capacity.dtype
    inf = jnp.asarray(jnp.inf, dtype)

    def round_(state):
        rate, active, bottleneck, rounds = state
        # Active weight and frozen load per link, both recomputed from scratch every round
        # (no running subtraction, so float32 residuals do not drift).
        active_weight = all_reduce(
            scatter_hops(jnp.where(active, net.weight, 0), net.ids, net.coef, slots, "add", 0),
            axis_name,
        )
        residual = residual_capacity(
            net.capacity, jnp.where(active, 0, rate), net.ids, net.coef, net.quantum, axis_name
        )
        crossed = (active_weight > 0) & net.is_real
        share = jnp.where(crossed, residual / jnp.where(crossed, active_weight, 1), inf)

        link_level = min_over_hops(share, net.ids, inf)
        level = jnp.minimum(link_level, net.demand_level)
        # A link is a local bottleneck when no active flow on it has a lower level.
        active_level = jax.lax.optimization_barrier(jnp.where(active, level, inf))
        floor = all_reduce(
            scatter_hops(active_level, net.ids, None, slots, "min", inf), axis_name, "min"
        )
        is_bottleneck = crossed & (share <= floor * (1 + rtol))

        hit_link = jnp.full(num_flows, -1, jnp.int32)
        for hop in reversed(range(num_hops)):
            hit_link = jnp.where(gather(is_bottleneck, net.ids[hop]), net.ids[hop], hit_link)
        by_demand = net.demand_level <= link_level * (1 + rtol)
        freeze = active & ((hit_link >= 0) | by_demand | (level == inf))
        new_rate = jnp.where(by_demand & (hit_link < 0), net.demand, net.weight * level)
        return (
            jnp.where(freeze, new_rate, rate),
            active & ~freeze,
            jnp.where(freeze, hit_link, bottleneck),
            rounds + 1,
        )

    def any_active(active):
        if axis_name is None:
            return jnp.any(active)
        return jax.lax.psum(jnp.any(active).astype(jnp.int32), axis_name) > 0

    def more(state):
        _, active, _, rounds = state
        return go & any_active(active) & (rounds < max_iters)

    state = (jnp.zeros(num_flows, dtype), present, jnp.full(num_flows, -1, jnp.int32), jnp.int32(0))
    rate, active, bottleneck, rounds = jax.lax.while_loop(more, round_, state)
    return rate, bottleneck, rounds, go & any_active(active)
