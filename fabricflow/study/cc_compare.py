"""Congestion-control comparison: every rate law on the same scenarios, PFC on.

For each law (DCQCN, HPCC, TIMELY, Swift, predictive) the scenarios run side by side in
one simulation (:func:`~fabricflow.dynamics.scenarios.union`: one compilation per law):
an incast (``senders`` flows into one receiver plus a victim flow), an all-to-all among
``hosts`` hosts of an oversubscribed leaf-spine and a ring of ``ring`` switches (the
cyclic buffer dependency of PFC deadlocks). Over the second half of the run, per law and
scenario:

* queue: ``queue_p50_bytes``, ``queue_p99_bytes``, ``queue_max_bytes`` at the scenario's
  bottleneck (the all-to-all's: its link with the largest mean queue);
* throughput: ``utilization`` of the bottleneck (the throughput of the flows through it
  over its capacity), ``throughput_Bps`` of all the scenario's flows;
* fairness: ``jain_fairness`` of each flow's throughput over its max-min rate (1: every
  flow at the same fraction of its fair share), ``min_share`` (the worst such fraction);
* PFC: ``pause_time_s`` (summed over links), ``pause_fraction`` (the most paused link),
  ``victim_flows`` (flows slowed by pauses without a congestion point of their own);
* convergence: ``convergence_time_s``, from when every flow's rate stays within 10 % of
  its late mean (NaN if it never settles).

The predictive controller's comparison with DCQCN and HPCC on a 64-to-1 incast and an
all-to-all of about 8,000 flows (:func:`head_to_head`) uses the same metrics.
"""

from __future__ import annotations

import time

import numpy as np
import xarray as xr

from fabricflow.dynamics.congestion import simulate_cc
from fabricflow.dynamics.scenarios import alltoall, incast, ring, union
from fabricflow.dynamics.summaries import convergence_time, jain_fairness
from fabricflow.solve.cc.laws import CC_NAMES
from fabricflow.solve.maxmin.engine import max_min as fair_rates
from fabricflow.solve.pfc.victims import victim_flows

METRICS = {
    "queue_p50_bytes": ("bytes", "bottleneck egress queue, median over the window"),
    "queue_p99_bytes": ("bytes", "bottleneck egress queue, 99th percentile over the window"),
    "queue_max_bytes": ("bytes", "bottleneck egress queue, largest over the whole run"),
    "utilization": ("1", "bottleneck throughput / capacity over the window"),
    "throughput_Bps": ("bytes/s", "throughput of all the scenario's flows over the window"),
    "jain_fairness": ("1", "Jain's index of throughput / max-min rate"),
    "min_share": ("1", "smallest throughput / max-min rate of any flow"),
    "pause_time_s": ("s", "PFC pause time summed over the scenario's links"),
    "pause_fraction": ("1", "largest fraction of the run any link spent paused"),
    "victim_flows": ("1", "flows slowed by PFC pauses without a congestion point of their own"),
    "convergence_time_s": ("s", "time from which every rate stays within 10 % of its late mean"),
}


def scenarios(*, senders: int = 16, hosts: int = 16, switches: int = 4, bandwidth=40e9 / 8):
    """The study's scenarios, united: ``(union, names)``."""
    parts = [
        incast(senders, bandwidth=bandwidth),
        alltoall(hosts, bandwidth=bandwidth),
        ring(switches, bandwidth=bandwidth),
    ]
    return union(parts), [sc.name for sc in parts]


def part_metrics(result, part, max_min, since: float) -> dict:
    """The metrics of one part of a union run (module docs), as floats."""
    flows = np.arange(result.num_flows)[part.flows]
    links = np.unique(result.links[flows][result.links[flows] >= 0])
    window = result.time >= since
    rate = result.mean_rate(since)
    queue = result.queue[:, links].astype(np.float64)
    bottleneck = part.bottleneck
    if bottleneck is None:
        bottleneck = int(links[np.argmax(queue[window].mean(axis=0))])
    series = result.queue[:, bottleneck].astype(np.float64)
    crossing = np.any(result.links == bottleneck, axis=1)
    share = rate[flows] / max_min[flows]
    victims = victim_flows(result, max_min, since=since)[flows]
    return {
        "queue_p50_bytes": float(np.percentile(series[window], 50)),
        "queue_p99_bytes": float(np.percentile(series[window], 99)),
        "queue_max_bytes": float(series.max()),
        "utilization": float(rate[crossing].sum() / result.capacity[bottleneck]),
        "throughput_Bps": float(rate[flows].sum()),
        "jain_fairness": jain_fairness(share),
        "min_share": float(share.min()),
        "pause_time_s": float(result.pause_time[links].sum()),
        "pause_fraction": float(result.pause_time[links].max() / result.duration),
        "victim_flows": float(victims.sum()),
        "convergence_time_s": convergence_time(result, since=since, flows=flows),
    }


def evaluate(united, laws, *, pfc: str, duration: float, dt: float, records: int) -> xr.Dataset:
    """Every law of ``laws`` on the parts of ``united`` (one run per law); a Dataset with
    dims ``(cc, scenario)`` and the variables of :data:`METRICS`."""
    names = [part.name for part in united.parts]
    max_min = fair_rates(united.routes.links, united.fabric.capacity, dtype=np.float64).rates
    values = {name: np.full((len(laws), len(names)), np.nan) for name in METRICS}
    seconds = []
    for i, cc in enumerate(laws):
        began = time.perf_counter()
        result = simulate_cc(
            united.fabric, united.routes, cc=cc, pfc=pfc, duration=duration, dt=dt, records=records
        )
        seconds.append(time.perf_counter() - began)
        for j, part in enumerate(united.parts):
            for name, value in part_metrics(result, part, max_min, duration / 2).items():
                values[name][i, j] = value
    return xr.Dataset(
        {
            name: (("cc", "scenario"), values[name], {"units": units, "long_name": long_name})
            for name, (units, long_name) in METRICS.items()
        },
        coords={"cc": list(laws), "scenario": names},
        attrs={
            "pfc": pfc,
            "duration_s": float(duration),
            "dt_s": float(dt),
            "window_s": f"{duration / 2:g}..{duration:g}",
            "seconds_per_law": seconds,
        },
    )


def compare(
    *,
    laws=CC_NAMES,
    senders: int = 16,
    hosts: int = 16,
    switches: int = 4,
    bandwidth: float = 40e9 / 8,
    pfc: str = "static",
    duration: float = 0.01,
    dt: float = 1e-6,
    records: int = 500,
) -> xr.Dataset:
    """Every law on the study's scenarios (module docs)."""
    united, _ = scenarios(senders=senders, hosts=hosts, switches=switches, bandwidth=bandwidth)
    ds = evaluate(united, list(laws), pfc=pfc, duration=duration, dt=dt, records=records)
    ds.attrs.update(
        study="cc_compare",
        scenarios=f"incast {senders}+1 victim, alltoall of {hosts} hosts, ring of "
        f"{switches} switches",
        bandwidth_Bps=float(bandwidth),
    )
    return ds


def head_to_head(
    *,
    laws=("predictive", "dcqcn", "hpcc"),
    senders: int = 64,
    hosts: int = 91,
    bandwidth: float = 40e9 / 8,
    pfc: str = "static",
    duration: float = 0.01,
    dt: float = 1e-6,
    records: int = 500,
) -> xr.Dataset:
    """The predictive controller against DCQCN and HPCC on a ``senders``-to-1 incast and an
    all-to-all of ``hosts`` hosts (91: 8,190 flows), run side by side; same metrics."""
    united = union([incast(senders, bandwidth=bandwidth), alltoall(hosts, bandwidth=bandwidth)])
    ds = evaluate(united, list(laws), pfc=pfc, duration=duration, dt=dt, records=records)
    ds.attrs.update(
        study="cc_head_to_head",
        scenarios=f"incast {senders}+1 victim; alltoall of {hosts} hosts "
        f"({hosts * (hosts - 1)} flows)",
        bandwidth_Bps=float(bandwidth),
    )
    return ds


__all__ = ["METRICS", "compare", "evaluate", "head_to_head", "part_metrics", "scenarios"]
