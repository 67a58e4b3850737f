"""The interface of a congestion-control rate law, in the style of diffrax's solvers.

The fluid integrator (:mod:`.integrator`) owns everything the network does: queues,
service, ECN marking, INT and delay signals, feedback delays and PFC. A rate law owns
only the reaction point of every flow, through three methods:

* ``init(initial_rate, line_rate, params)``: the law's state at time 0, a ``NamedTuple``
  of ``[F]`` arrays whose first field is ``rate`` (bytes/s, what the flow sends now);
* ``update(state, feedback, params)``: the state one step ``feedback.dt`` later, from
  the delayed feedback the law asked for (:class:`Feedback`); only flows that are
  sending are updated (the integrator keeps the others' state);
* ``max_stable_dt(params, min_delay)``: the largest step the update is stable at
  (``min_delay``: the shortest feedback delay of the run's flows).

A law declares the signals it reads in ``signals`` (a subset of :data:`SIGNALS`), so the
integrator builds only those rings and gathers; its parameters are a
:class:`~fabricflow.solve.parameters.Parameters` class (``params_class``) whose
``PRESETS`` are sourced (the first is the default). A law instance has no fields: it is
hashable and passed to ``jit`` as a static argument (one compilation per law).

A new algorithm is one file: a ``Parameters`` subclass, a state ``NamedTuple`` and a
:class:`RateLaw` subclass, added to :data:`fabricflow.solve.cc.laws.LAWS`.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, ClassVar, NamedTuple

import jax

from fabricflow.solve.parameters import Parameters

#: Network signals a law can ask for: ``ecn`` (RED/ECN marks along the path), ``delay``
#: (queueing delay along the path, split into fabric and host parts), ``int`` (per-hop
#: in-band telemetry: queue, transmitted and offered load of every link on the path),
#: ``ack`` (the flow's bytes acknowledged per second), ``nack`` (the flow's bytes trimmed
#: per second, from the NACKs of trimmed packets), ``credit`` (the receiver's view: how
#: many flows send to its downlink, and that link's capacity).
SIGNALS = ("ecn", "delay", "int", "ack", "nack", "credit")


class Feedback(NamedTuple):
    """What the reaction points know at one step (``[F]`` arrays unless noted).

    Every network signal is read ``feedback_delay`` seconds late (the path's one-way
    latency plus the extra delay of the run). Fields of signals the law did not ask for
    are ``None``.

    Attributes:
        time: s (scalar). dt: the step, s (a Python float).
        line_rate: bytes/s cap of each flow (its NIC).
        base_rtt: s, round-trip propagation of the flow (twice its path latency).
        feedback_delay: s, the age of the signals below.
        num_hops: hops of each flow's path (links, as float).
        rate_delayed: bytes/s, the flow's own rate ``feedback_delay`` ago.
        log_no_mark: ``log(1 - p)`` of the path's ECN marking (<= 0) [ecn].
        fabric_queue_delay, host_queue_delay: s of queueing at switch egresses and at
            host NIC egresses along the path [delay].
        hop_queue_delay: ``[F, H]`` s, queue / capacity of each hop's link [int].
        hop_utilization: ``[F, H]`` transmitted bytes / (capacity x dt) [int].
        hop_load: ``[F, H]`` arriving bytes / (capacity x dt): the offered load [int].
        hop_valid: bool ``[F, H]``, real hops (not padding) [int].
        hop_rate_delayed: ``[F, H]`` bytes/s, the flow's own rate when the bytes its
            telemetry of each hop measures were sent (the feedback delay plus the latency
            from the sender to that hop ago) [int].
        ack_rate: bytes/s of the flow delivered to its receiver [ack].
        nack_rate: bytes/s of the flow trimmed in the fabric (0 without trimming) [nack].
        receiver_flows: flows sending over the flow's last hop (its receiver's downlink),
            as float [credit]. receiver_capacity: bytes/s of that downlink [credit].
    """

    time: jax.Array
    dt: float
    line_rate: jax.Array
    base_rtt: jax.Array
    feedback_delay: jax.Array
    num_hops: jax.Array
    rate_delayed: jax.Array
    log_no_mark: Any = None  # jax.Array, or None when not asked for
    fabric_queue_delay: Any = None  # jax.Array, or None when not asked for
    host_queue_delay: Any = None  # jax.Array, or None when not asked for
    hop_queue_delay: Any = None  # jax.Array, or None when not asked for
    hop_utilization: Any = None  # jax.Array, or None when not asked for
    hop_load: Any = None  # jax.Array, or None when not asked for
    hop_valid: Any = None  # jax.Array, or None when not asked for
    hop_rate_delayed: Any = None  # jax.Array, or None when not asked for
    ack_rate: Any = None  # jax.Array, or None when not asked for
    nack_rate: Any = None  # jax.Array, or None when not asked for
    receiver_flows: Any = None  # jax.Array, or None when not asked for
    receiver_capacity: Any = None  # jax.Array, or None when not asked for


@dataclasses.dataclass(frozen=True)
class RateLaw(abc.ABC):
    """A congestion-control reaction point (see the module docs)."""

    name: ClassVar[str]
    title: ClassVar[str]
    params_class: ClassVar[type[Parameters]]
    signals: ClassVar[frozenset[str]]

    @abc.abstractmethod
    def init(self, initial_rate: jax.Array, line_rate: jax.Array, params) -> Any:
        """State at time 0 from each flow's starting rate and line rate (bytes/s)."""

    @abc.abstractmethod
    def update(self, state: Any, feedback: Feedback, params) -> Any:
        """State after one step ``feedback.dt`` (rates kept within the line rate)."""

    def initial_rate(self, line_rate: jax.Array, params) -> jax.Array:
        """Default starting rate: ``params.initial_rate_fraction`` of the line rate."""
        return line_rate * params.initial_rate_fraction

    def max_stable_dt(self, params, min_delay: float) -> float:
        """Largest stable step, s (``min_delay``: the shortest feedback delay, s)."""
        return float("inf")

    def preset(self, name: str | None = None, **overrides):
        """A preset of this law's parameters (default: the first) with fields overridden."""
        return self.params_class.preset(name, **overrides)


__all__ = ["SIGNALS", "Feedback", "RateLaw"]
