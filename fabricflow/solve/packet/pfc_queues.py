"""Lossless fabric without congestion control: a time-stepped fluid of per-port queues.

With PFC on and no congestion control, senders transmit at line rate and only pauses
slow them. Five packet-level facts then set each flow's time, and none of them is
max-min fairness among flows:

1. **FIFO output queues.** A shared-buffer switch (the Ethernet ASICs RoCE fabrics are
   built from) keeps one FIFO per egress port and priority: packets leave in the order
   they arrived, whatever port they came in on, so an input port gets a share of the
   egress in proportion to what it brings, not an equal turn. A NIC serves its queue
   pairs round-robin. (:mod:`.queue_structure` has the ``round_robin`` alternative.)
2. **Head-of-line blocking.** PFC pauses a whole ingress link (one lossless priority)
   once the bytes that came in over it and wait in the switch exceed XOFF, and resumes
   it at XON = XOFF - hysteresis. While paused, *every* flow on that link stops, also the
   ones bound for idle egresses (victim flows).
3. **Pause spreading.** A paused link's own egress queue fills, which pauses the links
   feeding it, hop by hop back to the senders.
4. **The pause loop's delay.** A pause or resume acts only when the frame has flown up
   the link and the data already on the wire has landed: the queue overshoots XOFF, and
   after XON it drains for that long with nothing arriving, which can leave the egress
   idle.
5. **The last ACK queues too.** RoCE ACKs travel in the data's priority class, so at
   every switch of the return path the last ACK waits behind the data queued there (and
   stops while that link is paused); at the receiving NIC it goes first.

The model keeps, for every flow ``f`` and hop ``h``, the bytes ``q[f, h]`` waiting at that
hop's egress, and advances them in steps of ``dt`` (default one full packet's time on
the fastest link: the arbitration grain). Each egress's queue is split into the
arbitration groups of :mod:`.queue_structure`. In each step every unpaused egress ``l`` sends
``C_l dt`` bytes, split max-min among its backlogged groups (round-robin); inside a group
the bytes leave in FIFO order. FIFO order is kept by positions: each group counts the
bytes that ever entered and left it, and each entry's queued bytes are taken as spread
evenly between the positions of its oldest and newest queued byte, so an entry leaves
completely once the group has served past its newest byte. Sent bytes join the next
hop's queue and can leave it one step later, so the last byte of a lone flow lags one
step per hop: the engine reports transfer times with that lag removed, and the caller
adds the exact store-and-forward term (:mod:`.overheads`).

Propagation is not in the loop: the model's clock at each hop runs behind real time by
the path's propagation so far, and the caller adds it. In that frame a pause decided
downstream of link ``l`` reaches the bytes arriving over ``l`` after twice ``l``'s latency
(the frame's flight up, then the flight of what was already sent), so each ingress
link's pause, decided after each step from the bytes it holds (a packet's buffer is
freed when its transmission ends), takes effect ``round(2 d_l / dt)`` steps later. The
last ACK is a token that enters each return-path group at the position the group has
reached when it gets there and leaves once the group has served that far.

One ``lax.while_loop`` over steps (bounded by ``max_steps``; while nothing is queued, no
ACK is on its way and no pause is pending, the clock jumps to the next start); per step, segment sums over
the ``[F, H]`` hop entries, a water level on the links shared by several groups, and a
few passes over the ACK tokens in flight, so a step costs ``O(F H)`` and a run
``O(F H T / dt)``. Shapes are fixed per flow set.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fabricflow.solve.packet.queue_structure import Groups
from fabricflow.solve.pfc.pause import pause_update
from fabricflow.solve.status import SolverStatus


class QueueRun(NamedTuple):
    """Result of :func:`simulate_lossless`.

    Attributes:
        finish_time: ``[F]`` seconds: last byte through the last hop, the per-hop step lag
            removed (``inf`` where unfinished).
        ack_wait: ``[F]`` seconds the last ACK waited in the return path's queues and
            pauses (its serialization and propagation excluded).
        steps: steps run. paused_fraction: ``[L]`` share of steps each link was paused.
        status: int32 :class:`~fabricflow.solve.status.SolverStatus` code.
    """

    finish_time: jax.Array
    ack_wait: jax.Array
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
    pause_delay=None,
    newton_steps: int = 2,
) -> QueueRun:
    """Run the per-port queue fluid (module docs) until every flow and its last ACK are
    through.

    Args:
        groups: :func:`~fabricflow.solve.packet.queue_structure.build_groups` of the paths.
        capacity: ``[L]`` bytes/s. size: ``[F]`` wire bytes. start: ``[F]`` seconds.
        dt: step in seconds. xoff, xon: PFC thresholds per ingress link, bytes.
        max_steps: loop bound (status ``MAX_ITERS_REACHED`` when hit).
        pause_delay: ``[L]`` seconds from an ingress queue crossing XOFF (XON) until the
            bytes arriving over that link stop (start again), in the model's frame
            (module docs: twice the link latency). ``None``: 0. Rounded to whole steps;
            the largest one sets a static shape.
        newton_steps: water-level refinements per shared link per step.
    """
    num_links = np.shape(capacity)[0]
    delay = np.zeros(num_links) if pause_delay is None else np.asarray(pause_delay, float)
    delay_steps = np.rint(delay / dt).astype(np.int32)
    # float64 always: bytes and FIFO positions are carried over thousands of steps, and a
    # float32 count would miss the last byte of a flow by more than the tests allow.
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
            jnp.asarray(delay_steps),
            newton_steps,
            int(delay_steps.max(initial=0)) + 1,
            ack_chunk(np.shape(size)[0]),
        )


def _segment_sum(values, segments, num_segments):
    """Sum of ``values [N]`` per sorted segment id ``segments [N]`` -> ``[num_segments]``.

    One call per vector: XLA's CPU scatter of stacked ``[N, k]`` rows costs about twice
    ``k`` scatters of ``[N]`` (measured at 49,152 entries), and this loop runs thousands of
    steps."""
    return jax.ops.segment_sum(values, segments, num_segments, indices_are_sorted=True)


def _water_level(queued, budget_group, shared, budget, newton_steps):
    """Bytes each group sends this step. A group alone on its link sends
    ``min(Q_g, budget)``; the groups of a shared link send ``min(Q_g, lam_l)`` with the
    level ``lam_l`` solving ``sum_g min(Q_g, lam_l) = min(budget_l, sum_g Q_g)``: Newton
    from below on a concave piecewise-linear function, so every iterate is feasible and
    each step passes at least one breakpoint.

    Args:
        queued: ``[G]`` bytes. budget_group: ``[G]`` the budget of each group's link.
        shared: ``(shared_group [S], shared_slot [S], shared_link [K])``.
        budget: ``[L]`` bytes each link may send.

    Returns ``(sent [G], groups with bytes on the link [G], bytes the link sends [G])``,
    the last two per group, of its link."""
    sent = jnp.minimum(queued, budget_group)
    active = (queued > 0).astype(queued.dtype)
    shared_group, shared_slot, shared_link = shared
    if shared_group.shape[0] == 0:
        return sent, active, sent
    slots = shared_link.shape[0]
    q = queued[shared_group]
    cap = budget[shared_link]

    def slot_sums(a, b):  # two sorted segment sums (one each: see _segment_sum)
        return _segment_sum(a, shared_slot, slots), _segment_sum(b, shared_slot, slots)

    count, total = slot_sums((q > 0).astype(q.dtype), q)
    over = total > cap
    level = cap / jnp.maximum(count, 1)

    def step(_, level):
        at = level[shared_slot]
        filled, above = slot_sums(jnp.minimum(q, at), (q > at).astype(q.dtype))
        return jnp.where(over, level + (cap - filled) / jnp.maximum(above, 1), level)

    level = jax.lax.fori_loop(0, newton_steps, step, level)
    shared_sent = jnp.where(over[shared_slot], jnp.minimum(q, level[shared_slot]), q)
    sent = sent.at[shared_group].set(shared_sent)
    active = active.at[shared_group].set(count[shared_slot])
    busy = sent.at[shared_group].set(jnp.minimum(total, cap)[shared_slot])
    return sent, active, busy


def _fifo_split(queue, head, tail, entry_group, reach, sent_group, num_groups):
    """Bytes each entry sends when its group serves the positions up to ``reach [E]``
    (its group's, gathered), ``sent_group [G]`` bytes in all (FIFO order).

    An entry whose newest byte lies in the served range leaves completely; the others
    send the part of their evenly spread bytes the range covers. The split is then
    scaled so the group sends exactly ``sent_group`` (positions approximate the true
    order and must never lose or invent a byte). Returns ``sent [E]``."""
    whole = (queue > 0) & (tail <= reach)
    span = tail - head
    covered = jnp.clip((reach - head) / jnp.where(span > 0, span, 1), 0, 1)
    part = jnp.where(whole, 0, queue * covered)
    rest = jnp.where(whole, 0, queue)
    whole_sum, part_sum, rest_sum = (
        _segment_sum(values, entry_group, num_groups) for values in (queue - rest, part, rest)
    )
    tiny = 1e-300
    whole_scale = jnp.where(whole_sum > sent_group, sent_group / jnp.maximum(whole_sum, tiny), 1)
    left = jnp.maximum(sent_group - whole_sum, 0)
    shrink = jnp.where(part_sum > 0, jnp.minimum(left / jnp.maximum(part_sum, tiny), 1), 0)
    extra = jnp.maximum(left - part_sum, 0)
    top_up = jnp.where(rest_sum > part_sum, extra / jnp.maximum(rest_sum - part_sum, tiny), 0)
    partial = part * shrink[entry_group] + (rest - part) * jnp.minimum(top_up, 1)[entry_group]
    return jnp.where(whole, queue * whole_scale[entry_group], partial)


def _place(queue, head, tail, added, group_in, group_added, entry_group):
    """Queue ``added`` bytes per entry behind what is there: the group's new bytes take the
    positions ``(group_in, group_in + group_added]``, each entry's evenly among them.
    Returns ``(queue, head, tail, group_in)``."""
    end_group = group_in + group_added
    fresh = added > 0
    head = jnp.where(fresh & (queue <= 0), group_in[entry_group], head)
    tail = jnp.where(fresh, end_group[entry_group], tail)
    return queue + added, head, tail, end_group


def _advance_acks(ack, groups_state, t, dt, ack_link, ack_group, flow_hops, paused_ext, chunk):
    """Move each last-ACK token through as many return-path hops as it clears in
    ``[t, t + dt)``. ``ack = (hop [F], position [F], time [F], done [F])``;
    ``groups_state = (served_from, sent, left, group_in, group_added)``, each padded with
    one idle group at the end (``left``: bytes the group still holds from before the
    step). ``ack_link``, ``ack_group``: ``[F + 1, H]``, ``flow_hops``: ``[F + 1]``, each
    with one idle row at the end. Returns the new ``ack``.

    Only the tokens in flight move, and each moves on the step's group state alone (no
    token reads another), so they are gathered into chunks of ``chunk`` (static) and the
    passes run on those: a few hundred tokens instead of every flow, with the same
    arithmetic per token (the result equals passes over all flows)."""
    hop, position, when, done = ack
    num_flows = hop.shape[0]
    in_flight = (hop >= 0) & (hop < flow_hops[:-1]) & jnp.isinf(done)
    flows = jnp.arange(num_flows, dtype=jnp.int32)

    def one_chunk(rank, carry):
        first, ack = carry
        slot = jnp.where(in_flight & (rank >= first) & (rank < first + chunk), rank - first, chunk)
        rows = jnp.full(chunk, num_flows, jnp.int32).at[slot].set(flows, mode="drop")
        picked = tuple(
            jnp.concatenate([x, jnp.full(1, fill, x.dtype)])[rows]
            for x, fill in zip(ack, (-1, 0, jnp.inf, jnp.inf))
        )
        moved = _ack_passes(
            picked, groups_state, t, dt, ack_link[rows], ack_group[rows], flow_hops[rows],
            paused_ext,
        )  # fmt: skip
        ack = tuple(x.at[rows].set(y, mode="drop") for x, y in zip(ack, moved))
        return first + chunk, ack

    def chunks(ack):
        count = jnp.sum(in_flight, dtype=jnp.int32)
        rank = jnp.cumsum(in_flight, dtype=jnp.int32) - 1
        return jax.lax.while_loop(lambda c: c[0] < count, partial(one_chunk, rank), (0, ack))[1]

    return jax.lax.cond(jnp.any(in_flight), chunks, lambda ack: ack, ack)


def _ack_passes(ack, groups_state, t, dt, ack_link, ack_group, flow_hops, paused_ext):
    """:func:`_advance_acks` on the tokens ``ack`` (rows of ``ack_link``, ``ack_group``
    ``[K, H]`` and ``flow_hops [K]``): passes until none moves, at most ``H``."""
    served_from, sent, left, group_in, group_added = groups_state
    num_hops = ack_link.shape[1]
    flows = jnp.arange(ack_link.shape[0])
    t_end = t + dt

    def one_hop(carry):
        (hop, position, when, done), _, passes = carry
        moving = (hop >= 0) & (hop < flow_hops) & jnp.isinf(done)
        j = jnp.clip(hop, 0, num_hops - 1)
        group = ack_group[flows, j]
        in_group = group < sent.shape[0] - 1
        ahead = position - served_from[group]
        sent_here = sent[group]
        # served past the token, or nothing from before it is left (position rounding)
        reached = (ahead <= sent_here * (1 + 1e-9)) | (left[group] <= 0)
        clears = ~paused_ext[ack_link[flows, j]] & (~in_group | reached)
        leave = t + dt * jnp.clip(ahead / jnp.where(sent_here > 0, sent_here, 1), 0, 1)
        leave = jnp.maximum(jnp.where(in_group, leave, when), when)
        go = moving & clears
        hop = hop + go.astype(hop.dtype)
        nxt = ack_group[flows, jnp.clip(hop, 0, num_hops - 1)]
        fraction = jnp.clip((leave - t) / dt, 0, 1)
        position = jnp.where(go, group_in[nxt] + fraction * group_added[nxt], position)
        when = jnp.where(go, leave, jnp.where(moving, t_end, when))
        done = jnp.where(go & (hop >= flow_hops), leave, done)
        return (hop, position, when, done), jnp.any(go), passes + 1

    def more(carry):  # another pass while some token moved in the last one
        return carry[1] & (carry[2] < num_hops)

    return jax.lax.while_loop(more, one_hop, (ack, jnp.bool_(True), 0))[0]


class _State(NamedTuple):
    """Loop state of :func:`_simulate` (``E`` entries, ``G`` groups, ``F`` flows, ``L``
    links, ``S`` pause-history slots)."""

    t: jax.Array  # seconds at the start of the step
    n: jax.Array  # steps run
    queue: jax.Array  # [E] bytes waiting at the entry's egress
    head: jax.Array  # [E] FIFO position of the entry's oldest queued byte
    tail: jax.Array  # [E] ... and of its newest
    group_in: jax.Array  # [G] bytes that ever entered the group
    group_out: jax.Array  # [G] bytes that ever left it
    delivered: jax.Array  # [F] bytes through the last hop
    injected: jax.Array  # [F] bool, the flow's bytes are at its NIC
    finish: jax.Array  # [F] seconds, inf until delivered
    signalled: jax.Array  # [L] bool, the pause state each downstream last decided
    history: jax.Array  # [S, L] bool, those decisions over the last S steps
    last_pause: jax.Array  # int32, last step any link decided a pause (< n - S: none pending)
    paused_steps: jax.Array  # [L] int32
    ack: tuple  # last-ACK tokens: hop [F] int32, position [F], time [F], done [F]


def ack_chunk(num_flows: int) -> int:
    """Last-ACK tokens moved per chunk (static): 1/16 of the flows, at least 256. An
    ACK's flight (microseconds) is short against the transfers (hundreds of
    microseconds at 2 MB), so few are in flight at once; more take more chunks."""
    return max(1, min(num_flows, max(256, num_flows // 16)))


@jax.jit(static_argnames=("newton_steps", "num_slots", "ack_chunk"))
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
    shared_group,
    shared_slot,
    shared_link,
    ack_link,
    ack_group,
    capacity,
    size,
    start,
    dt,
    xoff,
    xon,
    max_steps,
    delay_steps,
    newton_steps,
    num_slots,
    ack_chunk,
) -> QueueRun:
    num_links = capacity.shape[0]
    num_groups = group_link.shape[0]
    dtype = capacity.dtype
    inf = jnp.asarray(jnp.inf, dtype)
    pad = jnp.zeros(1, dtype)
    shared = (shared_group, shared_slot, shared_link)
    # one idle row at the end, for the padding of the ACK chunks
    ack_link = jnp.concatenate([ack_link, jnp.full((1, ack_link.shape[1]), num_links)])
    ack_group = jnp.concatenate([ack_group, jnp.full((1, ack_group.shape[1]), num_groups)])
    flow_hops_padded = jnp.concatenate([flow_hops, jnp.zeros(1, flow_hops.dtype)])

    def group_sum(values):
        return jax.ops.segment_sum(values, entry_group, num_groups, indices_are_sorted=True)

    def inject(st: _State):
        """Senders: a flow's bytes are all ready at its NIC from its start time on."""
        arriving = ~st.injected & (start <= st.t)
        added = jnp.where(entry_first & arriving[entry_flow], size[entry_flow], 0)
        queue, head, tail, group_in = _place(
            st.queue, st.head, st.tail, added, st.group_in, group_sum(added), entry_group
        )
        return st._replace(
            queue=queue, head=head, tail=tail, group_in=group_in, injected=st.injected | arriving
        )

    def skip_idle(st: _State) -> _State:
        """Nothing queued, no ACK on its way and no pause pending: jump the clock to the
        next start (late starts cost no steps)."""
        hop, done = st.ack[0], st.ack[3]
        acks_moving = jnp.any((hop >= 0) & (hop < flow_hops) & jnp.isinf(done))
        waiting = ~st.injected
        # a pause is pending while one decided in the last S steps is in the history
        # (the scalar stands for any(history): that reduction cost more than a step's gathers)
        pending = st.last_pause >= st.n - num_slots
        idle = ~jnp.any(st.queue > 0) & ~acks_moving & ~pending & jnp.any(waiting)
        next_start = jnp.min(jnp.where(waiting, start, inf))
        return st._replace(t=jnp.where(idle, jnp.maximum(st.t, next_start), st.t))

    def step(st: _State) -> _State:
        st = skip_idle(st)
        st = jax.lax.cond(jnp.any(~st.injected & (start <= st.t)), inject, lambda s: s, st)
        # what each upstream egress obeys now: the decision of delay_steps steps ago
        back = st.n - 1 - delay_steps
        paused = (back >= 0) & st.history[jnp.mod(back, num_slots), jnp.arange(num_links)]
        budget = jnp.where(paused, 0, capacity * dt)
        queued = group_sum(st.queue)
        sent_group, active, busy = _water_level(
            queued, budget[group_link], shared, budget, newton_steps
        )
        served_from = st.group_out
        group_out = served_from + sent_group
        reach = group_out[entry_group]
        sent = _fifo_split(st.queue, st.head, st.tail, entry_group, reach, sent_group, num_groups)
        last_tail, last_group = st.tail[flow_last], entry_group[flow_last]
        queue = st.queue - sent
        head = jnp.where(queue > 0, jnp.maximum(st.head, reach), st.head)
        tail = jnp.maximum(st.tail, head)
        forward = jnp.concatenate([jnp.where(entry_last, 0, sent), pad])[entry_prev]
        group_before, group_added = st.group_in, group_sum(forward)
        queue, head, tail, group_in = _place(
            queue, head, tail, forward, group_before, group_added, entry_group
        )
        delivered = st.delivered + sent[flow_last]
        # Round-robin sends one packet per active group per turn, so a group's bytes have
        # left after about min(n_l sent_g, the link's bytes) / C_l (exact for a lone
        # group); the flow's newest byte leaves at its FIFO position's share of that.
        drain = jnp.minimum(sent_group * active, busy)[last_group]
        drain = jnp.minimum(drain / capacity[group_link[last_group]], dt)
        sent_last = sent_group[last_group]
        position = (last_tail - served_from[last_group]) / jnp.where(sent_last > 0, sent_last, 1)
        done_now = jnp.isinf(st.finish) & st.injected & (delivered >= size * (1 - 1e-9))
        finish = jnp.where(done_now, st.t + jnp.clip(position, 0, 1) * drain, st.finish)
        hop, ack_position, ack_time, ack_done = st.ack
        ack = _advance_acks(
            (
                jnp.where(done_now, 0, hop),
                ack_position,
                jnp.where(done_now, finish, ack_time),
                ack_done,
            ),
            tuple(
                jnp.concatenate([x, pad])
                for x in (served_from, sent_group, queued - sent_group, group_before, group_added)
            ),
            st.t,
            dt,
            ack_link,
            ack_group,
            flow_hops_padded,
            jnp.concatenate([paused, jnp.zeros(1, bool)]),
            ack_chunk,
        )
        # a packet holds its ingress buffer until its transmission has ended
        held = jax.ops.segment_sum(queue + sent, entry_ingress, num_links + 1)[:-1]
        signalled = pause_update(st.signalled, held, xoff, xon)
        return _State(
            st.t + dt,
            st.n + 1,
            queue,
            head,
            tail,
            group_in,
            group_out,
            delivered,
            st.injected,
            finish,
            signalled,
            st.history.at[jnp.mod(st.n, num_slots)].set(signalled),
            jnp.where(jnp.any(signalled), st.n, st.last_pause),
            st.paused_steps + paused.astype(jnp.int32),
            ack,
        )

    def more(st: _State):
        busy = jnp.any(jnp.isinf(st.finish)) | jnp.any(jnp.isinf(st.ack[3]))
        return busy & (st.n < max_steps)

    state = _initial_state(entry_group.shape[0], num_groups, num_links, num_slots, start, dtype)
    state = jax.lax.while_loop(more, step, state)
    ack_done = state.ack[3]
    ack_wait = ack_done - state.finish
    # one step of lag per hop after the first (the fluid's store-and-forward)
    finish = state.finish - (flow_hops - 1).astype(dtype) * dt
    unfinished = jnp.any(jnp.isinf(finish)) | jnp.any(jnp.isinf(ack_done))
    status = jnp.where(unfinished, SolverStatus.MAX_ITERS_REACHED, SolverStatus.CONVERGED).astype(
        jnp.int32
    )
    status = jnp.where(jnp.all(jnp.isfinite(size)), status, SolverStatus.NONFINITE)
    fraction = state.paused_steps / jnp.maximum(state.n, 1).astype(dtype)
    return QueueRun(finish, ack_wait, state.n, fraction, status)


def _initial_state(
    num_entries: int, num_groups: int, num_links: int, num_slots: int, start, dtype
) -> _State:
    """:func:`_simulate`'s loop state before its first step: the clock at the earliest
    start (``start`` ``[F]`` seconds), nothing queued, injected or delivered, every
    flow unfinished (``inf``), no pause decided (the last one long before the pause
    history's ``num_slots`` steps) and no last-ACK token on its way."""
    num_flows = start.shape[0]
    inf = jnp.asarray(jnp.inf, dtype)
    entries = jnp.zeros(num_entries, dtype)
    return _State(
        jnp.min(start, initial=inf) if num_flows else jnp.zeros((), dtype),
        jnp.int32(0),
        entries,
        entries,
        entries,
        jnp.zeros(num_groups, dtype),
        jnp.zeros(num_groups, dtype),
        jnp.zeros(num_flows, dtype),
        jnp.zeros(num_flows, bool),
        jnp.full(num_flows, inf),
        jnp.zeros(num_links, bool),
        jnp.zeros((num_slots, num_links), bool),
        jnp.int32(-num_slots - 1),
        jnp.zeros(num_links, jnp.int32),
        (
            jnp.full(num_flows, -1, jnp.int32),
            jnp.zeros(num_flows, dtype),
            jnp.full(num_flows, inf),
            jnp.full(num_flows, inf),
        ),
    )
