"""Analytic steady states of the Ultra Ethernet laws: ``N`` identical long flows on one
link of capacity ``capacity`` (bytes/s) with base round trip ``base_rtt`` (s).

* NSCC (:func:`nscc_equilibrium`): below the delay target the window only grows, so the
  queue rests at or above it. There, per flow, the window ``w = C (T + d) / N`` gains
  the fair increase of its unmarked ACKs and ``eta`` per network RTT, ``(1 - p) fi / (T +
  d) + eta / T_n`` bytes/s, over a decrease cycle of one base RTT plus the wait for the
  first marked ACK (``mss / (p C / N)``), and loses ``w min(gamma (avg - target) / avg,
  max_md)`` once per cycle, where ``p`` is the RED marking of the queue ``d C`` and
  ``avg = p d + (1 - p) T / 4`` the delay average the law keeps (unmarked samples above
  the target count as a quarter base RTT). The queueing delay ``d`` that balances the
  two is found by bisection: a mean-value fixed point, the centre of the window's
  once-per-RTT sawtooth. Windows stop at one packet (``mtu``), so the queue is at least
  ``N mtu - C T`` (many flows on a small BDP).
* RCCC (:func:`rccc_fixed_point`): the pacer's credit, ``pull_rate C / N`` per flow, is
  the rate at rest: utilization ``pull_rate``, no standing queue. Each flow first spends
  its speculative ``max_wnd = 1.5 line T`` at the line rate while credit comes in at the
  granted rate, so it reaches its rest rate after ``max_wnd / (line - pull_rate C / N)``.
"""

from __future__ import annotations

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.solve.cc.nscc import REFERENCE_RATE, REFERENCE_RTT, NsccParams
from fabricflow.solve.cc.rccc import RcccParams


def _check(capacity: float, num_flows: int, base_rtt: float) -> None:
    if not num_flows >= 1 or not capacity > 0 or not base_rtt > 0:
        raise SpecError("num_flows", "need num_flows >= 1, capacity > 0 and base_rtt > 0")


def _nscc_balance(delay, capacity, num_flows, base_rtt, params, line):
    """Window gained minus window lost per decrease cycle (bytes) at queueing ``delay``."""
    p = params
    queue = delay * capacity
    marked = np.clip(p.pmax * (queue - p.kmin) / (p.kmax - p.kmin), 0.0, 1.0)
    marked = np.where(queue > p.kmax, 1.0, np.where(queue <= p.kmin, 0.0, marked))
    rtt = base_rtt + delay
    window = min(capacity * rtt / num_flows, p.max_wnd_bdp * line * base_rtt)
    ack = capacity / num_flows
    a = line * p.network_rtt / (REFERENCE_RATE * REFERENCE_RTT)
    gain = (1.0 - marked) * p.fi_mss * p.mss * a / rtt + p.eta_mss * p.mss * a / p.network_rtt
    cycle = base_rtt + (p.mss / (marked * ack) if marked > 0 else np.inf)
    avg = marked * delay + (1.0 - marked) * 0.25 * base_rtt
    cut = min(p.gamma * (avg - p.target) / avg, p.max_md) if avg > p.target else 0.0
    return gain * cycle - window * cut


def nscc_equilibrium(
    capacity: float,
    num_flows: int,
    base_rtt: float,
    params: NsccParams | None = None,
    line_rate: float | None = None,
) -> dict:
    """NSCC at rest (module docs): ``delay_s`` (queueing), ``queue_bytes``,
    ``utilization`` (1: the window fills the link), ``marking``, ``window_bytes``."""
    _check(capacity, num_flows, base_rtt)
    params = params or NsccParams()
    line = capacity if line_rate is None else float(line_rate)
    low, high = float(params.target), float(params.target) + 100.0 * float(base_rtt)
    if _nscc_balance(high, capacity, num_flows, base_rtt, params, line) > 0:
        raise SpecError("params", "NSCC has no rest point below 100 base RTTs of queue")
    for _ in range(200):
        mid = 0.5 * (low + high)
        if _nscc_balance(mid, capacity, num_flows, base_rtt, params, line) > 0:
            low = mid
        else:
            high = mid
    # windows never go below one packet: N packets in flight hold at least this queue
    floor = num_flows * float(params.mtu) / capacity - base_rtt
    delay = max(0.5 * (low + high), floor)
    queue = delay * capacity
    span = params.kmax - params.kmin
    marking = float(np.clip(params.pmax * (queue - params.kmin) / span, 0.0, 1.0))
    return {
        "delay_s": delay,
        "queue_bytes": queue,
        "utilization": 1.0,
        "marking": 1.0 if queue > params.kmax else marking,
        "window_bytes": capacity * (base_rtt + delay) / num_flows,
    }


def rccc_fixed_point(
    capacity: float,
    num_flows: int,
    base_rtt: float,
    params: RcccParams | None = None,
    line_rate: float | None = None,
    feedback_delay: float = 0.0,
) -> dict:
    """RCCC at rest (module docs): ``rate_Bps`` per flow, ``utilization``,
    ``queue_bytes`` (0) and ``settle_s``, when a flow's speculative credit is spent
    (``feedback_delay``: s before the first credit arrives)."""
    _check(capacity, num_flows, base_rtt)
    params = params or RcccParams()
    line = capacity if line_rate is None else float(line_rate)
    grant = min(params.pull_rate * capacity / num_flows, line)
    max_wnd = params.max_wnd_bdp * line * base_rtt
    if max_wnd <= line * feedback_delay:  # spent before the first credit arrives
        settle = max_wnd / line
    else:
        settle = (max_wnd - grant * feedback_delay) / (line - grant) if line > grant else 0.0
    return {
        "rate_Bps": grant,
        "utilization": num_flows * grant / capacity,
        "queue_bytes": 0.0,
        "settle_s": settle,
    }


__all__ = ["nscc_equilibrium", "rccc_fixed_point"]
