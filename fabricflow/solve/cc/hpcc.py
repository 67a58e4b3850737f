"""HPCC (Li et al., "HPCC: High Precision Congestion Control", SIGCOMM'19) as a rate law.

Every packet carries in-band telemetry (INT) of each link on its path: queue length,
transmitted bytes, capacity. The sender, reading it one feedback delay late, computes per
link the normalized in-flight bytes ``u_l = q_l / (C_l T) + tx_l / C_l`` and takes the
most loaded link, ``u = max_l u_l``, into an EWMA ``U`` with time constant ``T`` (the
base RTT). Its window reacts to every ACK from a *reference* window ``W_c`` that it
updates once per RTT (Algorithm 1 of the paper)::

    W = W_c / (U / eta) + W_AI     if U >= eta or incStage >= maxStage   (multiplicative)
    W = W_c + W_AI                 otherwise                             (additive)
    once per T:  W_c <- W;  incStage <- 0 after a multiplicative step, else incStage + 1

and it paces at ``R = W / T``. Here every step ``dt`` is an ACK: ``U`` moves by
``dt / T`` of the way to the new ``u``, ``W`` follows, and a per-flow timer moves ``W_c``
to ``W`` every ``T``.

Fixed point (:func:`~fabricflow.solve.cc.fixed_points.hpcc_fixed_point`): with ``N``
flows on one link, ``W = W_c`` gives ``U = eta W_c / (W_c - W_AI)``; while that is below 1
no queue builds, ``U`` is the utilization and the throughput is ``eta C + N W_AI / T``:
utilization just above ``eta`` with an empty queue (the paper's "near-zero queues").

Defaults (docs/references.md §10): ``eta`` = 0.95 and ``maxStage`` = 5 (the paper's
evaluation), ``W_AI = W_init (1 - eta) / N`` with ``W_init`` the line rate x ``T`` and
``N`` = 100 expected flows per link (ours: the steps of ``N`` flows fit in the ``1 - eta``
headroom; the authors' simulator uses the same order), minimum rate 100 Mb/s
(the ``MinRate`` default of the authors' ns-3 simulator). ``T`` (``base_rtt``) is each
flow's feedback delay unless set: the age of the INT it reads.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from fabricflow.solve.cc.law import Feedback, RateLaw
from fabricflow.solve.parameters import Parameters, register


@register
@dataclasses.dataclass(frozen=True)
class HPCCParams(Parameters):
    """HPCC sender parameters (SI units).

    Attributes:
        eta: target utilization, in (0, 1].
        max_stage: additive stages (reference updates with U < eta) before a
            multiplicative step is allowed again (maxStage).
        expected_flows: N of ``W_AI = W_init (1 - eta) / N``, flows per link.
        base_rtt: T, s; 0: each flow's feedback delay.
        min_rate: lowest sending rate, bytes/s.
        initial_rate_fraction: starting rate as a fraction of the line rate.
    """

    FIELDS: ClassVar = {
        "eta": ("number", "(0, 1]"),
        "max_stage": ("number", ">= 0"),
        "expected_flows": ("number", "> 0"),
        "base_rtt": ("time", ">= 0"),
        "min_rate": ("rate", ">= 0"),
        "initial_rate_fraction": ("number", "(0, 1]"),
    }
    PREFIX: ClassVar = "params"
    NAME: ClassVar = "HPCC"

    eta: float = 0.95
    max_stage: float = 5.0
    expected_flows: float = 100.0
    base_rtt: float = 0.0
    min_rate: float = 100e6 / 8
    initial_rate_fraction: float = 1.0


HPCCParams.PRESETS = {"paper": HPCCParams()}


class HPCCState(NamedTuple):
    """Per flow: ``rate`` (bytes/s), reference window ``window`` (bytes), EWMA
    ``utilization`` U, ``stage`` (additive stages), ``timer`` (s since the last reference
    update)."""

    rate: jax.Array
    window: jax.Array
    utilization: jax.Array
    stage: jax.Array
    timer: jax.Array


def base_rtt(feedback: Feedback, params) -> jax.Array:
    """HPCC's ``T`` per flow, s: ``params.base_rtt`` or, when 0, the feedback delay."""
    return jnp.where(params.base_rtt > 0, params.base_rtt, feedback.feedback_delay)


def path_load(feedback: Feedback, rtt) -> jax.Array:
    """``max`` over the path of ``q / (C T) + tx / C`` (INT), ``[F]``."""
    hop = feedback.hop_queue_delay / rtt[:, None] + feedback.hop_utilization
    return jnp.max(jnp.where(feedback.hop_valid, hop, 0.0), axis=1)


@dataclasses.dataclass(frozen=True)
class HPCC(RateLaw):
    """HPCC: INT-measured in-flight bytes -> window toward ``eta`` utilization (module
    docs)."""

    name: ClassVar = "hpcc"
    title: ClassVar = "HPCC"
    params_class: ClassVar = HPCCParams
    signals: ClassVar = frozenset({"int"})

    def init(self, initial_rate, line_rate, params) -> HPCCState:
        zeros = jnp.zeros_like(initial_rate)
        # The window is rate x T; T needs the feedback delay, so it is set at the first
        # update from the rate (a window of 0 marks "not yet").
        return HPCCState(initial_rate, zeros, zeros, zeros, zeros)

    def update(self, state: HPCCState, feedback: Feedback, params) -> HPCCState:
        dt = feedback.dt
        rtt = base_rtt(feedback, params)
        line = feedback.line_rate
        reference = jnp.where(state.window > 0, state.window, state.rate * rtt)
        w_ai = line * rtt * (1.0 - params.eta) / params.expected_flows
        weight = jnp.minimum(dt / rtt, 1.0)
        utilization = state.utilization + weight * (path_load(feedback, rtt) - state.utilization)
        multiplicative = (utilization >= params.eta) | (state.stage >= params.max_stage)
        safe = jnp.maximum(utilization, 1e-6)
        window = jnp.where(multiplicative, reference * params.eta / safe + w_ai, reference + w_ai)
        floor = jnp.minimum(params.min_rate, line)
        window = jnp.clip(window, floor * rtt, line * rtt)
        timer = state.timer + dt
        due = timer >= rtt
        return HPCCState(
            rate=window / rtt,
            window=jnp.where(due, window, reference),
            utilization=utilization,
            stage=jnp.where(due, jnp.where(multiplicative, 0.0, state.stage + 1.0), state.stage),
            timer=jnp.where(due, timer - rtt, timer),
        )

    def max_stable_dt(self, params, min_delay: float) -> float:
        """The EWMA and the once-per-T reference update need ``dt <= T / 2``."""
        rtt = float(jnp.min(jnp.where(params.base_rtt > 0, params.base_rtt, min_delay)))
        return rtt / 2.0


__all__ = ["HPCC", "HPCCParams", "HPCCState", "base_rtt", "path_load"]
