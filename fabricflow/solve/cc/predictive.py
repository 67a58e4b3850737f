"""A predictive controller: model-predictive control with the fluid queue as predictor.

Design. Each sender reads, per hop of its path, the queueing delay ``d = q / C`` and the
offered load ``lam = arrivals / C`` that in-band telemetry reports (as HPCC's INT does),
one feedback delay ``tau`` late. It predicts with the same fluid queue equation the
integrator solves, ``dd/dt = lam - 1`` (``d >= 0``), under the symmetric assumption that
the other flows on the hop change their rates as it changed its own (the load scales
with ``R(s) / R(t - tau)``):

* the present delay, bridging the dead time (a Smith predictor):
  ``d_now = max(0, d + tau (lam (1 + r) / 2 - 1))`` with ``r = R(t) / R(t - tau)``;
* the delay after a horizon ``H`` for a load ``x`` held over it: ``d_now + H (x - 1)``.

It then chooses the load that minimizes, over the horizon,
``J(x) = (d_now + H (x - 1) - d_ref)^2 + rho H^2 (x - eta)^2`` -- drain the queue to the
target delay ``d_ref`` without straying far from the target utilization ``eta`` -- which
has the closed form ``x* = (1 + (d_ref - d_now) / H + rho eta) / (1 + rho)``. The rate
that gives the hop that load is ``R(t - tau) x* / lam``; the flow takes the smallest over
its hops (its bottleneck), adds ``rate_ai`` (an additive term that makes the shares fair,
as in AIMD) and moves toward it: at once when that is a decrease, with time constant
``smoothing`` (at least 1.5 feedback delays) when it is an increase.

Why this design rather than a small predictor fitted on simulated trajectories: the
fluid equation *is* the model of the queue here, exact for the fluid, with no data to
collect, no parameters fitted to a scenario and nothing to retrain when the fabric
changes; its one-step optimum is closed form, so the controller vectorizes over flows and
hops like the others and differentiates through (``tune_cc``). A fitted predictor would
be judged against the very model it was fitted to.

At rest every hop's load is 1 and the delay ``d_ref + H (1 + rho) N rate_ai / C`` for
``N`` flows on a link of capacity ``C``: full utilization with a queue of about
``d_ref`` (:func:`~fabricflow.solve.cc.fixed_points.predictive_fixed_point`).

Defaults (ours, docs/references.md §13): ``d_ref`` = 2 us, ``H`` = 10 us, ``rho`` = 0.1,
``eta`` = 1, ``rate_ai`` = 10 Mb/s, smoothing 10 us, minimum rate 100 Mb/s.
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
class PredictiveParams(Parameters):
    """Predictive controller parameters (SI units).

    Attributes:
        target_delay: queueing delay to hold at the bottleneck (d_ref), s.
        horizon: prediction horizon H, s.
        rho: weight of the utilization term against the delay term.
        eta: target utilization of the delay-free term.
        rate_ai: additive increase per update, bytes/s (fairness).
        smoothing: time constant of a rise toward the chosen rate, s (at least 1.5
            feedback delays are used).
        min_rate: lowest sending rate, bytes/s.
        initial_rate_fraction: starting rate as a fraction of the line rate.
    """

    FIELDS: ClassVar = {
        "target_delay": ("time", ">= 0"),
        "horizon": ("time", "> 0"),
        "rho": ("number", ">= 0"),
        "eta": ("number", "(0, 1]"),
        "rate_ai": ("rate", ">= 0"),
        "smoothing": ("time", "> 0"),
        "min_rate": ("rate", ">= 0"),
        "initial_rate_fraction": ("number", "(0, 1]"),
    }
    PREFIX: ClassVar = "params"
    NAME: ClassVar = "predictive"

    target_delay: float = 2e-6
    horizon: float = 10e-6
    rho: float = 0.1
    eta: float = 1.0
    rate_ai: float = 10e6 / 8
    smoothing: float = 10e-6
    min_rate: float = 100e6 / 8
    initial_rate_fraction: float = 1.0


PredictiveParams.PRESETS = {"default": PredictiveParams()}


#: The rise time constant is at least this many feedback delays: a faster rise overshoots
#: (measured: stable at 1.25 feedback delays, oscillating at 0.6 on an incast).
RISE_PER_DELAY = 1.5


class PredictiveState(NamedTuple):
    """Per flow: ``rate`` (bytes/s)."""

    rate: jax.Array


def chosen_load(delay_now, params):
    """The load ``x*`` that minimizes the horizon cost (module docs)."""
    return (1.0 + (params.target_delay - delay_now) / params.horizon + params.rho * params.eta) / (
        1.0 + params.rho
    )


def target_rate(state: PredictiveState, feedback: Feedback, params):
    """The rate each flow's bottleneck hop asks for, ``[F]`` bytes/s (before clipping)."""
    tau = feedback.feedback_delay[:, None]
    previous = jnp.maximum(feedback.hop_rate_delayed, 1.0)  # the rate each hop's load saw
    ratio = state.rate[:, None] / previous
    # A hop that drains a queue while its arrivals stall (an upstream link is PFC-paused)
    # is busy, not idle: the larger of its offered load and its transmitted share.
    load = jnp.maximum(jnp.maximum(feedback.hop_load, feedback.hop_utilization), 1e-3)
    delay_now = jnp.maximum(
        feedback.hop_queue_delay + tau * (load * (1.0 + ratio) / 2.0 - 1.0), 0.0
    )
    per_hop = previous * chosen_load(delay_now, params) / load
    return jnp.min(jnp.where(feedback.hop_valid, per_hop, jnp.inf), axis=1)


@dataclasses.dataclass(frozen=True)
class Predictive(RateLaw):
    """Model-predictive control on INT with the fluid queue as predictor (module docs)."""

    name: ClassVar = "predictive"
    title: ClassVar = "predictive (MPC)"
    params_class: ClassVar = PredictiveParams
    signals: ClassVar = frozenset({"int"})

    def init(self, initial_rate, line_rate, params) -> PredictiveState:
        return PredictiveState(initial_rate)

    def update(self, state: PredictiveState, feedback: Feedback, params) -> PredictiveState:
        line = feedback.line_rate
        floor = jnp.minimum(params.min_rate, line)
        goal = jnp.clip(target_rate(state, feedback, params) + params.rate_ai, floor, line)
        # Decreases take effect at once (as HPCC's per-ACK reaction); increases move with
        # time constant ``smoothing``, longer than the feedback delay, so that the rates a
        # delayed measurement asks for are not overshot before it shows their effect.
        smoothing = jnp.maximum(params.smoothing, RISE_PER_DELAY * feedback.feedback_delay)
        rise = jnp.minimum(feedback.dt / smoothing, 1.0)
        step = jnp.where(goal < state.rate, 1.0, rise)
        return PredictiveState(rate=jnp.clip(state.rate + step * (goal - state.rate), floor, line))

    def max_stable_dt(self, params, min_delay: float) -> float:
        """The rise toward the chosen rate needs ``dt <= smoothing``; the prediction
        resolves the horizon with ``dt <= horizon / 4``."""
        smoothing = max(float(jnp.min(params.smoothing)), RISE_PER_DELAY * min_delay)
        return min(smoothing, float(jnp.min(params.horizon)) / 4.0)


__all__ = [
    "RISE_PER_DELAY",
    "Predictive",
    "PredictiveParams",
    "PredictiveState",
    "chosen_load",
    "target_rate",
]
