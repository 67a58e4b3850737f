"""The jitted fluid integrator shared by every congestion-control law (arrays only).

Model, per fixed step ``dt`` (explicit Euler):

* **Sources**: flow ``f`` starts at ``start[f]`` and injects at the rate its law sets
  into its NIC queue (hop 0) while that holds less than two steps' worth (a paused NIC
  therefore stops the flow instead of building an unbounded backlog) and until ``size[f]``
  bytes are injected; it finishes when all bytes are delivered.
* **Queues**: every (flow, hop) entry holds the flow's bytes waiting at that hop's
  egress. Each link serves its backlog plus this step's arrivals, up to ``capacity x dt``
  (0 while paused), shared in proportion to what each flow has there; what a hop serves
  arrives at the next hop one step later. Bytes are conserved per flow and per link.
* **Signals** (only those the law asks for, :data:`~.law.SIGNALS`): ECN marks of the
  switch egresses (RED on the egress queue; a flow sees ``1 - prod(1 - p_l)``), queueing
  delay (``queue / capacity`` summed over the path, split into switch and host egresses)
  and per-hop telemetry (queue delay, transmitted and offered load of every hop). Each is
  kept per link in a ring of ``D`` slots (``D > max delay / dt``) and read by flow ``f``
  ``delay_steps[f]`` steps late, as is its own rate.
* **Trimming** (loss-tolerant Ethernet, ``Config.trim``): a switch egress queue that
  would exceed its ``trim_limit`` bytes cuts the payload of the excess packets, each flow
  in proportion to its bytes there; the sender re-sends those bytes (selective
  retransmission), so they count again against its size and are added to its
  ``retransmitted`` bytes. No pause is sent: nothing propagates upstream.
* **PFC** (one lossless priority, :mod:`fabricflow.solve.pfc.pause`): the ingress queue
  of port ``l`` at switch ``dst(l)`` is the bytes that arrived over ``l`` and still wait
  at the next hop; above XOFF the link ``l`` is paused (its sender's egress stops) until
  the queue falls to XON. Thresholds are static or dynamic.

Per step the work is a few fused gathers and two ``segment_sum``s over the ``[F, H]``
entries, plus one gather per signal: ``O(F H + L)``. Memory: state ``O(F H + D (F + L))``;
records ``O(R (F + L))``. The law is a static argument (one compilation per law, config
and shape); parameter values, capacities, sizes and start times are traced.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from fabricflow.solve.cc.ecn import log_no_mark, marking_probability
from fabricflow.solve.cc.law import Feedback, RateLaw
from fabricflow.solve.pfc.pause import dynamic_xoff, pause_update, xon_of

PAD_SEGMENTS = 256
#: The optional rings of :class:`Rings` (all but ``rate``).
RING_SIGNALS = ("log_no_mark", "queue_delay", "utilization", "load", "ack", "nack", "receivers")


class Problem(NamedTuple):
    """Host-prepared arrays (padding uses the sentinel link id ``L``).

    links: int32 ``[F, H]`` link of each hop (``L`` for padding), used for gathers;
    scatter_links, scatter_prev: the hop links and the link each hop's bytes arrived over,
    with padding and hop 0 spread over ``PAD_SEGMENTS`` extra segments after ``L`` (on
    GPUs, a million atomic adds onto one sentinel address would serialise), for the two
    ``segment_sum``s; last_hop: int32 ``[F]``; hop_fabric: bool ``[F, H]`` hops leaving a
    switch; capacity: ``[L+1]`` bytes/s; marking (switch egress), pfc_ingress: bool
    ``[L+1]``; link_dst_node: int32 ``[L+1]``; line_rate, size, start: ``[F]`` (bytes/s,
    bytes, s); initial_rate: ``[F]`` bytes/s (0: the law's default); base_rtt,
    feedback_delay: ``[F]`` s; delay_steps: int32 ``[F]`` (>= 1); hop_delay_steps: int32
    ``[F, H]``, the feedback delay plus the latency from the sender to each hop (how old
    the sender's rate is that a hop's telemetry reflects); trim_limit: ``[L+1]`` bytes an
    egress queue holds before trimming (``inf``: never trims; only read when
    ``Config.trim``); last_link: int32 ``[F]`` each flow's last hop link (its receiver's
    downlink).
    """

    links: jax.Array
    last_hop: jax.Array
    hop_fabric: jax.Array
    capacity: jax.Array
    marking: jax.Array
    pfc_ingress: jax.Array
    scatter_links: jax.Array
    scatter_prev: jax.Array
    link_dst_node: jax.Array
    line_rate: jax.Array
    size: jax.Array
    start: jax.Array
    initial_rate: jax.Array
    base_rtt: jax.Array
    feedback_delay: jax.Array
    delay_steps: jax.Array
    hop_delay_steps: jax.Array
    trim_limit: jax.Array
    last_link: jax.Array


class Config(NamedTuple):
    """Static configuration (a change recompiles)."""

    dt: float
    steps_per_record: int
    num_records: int
    ring_slots: int
    pfc_mode: str
    num_nodes: int
    trim: bool = False


class Rings(NamedTuple):
    """Delayed-feedback rings ``[D, ...]``; a signal the law does not read is ``None``."""

    rate: jax.Array  # [D, F] each flow's rate
    log_no_mark: Any  # [D, L+1] log(1 - p) per link (ecn), or None
    queue_delay: Any  # [D, L+1] s, queue / capacity (delay, int), or None
    utilization: Any  # [D, L+1] sent / (capacity dt) (int), or None
    load: Any  # [D, L+1] arrived / (capacity dt) (int), or None
    ack: Any  # [D, F] bytes/s delivered to each flow's receiver (ack), or None
    nack: Any  # [D, F] bytes/s of each flow trimmed (nack), or None
    receivers: Any  # [D, L+1] sending flows whose last hop is the link (credit), or None


class State(NamedTuple):
    step: jax.Array
    law: Any  # the law's state: a NamedTuple of [F] arrays, first field ``rate``
    queue: jax.Array  # [F, H] bytes waiting at each hop
    served: jax.Array  # [F, H] bytes served by each hop in the last step
    injected: jax.Array  # [F] bytes (Kahan sum: value + compensation)
    injected_c: jax.Array
    delivered: jax.Array
    delivered_c: jax.Array
    finish: jax.Array  # [F] s, inf until finished
    paused: jax.Array  # [L+1] bool
    egress: jax.Array  # [L+1] bytes
    rings: Rings
    pause_time: jax.Array  # [L+1] s
    flow_pause_time: jax.Array  # [F] s
    retransmitted: jax.Array  # [F] bytes trimmed and sent again
    trimmed: jax.Array  # [L+1] bytes trimmed at each link
    nonfinite: jax.Array  # bool


class Record(NamedTuple):
    rate: jax.Array  # [F] bytes/s
    delivered: jax.Array  # [F] cumulative bytes
    queue: jax.Array  # [L] egress bytes
    paused: jax.Array  # [L] bool


def _materialise(values, step):
    """Return ``values`` computed once as an array. XLA would otherwise fuse the [L]
    elementwise producer into every [F, H] gather that reads it and redo the division
    per (flow, hop); a conditional on a traced predicate (always true) is a fusion
    boundary, where ``optimization_barrier`` is dropped by the CPU compiler."""
    return jax.lax.cond(step >= 0, lambda v: v, jnp.zeros_like, values)


def _sum_hops(values):
    """Sum over the (small, static) hop axis of ``[F, H]`` as column adds: XLA fuses these
    into one loop, where a reduction over a minor axis of size H is much slower on CPU."""
    total = values[:, 0]
    for hop in range(1, values.shape[1]):
        total = total + values[:, hop]
    return total


def _kahan(total, comp, add):
    y = add - comp
    t = total + y
    return t, (t - total) - y


def _ring(law: RateLaw, signal: str, slots: int, widths: tuple[int, int], dtype):
    """The ring of ``signal`` (``[slots, L+1]`` per link or ``[slots, F]`` per flow), or
    ``None`` when the law does not read it; ``widths`` is ``(L+1, F)``."""
    needs = {
        "log_no_mark": ("ecn" in law.signals, 0),
        "queue_delay": (bool({"delay", "int"} & law.signals), 0),
        "utilization": ("int" in law.signals, 0),
        "load": ("int" in law.signals, 0),
        "ack": ("ack" in law.signals, 1),
        "nack": ("nack" in law.signals, 1),
        "receivers": ("credit" in law.signals, 0),
    }
    needed, axis = needs[signal]
    return jnp.zeros((slots, widths[axis]), dtype) if needed else None


def init_state(problem: Problem, law: RateLaw, params, config: Config, dtype) -> State:
    num_flows, hops = problem.links.shape
    num_links1 = problem.capacity.shape[0]
    default = law.initial_rate(problem.line_rate, params)
    rate0 = jnp.where(problem.initial_rate > 0, problem.initial_rate, default)
    rate0 = jnp.minimum(rate0, problem.line_rate).astype(dtype)
    zeros_f = jnp.zeros(num_flows, dtype)
    slots = config.ring_slots
    rings = Rings(
        rate=jnp.broadcast_to(rate0, (slots, num_flows)).astype(dtype),
        **{name: _ring(law, name, slots, (num_links1, num_flows), dtype) for name in RING_SIGNALS},
    )
    return State(
        step=jnp.zeros((), jnp.int32),
        law=law.init(rate0, problem.line_rate.astype(dtype), params),
        queue=jnp.zeros((num_flows, hops), dtype),
        served=jnp.zeros((num_flows, hops), dtype),
        injected=zeros_f,
        injected_c=zeros_f,
        delivered=zeros_f,
        delivered_c=zeros_f,
        finish=jnp.full(num_flows, jnp.inf, dtype),
        paused=jnp.zeros(num_links1, bool),
        egress=jnp.zeros(num_links1, dtype),
        rings=rings,
        pause_time=jnp.zeros(num_links1, dtype),
        flow_pause_time=zeros_f,
        retransmitted=zeros_f,
        trimmed=jnp.zeros(num_links1, dtype),
        nonfinite=jnp.zeros((), bool),
    )


def feedback(state: State, problem: Problem, law: RateLaw, config: Config) -> Feedback:
    """The delayed signals the law reads, gathered for every flow (module docs)."""
    num_flows = problem.links.shape[0]
    slot = jnp.mod(state.step - problem.delay_steps, config.ring_slots)
    rows = slot[:, None]
    rings = state.rings
    fields = {}
    if rings.log_no_mark is not None:
        fields["log_no_mark"] = _sum_hops(rings.log_no_mark[rows, problem.links])
    if rings.queue_delay is not None:
        hop_delay = rings.queue_delay[rows, problem.links]
        if "delay" in law.signals:
            fabric = _sum_hops(jnp.where(problem.hop_fabric, hop_delay, 0.0))
            fields["fabric_queue_delay"] = fabric
            fields["host_queue_delay"] = _sum_hops(hop_delay) - fabric
        if "int" in law.signals:
            fields["hop_queue_delay"] = hop_delay
            fields["hop_utilization"] = rings.utilization[rows, problem.links]
            fields["hop_load"] = rings.load[rows, problem.links]
            fields["hop_valid"] = problem.links < problem.capacity.shape[0] - 1
            hop_slot = jnp.mod(state.step - problem.hop_delay_steps, config.ring_slots)
            fields["hop_rate_delayed"] = rings.rate[hop_slot, jnp.arange(num_flows)[:, None]]
    if rings.ack is not None:
        fields["ack_rate"] = rings.ack[slot, jnp.arange(num_flows)]
    if rings.nack is not None:
        fields["nack_rate"] = rings.nack[slot, jnp.arange(num_flows)]
    if rings.receivers is not None:
        fields["receiver_flows"] = rings.receivers[slot, problem.last_link]
        fields["receiver_capacity"] = problem.capacity[problem.last_link]
    return Feedback(
        time=state.step.astype(state.egress.dtype) * config.dt,
        dt=config.dt,
        line_rate=problem.line_rate,
        base_rtt=problem.base_rtt,
        feedback_delay=problem.feedback_delay,
        num_hops=(problem.last_hop + 1).astype(problem.line_rate.dtype),
        rate_delayed=rings.rate[slot, jnp.arange(num_flows)],
        **fields,
    )


def _react(state: State, problem: Problem, law: RateLaw, params, config: Config):
    """The law's new state for the flows that are sending (the others keep theirs)."""
    time = state.step.astype(state.egress.dtype) * config.dt
    sending = (time >= problem.start) & (state.injected < problem.size)
    updated = law.update(state.law, feedback(state, problem, law, config), params)
    new = jax.tree_util.tree_map(
        lambda fresh, old: jnp.where(sending, fresh, old), updated, state.law
    )
    return new, sending


def _serve(state: State, problem: Problem, rate, sending, config: Config):
    """Inject at ``rate`` and serve every link: (injected, queues, per-link bytes)."""
    dt = config.dt
    num_links1 = problem.capacity.shape[0]
    budget = jnp.maximum(2.0 * rate * dt - state.queue[:, 0], 0.0)
    remaining = jnp.maximum(problem.size - state.injected, 0.0)
    inject = jnp.where(sending, jnp.minimum(jnp.minimum(rate * dt, budget), remaining), 0.0)
    valid = problem.links < num_links1 - 1
    arrivals = jnp.concatenate([inject[:, None], state.served[:, :-1]], axis=1)
    waiting = jnp.where(valid, state.queue + arrivals, 0.0)
    per_link = jax.ops.segment_sum(
        waiting.ravel(), problem.scatter_links.ravel(), num_segments=num_links1 + PAD_SEGMENTS
    )[:num_links1]
    service = jnp.where(state.paused, 0.0, problem.capacity * dt)
    over = per_link > service
    # The division only where it is taken: elsewhere (the sentinel's infinite service) it
    # would put inf x 0 = NaN into gradients.
    fraction = jnp.where(over, jnp.where(over, service, 0.0) / jnp.where(over, per_link, 1.0), 1.0)
    fraction = _materialise(fraction, state.step)
    served = waiting * fraction[problem.links]
    return inject, waiting - served, served, per_link, jnp.maximum(per_link - service, 0.0)


def _write_rings(rings: Rings, write, signals: dict, problem, params, dt):
    """This step's signals into slot ``write`` of every ring that exists. ``signals``:
    ``rate``, ``egress``, ``per_link``, ``old_egress``, ``out`` and ``cut`` (bytes per
    flow delivered and trimmed this step) and ``sending``."""
    rate, egress = signals["rate"], signals["egress"]
    fields = {"rate": rings.rate.at[write].set(rate)}
    dtype = rate.dtype
    if rings.log_no_mark is not None:
        p_link = jnp.where(
            problem.marking,
            marking_probability(egress, params.kmin, params.kmax, params.pmax),
            0.0,
        )
        fields["log_no_mark"] = rings.log_no_mark.at[write].set(log_no_mark(p_link).astype(dtype))
    if rings.queue_delay is not None:
        fields["queue_delay"] = rings.queue_delay.at[write].set(egress / problem.capacity)
    if rings.utilization is not None:
        per_step = problem.capacity * dt
        sent = signals["per_link"] - egress
        fields["utilization"] = rings.utilization.at[write].set(sent / per_step)
        arrived = signals["per_link"] - signals["old_egress"]
        fields["load"] = rings.load.at[write].set(arrived / per_step)
    if rings.ack is not None:
        fields["ack"] = rings.ack.at[write].set(signals["out"] / dt)
    if rings.nack is not None:
        fields["nack"] = rings.nack.at[write].set(signals["cut"] / dt)
    if rings.receivers is not None:
        count = jax.ops.segment_sum(
            signals["sending"].astype(dtype), problem.last_link, num_segments=egress.shape[0]
        )
        fields["receivers"] = rings.receivers.at[write].set(count)
    return rings._replace(**fields)


def _trim(problem: Problem, queue, egress, config: Config):
    """Trimming: ``(queue, egress, cut [F], trimmed [L+1])`` after every switch egress
    above its ``trim_limit`` drops the excess payload, each flow's share in proportion to
    its bytes there (unchanged, with zero cuts, when trimming is off)."""
    if not config.trim:
        return queue, egress, jnp.zeros(queue.shape[0], queue.dtype), jnp.zeros_like(egress)
    over = egress > problem.trim_limit
    fraction = jnp.where(
        over, 1.0 - jnp.where(over, problem.trim_limit, 0.0) / jnp.where(over, egress, 1.0), 0.0
    )
    cut = queue * fraction[problem.links]
    return queue - cut, egress * (1.0 - fraction), _sum_hops(cut), egress * fraction


def _pfc(state: State, problem: Problem, queue, sending, pfc_params, config: Config):
    """PFC pause states, pause time per link and per flow (unchanged when PFC is off)."""
    if config.pfc_mode == "off":
        return state.paused, state.pause_time, state.flow_pause_time
    dt = config.dt
    num_links1 = problem.capacity.shape[0]
    # Hop 0 has no ingress port (the NIC): its prev link is a sentinel segment.
    held = jax.ops.segment_sum(
        queue.ravel(), problem.scatter_prev.ravel(), num_segments=num_links1 + PAD_SEGMENTS
    )[:num_links1]
    if config.pfc_mode == "dynamic":
        xoff = dynamic_xoff(
            held,
            problem.pfc_ingress,
            problem.link_dst_node,
            config.num_nodes,
            pfc_params.shared_buffer,
            pfc_params.dynamic_alpha,
        )
    else:
        xoff = jnp.broadcast_to(pfc_params.xoff, held.shape)
    paused = problem.pfc_ingress & pause_update(
        state.paused, held, xoff, xon_of(xoff, pfc_params.hysteresis)
    )
    paused = _materialise(paused, state.step)
    pause_time = state.pause_time + jnp.where(paused, dt, 0.0)
    on_paused = _sum_hops(paused[problem.links].astype(queue.dtype)) > 0
    flow_pause_time = state.flow_pause_time + jnp.where(on_paused & sending, dt, 0.0)
    return paused, pause_time, flow_pause_time


def step(state: State, problem: Problem, law: RateLaw, params, pfc_params, config: Config):
    """Advance every flow, queue, signal and pause state by one step ``config.dt``."""
    dt = config.dt
    time = state.step.astype(state.egress.dtype) * dt
    law_state, sending = _react(state, problem, law, params, config)
    rate = law_state.rate
    inject, queue, served, per_link, egress = _serve(state, problem, rate, sending, config)
    queue, egress, cut, trimmed = _trim(problem, queue, egress, config)
    # trimmed bytes are sent again: they leave the injected count (selective retransmission)
    injected, injected_c = _kahan(
        state.injected, state.injected_c, inject - cut if config.trim else inject
    )
    out = jnp.take_along_axis(served, problem.last_hop[:, None], axis=1)[:, 0]
    delivered, delivered_c = _kahan(state.delivered, state.delivered_c, out)
    done = jnp.isinf(state.finish) & (delivered >= problem.size * (1.0 - 1e-6))
    write = jnp.mod(state.step, config.ring_slots)
    signals = {
        "rate": rate,
        "egress": egress,
        "per_link": per_link,
        "old_egress": state.egress,
        "out": out,
        "cut": cut,
        "sending": sending,
    }
    rings = _write_rings(state.rings, write, signals, problem, params, dt)
    paused, pause_time, flow_pause_time = _pfc(state, problem, queue, sending, pfc_params, config)
    return State(
        step=state.step + 1,
        law=law_state,
        queue=queue,
        served=served,
        injected=injected,
        injected_c=injected_c,
        delivered=delivered,
        delivered_c=delivered_c,
        finish=jnp.where(done, time + dt, state.finish),
        paused=paused,
        egress=egress,
        rings=rings,
        pause_time=pause_time,
        flow_pause_time=flow_pause_time,
        retransmitted=state.retransmitted + cut if config.trim else state.retransmitted,
        trimmed=state.trimmed + trimmed if config.trim else state.trimmed,
        nonfinite=state.nonfinite,
    )


def cast(problem: Problem, params, pfc_params, dtype):
    """The float inputs in the run's dtype (integer and bool arrays stay as they are)."""
    floats = ("capacity", "line_rate", "size", "start", "initial_rate", "base_rtt", "trim_limit")
    problem = problem._replace(
        **{name: getattr(problem, name).astype(dtype) for name in floats},
        feedback_delay=problem.feedback_delay.astype(dtype),
    )
    params = jax.tree_util.tree_map(lambda v: jnp.asarray(v, dtype), params)
    pfc_params = jax.tree_util.tree_map(lambda v: jnp.asarray(v, dtype), pfc_params)
    return problem, params, pfc_params


def _record(state: State) -> Record:
    return Record(
        rate=state.law.rate,
        delivered=state.delivered,
        queue=state.egress[:-1],
        paused=state.paused[:-1],
    )


def one_record(carry: State, problem: Problem, law: RateLaw, params, pfc_params, config: Config):
    """``steps_per_record`` steps, then the record of the state reached."""

    def inner(state, _):
        return step(state, problem, law, params, pfc_params, config), None

    carry, _ = jax.lax.scan(inner, carry, None, length=config.steps_per_record)
    # NaN/inf persist once they appear, so checking at records (not every step) is enough.
    bad = ~jnp.all(jnp.isfinite(carry.law.rate)) | ~jnp.all(jnp.isfinite(carry.egress))
    carry = carry._replace(nonfinite=carry.nonfinite | bad)
    return carry, _record(carry)


@functools.partial(jax.jit, static_argnames=("law", "config", "dtype"))
def run(problem: Problem, params, pfc_params, law: RateLaw, config: Config, dtype=jnp.float32):
    """Integrate ``num_records x steps_per_record`` steps; return (final state, records).

    The loop is a bounded ``lax.scan`` of ``lax.scan``s (records every
    ``steps_per_record`` steps), so its length is fixed at compile time.
    """
    problem, params, pfc_params = cast(problem, params, pfc_params, dtype)
    state = init_state(problem, law, params, config, dtype)

    def outer(carry, _):
        return one_record(carry, problem, law, params, pfc_params, config)

    return jax.lax.scan(outer, state, None, length=config.num_records)


def run_remat(problem: Problem, params, pfc_params, law: RateLaw, config: Config, dtype):
    """:func:`run` for reverse-mode differentiation: each record's steps are recomputed in
    the backward pass (``jax.checkpoint``), so ``jax.grad`` keeps ``num_records`` states
    instead of every step's. Not jitted: call it inside ``jax.jit`` / ``jax.grad``."""
    problem, params, pfc_params = cast(problem, params, pfc_params, dtype)
    state = init_state(problem, law, params, config, dtype)
    body = jax.checkpoint(lambda carry: one_record(carry, problem, law, params, pfc_params, config))

    def outer(carry, _):
        return body(carry)

    return jax.lax.scan(outer, state, None, length=config.num_records)


@functools.partial(jax.jit, static_argnames=("law", "config", "dtype", "problem_axes"))
def run_batch(
    problem: Problem,
    params,
    pfc_params,
    law: RateLaw,
    config: Config,
    dtype=jnp.float32,
    problem_axes: tuple | None = None,
):
    """:func:`run` vmapped over a batch: the leading axis of every law and PFC parameter
    field, and of the problem fields whose ``problem_axes`` entry is 0 (scenarios)."""
    axes = Problem(*(problem_axes or (None,) * len(Problem._fields)))
    return jax.vmap(lambda s, p, q: run(s, p, q, law, config, dtype), in_axes=(axes, 0, 0))(
        problem, params, pfc_params
    )


# ------------------------------------------------------------- chunked runs (progress)
# The same integration cut into chunks of ``chunk`` records, so the host can report
# progress between chunks. Every chunk has the same static length (one compilation); the
# records past ``num_records`` in the last chunk are skipped by a ``lax.cond`` (the state
# is left untouched) and dropped on the host. Each step runs the same ``step`` function
# on the same state as :func:`run`, so the results agree with it.


@functools.partial(jax.jit, static_argnames=("law", "config", "dtype"))
def start(problem: Problem, params, pfc_params, law: RateLaw, config: Config, dtype=jnp.float32):
    """The state at time 0 of a chunked run."""
    problem, params, pfc_params = cast(problem, params, pfc_params, dtype)
    return init_state(problem, law, params, config, dtype)


@functools.partial(jax.jit, static_argnames=("law", "config", "dtype", "chunk"))
def advance(
    state: State,
    first_record,
    problem: Problem,
    params,
    pfc_params,
    law: RateLaw,
    config: Config,
    dtype=jnp.float32,
    chunk: int = 1,
):
    """Records ``first_record .. first_record + chunk - 1`` (those ``>= num_records`` are
    skipped). Returns ``(state, records [chunk, ...])``."""
    problem, params, pfc_params = cast(problem, params, pfc_params, dtype)

    def outer(carry, index):
        def go(c):
            return one_record(c, problem, law, params, pfc_params, config)

        def skip(c):
            return c, _record(c)

        return jax.lax.cond(index < config.num_records, go, skip, carry)

    indices = first_record + jnp.arange(chunk, dtype=jnp.int32)
    return jax.lax.scan(outer, state, indices)


@functools.partial(jax.jit, static_argnames=("law", "config", "dtype", "problem_axes"))
def start_batch(
    problem: Problem,
    params,
    pfc_params,
    law: RateLaw,
    config: Config,
    dtype=jnp.float32,
    problem_axes: tuple | None = None,
):
    """:func:`start` for a batch."""
    axes = Problem(*(problem_axes or (None,) * len(Problem._fields)))
    return jax.vmap(lambda s, p, q: start(s, p, q, law, config, dtype), in_axes=(axes, 0, 0))(
        problem, params, pfc_params
    )


@functools.partial(jax.jit, static_argnames=("law", "config", "dtype", "chunk", "problem_axes"))
def advance_batch(
    state: State,
    first_record,
    problem: Problem,
    params,
    pfc_params,
    law: RateLaw,
    config: Config,
    dtype=jnp.float32,
    chunk: int = 1,
    problem_axes: tuple | None = None,
):
    """:func:`advance` for a batch (records ``[batch, chunk, ...]``)."""
    axes = Problem(*(problem_axes or (None,) * len(Problem._fields)))
    return jax.vmap(
        lambda st, s, p, q: advance(st, first_record, s, p, q, law, config, dtype, chunk),
        in_axes=(0, axes, 0, 0),
    )(state, problem, params, pfc_params)


__all__ = [
    "Config",
    "PAD_SEGMENTS",
    "Problem",
    "RING_SIGNALS",
    "Record",
    "Rings",
    "State",
    "advance",
    "advance_batch",
    "cast",
    "feedback",
    "init_state",
    "one_record",
    "run",
    "run_batch",
    "run_remat",
    "start",
    "start_batch",
    "step",
]
