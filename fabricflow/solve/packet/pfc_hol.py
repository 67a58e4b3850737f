"""Lossless steady state without congestion control: port arbitration + PFC HOL blocking.

With PFC on and no congestion control, senders transmit at line rate and are slowed only
by pauses. Two packet-level facts then set each flow's rate, and neither is max-min
fairness among flows:

1. **Per-port arbitration.** A switch egress serves its input ports round-robin (one
   packet each, all packets ``mtu`` bytes), so link ``l`` splits its capacity max-min
   fairly among *input ports* (groups of flows entering the switch on the same link),
   not among flows. A flow alone on its input port can get more than its max-min share,
   and flows bunched on one port get less.
2. **Head-of-line blocking.** PFC pauses a whole ingress link (one lossless priority)
   once its queue passes XOFF. If the flows of ingress ``k`` bound for egress ``l`` can
   leave only at the fraction ``rho`` of their arrival rate, ``k`` is paused a fraction
   ``1 - rho`` of the time and *every* flow on ``k`` is slowed by ``rho``, also the ones
   bound for idle egresses (victim flows). Pauses then spread upstream the same way.

The steady state is a fixed point on the flow rates ``x`` (bytes/s). For every
(egress link, input port) group ``g`` with demand ``d_g = sum x_f``, the egress's port
level ``lambda_l`` solves ``sum_g min(d_g, lambda_l) = C_l`` (when the link is
oversubscribed; otherwise the unused capacity is offered equally to its groups) and the
group may move at ``rho_g = lambda_l / d_g`` times its rate. An input port (a link, or
a flow's own queue pair at the sending NIC) drains at the smallest ``rho`` of its groups;
each flow is rescaled by the smallest drain factor on its path:
``x_f <- x_f * min_h phi(port_h)``. At the fixed point every factor is 1: every group
fits its egress and no flow can grow without a pause. Flows keep the ratios their
upstream arbitration gave them, which is what a paused FIFO ingress does.

The PFC thresholds set how fast this state is reached (a few queue fills of XOFF bytes
at line rate: microseconds) but not its rates, as long as XOFF holds at least one
packet and the headroom absorbs the in-flight bytes (else the fabric is not lossless).

Everything here is jitted over fixed shapes: ``[F, H]`` hops, ``[G]`` groups, ``[P]``
ports; one compilation per flow set, reused at every event.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class Groups(NamedTuple):
    """Host-side structure of the arbitration groups (numpy, static per flow set).

    Attributes:
        hop_group: int32 ``[F, H]`` group of each hop, ``G`` for padding.
        group_link: int32 ``[G]`` egress link of each group.
        group_port: int32 ``[G]`` input port of each group (compact ids ``0..P-1``).
        hop_port: int32 ``[F, H]`` input port of each hop, ``P`` for padding.
        num_ports: ``P``.
    """

    hop_group: np.ndarray
    group_link: np.ndarray
    group_port: np.ndarray
    hop_port: np.ndarray
    num_ports: int


def build_groups(links: np.ndarray, num_links: int) -> Groups:
    """(egress link, input port) groups of ``[F, H]`` paths (``-1`` padded).

    The input port of hop ``h >= 1`` is the link of hop ``h - 1``; at the first hop it
    is the flow's own queue pair (the NIC serves its queue pairs round-robin).
    """
    links = np.asarray(links, np.int64)
    num_flows, num_hops = links.shape
    valid = links >= 0
    own = num_links + np.arange(num_flows, dtype=np.int64)[:, None]
    prev = np.concatenate([own, links[:, :-1]], axis=1) if num_hops else own[:, :0]
    port_key = np.where(valid, prev, -1)
    ports, port_inverse = np.unique(port_key[valid], return_inverse=True)
    num_ports = int(ports.size)
    hop_port = np.full(links.shape, num_ports, np.int64)
    hop_port[valid] = port_inverse
    group_key = links[valid] * (num_ports + 1) + hop_port[valid]
    keys, group_inverse = np.unique(group_key, return_inverse=True)
    hop_group = np.full(links.shape, keys.size, np.int64)
    hop_group[valid] = group_inverse
    return Groups(
        hop_group.astype(np.int32),
        (keys // (num_ports + 1)).astype(np.int32),
        (keys % (num_ports + 1)).astype(np.int32),
        hop_port.astype(np.int32),
        num_ports,
    )


class SteadyState(NamedTuple):
    """Result of :func:`steady_rates`: rates ``[F]`` (bytes/s, 0 for inactive flows),
    iterations run, and the largest remaining relative rate change (convergence)."""

    rate: jax.Array
    iterations: jax.Array
    residual: jax.Array


def _port_levels(demand, group_link, capacity, num_links, newton_steps):
    """``rho_g`` ``[G]``: the factor each group may move by at its egress (see module)."""
    active = demand > 0
    count = jax.ops.segment_sum(active.astype(demand.dtype), group_link, num_links + 1)
    total = jax.ops.segment_sum(demand, group_link, num_links + 1)
    cap = jnp.concatenate([capacity, jnp.array([jnp.inf], capacity.dtype)])
    over = total > cap
    # Newton on the concave piecewise-linear sum_g min(d_g, lam) from below (start C/n):
    # each step lands at or below the root and passes at least one breakpoint.
    level = cap / jnp.maximum(count, 1)

    def step(_, level):
        below = jnp.minimum(demand, level[group_link])
        filled = jax.ops.segment_sum(below, group_link, num_links + 1)
        above = jax.ops.segment_sum(
            (active & (demand > level[group_link])).astype(demand.dtype), group_link, num_links + 1
        )
        return jnp.where(over, level + (cap - filled) / jnp.maximum(above, 1), level)

    level = jax.lax.fori_loop(0, newton_steps, step, level)
    spare = jnp.where(over, 0.0, (cap - total) / jnp.maximum(count, 1))
    safe = jnp.where(active, demand, 1.0)
    rho = jnp.where(
        over[group_link], level[group_link] / safe, (demand + spare[group_link]) / safe
    )
    return jnp.where(active, rho, jnp.inf)


def steady_rates(
    rate,
    active,
    groups: Groups,
    capacity,
    *,
    max_iters: int = 500,
    tol: float = 1e-6,
    newton_steps: int = 12,
) -> SteadyState:
    """Fixed point of the lossless no-CC rates (module docs), from a warm start.

    Args:
        rate: ``[F]`` starting rates, bytes/s (a flow that is active with rate 0 starts
            at its first hop's capacity, i.e. at line rate).
        active: bool ``[F]``. groups: :func:`build_groups` of the flows' paths.
        capacity: ``[L]`` bytes/s.
        max_iters: bound on fixed-point sweeps. tol: stop once every flow's factor lies
            within ``tol`` of 1.
        newton_steps: level refinements per sweep (each passes at least one breakpoint;
            the outer sweeps continue where they stop).
    """
    capacity = jnp.asarray(capacity, jnp.float64 if jax.config.x64_enabled else jnp.float32)
    return _steady(
        jnp.asarray(rate, capacity.dtype),
        jnp.asarray(active),
        jnp.asarray(groups.hop_group),
        jnp.asarray(groups.group_link),
        jnp.asarray(groups.group_port),
        jnp.asarray(groups.hop_port),
        capacity,
        groups.num_ports,
        max_iters,
        jnp.asarray(tol, capacity.dtype),
        newton_steps,
    )


@jax.jit(static_argnames=("num_ports", "max_iters", "newton_steps"))
def _steady(
    rate,
    active,
    hop_group,
    group_link,
    group_port,
    hop_port,
    capacity,
    num_ports,
    max_iters,
    tol,
    newton_steps,
):
    num_links = capacity.shape[0]
    num_groups = group_link.shape[0]
    valid = hop_group < num_groups
    first_link = jnp.where(valid[:, 0], group_link[jnp.minimum(hop_group[:, 0], num_groups - 1)], 0)
    line = capacity[first_link] if num_groups else jnp.zeros_like(rate)
    rate = jnp.where(active, jnp.where(rate > 0, rate, line), 0.0)

    def sweep(state):
        rate, it, _ = state
        hop_rate = jnp.where(valid, rate[:, None], 0.0)
        demand = jax.ops.segment_sum(hop_rate.ravel(), hop_group.ravel(), num_groups + 1)
        rho = _port_levels(demand[:-1], group_link, capacity, num_links, newton_steps)
        drain = jax.ops.segment_min(rho, group_port, num_ports + 1)
        drain = jnp.concatenate([drain[:-1], jnp.array([jnp.inf], drain.dtype)])
        factor = jnp.min(drain[hop_port], axis=1)
        factor = jnp.where(active & jnp.isfinite(factor), factor, 1.0)
        residual = jnp.max(jnp.abs(factor - 1.0), initial=0.0)
        return rate * factor, it + 1, residual

    def more(state):
        _, it, residual = state
        return (it < max_iters) & (residual > tol)

    init = (rate, jnp.int32(0), jnp.asarray(jnp.inf, rate.dtype))
    rate, iterations, residual = jax.lax.while_loop(more, sweep, init)
    return SteadyState(rate, iterations, residual)
