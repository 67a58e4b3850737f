"""Lossless fabric without congestion control: a time-stepped fluid of per-port queues.

With PFC on and no congestion control, senders transmit at line rate and only pauses
slow them. Three packet-level facts then set each flow's rate, and none of them is
max-min fairness among flows:

1. **Per-port arbitration.** A switch egress serves its input ports round-robin, one
   packet per backlogged port per turn, so a link's capacity is shared max-min fairly
   among the *input ports* that have packets for it (groups of flows that entered the
   switch on the same link; at the sending NIC each flow's queue pair is its own port).
2. **Head-of-line blocking.** PFC pauses a whole ingress link (one lossless priority)
   once the bytes that came in over it and wait in the switch exceed XOFF, and resumes
   it at XON = XOFF - hysteresis. While paused, *every* flow on that link stops, also the
   ones bound for idle egresses (victim flows).
3. **Pause spreading.** A paused link's own egress queue fills, which pauses the links
   feeding it, hop by hop back to the senders.

The model keeps, for every flow ``f`` and hop ``h``, the bytes ``q[f, h]`` waiting at that
hop's egress, and advances them in steps of ``dt`` (default one full packet's time on
the fastest link: the round-robin grain). In each step every unpaused egress ``l`` sends
``C_l dt`` bytes split max-min among its (egress, input port) groups by their queued
bytes (round-robin among backlogged ports), each group's bytes taken from its flows in
proportion to what they have queued (the FIFO mix). Sent bytes join the next hop's queue
and can leave it one step later, so the last byte of a lone flow lags one step per hop:
the engine reports transfer times with that lag removed, and the caller adds the exact
store-and-forward term (:mod:`.overheads`). After each step every ingress link's held
bytes are compared with XOFF / XON to set its pause for the next step. Propagation and
the pause frame's flight (one link latency) are not in the loop: with headroom of at
least the link's bandwidth-delay product the fabric stays lossless, the queues simply
overshoot XOFF by that much, and the overshoot drains at the same rates.

One ``lax.while_loop`` over steps (bounded by ``max_steps``); per step, segment sums over
the ``[F, H]`` hop entries and a few Newton steps of the per-link water level, so a step
costs ``O(F H)`` and a run ``O(F H T / dt)``. Shapes are fixed per flow set.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..status import Status


class Groups(NamedTuple):
    """Host-side structure of the arbitration groups (numpy, static per flow set).

    Attributes:
        hop_group: int32 ``[F, H]`` group of each hop, ``G`` for padding.
        group_link: int32 ``[G]`` egress link of each group.
        hop_ingress: int32 ``[F, H]`` link the bytes at this hop came in over (the
            previous hop's link), ``L`` at the first hop and for padding.
        last_hop: int32 ``[F]`` index of each flow's last valid hop.
    """

    hop_group: np.ndarray
    group_link: np.ndarray
    hop_ingress: np.ndarray
    last_hop: np.ndarray


def build_groups(links: np.ndarray, num_links: int) -> Groups:
    """(egress link, input port) groups of ``[F, H]`` paths (``-1`` padded, no gaps)."""
    links = np.asarray(links, np.int64)
    num_flows, num_hops = links.shape
    valid = links >= 0
    own = num_links + np.arange(num_flows, dtype=np.int64)[:, None]
    prev = np.concatenate([own, links[:, :-1]], axis=1)
    port_key = np.where(valid, prev, -1)
    group_key = links[valid] * (num_links + num_flows + 1) + port_key[valid]
    keys, inverse = np.unique(group_key, return_inverse=True)
    hop_group = np.full(links.shape, keys.size, np.int64)
    hop_group[valid] = inverse
    ingress = np.where(valid & (prev < num_links), prev, num_links)
    return Groups(
        hop_group.astype(np.int32),
        (keys // (num_links + num_flows + 1)).astype(np.int32),
        ingress.astype(np.int32),
        (valid.sum(axis=1) - 1).astype(np.int32),
    )


class QueueRun(NamedTuple):
    """Result of :func:`simulate_lossless`.

    Attributes:
        finish_time: ``[F]`` seconds: last byte through the last hop, the per-hop step lag
            removed (``inf`` where unfinished).
        steps: steps run. paused_fraction: ``[L]`` share of steps each link was paused.
        status: int32 :class:`~fabricflow.solve.status.Status` code.
    """

    finish_time: jax.Array
    steps: jax.Array
    paused_fraction: jax.Array
    status: jax.Array


def simulate_lossless(
    groups: Groups,
    capacity,
    size,
    start,
    *,
    dt: float,
    xoff: float,
    xon: float,
    max_steps: int,
    newton_steps: int = 6,
) -> QueueRun:
    """Run the per-port queue fluid (module docs) until every flow is delivered.

    Args:
        groups: :func:`build_groups` of the paths. capacity: ``[L]`` bytes/s.
        size: ``[F]`` wire bytes. start: ``[F]`` seconds.
        dt: step in seconds. xoff, xon: PFC thresholds per ingress link, bytes.
        max_steps: loop bound (status ``MAX_ITERS_REACHED`` when hit).
        newton_steps: water-level refinements per link per step.
    """
    dtype = jnp.float64 if jax.config.x64_enabled else jnp.float32
    return _simulate(
        jnp.asarray(groups.hop_group),
        jnp.asarray(groups.group_link),
        jnp.asarray(groups.hop_ingress),
        jnp.asarray(groups.last_hop),
        jnp.asarray(capacity, dtype),
        jnp.asarray(size, dtype),
        jnp.asarray(start, dtype),
        jnp.asarray(dt, dtype),
        jnp.asarray(xoff, dtype),
        jnp.asarray(xon, dtype),
        jnp.asarray(max_steps, jnp.int32),
        newton_steps,
    )


def _water_level(queued, group_link, budget, num_links, newton_steps):
    """Bytes each group sends this step: ``min(Q_g, lam_l)`` with the level ``lam_l``
    solving ``sum_g min(Q_g, lam_l) = min(budget_l, sum_g Q_g)`` (Newton from below on a
    concave piecewise-linear function: every step stays feasible)."""
    has = queued > 0
    count = jax.ops.segment_sum(has.astype(queued.dtype), group_link, num_links)
    total = jax.ops.segment_sum(queued, group_link, num_links)
    over = total > budget
    level = budget / jnp.maximum(count, 1)

    def step(_, level):
        at = level[group_link]
        filled = jax.ops.segment_sum(jnp.minimum(queued, at), group_link, num_links)
        above = jax.ops.segment_sum((queued > at).astype(queued.dtype), group_link, num_links)
        return jnp.where(over, level + (budget - filled) / jnp.maximum(above, 1), level)

    level = jax.lax.fori_loop(0, newton_steps, step, level)
    return jnp.where(over[group_link], jnp.minimum(queued, level[group_link]), queued)


@jax.jit(static_argnames=("newton_steps",))
def _simulate(
    hop_group,
    group_link,
    hop_ingress,
    last_hop,
    capacity,
    size,
    start,
    dt,
    xoff,
    xon,
    max_steps,
    newton_steps,
) -> QueueRun:
    num_flows, num_hops = hop_group.shape
    num_links = capacity.shape[0]
    num_groups = group_link.shape[0]
    dtype = capacity.dtype
    valid = hop_group < num_groups
    flat_group = hop_group.ravel()
    flat_ingress = hop_ingress.ravel()
    is_last = jnp.arange(num_hops)[None, :] == last_hop[:, None]
    budget_full = capacity * dt
    inf = jnp.asarray(jnp.inf, dtype)

    def step(state):
        t, queue, delivered, injected, paused, finish, n, paused_steps = state
        # senders: a flow's bytes are all ready at its NIC from its start time on
        arriving = ~injected & (start <= t)
        queue = queue.at[:, 0].add(jnp.where(arriving, size, 0))
        injected = injected | arriving
        queued = jax.ops.segment_sum(queue.ravel(), flat_group, num_groups + 1)[:-1]
        budget = jnp.where(paused, 0, budget_full)
        sent_group = _water_level(queued, group_link, budget, num_links, newton_steps)
        share = jnp.where(queued > 0, sent_group / jnp.where(queued > 0, queued, 1), 0)
        share = jnp.concatenate([share, jnp.zeros(1, dtype)])
        sent = jnp.where(valid, queue * share[hop_group], 0)
        forward = jnp.where(is_last, 0, sent)
        queue = queue - sent + jnp.pad(forward[:, :-1], ((0, 0), (1, 0)))
        out = jnp.sum(jnp.where(is_last, sent, 0), axis=1)
        before = delivered
        delivered = delivered + out
        # the last byte: interpolate within the step by the bytes that were missing
        done_now = jnp.isinf(finish) & injected & (delivered >= size * (1 - 1e-6))
        fraction = jnp.clip((size - before) / jnp.where(out > 0, out, 1), 0, 1)
        finish = jnp.where(done_now, t + fraction * dt, finish)
        held = jax.ops.segment_sum(queue.ravel(), flat_ingress, num_links + 1)[:-1]
        paused = (held > xoff) | (paused & (held > xon))
        return (
            t + dt,
            queue,
            delivered,
            injected,
            paused,
            finish,
            n + 1,
            paused_steps + paused.astype(jnp.int32),
        )

    def more(state):
        finish, n = state[5], state[6]
        return jnp.any(jnp.isinf(finish)) & (n < max_steps)

    state = (
        jnp.min(start, initial=inf) if num_flows else jnp.zeros((), dtype),
        jnp.zeros((num_flows, num_hops), dtype),
        jnp.zeros(num_flows, dtype),
        jnp.zeros(num_flows, bool),
        jnp.zeros(num_links, bool),
        jnp.full(num_flows, inf),
        jnp.int32(0),
        jnp.zeros(num_links, jnp.int32),
    )
    state = jax.lax.while_loop(more, step, state)
    finish, steps, paused_steps = state[5], state[6], state[7]
    # one step of lag per hop after the first (the fluid's store-and-forward)
    finish = finish - last_hop.astype(dtype) * dt
    status = jnp.where(
        jnp.any(jnp.isinf(finish)), Status.MAX_ITERS_REACHED, Status.CONVERGED
    ).astype(jnp.int32)
    status = jnp.where(jnp.all(jnp.isfinite(size)), status, Status.NONFINITE)
    fraction = paused_steps / jnp.maximum(steps, 1).astype(dtype)
    return QueueRun(finish, steps, fraction, status)
