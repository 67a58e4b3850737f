"""Swift (Kumar et al., "Swift: Delay is Simple and Effective for Congestion Control in
the Datacenter", SIGCOMM'20) as a rate law.

Swift is AIMD on a congestion window with an end-to-end delay target, split in two: a
*fabric* window reacts to the fabric delay (propagation plus the queueing at switch
egresses) and an *endpoint* window to the host delay (here the queueing at the host
NICs' egresses plus a fixed host processing delay ``host_delay``); the flow sends
``min(fabric, endpoint)`` packets of ``mtu`` bytes per RTT. Per RTT (Algorithm 1)::

    delay < target:  cwnd += ai                       (ai / cwnd per ACK)
    otherwise, at most once per RTT:
                     cwnd *= max(1 - beta (delay - target) / delay, 1 - max_mdf)

The fabric target scales with the path and with the window (section 3.5)::

    target = base_target + hops x hop_scale + clamp(a / sqrt(cwnd) + b, 0, fs_range)

with ``a, b`` such that the flow-scaling term is ``fs_range`` at ``fs_min_cwnd`` and 0
at ``fs_max_cwnd`` packets: more flows (smaller windows) get a larger target, so that
many small windows still fill the link. The endpoint target is ``endpoint_target``.

In the fluid, every step moves the window by ``ai dt / RTT`` while below target; the
decrease happens at the flow's own once-per-RTT instants. At rest the delay sits at the
target: AIMD around a delay threshold holds the queue at ``(target - base RTT) x C``
(:func:`target_delay`).

Defaults (docs/references.md §12): ``ai`` = 1 packet, ``beta`` = 0.8, ``max_mdf`` = 0.5,
flow scaling over ``[0.1, 100]`` packets, as in the paper's algorithm; the delay targets
depend on the fabric (the paper sets them from its base RTTs): ours are base target
25 us, 1 us per hop, a flow-scaling range of 50 us and an endpoint target of 100 us, for
fabrics of microsecond links; ``mtu`` 4096 bytes (RoCE).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from fabricflow.errors import SpecError
from fabricflow.solve.cc.law import Feedback, RateLaw
from fabricflow.solve.parameters import Parameters, register


@register
@dataclasses.dataclass(frozen=True)
class SwiftParams(Parameters):
    """Swift sender parameters (SI units; windows in packets of ``mtu`` bytes).

    Attributes:
        ai: additive increase, packets per RTT. beta: multiplicative decrease constant.
        max_mdf: largest multiplicative decrease per RTT, in (0, 1).
        base_target: fabric delay target of a one-hop path with few flows, s.
        hop_scale: target added per hop, s.
        fs_range: largest flow-scaling addition to the target, s.
        fs_min_cwnd, fs_max_cwnd: windows (packets) where flow scaling is full and zero.
        endpoint_target: host delay target, s. host_delay: fixed host processing delay, s.
        mtu: packet size, bytes. min_cwnd: smallest window, packets (below 1: paced).
        initial_rate_fraction: starting rate as a fraction of the line rate.
    """

    FIELDS: ClassVar = {
        "ai": ("number", "> 0"),
        "beta": ("number", "(0, 1]"),
        "max_mdf": ("number", "(0, 1)"),
        "base_target": ("time", "> 0"),
        "hop_scale": ("time", ">= 0"),
        "fs_range": ("time", ">= 0"),
        "fs_min_cwnd": ("number", "> 0"),
        "fs_max_cwnd": ("number", "> 0"),
        "endpoint_target": ("time", "> 0"),
        "host_delay": ("time", ">= 0"),
        "mtu": ("size", "> 0"),
        "min_cwnd": ("number", "> 0"),
        "initial_rate_fraction": ("number", "(0, 1]"),
    }
    PREFIX: ClassVar = "params"
    NAME: ClassVar = "Swift"

    ai: float = 1.0
    beta: float = 0.8
    max_mdf: float = 0.5
    base_target: float = 25e-6
    hop_scale: float = 1e-6
    fs_range: float = 50e-6
    fs_min_cwnd: float = 0.1
    fs_max_cwnd: float = 100.0
    endpoint_target: float = 100e-6
    host_delay: float = 0.0
    mtu: float = 4096.0
    min_cwnd: float = 0.01
    initial_rate_fraction: float = 1.0

    def check_relations(self, values) -> None:
        if (values["fs_min_cwnd"] >= values["fs_max_cwnd"]).any():
            raise SpecError(
                "params.fs_min_cwnd",
                f"needs fs_min_cwnd < fs_max_cwnd, got {self.fs_min_cwnd} and {self.fs_max_cwnd}",
            )


SwiftParams.PRESETS = {"paper": SwiftParams()}


class SwiftState(NamedTuple):
    """Per flow: ``rate`` (bytes/s), ``fabric_cwnd`` and ``endpoint_cwnd`` (packets),
    ``since_decrease`` (s since the last multiplicative decrease)."""

    rate: jax.Array
    fabric_cwnd: jax.Array
    endpoint_cwnd: jax.Array
    since_decrease: jax.Array


def target_delay(cwnd, num_hops, params):
    """Swift's fabric target delay (s) for a window of ``cwnd`` packets over ``num_hops``."""
    inv_min = 1.0 / jnp.sqrt(params.fs_min_cwnd)
    inv_max = 1.0 / jnp.sqrt(params.fs_max_cwnd)
    alpha = params.fs_range / (inv_min - inv_max)
    scaling = jnp.clip(
        alpha / jnp.sqrt(jnp.maximum(cwnd, 1e-9)) - alpha * inv_max, 0.0, params.fs_range
    )
    return params.base_target + num_hops * params.hop_scale + scaling


def _aimd(cwnd, delay, target, rtt, can_decrease, params, dt):
    """One step of Swift's AIMD on ``cwnd`` (packets) for ``delay`` against ``target``."""
    grow = jnp.where(cwnd >= 1.0, params.ai, params.ai * cwnd) * dt / rtt
    factor = jnp.maximum(1.0 - params.beta * (delay - target) / delay, 1.0 - params.max_mdf)
    below = delay < target
    decreased = jnp.where(can_decrease, cwnd * factor, cwnd)
    return jnp.where(below, cwnd + grow, decreased), ~below & can_decrease


@dataclasses.dataclass(frozen=True)
class Swift(RateLaw):
    """Swift: fabric and endpoint delay targets -> AIMD windows (module docs)."""

    name: ClassVar = "swift"
    title: ClassVar = "Swift"
    params_class: ClassVar = SwiftParams
    signals: ClassVar = frozenset({"delay"})

    def init(self, initial_rate, line_rate, params) -> SwiftState:
        zeros = jnp.zeros_like(initial_rate)
        # Windows are set from the rate at the first update (it needs the RTT): 0 = unset.
        return SwiftState(initial_rate, zeros, zeros, zeros)

    def update(self, state: SwiftState, feedback: Feedback, params) -> SwiftState:
        dt = feedback.dt
        fabric_delay = feedback.base_rtt + feedback.fabric_queue_delay
        host_delay = feedback.host_queue_delay + params.host_delay
        rtt = jnp.maximum(fabric_delay + host_delay, 1e-9)
        unset = state.fabric_cwnd <= 0
        start = state.rate * rtt / params.mtu
        fabric = jnp.where(unset, start, state.fabric_cwnd)
        endpoint = jnp.where(unset, start, state.endpoint_cwnd)
        can_decrease = state.since_decrease >= rtt
        target = target_delay(fabric, feedback.num_hops, params)
        fabric, cut_f = _aimd(fabric, fabric_delay, target, rtt, can_decrease, params, dt)
        endpoint, cut_e = _aimd(
            endpoint,
            jnp.maximum(host_delay, 1e-12),
            params.endpoint_target,
            rtt,
            can_decrease,
            params,
            dt,
        )
        line_cwnd = feedback.line_rate * rtt / params.mtu
        fabric = jnp.clip(fabric, params.min_cwnd, line_cwnd)
        endpoint = jnp.clip(endpoint, params.min_cwnd, line_cwnd)
        cwnd = jnp.minimum(fabric, endpoint)
        return SwiftState(
            rate=jnp.minimum(cwnd * params.mtu / rtt, feedback.line_rate),
            fabric_cwnd=fabric,
            endpoint_cwnd=endpoint,
            since_decrease=jnp.where(cut_f | cut_e, 0.0, state.since_decrease + dt),
        )

    def max_stable_dt(self, params, min_delay: float) -> float:
        """Windows move once per RTT; the base target bounds the RTT from below."""
        return float(jnp.min(params.base_target)) / 4.0


__all__ = ["Swift", "SwiftParams", "SwiftState", "target_delay"]
