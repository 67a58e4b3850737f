"""The jitted DCQCN + PFC fluid integrator (arrays in, arrays out).

Model, per fixed step ``dt`` (explicit Euler; see ``DCQCNParams.max_stable_dt``):

* **Sources**: flow ``f`` starts at ``start[f]``, injects at its current DCQCN rate
  ``R_C`` into its NIC queue (hop 0) while that holds less than two steps' worth (a
  paused NIC therefore stops the flow instead of building an unbounded backlog) and
  until ``size[f]`` bytes are injected; it finishes when all bytes are delivered.
* **Queues**: every (flow, hop) entry holds the flow's bytes waiting at that hop's egress.
  Each link serves its backlog plus this step's arrivals, up to ``capacity x dt`` (0 while
  paused), shared in proportion to what each flow has there; what a hop serves arrives at
  the next hop one step later. The egress queue of a link is the sum of its entries, so
  bytes are conserved per flow and per link.
* **ECN**: links leaving a switch mark with RED on their egress queue; a flow sees
  ``1 - prod(1 - p_l)`` over its path, delayed by its feedback delay.
* **Delays**: per-link ``log(1 - p)`` and per-flow ``R_C`` are kept in ring buffers of
  ``D`` slots (``D > max delay / dt``); flow ``f`` reads the slot ``delay_steps[f]`` back.
* **PFC** (one lossless priority): the ingress queue of port ``l`` at switch ``dst(l)`` is
  the bytes that arrived over ``l`` and still wait at the next hop; above XOFF the link
  ``l`` is paused (its sender's egress stops) until the queue falls below XON. Thresholds
  are static or dynamic (``alpha x`` free shared buffer of the switch).

Per step the work is a few fused gathers and two ``segment_sum``s over the ``[F, H]``
entries: ``O(F H + L)``. Memory: state ``O(F H + D (F + L))``; records ``O(R (F + L))``.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from .model import dcqcn_derivatives, log_no_mark, marking_probability

PFC_MODES = ("off", "static", "dynamic")
PAD_SEGMENTS = 256


class Problem(NamedTuple):
    """Host-prepared arrays (padding uses the sentinel link id ``L``).

    links, prev_links: int32 ``[F, H]`` link of each hop and the link it arrived over
    (``L`` for hop 0 and padding), used for gathers; scatter_links, scatter_prev: the same
    for the two ``segment_sum``s, but with padding / hop 0 spread over ``PAD_SEGMENTS``
    extra segments after ``L`` (on GPUs, a million atomic adds onto one sentinel address
    would serialise); last_hop: int32 ``[F]``; capacity: ``[L+1]`` bytes/s;
    marking, pfc_ingress: bool ``[L+1]``; link_dst_node: int32 ``[L+1]``; line_rate,
    size, start: ``[F]`` (bytes/s, bytes, s); delay_steps: int32 ``[F]`` (>= 1).
    """

    links: jax.Array
    prev_links: jax.Array
    last_hop: jax.Array
    capacity: jax.Array
    marking: jax.Array
    pfc_ingress: jax.Array
    scatter_links: jax.Array
    scatter_prev: jax.Array
    link_dst_node: jax.Array
    line_rate: jax.Array
    size: jax.Array
    start: jax.Array
    delay_steps: jax.Array


class Config(NamedTuple):
    """Static configuration (a change recompiles)."""

    dt: float
    steps_per_record: int
    num_records: int
    ring_slots: int
    pfc_mode: str
    num_nodes: int


class State(NamedTuple):
    step: jax.Array
    rc: jax.Array
    rt: jax.Array
    alpha: jax.Array
    queue: jax.Array  # [F, H] bytes waiting at each hop
    served: jax.Array  # [F, H] bytes served by each hop in the last step
    injected: jax.Array  # [F] bytes (Kahan sum: value + compensation)
    injected_c: jax.Array
    delivered: jax.Array
    delivered_c: jax.Array
    finish: jax.Array  # [F] s, inf until finished
    paused: jax.Array  # [L+1] bool
    egress: jax.Array  # [L+1] bytes
    ring_log: jax.Array  # [D, L+1] log(1 - p) per link
    ring_rate: jax.Array  # [D, F] R_C per flow
    pause_time: jax.Array  # [L+1] s
    flow_pause_time: jax.Array  # [F] s
    nonfinite: jax.Array  # bool


class Record(NamedTuple):
    rate: jax.Array  # [F] R_C, bytes/s
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


def init_state(problem: Problem, params, pfc_params, config: Config, dtype) -> State:
    num_flows, hops = problem.links.shape
    num_links1 = problem.capacity.shape[0]
    rc0 = (problem.line_rate * params.initial_rate_fraction).astype(dtype)
    zeros_f = jnp.zeros(num_flows, dtype)
    return State(
        step=jnp.zeros((), jnp.int32),
        rc=rc0,
        rt=problem.line_rate.astype(dtype),
        alpha=jnp.full(num_flows, params.initial_alpha, dtype),
        queue=jnp.zeros((num_flows, hops), dtype),
        served=jnp.zeros((num_flows, hops), dtype),
        injected=zeros_f,
        injected_c=zeros_f,
        delivered=zeros_f,
        delivered_c=zeros_f,
        finish=jnp.full(num_flows, jnp.inf, dtype),
        paused=jnp.zeros(num_links1, bool),
        egress=jnp.zeros(num_links1, dtype),
        ring_log=jnp.zeros((config.ring_slots, num_links1), dtype),
        ring_rate=jnp.broadcast_to(rc0, (config.ring_slots, num_flows)).astype(dtype),
        pause_time=jnp.zeros(num_links1, dtype),
        flow_pause_time=zeros_f,
        nonfinite=jnp.zeros((), bool),
    )


def step(state: State, problem: Problem, params, pfc_params, config: Config) -> State:
    """Advance every flow, queue and pause state by one step ``config.dt``."""
    dt = config.dt
    dtype = state.rc.dtype
    num_flows, hops = problem.links.shape
    num_links1 = problem.capacity.shape[0]
    slots = config.ring_slots
    time = state.step.astype(dtype) * dt
    flow_ids = jnp.arange(num_flows)

    # --- delayed feedback from the rings (bounded memory: D slots).
    slot = jnp.mod(state.step - problem.delay_steps, slots)
    log_hist = _sum_hops(state.ring_log[slot[:, None], problem.links])
    rate_hist = state.ring_rate[slot, flow_ids]

    # --- DCQCN reaction point (only while the flow is sending).
    started = time >= problem.start
    sending = started & (state.injected < problem.size)
    d_rc, d_rt, d_alpha = dcqcn_derivatives(
        state.rc, state.rt, state.alpha, log_hist, rate_hist, params
    )
    floor = jnp.minimum(params.min_rate, problem.line_rate)
    rc = jnp.where(sending, jnp.clip(state.rc + dt * d_rc, floor, problem.line_rate), state.rc)
    rt = jnp.where(sending, jnp.clip(state.rt + dt * d_rt, floor, problem.line_rate), state.rt)
    alpha = jnp.where(sending, jnp.clip(state.alpha + dt * d_alpha, 0.0, 1.0), state.alpha)

    # --- sources inject into their NIC queue (hop 0), bounded to two steps of rate.
    budget = jnp.maximum(2.0 * rc * dt - state.queue[:, 0], 0.0)
    remaining = jnp.maximum(problem.size - state.injected, 0.0)
    inject = jnp.where(sending, jnp.minimum(jnp.minimum(rc * dt, budget), remaining), 0.0)
    injected, injected_c = _kahan(state.injected, state.injected_c, inject)

    # --- queues: every link serves backlog + arrivals, shared in proportion.
    valid = problem.links < num_links1 - 1
    arrivals = jnp.concatenate([inject[:, None], state.served[:, :-1]], axis=1)
    waiting = jnp.where(valid, state.queue + arrivals, 0.0)
    per_link = jax.ops.segment_sum(
        waiting.ravel(), problem.scatter_links.ravel(), num_segments=num_links1 + PAD_SEGMENTS
    )[:num_links1]
    service = jnp.where(state.paused, 0.0, problem.capacity * dt)
    fraction = jnp.where(per_link > service, service / jnp.maximum(per_link, 1e-30), 1.0)
    fraction = _materialise(fraction, state.step)
    served = waiting * fraction[problem.links]
    queue = waiting - served
    egress = jnp.maximum(per_link - service, 0.0)
    out = jnp.take_along_axis(served, problem.last_hop[:, None], axis=1)[:, 0]
    delivered, delivered_c = _kahan(state.delivered, state.delivered_c, out)
    done = jnp.isinf(state.finish) & (delivered >= problem.size * (1.0 - 1e-6))
    finish = jnp.where(done, time + dt, state.finish)

    # --- ECN marking at switch egress, written into the ring.
    p_link = jnp.where(
        problem.marking, marking_probability(egress, params.kmin, params.kmax, params.pmax), 0.0
    )
    write = jnp.mod(state.step, slots)
    ring_log = state.ring_log.at[write].set(log_no_mark(p_link).astype(dtype))
    ring_rate = state.ring_rate.at[write].set(rc)

    # --- PFC: ingress queue per (switch, ingress port) -> pause the upstream link.
    paused, pause_time, flow_pause_time = state.paused, state.pause_time, state.flow_pause_time
    if config.pfc_mode != "off":
        # Hop 0 has no ingress port (the NIC): its prev link is the sentinel segment.
        ingress = jax.ops.segment_sum(
            queue.ravel(), problem.scatter_prev.ravel(), num_segments=num_links1 + PAD_SEGMENTS
        )[:num_links1]
        if config.pfc_mode == "dynamic":
            node_use = jax.ops.segment_sum(
                jnp.where(problem.pfc_ingress, ingress, 0.0),
                problem.link_dst_node,
                num_segments=config.num_nodes,
            )
            free = jnp.maximum(pfc_params.shared_buffer - node_use[problem.link_dst_node], 0.0)
            xoff = pfc_params.dynamic_alpha * free
        else:
            xoff = jnp.broadcast_to(pfc_params.xoff, ingress.shape)
        xon = jnp.maximum(xoff - pfc_params.hysteresis, 0.0)
        paused = problem.pfc_ingress & jnp.where(state.paused, ingress > xon, ingress > xoff)
        paused = _materialise(paused, state.step)
        pause_time = pause_time + jnp.where(paused, dt, 0.0)
        on_paused = _sum_hops(paused[problem.links].astype(dtype)) > 0
        flow_pause_time = flow_pause_time + jnp.where(on_paused & sending, dt, 0.0)

    return State(
        step=state.step + 1,
        rc=rc,
        rt=rt,
        alpha=alpha,
        queue=queue,
        served=served,
        injected=injected,
        injected_c=injected_c,
        delivered=delivered,
        delivered_c=delivered_c,
        finish=finish,
        paused=paused,
        egress=egress,
        ring_log=ring_log,
        ring_rate=ring_rate,
        pause_time=pause_time,
        flow_pause_time=flow_pause_time,
        nonfinite=state.nonfinite,
    )


def _cast(problem: Problem, params, pfc_params, dtype):
    """The float inputs in the run's dtype (integer and bool arrays stay as they are)."""
    problem = problem._replace(
        capacity=problem.capacity.astype(dtype),
        line_rate=problem.line_rate.astype(dtype),
        size=problem.size.astype(dtype),
        start=problem.start.astype(dtype),
    )
    params = jax.tree_util.tree_map(lambda v: jnp.asarray(v, dtype), params)
    pfc_params = jax.tree_util.tree_map(lambda v: jnp.asarray(v, dtype), pfc_params)
    return problem, params, pfc_params


def _one_record(carry: State, problem: Problem, params, pfc_params, config: Config):
    """``steps_per_record`` steps, then the record of the state reached."""

    def inner(state, _):
        return step(state, problem, params, pfc_params, config), None

    carry, _ = jax.lax.scan(inner, carry, None, length=config.steps_per_record)
    # NaN/inf persist once they appear, so checking at records (not every step) is enough.
    bad = ~jnp.all(jnp.isfinite(carry.rc)) | ~jnp.all(jnp.isfinite(carry.egress))
    carry = carry._replace(nonfinite=carry.nonfinite | bad)
    record = Record(
        rate=carry.rc, delivered=carry.delivered, queue=carry.egress[:-1], paused=carry.paused[:-1]
    )
    return carry, record


@functools.partial(jax.jit, static_argnames=("config", "dtype"))
def run(problem: Problem, params, pfc_params, config: Config, dtype=jnp.float32):
    """Integrate ``num_records x steps_per_record`` steps; return (final state, records).

    The loop is a bounded ``lax.scan`` of ``lax.scan``s (records every
    ``steps_per_record`` steps), so its length is fixed at compile time.
    """
    problem, params, pfc_params = _cast(problem, params, pfc_params, dtype)
    state = init_state(problem, params, pfc_params, config, dtype)

    def outer(carry, _):
        return _one_record(carry, problem, params, pfc_params, config)

    return jax.lax.scan(outer, state, None, length=config.num_records)


@functools.partial(jax.jit, static_argnames=("config", "dtype"))
def run_batch(problem: Problem, params, pfc_params, config: Config, dtype=jnp.float32):
    """:func:`run` vmapped over a batch of DCQCN and PFC parameter sets (leading axis of
    every field of both)."""
    return jax.vmap(lambda p, q: run(problem, p, q, config, dtype))(params, pfc_params)


# ------------------------------------------------------------- chunked runs (progress)
# The same integration cut into chunks of ``chunk`` records, so the host can report
# progress between chunks. Every chunk has the same static length (one compilation); the
# records past ``num_records`` in the last chunk are skipped by a ``lax.cond`` (the state
# is left untouched) and dropped on the host. Each step runs the same ``step`` function
# on the same state as :func:`run`, so the results agree with it.


@functools.partial(jax.jit, static_argnames=("config", "dtype"))
def start(problem: Problem, params, pfc_params, config: Config, dtype=jnp.float32) -> State:
    """The state at time 0 of a chunked run."""
    problem, params, pfc_params = _cast(problem, params, pfc_params, dtype)
    return init_state(problem, params, pfc_params, config, dtype)


@functools.partial(jax.jit, static_argnames=("config", "dtype", "chunk"))
def advance(
    state: State,
    first_record,
    problem: Problem,
    params,
    pfc_params,
    config: Config,
    dtype=jnp.float32,
    chunk: int = 1,
):
    """Records ``first_record .. first_record + chunk - 1`` (those ``>= num_records`` are
    skipped). Returns ``(state, records [chunk, ...])``."""
    problem, params, pfc_params = _cast(problem, params, pfc_params, dtype)

    def outer(carry, index):
        def go(c):
            return _one_record(c, problem, params, pfc_params, config)

        def skip(c):
            return c, Record(
                rate=c.rc, delivered=c.delivered, queue=c.egress[:-1], paused=c.paused[:-1]
            )

        return jax.lax.cond(index < config.num_records, go, skip, carry)

    indices = first_record + jnp.arange(chunk, dtype=jnp.int32)
    return jax.lax.scan(outer, state, indices)


@functools.partial(jax.jit, static_argnames=("config", "dtype"))
def start_batch(problem: Problem, params, pfc_params, config: Config, dtype=jnp.float32):
    """:func:`start` for a parameter batch."""
    return jax.vmap(lambda p, q: start(problem, p, q, config, dtype))(params, pfc_params)


@functools.partial(jax.jit, static_argnames=("config", "dtype", "chunk"))
def advance_batch(
    state: State,
    first_record,
    problem: Problem,
    params,
    pfc_params,
    config: Config,
    dtype=jnp.float32,
    chunk: int = 1,
):
    """:func:`advance` for a parameter batch (records ``[batch, chunk, ...]``)."""
    return jax.vmap(lambda s, p, q: advance(s, first_record, problem, p, q, config, dtype, chunk))(
        state, params, pfc_params
    )
