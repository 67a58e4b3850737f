"""Congestion control in the collective model: phase rates as a CC law settles them.

By default a collective's phase runs at max-min fair rates: what an ideal congestion
control converges to. :class:`CCRates` is a max-min solver (``(links, capacity, coef=) ->
rates``, what :func:`~fabricflow.collective.collective_time` takes as ``solver=``) that
asks the congestion-control fluid (:mod:`fabricflow.solve.cc`) instead: the phase's
transfers run as long-lived flows under the chosen law for ``duration``, and each flow's
throughput over the second half of that run, over its max-min rate on the same flows, is
its *CC efficiency* ``e`` in ``(0, 1]``. The phase's rate of each transfer is its
max-min rate (with the routing's coefficients) times ``e``: under-utilization (DCQCN's
rate cuts below the fair share, HPCC's ``eta``), unfairness (a flow held below its share
while another holds more: the slowest transfer sets the collective's time) and oscillation
all lengthen the phase. ``e`` is capped at 1: a flow that takes more than its fair share
does not speed the phase past what the links allow.

What it approximates: a pipelined transfer crosses several hops; the fluid counts each of
its links once (its coefficient, which multipath splits and repeated hops set, is kept
for the max-min part only), its hops in link order, and the transfer's line rate is its
narrowest link. Only transfers that cross the network run under the law (scale-up
traffic, links touching a tier -1 switch, keeps its max-min rate), ECN marks at switch
egress links (tier > 0 nodes). PFC is off unless asked for.

What it costs: one fluid run per distinct phase (phases with the same flows and capacity
are solved once per :class:`CCRates`), ``duration / dt`` steps over ``F x H`` entries
(the default 1 ms at 1 us: 1,000 steps), and one compilation per flow-count bucket
(flow counts are padded to a power of two): about 10 s of CPU per bucket on a laptop-class
core. The efficiencies found are kept (:attr:`CCRates.phases`) for reports.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fabricflow.collective.flow_rates import fair_rates
from fabricflow.errors import SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.solve.cc.laws import resolve_law
from fabricflow.solve.cc.run_cc import simulate_arrays


@dataclasses.dataclass(frozen=True)
class PhaseEfficiency:
    """One phase as the CC fluid ran it: its flows, their mean and worst CC efficiency,
    and the largest egress queue of the run (bytes)."""

    flows: int
    mean_efficiency: float
    min_efficiency: float
    peak_queue_bytes: float


class CCRates:
    """A solver for the collective model whose rates are the CC fluid's (module docs).

    Args:
        fabric: the fabric the phases run on (for ECN marking, PFC buffers and latencies).
        cc: ``dcqcn``, ``hpcc``, ``timely``, ``swift`` or ``predictive``.
        params: the law's preset name or parameter set (default: its default).
        pfc: ``off`` (default), ``static`` or ``dynamic``.
        duration, dt: the fluid run of each phase, s (``dt`` default: the law's stable
            step or 1 us, the smaller).
        extra_delay: feedback delay added to each flow's path latency, s.
        base: the max-min solver ``(links, capacity, coef=) -> rates`` the efficiencies
            scale (default: the collective model's float64 numpy solvers).
    """

    def __init__(
        self,
        fabric: Fabric,
        cc: str = "dcqcn",
        *,
        params=None,
        pfc: str = "off",
        duration: float = 1e-3,
        dt: float | None = None,
        extra_delay: float = 4e-6,
        base=None,
    ):
        if not isinstance(fabric, Fabric):
            raise SpecError("fabric", f"expected a Fabric, got {type(fabric).__name__}")
        self.law = resolve_law(cc)
        self.cc = self.law.name
        self.fabric = fabric
        self.options = {
            "cc": self.law,
            "params": params,
            "pfc": pfc,
            "duration": float(duration),
            "extra_delay": extra_delay,
            "records": 40,
            "marking": fabric.node_tier[fabric.link_src] > 0,
            "pfc_ingress": fabric.node_tier[fabric.link_dst] > 0,
        }
        if dt is not None:
            self.options["dt"] = float(dt)
        self.base = base
        tier = fabric.node_tier
        self._network = (tier[fabric.link_src] >= 0) & (tier[fabric.link_dst] >= 0)
        self.phases: list[PhaseEfficiency] = []
        self._memo: dict = {}

    def efficiency(self, links: np.ndarray, capacity: np.ndarray) -> np.ndarray:
        """float64 ``[F]`` in ``(0, 1]``: each flow's CC throughput over its max-min rate,
        each link of its row counted once (memoised per (links, capacity))."""
        links = np.asarray(links, dtype=np.int64)
        capacity = np.asarray(capacity, dtype=np.float64)
        key = (links.shape, links.tobytes(), capacity.tobytes())
        if key not in self._memo:
            self._memo[key] = self._run(links, capacity)
        return self._memo[key]

    def __call__(self, links, capacity, coef=None) -> np.ndarray:
        links = np.asarray(links)
        capacity = np.asarray(capacity, dtype=np.float64)
        ideal = fair_rates(links, capacity, coef, self.base)[0]
        return ideal * self.efficiency(links, capacity)

    def _run(self, links: np.ndarray, capacity: np.ndarray) -> np.ndarray:
        # Only flows that cross the network run under the law: scale-up traffic (NVLink,
        # links touching a tier -1 switch) has no RoCE congestion control.
        network = np.where(links >= 0, self._network[np.where(links >= 0, links, 0)], False)
        rows = np.flatnonzero(network.any(axis=1))
        out = np.ones(links.shape[0])
        if rows.size == 0:
            return out
        flows = _left_packed(links[rows])
        ideal = fair_rates(flows, capacity)[0]
        padded, count = _pad_flows(flows)
        entry = np.where(padded >= 0, padded, 0)
        width = padded >= 0
        latency = np.where(width, self.fabric.latency[entry], 0.0).sum(axis=1)
        line = np.where(width, capacity[entry], np.inf).min(axis=1)
        duration = self.options["duration"]
        start = np.where(np.arange(padded.shape[0]) < count, 0.0, 10.0 * duration)
        result = simulate_arrays(
            padded,
            capacity,
            latency,
            line_rate=line,
            start=start,
            link_latency=self.fabric.latency,
            **self.options,
        )
        rate = result.mean_rate()[:count].astype(np.float64)
        found = np.clip(rate / np.maximum(ideal, 1e-300), 1e-6, 1.0)
        out[rows] = found
        self.phases.append(
            PhaseEfficiency(
                flows=int(count),
                mean_efficiency=float(found.mean()),
                min_efficiency=float(found.min()),
                peak_queue_bytes=float(np.max(result.queue)),
            )
        )
        return out

    def report(self) -> dict:
        """JSON-able: the law and each phase's efficiencies (as run so far)."""
        return {
            "cc": self.cc,
            "phases": [dataclasses.asdict(p) for p in self.phases],
        }


def as_cc_rates(fabric: Fabric, cc, solver=None) -> CCRates:
    """``cc`` (a law's name or a :class:`CCRates`) as a solver for ``fabric``; a given
    ``solver`` becomes the max-min part a law's name scales."""
    if isinstance(cc, CCRates):
        if cc.fabric is not fabric:
            raise SpecError("cc", "this CCRates was made for another fabric")
        if solver is not None:
            raise SpecError("solver", "give the max-min solver to CCRates(base=...), not both")
        return cc
    return CCRates(fabric, cc, base=solver)


def _left_packed(links: np.ndarray) -> np.ndarray:
    """Rows with their valid links first (the fluid wants padding at the end of a row)."""
    order = np.argsort(links < 0, axis=1, kind="stable")
    return np.take_along_axis(links, order, axis=1)


def _pad_flows(links: np.ndarray) -> tuple[np.ndarray, int]:
    """``links`` padded to a power-of-two count of rows (copies of the first row, which
    never start) so that phases of similar size share one compilation; and the count."""
    count = links.shape[0]
    rows = 1 << max(int(np.ceil(np.log2(count))), 4)
    padded = np.concatenate([links, np.repeat(links[:1], rows - count, axis=0)])
    return padded, count


__all__ = ["CCRates", "PhaseEfficiency", "as_cc_rates"]
