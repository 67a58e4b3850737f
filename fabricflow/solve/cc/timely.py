"""TIMELY (Mittal et al., SIGCOMM'15) and patched TIMELY (Zhu et al., CoNEXT'16).

TIMELY reacts to RTT samples, one per completed segment of ``segment`` bytes (at most one
per ``min_rtt``): with ``rtt_diff`` an EWMA (weight ``alpha``) of the difference between
consecutive samples and the gradient ``g = rtt_diff / min_rtt``::

    rtt < T_low:           rate += delta
    rtt > T_high:          rate *= 1 - beta (1 - T_high / rtt)
    g <= 0:                rate += delta          (delta_hai after 5 increases in a row)
    otherwise:             rate *= 1 - beta g

Here every flow keeps a timer and updates at its own sampling instants, every
``max(segment / rate, min_rtt)``, from the RTT its fluid path shows one feedback delay
late (base RTT plus the queueing delay of every hop). The fluid model of CoNEXT'16 is the
continuous version of the same rule; its analysis shows that TIMELY has no fixed point
(the ``g <= 0`` branch always increases) and that, with the equality moved to the
decrease branch, it has infinitely many: at ``g = 0`` any rates that fill the link stay
put, so the rates it settles at depend on where they started.

**Patched TIMELY** (``patched = 1``, the ``patched`` preset; CoNEXT'16 Algorithm 2) keeps
the thresholds and replaces the gradient rule by a smooth mix of increase and decrease
driven by the absolute RTT::

    w = clip(2 g + 1/2, 0, 1),  error = (rtt - T_low) / T_low
    rate <- delta (1 - w) + rate (1 - beta w error)

which has a unique fixed point: every flow at ``C / N`` with
``rtt* = T_low (1 + N delta / (beta C))``
(:func:`~fabricflow.solve.cc.fixed_points.timely_patched_fixed_point`).

Presets (docs/references.md §11): ``paper`` -- C = 10 Gb/s in the sources, delta = 10 Mb/s,
beta = 0.8, alpha = 0.875, T_low = 50 us, T_high = 500 us, min RTT 20 us, 64 KB segments
(the values CoNEXT'16 validates with, recommended by the TIMELY paper); ``patched`` --
the same with beta = 0.008 and 16 KB segments. Both without hyper-active increase
(``rate_hai = rate_ai``, as the fluid model), minimum rate 100 Mb/s.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from fabricflow.errors import SpecError
from fabricflow.solve.cc.law import Feedback, RateLaw
from fabricflow.solve.parameters import Parameters, register

# Increases in a row before the hyper-active increase (TIMELY's HAI, N = 5).
HAI_AFTER = 5


@register
@dataclasses.dataclass(frozen=True)
class TimelyParams(Parameters):
    """TIMELY sender parameters (SI units).

    Attributes:
        rate_ai: additive increase delta, bytes/s. rate_hai: hyper-active increase, bytes/s.
        beta: multiplicative decrease factor. alpha: EWMA weight of the RTT difference.
        t_low, t_high: RTT thresholds, s. min_rtt: D_minRTT (gradient normalisation and
            shortest update interval), s. segment: bytes per RTT sample.
        patched: 1 for patched TIMELY (CoNEXT'16), 0 for TIMELY.
        min_rate: lowest sending rate, bytes/s.
        initial_rate_fraction: starting rate as a fraction of the line rate.
    """

    FIELDS: ClassVar = {
        "rate_ai": ("rate", "> 0"),
        "rate_hai": ("rate", "> 0"),
        "beta": ("number", "(0, 1]"),
        "alpha": ("number", "(0, 1]"),
        "t_low": ("time", "> 0"),
        "t_high": ("time", "> 0"),
        "min_rtt": ("time", "> 0"),
        "segment": ("size", "> 0"),
        "patched": ("number", "[0, 1]"),
        "min_rate": ("rate", ">= 0"),
        "initial_rate_fraction": ("number", "(0, 1]"),
    }
    PREFIX: ClassVar = "params"
    NAME: ClassVar = "TIMELY"

    rate_ai: float = 10e6 / 8
    rate_hai: float = 10e6 / 8
    beta: float = 0.8
    alpha: float = 0.875
    t_low: float = 50e-6
    t_high: float = 500e-6
    min_rtt: float = 20e-6
    segment: float = 64e3
    patched: float = 0.0
    min_rate: float = 100e6 / 8
    initial_rate_fraction: float = 1.0

    def check_relations(self, values) -> None:
        if (values["t_low"] >= values["t_high"]).any():
            raise SpecError(
                "params.t_low", f"needs t_low < t_high, got {self.t_low} s and {self.t_high} s"
            )


TimelyParams.PRESETS = {
    "paper": TimelyParams(),
    "patched": TimelyParams(beta=0.008, segment=16e3, patched=1.0),
}


class TimelyState(NamedTuple):
    """Per flow: ``rate`` (bytes/s), ``prev_rtt`` (s), ``rtt_diff`` (s, EWMA), ``timer``
    (s since the last sample), ``stage`` (increases in a row)."""

    rate: jax.Array
    prev_rtt: jax.Array
    rtt_diff: jax.Array
    timer: jax.Array
    stage: jax.Array


def new_rate(state: TimelyState, rtt, gradient, params):
    """The rate after one RTT sample (module docs), before clipping."""
    rate = state.rate
    step = jnp.where(state.stage >= HAI_AFTER, params.rate_hai, params.rate_ai)
    high = rate * (1.0 - params.beta * (1.0 - params.t_high / rtt))
    original = jnp.where(
        gradient <= 0, rate + step, rate * jnp.maximum(1.0 - params.beta * gradient, 0.0)
    )
    weight = jnp.clip(2.0 * gradient + 0.5, 0.0, 1.0)
    error = (rtt - params.t_low) / params.t_low
    patched = params.rate_ai * (1.0 - weight) + rate * (1.0 - params.beta * weight * error)
    middle = jnp.where(params.patched > 0.5, patched, original)
    return jnp.where(rtt < params.t_low, rate + step, jnp.where(rtt > params.t_high, high, middle))


@dataclasses.dataclass(frozen=True)
class Timely(RateLaw):
    """TIMELY: RTT gradient -> rate, at each completed segment (module docs)."""

    name: ClassVar = "timely"
    title: ClassVar = "TIMELY"
    params_class: ClassVar = TimelyParams
    signals: ClassVar = frozenset({"delay"})

    def init(self, initial_rate, line_rate, params) -> TimelyState:
        zeros = jnp.zeros_like(initial_rate)
        # prev_rtt of 0 marks "no sample yet": the first sample sets it.
        return TimelyState(initial_rate, zeros, zeros, zeros, zeros)

    def update(self, state: TimelyState, feedback: Feedback, params) -> TimelyState:
        rtt = feedback.base_rtt + feedback.fabric_queue_delay + feedback.host_queue_delay
        rtt = jnp.maximum(rtt, 1e-9)
        timer = state.timer + feedback.dt
        interval = jnp.maximum(params.segment / jnp.maximum(state.rate, 1.0), params.min_rtt)
        due = timer >= interval
        first = state.prev_rtt <= 0
        diff = jnp.where(first, 0.0, rtt - state.prev_rtt)
        rtt_diff = (1.0 - params.alpha) * state.rtt_diff + params.alpha * diff
        gradient = rtt_diff / params.min_rtt
        rate = new_rate(state, rtt, gradient, params)
        floor = jnp.minimum(params.min_rate, feedback.line_rate)
        rate = jnp.clip(rate, floor, feedback.line_rate)
        increased = rate > state.rate
        update = due & ~first
        return TimelyState(
            rate=jnp.where(update, rate, state.rate),
            prev_rtt=jnp.where(due, rtt, state.prev_rtt),
            rtt_diff=jnp.where(update, rtt_diff, state.rtt_diff),
            timer=jnp.where(due, 0.0, timer),
            stage=jnp.where(update, jnp.where(increased, state.stage + 1.0, 0.0), state.stage),
        )

    def max_stable_dt(self, params, min_delay: float) -> float:
        """Samples come at most once per ``min_rtt``: resolve it with ``dt <= min_rtt/2``."""
        return float(jnp.min(params.min_rtt)) / 2.0


__all__ = ["HAI_AFTER", "Timely", "TimelyParams", "TimelyState", "new_rate"]
