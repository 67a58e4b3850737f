"""DCQCN parameter map: ECN thresholds and additive increase vs queue and throughput.

An incast (``senders`` flows from one leaf into one receiver on another leaf, plus a
victim flow from the same leaf to a third leaf, :func:`~fabricflow.dynamics.scenarios.incast`)
runs under DCQCN with PFC for every combination of the switch's RED marking thresholds
``kmin`` / ``kmax`` and the reaction point's additive-increase step ``R_AI``. All
parameter sets run as one vmapped :func:`~fabricflow.simulate_cc` call (``cc="dcqcn"``) (one
compilation); a combination with ``kmin >= kmax`` is not a RED ramp and is left NaN.

Over the second half of the run (after the start-up transient), per parameter set:

* ``queue_mean_bytes`` / ``queue_p99_bytes``: the egress queue of the bottleneck (the
  receiver's leaf port), over the recorded samples;
* ``max_queue_p99_bytes``: the largest p99 egress queue of any link (PFC moves the
  backlog upstream, to the spine, when the receiver's leaf pauses it);
* ``throughput_Bps``: the incast flows' delivered bytes per second, ``utilization`` that
  over the bottleneck capacity;
* ``victim_throughput_Bps``: the victim's delivered rate; its path has spare capacity, so
  anything below its line rate is PFC head-of-line blocking;
* ``pause_fraction``: the largest fraction of the whole run that any link spent paused;
* ``jain_fairness``: Jain's index over the incast flows' rates;
* ``fixed_point_queue_bytes``: the fluid model's analytic steady-state queue for
  ``senders`` flows on the bottleneck (:func:`~fabricflow.solve.cc.dcqcn_analysis.fixed_point`,
  NaN when it needs ``p > pmax``), the queue a stable, PFC-free run settles at.

Cost: work grows with ``duration / dt x combinations``; the default map (4 x 4 x 3 = 48
sets, 20 ms at 1 us steps) runs in one call: 88 s measured on a 2-core machine shared
with other jobs (load ~16).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import xarray as xr

from fabricflow.dynamics.congestion import simulate_cc
from fabricflow.dynamics.scenarios import incast
from fabricflow.errors import SpecError
from fabricflow.solve.cc.dcqcn import DCQCNParams
from fabricflow.solve.cc.dcqcn_analysis import fixed_point
from fabricflow.solve.parameters import stack_params

#: Default axes: switch ECN thresholds (bytes) and additive-increase steps (bytes/s).
KMIN_BYTES = (5e3, 20e3, 50e3, 100e3)
KMAX_BYTES = (200e3, 400e3, 800e3, 1600e3)
RATE_AI_BPS = (5e6 / 8, 40e6 / 8, 160e6 / 8)

METRICS = {
    "queue_mean_bytes": ("bytes", "bottleneck egress queue, mean over the window"),
    "queue_p99_bytes": ("bytes", "bottleneck egress queue, 99th percentile over the window"),
    "max_queue_p99_bytes": ("bytes", "largest 99th-percentile egress queue of any link"),
    "throughput_Bps": ("bytes/s", "incast flows' delivered throughput over the window"),
    "utilization": ("1", "incast throughput / bottleneck capacity"),
    "victim_throughput_Bps": ("bytes/s", "victim flow's delivered throughput over the window"),
    "pause_fraction": ("1", "largest fraction of the run any link spent PFC-paused"),
    "jain_fairness": ("1", "Jain's index over the incast flows' rates"),
    "fixed_point_queue_bytes": ("bytes", "analytic DCQCN fixed-point queue (no PFC)"),
}


def _axis(values, field: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64).ravel()
    if array.size == 0 or not np.all(np.isfinite(array)) or np.any(array < 0):
        raise SpecError(field, f"must be a non-empty list of finite values >= 0, got {values!r}")
    return array


def dcqcn_map(
    *,
    kmin=KMIN_BYTES,
    kmax=KMAX_BYTES,
    rate_ai=RATE_AI_BPS,
    senders: int = 8,
    bandwidth: float = 12.5e9,
    preset: str = "paper",
    pfc: str = "static",
    duration: float = 0.02,
    dt: float = 1e-6,
    records: int = 400,
) -> xr.Dataset:
    """Run the incast for every ``(kmin, kmax, rate_ai)`` and summarize (see module doc).

    Args:
        kmin, kmax: RED thresholds to sweep, bytes (``[K1]``, ``[K2]``).
        rate_ai: additive-increase steps to sweep, bytes/s (``[R]``); ``rate_hai`` follows
            it when the preset has no separate hyper increase (``paper``).
        senders: incast degree (flows into the receiver), >= 2.
        bandwidth: every link's capacity, bytes/s (uplinks scale so only the receiver's
            port is a bottleneck).
        preset: DCQCN preset the other parameters come from (``paper``, ``connectx``).
        pfc: PFC mode (``off``, ``static``, ``dynamic``).
        duration, dt: simulated time and step, s; the window is the second half.
        records: time samples kept for the queue percentiles.

    Returns:
        Dataset with dims ``(kmin_bytes, kmax_bytes, rate_ai_Bps)`` and the variables of
        :data:`METRICS`; attrs say the scenario and settings.
    """
    kmin_axis = _axis(kmin, "kmin")
    kmax_axis = _axis(kmax, "kmax")
    rai_axis = _axis(rate_ai, "rate_ai")
    if np.any(rai_axis <= 0):
        raise SpecError("rate_ai", f"must be > 0 bytes/s, got {rate_ai!r}")
    scenario = incast(senders, bandwidth=bandwidth)
    base = DCQCNParams.preset(preset)
    same_hai = base.rate_hai == base.rate_ai
    grid = list(
        itertools.product(range(kmin_axis.size), range(kmax_axis.size), range(rai_axis.size))
    )
    valid = [(i, j, k) for i, j, k in grid if kmin_axis[i] < kmax_axis[j]]
    if not valid:
        raise SpecError("kmin", "every kmin is >= every kmax: no RED ramp to simulate")
    sets = [
        base.replace(
            kmin=kmin_axis[i],
            kmax=kmax_axis[j],
            rate_ai=rai_axis[k],
            **({"rate_hai": rai_axis[k]} if same_hai else {}),
        )
        for i, j, k in valid
    ]
    result = simulate_cc(
        scenario.fabric,
        scenario.routes,
        cc="dcqcn",
        params=stack_params(sets),
        pfc=pfc,
        duration=duration,
        dt=dt,
        records=records,
    )
    values = _summaries(result, scenario, senders)
    values["fixed_point_queue_bytes"] = np.array(
        [_fixed_point_queue(float(bandwidth), senders, params) for params in sets]
    )
    shape = (kmin_axis.size, kmax_axis.size, rai_axis.size)
    index = tuple(np.array(valid).T)
    data_vars = {}
    for name, (units, long_name) in METRICS.items():
        grid_values = np.full(shape, np.nan)
        grid_values[index] = values[name]
        data_vars[name] = (
            ("kmin_bytes", "kmax_bytes", "rate_ai_Bps"),
            grid_values,
            {"units": units, "long_name": long_name},
        )
    return xr.Dataset(
        data_vars,
        coords={
            "kmin_bytes": ("kmin_bytes", kmin_axis, {"units": "bytes"}),
            "kmax_bytes": ("kmax_bytes", kmax_axis, {"units": "bytes"}),
            "rate_ai_Bps": ("rate_ai_Bps", rai_axis, {"units": "bytes/s"}),
        },
        attrs={
            "study": "dcqcn_map",
            "scenario": f"incast of {senders} flows + 1 victim, 2-tier leaf-spine",
            "bandwidth_Bps": float(bandwidth),
            "preset": preset,
            "pfc": pfc,
            "duration_s": float(duration),
            "dt_s": float(dt),
            "window_s": f"{duration / 2:g}..{duration:g}",
            "invalid": "NaN where kmin >= kmax (no RED ramp)",
        },
    )


def _summaries(result, scenario, senders: int) -> dict[str, np.ndarray]:
    """The window metrics of every batch entry, vectorized over ``[B, T, ...]``."""
    since = result.duration / 2
    window = result.time >= since
    rates = result.mean_rate(since)  # [B, F], from delivered bytes (exact)
    incast_rates = rates[:, :senders]
    queue = result.queue[:, window, :].astype(np.float64)  # [B, T, L]
    bottleneck = queue[:, :, scenario.bottleneck]
    throughput = incast_rates.sum(axis=1)
    capacity = float(result.capacity[scenario.bottleneck])
    with np.errstate(invalid="ignore", divide="ignore"):
        jain = throughput**2 / (senders * np.sum(incast_rates**2, axis=1))
    return {
        "queue_mean_bytes": bottleneck.mean(axis=1),
        "queue_p99_bytes": np.percentile(bottleneck, 99, axis=1),
        "max_queue_p99_bytes": np.percentile(queue, 99, axis=1).max(axis=1),
        "throughput_Bps": throughput,
        "utilization": throughput / capacity,
        "victim_throughput_Bps": rates[:, scenario.roles["victim"][0]],
        "pause_fraction": np.asarray(result.pause_time, np.float64).max(axis=1) / result.duration,
        "jain_fairness": jain,
    }


def _fixed_point_queue(capacity: float, flows: int, params: DCQCNParams) -> float:
    try:
        return fixed_point(capacity, flows, params)["queue_bytes"]
    except SpecError:  # needs p > pmax: no steady state on the RED ramp
        return math.nan


__all__ = ["KMAX_BYTES", "KMIN_BYTES", "METRICS", "RATE_AI_BPS", "dcqcn_map"]
