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
    """Host-side structure of the hop entries and arbitration groups (numpy, static per
    flow set). Entries ``e`` are the valid ``(flow, hop)`` pairs sorted by group, and
    groups are sorted by egress link, so the per-step sums are sorted segment sums.

    Attributes:
        entry_group: int32 ``[E]`` group of each entry (non-decreasing).
        entry_prev: int32 ``[E]`` entry of the same flow's previous hop (``E`` if none).
        entry_ingress: int32 ``[E]`` link the entry's bytes came in over (``L`` if none).
        entry_flow: int32 ``[E]`` flow of each entry.
        entry_first: bool ``[E]`` whether the entry is its flow's first hop.
        entry_last: bool ``[E]`` whether the entry is its flow's last hop.
        flow_last: int32 ``[F]`` entry of each flow's last hop.
        flow_hops: int32 ``[F]`` hops of each flow.
        group_link: int32 ``[G]`` egress link of each group (non-decreasing).
    """

    entry_group: np.ndarray
    entry_prev: np.ndarray
    entry_ingress: np.ndarray
    entry_flow: np.ndarray
    entry_first: np.ndarray
    entry_last: np.ndarray
    flow_last: np.ndarray
    flow_hops: np.ndarray
    group_link: np.ndarray


def build_groups(links: np.ndarray, num_links: int) -> Groups:
    """Entries and (egress link, input port) groups of ``[F, H]`` paths (``-1`` padded
    at the end of each row). The input port of hop ``h >= 1`` is the link of hop
    ``h - 1``; at the first hop it is the flow's own queue pair."""
    links = np.asarray(links, np.int64)
    num_flows, num_hops = links.shape
    valid = links >= 0
    own = num_links + np.arange(num_flows, dtype=np.int64)[:, None]
    prev = np.concatenate([own, links[:, :-1]], axis=1)
    stride = num_links + num_flows + 1
    flow, hop = np.nonzero(valid)
    group_key = links[flow, hop] * stride + prev[flow, hop]
    keys, group = np.unique(group_key, return_inverse=True)
    order = np.argsort(group, kind="stable")
    flow, hop, group = flow[order], hop[order], group[order]
    num_entries = flow.size
    entry_of = np.full(links.shape, num_entries, np.int64)
    entry_of[flow, hop] = np.arange(num_entries)
    hops = valid.sum(axis=1)
    entry_prev = np.where(hop > 0, entry_of[flow, np.maximum(hop - 1, 0)], num_entries)
    ingress = np.where(hop > 0, prev[flow, hop], num_links)
    return Groups(
        group.astype(np.int32),
        entry_prev.astype(np.int32),
        ingress.astype(np.int32),
        flow.astype(np.int32),
        hop == 0,
        hop == hops[flow] - 1,
        entry_of[np.arange(num_flows), np.maximum(hops - 1, 0)].astype(np.int32),
        hops.astype(np.int32),
        (keys // stride).astype(np.int32),
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
    newton_steps: int = 2,
) -> QueueRun:
    """Run the per-port queue fluid (module docs) until every flow is delivered.

    Args:
        groups: :func:`build_groups` of the paths. capacity: ``[L]`` bytes/s.
        size: ``[F]`` wire bytes. start: ``[F]`` seconds.
        dt: step in seconds. xoff, xon: PFC thresholds per ingress link, bytes.
        max_steps: loop bound (status ``MAX_ITERS_REACHED`` when hit).
        newton_steps: water-level refinements per link per step.
    """
    # float64 always: bytes are carried over thousands of steps, and a float32 count
    # would miss the last byte of a flow by more than the completion test allows.
    with jax.enable_x64(True):
        dtype = jnp.float64
        return _simulate(
            *(jnp.asarray(a) for a in groups),
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
    solving ``sum_g min(Q_g, lam_l) = min(budget_l, sum_g Q_g)``: Newton from below on a
    concave piecewise-linear function, so every iterate is feasible (never sends more
    than the budget) and each step passes at least one breakpoint.

    Returns ``(sent [G], groups with bytes [L], bytes the link sends [L])``."""

    def link_sums(a, b):  # two sorted segment sums in one pass
        both = jax.ops.segment_sum(
            jnp.stack([a, b], axis=1), group_link, num_links, indices_are_sorted=True
        )
        return both[:, 0], both[:, 1]

    count, total = link_sums((queued > 0).astype(queued.dtype), queued)
    over = total > budget
    level = budget / jnp.maximum(count, 1)

    def step(_, level):
        at = level[group_link]
        filled, above = link_sums(jnp.minimum(queued, at), (queued > at).astype(queued.dtype))
        return jnp.where(over, level + (budget - filled) / jnp.maximum(above, 1), level)

    level = jax.lax.fori_loop(0, newton_steps, step, level)
    sent = jnp.where(over[group_link], jnp.minimum(queued, level[group_link]), queued)
    return sent, count, jnp.minimum(total, budget)


@jax.jit(static_argnames=("newton_steps",))
def _simulate(
    entry_group,
    entry_prev,
    entry_ingress,
    entry_flow,
    entry_first,
    entry_last,
    flow_last,
    flow_hops,
    group_link,
    capacity,
    size,
    start,
    dt,
    xoff,
    xon,
    max_steps,
    newton_steps,
) -> QueueRun:
    num_flows = size.shape[0]
    num_entries = entry_group.shape[0]
    num_links = capacity.shape[0]
    num_groups = group_link.shape[0]
    dtype = capacity.dtype
    budget_full = capacity * dt
    inf = jnp.asarray(jnp.inf, dtype)
    zero = jnp.zeros(1, dtype)

    def step(state):
        t, queue, delivered, injected, paused, finish, n, paused_steps = state
        # senders: a flow's bytes are all ready at its NIC from its start time on
        arriving = ~injected & (start <= t)
        queue = queue + jnp.where(entry_first & arriving[entry_flow], size[entry_flow], 0)
        injected = injected | arriving
        queued = jax.ops.segment_sum(queue, entry_group, num_groups, indices_are_sorted=True)
        budget = jnp.where(paused, 0, budget_full)
        sent_group, active, busy = _water_level(queued, group_link, budget, num_links, newton_steps)
        share = jnp.where(queued > 0, sent_group / jnp.where(queued > 0, queued, 1), 0)
        sent = queue * share[entry_group]
        forward = jnp.concatenate([jnp.where(entry_last, 0, sent), zero])
        queue = queue - sent + forward[entry_prev]
        out = sent[flow_last]
        before = delivered
        delivered = delivered + out
        # The last byte, within the step: round-robin sends one packet per active group
        # per turn, so a group's sent bytes have left after about min(n_l sent_g, the
        # link's bytes) / C_l (exact for a lone group); the flow's bytes are spread
        # evenly over its group's.
        drain = jnp.minimum(sent_group * active[group_link], busy[group_link])
        drain = drain / capacity[group_link]
        last_group = entry_group[flow_last]
        done_now = jnp.isinf(finish) & injected & (delivered >= size * (1 - 1e-9))
        fraction = jnp.clip((size - before) / jnp.where(out > 0, out, 1), 0, 1)
        finish = jnp.where(done_now, t + fraction * jnp.minimum(drain[last_group], dt), finish)
        held = jax.ops.segment_sum(queue, entry_ingress, num_links + 1)[:-1]
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
        jnp.zeros(num_entries, dtype),
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
    finish = finish - (flow_hops - 1).astype(dtype) * dt
    status = jnp.where(
        jnp.any(jnp.isinf(finish)), Status.MAX_ITERS_REACHED, Status.CONVERGED
    ).astype(jnp.int32)
    status = jnp.where(jnp.all(jnp.isfinite(size)), status, Status.NONFINITE)
    fraction = paused_steps / jnp.maximum(steps, 1).astype(dtype)
    return QueueRun(finish, steps, fraction, status)
