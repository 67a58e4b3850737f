"""DCQCN (Zhu et al., SIGCOMM'15; the fluid model of CoNEXT'16) as a rate law.

Per flow: current rate ``R_C`` (what it sends), target rate ``R_T`` and congestion
estimate ``alpha``, driven by the ECN marks of the switch egress queues on its path,
delayed by the feedback delay. With ``m = -log(1 - p')`` (so ``(1-p')^n = exp(-m n)``)
and counts ``n`` in packets of ``packet_bytes``:

    a      = 1 - (1-p')^(tau R')            = -expm1(-m tau R')
    R' b   = R' p' / ((1-p')^(-B) - 1)      = R'/B * (p'/m) * x_B/expm1(x_B),  x_B = m B
    R' c   = R' b (1-p')^(F B)              = R' b exp(-F x_B)
    R' d   = R' p' / ((1-p')^(-T R') - 1)   = 1/T * (p'/m) * x_T/expm1(x_T),   x_T = m T R'
    R' e   = R' d (1-p')^(F T R')           = R' d exp(-F x_T)

    d alpha/dt = (g / tau') [(1 - (1-p')^(tau' R')) - alpha]
    d R_T/dt   = -(R_T - R_C) a / tau + R_AI (R'c + R'e)
    d R_C/dt   = -R_C alpha a / (2 tau) + (R_T - R_C) (R'b + R'd) / 2

Written this way nothing overflows in float32 (``(1-p)^(-B)`` would near p ~ 0.009 for
B = 1e4 packets) and the limits come out right without special cases: p' -> 0 gives
a = 0, R'b = R'c = R'/B, R'd = R'e = 1/T; p' -> 1 gives a = 1 and b..e -> 0. The
integrator steps it with explicit Euler (stable below :meth:`DCQCNParams.max_stable_dt`).

Presets (docs/references.md §2):

* ``paper`` -- SIGCOMM'15 / CoNEXT'16: tau = 50 us, tau' = 55 us, T = 55 us, B = 10 MB,
  F = 5, g = 1/256, R_AI = 40 Mb/s, Kmin = 5 KB, Kmax = 200 KB, Pmax = 1 %.
* ``connectx`` -- NVIDIA ConnectX NIC firmware: T = 300 us, B = 32767 B, R_AI = 5 Mb/s,
  R_HAI = 50 Mb/s, g = 1/204.8, alpha period 1 us, rate-reduce period 4 us, min rate
  1 Mb/s; the switch's ECN thresholds keep the paper's values.

Hyper increase is not in the paper's fluid model (there every increase event adds R_AI).
We add it as a first-order term: an increase event is a hyper-increase one when the
*other* counter has also passed F stages without a mark, probability ``(1-p)^(F T R')``
for byte-counter events and ``(1-p)^(F B)`` for timer events; such events add ``R_HAI``
instead of ``R_AI``. With ``rate_hai == rate_ai`` (``paper``) the equations are the paper's.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fabricflow.errors import SpecError
from fabricflow.solve.cc.ecn import MAX_NEG_LOG
from fabricflow.solve.cc.law import Feedback, RateLaw
from fabricflow.solve.parameters import Parameters, register


@register
@dataclasses.dataclass(frozen=True)
class DCQCNParams(Parameters):
    """DCQCN reaction-point and congestion-point parameters (SI units).

    Attributes:
        tau: CNP interval / rate-reduce period, s (the paper's tau).
        tau_prime: alpha update period, s (tau').
        timer: rate-increase timer T, s.
        byte_counter: byte counter B, bytes.
        fast_recovery: fast-recovery steps F (a count, kept as float for vmap).
        g: alpha gain, dimensionless in (0, 1].
        rate_ai: additive increase step R_AI, bytes/s.
        rate_hai: hyper increase step R_HAI, bytes/s (``== rate_ai``: no hyper stage).
        kmin, kmax: RED marking thresholds on switch egress queues, bytes.
        pmax: marking probability at ``kmax``, in (0, 1].
        min_rate: lowest sending rate, bytes/s.
        initial_alpha: alpha at flow start.
        initial_rate_fraction: starting rate as a fraction of the line rate (1.0: DCQCN
            starts at line rate).
        packet_bytes: packet size that counts packets in the marking exponents, bytes.
    """

    FIELDS: ClassVar = {
        "tau": ("time", "> 0"),
        "tau_prime": ("time", "> 0"),
        "timer": ("time", "> 0"),
        "byte_counter": ("size", "> 0"),
        "fast_recovery": ("number", ">= 0"),
        "g": ("number", "(0, 1]"),
        "rate_ai": ("rate", "> 0"),
        "rate_hai": ("rate", "> 0"),
        "kmin": ("size", ">= 0"),
        "kmax": ("size", "> 0"),
        "pmax": ("number", "(0, 1]"),
        "min_rate": ("rate", ">= 0"),
        "initial_alpha": ("number", "[0, 1]"),
        "initial_rate_fraction": ("number", "(0, 1]"),
        "packet_bytes": ("size", "> 0"),
    }
    PREFIX: ClassVar = "params"
    NAME: ClassVar = "DCQCN"

    tau: float = 50e-6
    tau_prime: float = 55e-6
    timer: float = 55e-6
    byte_counter: float = 10e6
    fast_recovery: float = 5.0
    g: float = 1.0 / 256.0
    rate_ai: float = 40e6 / 8
    rate_hai: float = 40e6 / 8
    kmin: float = 5e3
    kmax: float = 200e3
    pmax: float = 0.01
    min_rate: float = 0.0
    initial_alpha: float = 1.0
    initial_rate_fraction: float = 1.0
    packet_bytes: float = 1000.0

    def check_relations(self, values: dict[str, np.ndarray]) -> None:
        if np.any(values["kmin"] >= values["kmax"]):
            raise SpecError(
                "params.kmin",
                f"the RED ramp needs kmin < kmax, got kmin={self.kmin:g} bytes, "
                f"kmax={self.kmax:g} bytes (lower kmin or raise kmax)"
                if np.ndim(self.kmin) == 0 and np.ndim(self.kmax) == 0
                else "the RED ramp needs kmin < kmax in every batch entry",
            )

    def max_stable_dt(self) -> float:
        """Largest step (s) for which the explicit Euler update is stable, with margin 2.

        The stiffest terms relax at rates up to ``1/tau`` (target rate toward current
        rate, ``a <= 1``), ``1/(2 T)`` (fast recovery, ``R'd <= 1/T``) and ``g / tau'``
        (alpha). Euler needs ``dt < 2/rate``; we allow half of the smallest such bound,
        ``min(tau, 2 T, 2 tau'/g) / 2``. Paper preset: 25 us; ConnectX: 2 us. Accuracy of
        the queue dynamics asks for less: 1 us resolves a queue filling at 40 Gb/s in 5 KB
        steps.
        """
        bounds = [
            np.min(self.tau),
            2 * np.min(self.timer),
            2 * np.min(np.asarray(self.tau_prime) / np.asarray(self.g)),
        ]
        return float(min(bounds)) / 2.0


DCQCNParams.PRESETS = {
    "paper": DCQCNParams(),
    "connectx": DCQCNParams(
        tau=4e-6,
        tau_prime=1e-6,
        timer=300e-6,
        byte_counter=32767.0,
        fast_recovery=5.0,
        g=1.0 / 204.8,
        rate_ai=5e6 / 8,
        rate_hai=50e6 / 8,
        min_rate=1e6 / 8,
        initial_alpha=1.0,
    ),
}


def x_over_expm1(x):
    """``x / (exp(x) - 1)`` for ``x >= 0``: 1 at 0, 0 for large x; never NaN, nor is its
    gradient (written as ``x e^-x / (1 - e^-x)``, which does not overflow for large x)."""
    small = x < 1e-3
    safe = jnp.where(small, 1.0, x)
    return jnp.where(small, 1.0 - 0.5 * x + x * x / 12.0, safe * jnp.exp(-safe) / -jnp.expm1(-safe))


def dcqcn_derivatives(rc, rt, alpha, log_no_mark_delayed, rate_delayed, params):
    """Time derivatives of the DCQCN state (module docs).

    Args:
        rc, rt: current and target rate, bytes/s, ``[F]``.
        alpha: congestion estimate in [0, 1], ``[F]``.
        log_no_mark_delayed: ``log(1 - p')`` at ``t - tau*`` (<= 0), ``[F]``; for a path
            of several marking queues it is the sum over them.
        rate_delayed: ``R_C(t - tau*)``, bytes/s, ``[F]``.
        params: :class:`DCQCNParams` (scalars or arrays broadcastable against ``[F]``).

    Returns:
        ``(d_rc, d_rt, d_alpha)`` in bytes/s^2, bytes/s^2, 1/s.
    """
    m_raw = -log_no_mark_delayed
    p = -jnp.expm1(log_no_mark_delayed)
    m = jnp.minimum(m_raw, MAX_NEG_LOG)
    positive = m_raw > 0
    # p / -log(1-p): 1 at p = 0, -> 0 as p -> 1.
    ratio = jnp.where(positive, p / jnp.where(positive, m_raw, 1.0), 1.0)
    packets_per_s = rate_delayed / params.packet_bytes
    counter_packets = params.byte_counter / params.packet_bytes

    a = -jnp.expm1(-m * params.tau * packets_per_s)
    x_b = m * counter_packets
    x_t = m * params.timer * packets_per_s
    rate_b = packets_per_s / counter_packets * ratio * x_over_expm1(x_b)
    rate_c = rate_b * jnp.exp(-params.fast_recovery * x_b)
    rate_d = ratio * x_over_expm1(x_t) / params.timer
    rate_e = rate_d * jnp.exp(-params.fast_recovery * x_t)
    alpha_target = -jnp.expm1(-m * params.tau_prime * packets_per_s)

    d_alpha = params.g / params.tau_prime * (alpha_target - alpha)
    # Hyper increase (not in the paper's model; zero when rate_hai == rate_ai): an
    # increase event whose other counter has also passed F unmarked stages adds R_HAI.
    hyper = rate_c * jnp.exp(-params.fast_recovery * x_t) + rate_e * jnp.exp(
        -params.fast_recovery * x_b
    )
    d_rt = (
        -(rt - rc) * a / params.tau
        + params.rate_ai * (rate_c + rate_e)
        + (params.rate_hai - params.rate_ai) * hyper
    )
    d_rc = -rc * alpha * a / (2.0 * params.tau) + 0.5 * (rt - rc) * (rate_b + rate_d)
    return d_rc, d_rt, d_alpha


class DCQCNState(NamedTuple):
    """Per flow: ``rate`` (R_C) and ``target_rate`` (R_T) in bytes/s, ``alpha``."""

    rate: jax.Array
    target_rate: jax.Array
    alpha: jax.Array


@dataclasses.dataclass(frozen=True)
class DCQCN(RateLaw):
    """DCQCN: ECN marks -> CNPs -> multiplicative decrease, timer and byte-counter
    increase (module docs)."""

    name: ClassVar = "dcqcn"
    title: ClassVar = "DCQCN"
    params_class: ClassVar = DCQCNParams
    signals: ClassVar = frozenset({"ecn"})

    def init(self, initial_rate, line_rate, params) -> DCQCNState:
        return DCQCNState(
            rate=initial_rate,
            target_rate=line_rate,
            alpha=jnp.full(initial_rate.shape, params.initial_alpha, initial_rate.dtype),
        )

    def update(self, state: DCQCNState, feedback: Feedback, params) -> DCQCNState:
        d_rc, d_rt, d_alpha = dcqcn_derivatives(
            state.rate,
            state.target_rate,
            state.alpha,
            feedback.log_no_mark,
            feedback.rate_delayed,
            params,
        )
        dt, line = feedback.dt, feedback.line_rate
        floor = jnp.minimum(params.min_rate, line)
        return DCQCNState(
            rate=jnp.clip(state.rate + dt * d_rc, floor, line),
            target_rate=jnp.clip(state.target_rate + dt * d_rt, floor, line),
            alpha=jnp.clip(state.alpha + dt * d_alpha, 0.0, 1.0),
        )

    def max_stable_dt(self, params, min_delay: float) -> float:
        return params.max_stable_dt()


__all__ = ["DCQCN", "DCQCNParams", "DCQCNState", "dcqcn_derivatives", "x_over_expm1"]
