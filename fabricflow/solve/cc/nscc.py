"""NSCC, the Ultra Ethernet transport's sender congestion control, as a rate law.

Network-Signaled Congestion Control (UEC Specification 1.0, June 2025, the transport's
congestion management; its reference implementation is UEC's htsim, ``uec.cpp``) keeps a
window ``cwnd`` (bytes) per sender and reads two signals on every ACK: the ECN-CE echo and
the queueing delay ``d`` = RTT sample - base RTT. Per ``B`` bytes newly acknowledged:

=============  ======================  ==============================================
ECN echo       ``d < target``          ``d >= target``
=============  ======================  ==============================================
not marked     proportional increase:  fair increase: ``inc += fi B``
               ``inc += alpha B (target - d)`` (fast increase ``cwnd += fi_scale B``
               after a window of ACKs with ``d < 1 us``)
marked         nothing                 multiplicative decrease, once per base RTT:
                                       ``cwnd *= max(1 - gamma (avg - target) / avg, 0.5)``
=============  ======================  ==============================================

where ``avg`` is an EWMA of the delay (weight ``delay_alpha`` per ACK; an unmarked sample
above the target counts as a quarter base RTT: delay without marks is not the fabric's).
The increments are applied every 8 MTUs acknowledged, ``cwnd += inc / cwnd``, plus
``eta`` once per network RTT. A NACK (a trimmed packet) takes its bytes off the window;
*quick adapt* sets ``cwnd`` to the bytes acknowledged in the last ``base RTT + target``
when that period saw a NACK or a delay above ``4 target`` and delivered less than
``max_wnd / 2^qa_gate``. The window stays in ``[mtu, 1.5 BDP]`` (``max_wnd``).

Constants scale with the network as in the reference code: with the reference network
100 Gb/s and 12 us (BDP 150 KB), ``a = line rate x network_rtt / 150 KB`` and ``b =
target / 12 us``; ``alpha = 4 mss a b / target``, ``fi = 5 mss a``, ``eta = 0.15 mss a``,
``fi_scale = 0.25 a``, ``gamma = 0.8``; the target is 0.75 of the network RTT with
trimming (the network RTT without). ECN marks RED-linearly from 0.2 to 0.8 BDP of queue
(``kmin``, ``kmax``, ``pmax = 1``). :func:`nscc_params` sets all of them for a network.

**In the fluid**, ACKs arrive at the flow's acknowledged rate ``ack`` (bytes/s) one
feedback delay late, a fraction ``p`` of them marked (the path's marking probability):
per second the window moves by ``(1 - p) ack / cwnd x (fi or alpha (target - d))`` plus
``eta / network_rtt``, minus the NACKed bytes; the decrease fires when the expected count
of marked ACKs since the base RTT gate opened reaches one; quick adapt runs at its period
ends. The rate is ``cwnd / RTT`` (RTT: base RTT plus the queueing delay), capped at the
line rate. At rest (:func:`~fabricflow.solve.cc.uet_analysis.nscc_equilibrium`) the
increase (unmarked ACKs) balances the once-per-RTT decreases with the queue between
``kmin`` and the delay target.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from fabricflow.errors import SpecError
from fabricflow.solve.cc.law import Feedback, RateLaw
from fabricflow.solve.parameters import Parameters, register

#: The reference network of the constants' scaling: 100 Gb/s and a 12 us RTT.
REFERENCE_RATE = 100e9 / 8
REFERENCE_RTT = 12e-6
#: Fast increase needs delay samples below this, s.
FAST_INCREASE_DELAY = 1e-6


@register
@dataclasses.dataclass(frozen=True)
class NsccParams(Parameters):
    """NSCC sender parameters (SI units: bytes, s).

    Attributes:
        network_rtt: the fabric's largest unloaded RTT, s (scales every constant).
        target: queueing-delay target, s. mss: payload per packet, bytes.
        mtu: packet on the wire, bytes (the smallest window).
        alpha_scale: proportional increase per RTT at zero delay, in mss (4).
        fi_mss: fair increase per RTT, in mss (5). eta_mss: increase per network RTT,
            in mss (0.15). fast_scale: fast increase per acknowledged byte (0.25).
        gamma: multiplicative decrease constant (0.8). max_md: largest decrease (0.5).
        delay_alpha: EWMA weight of one delay sample (0.0125).
        qa_gate: quick adapt if a period delivered under ``max_wnd / 2^qa_gate``.
        qa_delay_factor: quick adapt on a delay above this times the target (4).
        max_wnd_bdp: the largest window in BDPs of the flow's base RTT (1.5).
        kmin, kmax, pmax: RED ECN marking of the switch egresses, bytes, bytes, in (0, 1].
        initial_rate_fraction: starting rate as a fraction of the line rate (1: the
            window starts at ``max_wnd``, as the reference code).
    """

    FIELDS: ClassVar = {
        "network_rtt": ("time", "> 0"),
        "target": ("time", "> 0"),
        "mss": ("size", "> 0"),
        "mtu": ("size", "> 0"),
        "alpha_scale": ("number", ">= 0"),
        "fi_mss": ("number", ">= 0"),
        "eta_mss": ("number", ">= 0"),
        "fast_scale": ("number", ">= 0"),
        "gamma": ("number", "(0, 1]"),
        "max_md": ("number", "(0, 1)"),
        "delay_alpha": ("number", "(0, 1]"),
        "qa_gate": ("number", ">= 0"),
        "qa_delay_factor": ("number", "> 0"),
        "max_wnd_bdp": ("number", "> 0"),
        "kmin": ("size", ">= 0"),
        "kmax": ("size", "> 0"),
        "pmax": ("number", "(0, 1]"),
        "initial_rate_fraction": ("number", "(0, 1]"),
    }
    PREFIX: ClassVar = "params"
    NAME: ClassVar = "NSCC"

    network_rtt: float = REFERENCE_RTT
    target: float = 0.75 * REFERENCE_RTT
    mss: float = 4096.0
    mtu: float = 4160.0
    alpha_scale: float = 4.0
    fi_mss: float = 5.0
    eta_mss: float = 0.15
    fast_scale: float = 0.25
    gamma: float = 0.8
    max_md: float = 0.5
    delay_alpha: float = 0.0125
    qa_gate: float = 3.0
    qa_delay_factor: float = 4.0
    max_wnd_bdp: float = 1.5
    kmin: float = 0.2 * REFERENCE_RATE * REFERENCE_RTT
    kmax: float = 0.8 * REFERENCE_RATE * REFERENCE_RTT
    pmax: float = 1.0
    initial_rate_fraction: float = 1.0

    def check_relations(self, values) -> None:
        if (values["kmin"] >= values["kmax"]).any():
            raise SpecError(
                "params.kmin", f"needs kmin < kmax bytes, got {self.kmin} and {self.kmax}"
            )


def nscc_params(network_rtt: float, link_rate: float, *, trimming: bool = True, **overrides):
    """:class:`NsccParams` for a network of ``network_rtt`` s (largest unloaded RTT) and
    ``link_rate`` bytes/s host links, set as the reference code sets them: target 0.75
    (trimming) or 1.0 of the network RTT, ECN from 0.2 to 0.8 of the BDP."""
    if not network_rtt > 0 or not link_rate > 0:
        raise SpecError("network_rtt", "network_rtt and link_rate must be > 0")
    bdp = network_rtt * link_rate
    values = {
        "network_rtt": network_rtt,
        "target": (0.75 if trimming else 1.0) * network_rtt,
        "kmin": 0.2 * bdp,
        "kmax": 0.8 * bdp,
    }
    return NsccParams(**{**values, **overrides})


NsccParams.PRESETS = {
    "spec": NsccParams(),
    "800g": nscc_params(REFERENCE_RTT, 800e9 / 8),
}


class NsccState(NamedTuple):
    """Per flow: ``rate`` (bytes/s), ``cwnd`` (bytes, 0 until the first update),
    ``avg_delay`` (s), ``since_decrease`` (s), ``marks`` (expected marked ACKs since the
    decrease gate opened), ``fast_bytes`` (bytes acknowledged at a delay under 1 us in a
    row), ``qa_elapsed`` (s into the quick-adapt period), ``qa_bytes`` (bytes acknowledged
    in it), ``qa_trigger`` (1 once the period saw a NACK or a large delay)."""

    rate: jax.Array
    cwnd: jax.Array
    avg_delay: jax.Array
    since_decrease: jax.Array
    marks: jax.Array
    fast_bytes: jax.Array
    qa_elapsed: jax.Array
    qa_bytes: jax.Array
    qa_trigger: jax.Array


def scaling(line_rate, params):
    """``(a, b)``: the reference code's scaling of the constants for this network."""
    a = line_rate * params.network_rtt / (REFERENCE_RATE * REFERENCE_RTT)
    return a, params.target / REFERENCE_RTT


def window_drift(cwnd, delay, marked, ack_rate, line_rate, params):
    """d cwnd / dt (bytes/s) of the increases for ACKs arriving at ``ack_rate`` bytes/s,
    a fraction ``marked`` of them ECN-marked, at queueing delay ``delay`` s (no fast
    increase, no decrease): the fluid form of the fair and proportional increases and of
    ``eta``."""
    a, b = scaling(line_rate, params)
    alpha = params.alpha_scale * params.mss * a * b / params.target
    per_byte = jnp.where(
        delay >= params.target,
        params.fi_mss * params.mss * a,
        alpha * jnp.maximum(params.target - delay, 0.0),
    )
    eta = params.eta_mss * params.mss * a / params.network_rtt
    return (1.0 - marked) * ack_rate * per_byte / jnp.maximum(cwnd, 1.0) + eta


@dataclasses.dataclass(frozen=True)
class Nscc(RateLaw):
    """NSCC: ECN and delay -> window (module docs)."""

    name: ClassVar = "nscc"
    title: ClassVar = "NSCC"
    params_class: ClassVar = NsccParams
    signals: ClassVar = frozenset({"ecn", "delay", "ack", "nack"})

    def init(self, initial_rate, line_rate, params) -> NsccState:
        zeros = jnp.zeros_like(initial_rate)
        return NsccState(initial_rate, zeros, zeros, zeros, zeros, zeros, zeros, zeros, zeros)

    def update(self, state: NsccState, feedback: Feedback, params) -> NsccState:
        dt = feedback.dt
        base_rtt = jnp.maximum(feedback.base_rtt, 1e-9)
        delay = feedback.fabric_queue_delay + feedback.host_queue_delay
        rtt = base_rtt + delay
        marked = -jnp.expm1(feedback.log_no_mark)  # fraction of ACKs with ECN-CE
        ack = feedback.ack_rate
        line = feedback.line_rate
        max_wnd = params.max_wnd_bdp * line * base_rtt
        cwnd = jnp.where(state.cwnd <= 0, jnp.minimum(state.rate * rtt, max_wnd), state.cwnd)
        a, _ = scaling(line, params)
        # the delay EWMA, one sample per packet acknowledged
        sample = jnp.where(
            delay > params.target, marked * delay + (1.0 - marked) * 0.25 * base_rtt, delay
        )
        weight = jnp.minimum(params.delay_alpha * ack * dt / params.mss, 1.0)
        avg = state.avg_delay + weight * (sample - state.avg_delay)
        # increases (unmarked ACKs); fast increase after a window of ACKs below 1 us
        low = delay < FAST_INCREASE_DELAY
        fast_bytes = jnp.where(low, state.fast_bytes + ack * dt, 0.0)
        fast = low & (fast_bytes > cwnd)
        grow = jnp.where(
            fast,
            (1.0 - marked) * params.fast_scale * a * ack,
            window_drift(cwnd, delay, marked, ack, line, params),
        )
        cwnd = cwnd + dt * (grow - feedback.nack_rate)
        # multiplicative decrease: the first marked ACK with the delay above the target,
        # once per base RTT (the expected count of such ACKs reaching one)
        gate = state.since_decrease >= base_rtt
        above = delay >= params.target
        marks = jnp.where(gate & above, state.marks + marked * ack * dt / params.mss, 0.0)
        decrease = (marks >= 1.0) & (avg > params.target)
        factor = jnp.maximum(
            1.0 - params.gamma * (avg - params.target) / jnp.maximum(avg, 1e-12),
            1.0 - params.max_md,
        )
        cwnd = jnp.where(decrease, cwnd * factor, cwnd)
        # quick adapt at the end of each period of base RTT + target
        period = base_rtt + params.target
        qa_elapsed = state.qa_elapsed + dt
        qa_bytes = state.qa_bytes + ack * dt
        trigger = jnp.maximum(
            state.qa_trigger,
            ((feedback.nack_rate > 0) | (delay > params.qa_delay_factor * params.target)).astype(
                cwnd.dtype
            ),
        )
        ends = qa_elapsed >= period
        adapt = ends & (trigger > 0) & (qa_bytes < max_wnd * 2.0**-params.qa_gate)
        cwnd = jnp.where(adapt, qa_bytes, cwnd)
        cwnd = jnp.clip(cwnd, params.mtu, max_wnd)
        return NsccState(
            rate=jnp.minimum(cwnd / rtt, line),
            cwnd=cwnd,
            avg_delay=avg,
            since_decrease=jnp.where(decrease, 0.0, state.since_decrease + dt),
            marks=jnp.where(decrease, 0.0, marks),
            fast_bytes=jnp.where(fast | adapt, 0.0, fast_bytes),
            qa_elapsed=jnp.where(ends, 0.0, qa_elapsed),
            qa_bytes=jnp.where(ends, 0.0, qa_bytes),
            qa_trigger=jnp.where(ends, 0.0, trigger),
        )

    def max_stable_dt(self, params, min_delay: float) -> float:
        """The window moves once per RTT at most; a step of a quarter of the target."""
        return float(jnp.min(params.target)) / 4.0


__all__ = [
    "Nscc",
    "NsccParams",
    "NsccState",
    "REFERENCE_RATE",
    "REFERENCE_RTT",
    "nscc_params",
    "scaling",
    "window_drift",
]
