"""DCQCN fluid equations (Zhu et al., SIGCOMM'15; CoNEXT'16), in numerically safe form.

One function, :func:`dcqcn_derivatives`, gives d(R_C)/dt, d(R_T)/dt, d(alpha)/dt of every
flow from its current state and its *delayed* feedback (log probability that a packet is
not marked, and the delayed sending rate). The simulator (:mod:`.dcqcn`) integrates it and
the stability analysis (:mod:`.analysis`) linearises the very same function.

With ``m = -log(1 - p')`` (so ``(1-p')^n = exp(-m n)``) and ``n`` counts in packets:

    a      = 1 - (1-p')^(tau R')            = -expm1(-m tau R')
    R' b   = R' p' / ((1-p')^(-B) - 1)      = R'/B * (p'/m) * x_B/expm1(x_B),  x_B = m B
    R' c   = R' b (1-p')^(F B)              = R' b exp(-F x_B)
    R' d   = R' p' / ((1-p')^(-T R') - 1)   = 1/T * (p'/m) * x_T/expm1(x_T),   x_T = m T R'
    R' e   = R' d (1-p')^(F T R')           = R' d exp(-F x_T)

Written this way nothing overflows in float32 (``(1-p)^(-B)`` would near p ~ 0.009 for
B = 1e4 packets) and the limits come out right with no special cases: p' -> 0 gives
a = 0, R'b = R'c = R'/B, R'd = R'e = 1/T; p' -> 1 gives a = 1 and b..e -> 0; R' -> 0
gives R'd -> (p'/m)/T rather than 0/0.

Hyper increase (ConnectX R_HAI) is an addition of ours, described in
:mod:`.params`; it vanishes when ``rate_hai == rate_ai``.
"""

from __future__ import annotations

import jax.numpy as jnp

# -log(1 - p) is capped here in the exponents: exp(-100) is 0 in float32 and float64
# alike for every use below, and the cap keeps products like m * 0 finite.
MAX_NEG_LOG = 100.0


def x_over_expm1(x):
    """``x / (exp(x) - 1)`` for ``x >= 0``: 1 at 0, 0 for large x; never NaN."""
    small = x < 1e-3
    safe = jnp.where(small, 1.0, x)
    return jnp.where(small, 1.0 - 0.5 * x + x * x / 12.0, safe / jnp.expm1(safe))


def marking_probability(queue, kmin, kmax, pmax):
    """RED/ECN marking probability of an egress queue (bytes): 0, linear to pmax, then 1."""
    ramp = pmax * (queue - kmin) / (kmax - kmin)
    return jnp.where(queue <= kmin, 0.0, jnp.where(queue <= kmax, ramp, 1.0))


def log_no_mark(p):
    """``log(1 - p)`` clipped to ``-MAX_NEG_LOG`` (finite at p = 1)."""
    return jnp.maximum(jnp.log1p(-jnp.minimum(p, 1.0)), -MAX_NEG_LOG)


def dcqcn_derivatives(rc, rt, alpha, log_no_mark_delayed, rate_delayed, params):
    """Time derivatives of the DCQCN state.

    Args:
        rc, rt: current and target rate, bytes/s, ``[F]``.
        alpha: congestion estimate in [0, 1], ``[F]``.
        log_no_mark_delayed: ``log(1 - p')`` at ``t - tau*`` (<= 0), ``[F]``; for a path
            of several marking queues it is the sum over them.
        rate_delayed: ``R_C(t - tau*)``, bytes/s, ``[F]``.
        params: :class:`~fabricflow.solve.dcqcn.params.DCQCNParams` (scalars or arrays
            broadcastable against ``[F]``).

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
