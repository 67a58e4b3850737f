"""RCCC, the Ultra Ethernet transport's receiver credit congestion control, as a rate law.

Receiver Credit-based Congestion Control (UEC Specification 1.0, June 2025, the
transport's congestion management; reference implementation UEC's htsim, ``uec.cpp``,
``UecPullPacer``) answers incast at the receiver: every receiver runs a pull pacer that
grants credit at ``pull_rate`` (0.99) of its link rate, round-robin over the senders that
have data for it; a sender may send only what it holds credit for. A new sender starts
with a speculative credit of ``max_wnd`` (1.5 BDP of its base RTT) and the credit it holds
never exceeds that.

**In the fluid** the pacer's round robin is an equal split: a flow into a receiver with
``n`` sending flows gets credit at ``pull_rate x C / n`` bytes/s (``C``: the receiver's
downlink), one feedback delay late (the credit travels back to the sender; none comes
before the receiver has seen the flow). The flow's
credit balance grows by that and shrinks by what it sends; it sends at its line rate while
it holds credit and at the credit rate once it has none. At rest (:func:`credit_rate`,
:func:`~fabricflow.solve.cc.uet_analysis.rccc_fixed_point`) every flow into a receiver
sends ``pull_rate C / n``: the downlink runs at ``pull_rate`` with no standing queue after
the speculative first window drains, whatever ``n``.
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
class RcccParams(Parameters):
    """RCCC parameters.

    Attributes:
        pull_rate: credit pacing as a fraction of the receiver's link rate (0.99).
        max_wnd_bdp: speculative first credit and the largest credit balance, in BDPs
            of the flow's base RTT at its line rate (1.5).
        initial_rate_fraction: starting rate as a fraction of the line rate (1).
    """

    FIELDS: ClassVar = {
        "pull_rate": ("number", "(0, 1]"),
        "max_wnd_bdp": ("number", "> 0"),
        "initial_rate_fraction": ("number", "(0, 1]"),
    }
    PREFIX: ClassVar = "params"
    NAME: ClassVar = "RCCC"

    pull_rate: float = 0.99
    max_wnd_bdp: float = 1.5
    initial_rate_fraction: float = 1.0


RcccParams.PRESETS = {"spec": RcccParams()}


class RcccState(NamedTuple):
    """Per flow: ``rate`` (bytes/s) and ``credit`` (bytes it may still send; negative
    before the first update, which grants the speculative window)."""

    rate: jax.Array
    credit: jax.Array


def credit_rate(receiver_capacity, receiver_flows, params):
    """Credit per flow, bytes/s: the pacer's ``pull_rate x C`` split over the ``n`` flows
    sending to the receiver; 0 while the receiver has seen no sender (``n = 0``: the
    flow's first bytes have not reached it yet, so no credit comes back)."""
    seen = receiver_flows > 0
    return jnp.where(
        seen, params.pull_rate * receiver_capacity / jnp.where(seen, receiver_flows, 1.0), 0.0
    )


@dataclasses.dataclass(frozen=True)
class Rccc(RateLaw):
    """RCCC: the receiver's credit pacer -> each sender's rate (module docs)."""

    name: ClassVar = "rccc"
    title: ClassVar = "RCCC"
    params_class: ClassVar = RcccParams
    signals: ClassVar = frozenset({"credit"})

    def init(self, initial_rate, line_rate, params) -> RcccState:
        return RcccState(initial_rate, -jnp.ones_like(initial_rate))

    def update(self, state: RcccState, feedback: Feedback, params) -> RcccState:
        dt = feedback.dt
        line = feedback.line_rate
        max_wnd = params.max_wnd_bdp * line * jnp.maximum(feedback.base_rtt, 1e-9)
        grant = credit_rate(feedback.receiver_capacity, feedback.receiver_flows, params)
        credit = jnp.where(state.credit < 0, max_wnd, state.credit)
        # spend at the line rate while credit lasts, then at the rate credit comes in
        rate = jnp.where(credit > line * dt, line, jnp.minimum(grant, line))
        credit = jnp.clip(credit + (grant - rate) * dt, 0.0, max_wnd)
        return RcccState(rate=rate, credit=credit)


__all__ = ["Rccc", "RcccParams", "RcccState", "credit_rate"]
