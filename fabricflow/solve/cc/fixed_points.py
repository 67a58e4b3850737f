"""Analytic steady states of the rate laws: ``N`` identical long flows on one link.

Each function solves the law's own equations at rest (every derivative or update zero)
for ``N`` flows of line rate ``line_rate`` sharing a link of capacity ``capacity``
(bytes/s), whose base round trip is ``base_rtt`` (s). They are the regression oracles of
the simulated laws (DCQCN's is :func:`fabricflow.solve.cc.dcqcn_analysis.fixed_point`).

* HPCC: ``W = W_c`` gives ``U = eta W_c / (W_c - W_AI)``; below 1 no queue builds and the
  throughput is ``eta C + N W_AI / T``; at or above 1 the link is full and the queue is
  ``(U - 1) C T`` with ``W_c = C T / N``.
* Patched TIMELY: ``w = 1/2`` at ``g = 0``; rest at ``delta / 2 = R beta error / 2`` gives
  ``rtt* = T_low (1 + N delta / (beta C))`` (CoNEXT'16, eq. of the patched fixed point).
* Swift: AIMD on the fabric delay rests where the delay meets the target of the flows'
  windows, ``rtt = target(C rtt / (N mtu))``, solved by bisection.
* Predictive: every hop's load 1 at rest gives the chosen load ``x* = 1 - N rate_ai / C``,
  so the delay ``d_ref + H (rho (eta - 1) + (1 + rho) N rate_ai / C)``.
"""

from __future__ import annotations

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.solve.cc.hpcc import HPCCParams
from fabricflow.solve.cc.predictive import PredictiveParams
from fabricflow.solve.cc.swift import SwiftParams, target_delay
from fabricflow.solve.cc.timely import TimelyParams


def _check(capacity: float, num_flows: int) -> None:
    if not num_flows >= 1 or not capacity > 0:
        raise SpecError("num_flows", "need num_flows >= 1 and capacity > 0")


def hpcc_fixed_point(
    capacity: float,
    num_flows: int,
    base_rtt: float,
    params: HPCCParams | None = None,
    line_rate: float | None = None,
) -> dict:
    """HPCC at rest: ``utilization``, ``queue_bytes``, ``rate_Bps`` per flow.

    ``base_rtt``: HPCC's T, s (``params.base_rtt`` when set, else the flows' feedback
    delay in the simulator). ``line_rate``: the flows' NIC rate (default ``capacity``).
    """
    _check(capacity, num_flows)
    params = params or HPCCParams()
    rtt = float(params.base_rtt) if float(params.base_rtt) > 0 else float(base_rtt)
    line = capacity if line_rate is None else float(line_rate)
    w_ai = line * rtt * (1.0 - params.eta) / params.expected_flows
    throughput = params.eta * capacity + num_flows * w_ai / rtt
    if throughput < capacity:
        return {
            "utilization": throughput / capacity,
            "queue_bytes": 0.0,
            "rate_Bps": throughput / num_flows,
        }
    window = capacity * rtt / num_flows
    load = params.eta * window / (window - w_ai)
    return {
        "utilization": 1.0,
        "queue_bytes": (load - 1.0) * capacity * rtt,
        "rate_Bps": capacity / num_flows,
    }


def timely_patched_fixed_point(
    capacity: float, num_flows: int, base_rtt: float, params: TimelyParams | None = None
) -> dict:
    """Patched TIMELY at rest: ``rtt_s``, ``queue_bytes`` (``(rtt - base_rtt) C``),
    ``rate_Bps`` (``C / N``)."""
    _check(capacity, num_flows)
    params = params or TimelyParams.preset("patched")
    rate = capacity / num_flows
    rtt = params.t_low * (1.0 + params.rate_ai / (params.beta * rate))
    if rtt > params.t_high:
        raise SpecError(
            "params", f"the fixed point RTT {rtt:.3g} s lies above t_high; no patched rest"
        )
    return {"rtt_s": rtt, "queue_bytes": (rtt - base_rtt) * capacity, "rate_Bps": rate}


def swift_fixed_point(
    capacity: float,
    num_flows: int,
    base_rtt: float,
    num_hops: int,
    params: SwiftParams | None = None,
) -> dict:
    """Swift at rest: ``rtt_s`` (fabric delay = target), ``target_s``, ``queue_bytes``,
    ``cwnd_packets``, ``rate_Bps`` (``C / N``)."""
    _check(capacity, num_flows)
    params = params or SwiftParams()
    rate = capacity / num_flows

    def gap(rtt: float) -> float:  # decreasing in rtt: the target falls as cwnd grows
        cwnd = rate * rtt / params.mtu
        return float(target_delay(cwnd, num_hops, params)) - rtt

    low, high = base_rtt, base_rtt + 10 * (params.base_target + params.fs_range) + 1e-3
    if gap(low) <= 0:
        return {
            "rtt_s": base_rtt,
            "target_s": base_rtt + gap(low),
            "queue_bytes": 0.0,
            "cwnd_packets": rate * base_rtt / params.mtu,
            "rate_Bps": rate,
        }
    for _ in range(200):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if gap(middle) > 0 else (low, middle)
    rtt = 0.5 * (low + high)
    return {
        "rtt_s": rtt,
        "target_s": rtt + gap(rtt),
        "queue_bytes": (rtt - base_rtt) * capacity,
        "cwnd_packets": rate * rtt / params.mtu,
        "rate_Bps": rate,
    }


def predictive_fixed_point(
    capacity: float, num_flows: int, params: PredictiveParams | None = None
) -> dict:
    """The predictive controller at rest: ``queue_delay_s``, ``queue_bytes``,
    ``utilization``, ``rate_Bps``."""
    _check(capacity, num_flows)
    params = params or PredictiveParams()
    share = num_flows * params.rate_ai / capacity
    delay = params.target_delay + params.horizon * (
        params.rho * (params.eta - 1.0) + (1.0 + params.rho) * share
    )
    if delay > 0:
        return {
            "queue_delay_s": delay,
            "queue_bytes": delay * capacity,
            "utilization": 1.0,
            "rate_Bps": capacity / num_flows,
        }
    # No queue: the chosen load at an empty queue, plus the additive term.
    load = (1.0 + params.target_delay / params.horizon + params.rho * params.eta) / (
        1.0 + params.rho
    ) + share
    utilization = float(np.minimum(load, 1.0))
    return {
        "queue_delay_s": 0.0,
        "queue_bytes": 0.0,
        "utilization": utilization,
        "rate_Bps": utilization * capacity / num_flows,
    }


__all__ = [
    "hpcc_fixed_point",
    "predictive_fixed_point",
    "swift_fixed_point",
    "timely_patched_fixed_point",
]
