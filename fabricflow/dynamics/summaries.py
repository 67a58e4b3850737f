"""Congestion-control/PFC results as an ``xarray.Dataset`` and their summaries.

:func:`to_dataset` turns a :class:`~fabricflow.solve.cc.result.CCResult` into a dataset
with coordinates ``time`` (s), ``flow``, ``link`` (and ``batch`` for parameter sweeps),
units in every variable's ``attrs``; it saves with ``ds.to_netcdf(path)`` (scipy engine,
no C netCDF stack needed). :func:`summarize` gives the figures a tuning study reads:
time-averaged throughput per flow, Jain's fairness, bottleneck queue p50/p99, pause
fraction, flow completion times, victim flows and deadlocked link sets.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from fabricflow.errors import SpecError
from fabricflow.solve.pfc.deadlock import deadlocks_over_time
from fabricflow.solve.pfc.victims import victim_flows


def jain_fairness(rates) -> float:
    """Jain's index ``(sum x)^2 / (n sum x^2)`` in (0, 1]; 1 = all equal (NaN if all 0)."""
    x = np.asarray(rates, dtype=np.float64)
    denom = x.size * np.sum(x * x)
    return float(np.sum(x) ** 2 / denom) if denom > 0 else float("nan")


def to_dataset(result) -> xr.Dataset:
    """Time series and per-flow / per-link outcomes of a run as an xarray Dataset.

    Variables: ``rate`` (time, flow) bytes/s; ``delivered`` (time, flow) bytes; ``queue``
    (time, link) bytes; ``paused`` (time, link) 0/1; ``pause_time`` (link) s;
    ``flow_pause_time``, ``finish_time`` (flow) s; ``retransmitted`` (flow) and
    ``trimmed`` (link) bytes (trimming runs); ``capacity`` (link) bytes/s;
    ``size``, ``start`` (flow); ``state_<name>`` (flow): the law's final state. A batch
    adds a leading ``batch`` dimension.
    """
    batched = result.rate.ndim == 3
    lead = ("batch",) if batched else ()
    ds = xr.Dataset(
        {
            "rate": (
                lead + ("time", "flow"),
                result.rate.astype(np.float64),
                {"units": "bytes/s", "long_name": f"{result.cc} sending rate"},
            ),
            "delivered": (
                lead + ("time", "flow"),
                result.delivered.astype(np.float64),
                {"units": "bytes", "long_name": "cumulative delivered bytes"},
            ),
            "queue": (
                lead + ("time", "link"),
                result.queue.astype(np.float64),
                {"units": "bytes", "long_name": "egress queue"},
            ),
            "paused": (
                lead + ("time", "link"),
                result.paused.astype(np.int8),
                {"units": "1", "long_name": "PFC pause state of the link's egress"},
            ),
            "pause_time": (
                lead + ("link",),
                result.pause_time.astype(np.float64),
                {"units": "s", "long_name": "time the link spent paused"},
            ),
            "flow_pause_time": (
                lead + ("flow",),
                result.flow_pause_time.astype(np.float64),
                {"units": "s", "long_name": "time with a paused link on the path"},
            ),
            "finish_time": (
                lead + ("flow",),
                result.finish_time.astype(np.float64),
                {"units": "s", "long_name": "flow completion time (inf: unfinished)"},
            ),
            "retransmitted": (
                lead + ("flow",),
                result.retransmitted.astype(np.float64),
                {"units": "bytes", "long_name": "bytes trimmed in the fabric and sent again"},
            ),
            "trimmed": (
                lead + ("link",),
                result.trimmed.astype(np.float64),
                {"units": "bytes", "long_name": "bytes trimmed at the link's egress"},
            ),
            "capacity": (
                ("batch", "link") if result.capacity.ndim == 2 else ("link",),
                result.capacity,
                {"units": "bytes/s"},
            ),
            "size": (("flow",), result.size, {"units": "bytes"}),
            "start": (("flow",), result.start, {"units": "s"}),
            "feedback_delay": (("flow",), result.delay, {"units": "s"}),
            **{
                f"state_{name}": (
                    lead + ("flow",),
                    np.asarray(value, np.float64),
                    {"long_name": f"final {result.cc} state {name!r}"},
                )
                for name, value in result.law_state.items()
            },
        },
        coords={
            "time": ("time", result.time, {"units": "s"}),
            "flow": np.arange(result.num_flows),
            "link": np.arange(result.num_links),
        },
        attrs={
            "model": f"{result.cc} fluid model with PFC",
            "cc": result.cc,
            "dt_s": result.dt,
            "duration_s": result.duration,
            "pfc_mode": result.pfc_mode,
            "trim": int(result.trim),
            **{f"param_{k}": _attr(v) for k, v in result.params.as_dict().items()},
            **{f"pfc_{k}": _attr(v) for k, v in result.pfc_params.as_dict().items()},
        },
    )
    if batched:
        ds = ds.assign_coords(batch=np.arange(result.rate.shape[0]))
    return ds


def _attr(value):
    # netCDF attributes must be scalars or 1-d arrays.
    return np.asarray(value, dtype=np.float64) if isinstance(value, list) else value


def convergence_time(result, *, since: float | None = None, rtol: float = 0.1, flows=None) -> float:
    """Time (s) from which every flow's sending rate (as its congestion control sets it)
    stays within ``rtol`` of its mean over the window ``[since, end]`` (relative to that
    mean, floored at 1 % of the flow's line rate); NaN if the rates never settle.

    ``result``: a non-batched :class:`~fabricflow.solve.cc.result.CCResult`; ``flows``:
    the flow ids to look at (default all).
    """
    since = result.duration / 2 if since is None else since
    flows = np.arange(result.num_flows) if flows is None else np.asarray(flows)
    rate = result.rate[:, flows].astype(np.float64)
    target = rate[result.time >= since].mean(axis=0)
    line = result.capacity[result.links[flows, 0]]
    scale = np.maximum(target, 0.01 * line)
    active = np.isinf(result.finish_time[flows])  # finished flows stop sending: not compared
    off = np.abs(rate - target) > rtol * scale
    bad = np.any(off[:, active], axis=1) if active.any() else np.zeros(off.shape[0], bool)
    if bad[-1]:
        return float("nan")
    last_bad = np.flatnonzero(bad)
    return float(result.time[last_bad[-1] + 1]) if last_bad.size else float(result.time[0])


def select_flows(roles: dict, num_flows: int, limit: int = 16) -> list[int]:
    """At most ``limit`` flow ids that show every role: small roles whole, larger ones
    by evenly spaced members (first and last included), in role order."""
    roles = roles or {"flows": list(range(num_flows))}
    budget = {role: 0 for role in roles}
    left = max(limit, len(roles))
    pending = sorted(roles, key=lambda role: len(roles[role]))
    for index, role in enumerate(pending):  # smallest first: they are shown whole
        share = max(1, left // (len(pending) - index))
        budget[role] = min(len(roles[role]), share)
        left -= budget[role]
    chosen: list[int] = []
    for role, ids in roles.items():
        picks = np.unique(np.linspace(0, len(ids) - 1, budget[role]).round().astype(int))
        chosen.extend(int(ids[i]) for i in picks)
    return chosen


def role_summary(rate, max_min_rate, roles: dict) -> dict:
    """Per role: ``flows`` (count), ``mean_Bps``, ``min_Bps``, ``max_Bps`` of the flows'
    throughputs and their ``max_min_mean_Bps``; ``ids`` when the role has <= 8 flows."""
    rate = np.asarray(rate, np.float64)
    ideal = None if max_min_rate is None else np.asarray(max_min_rate, np.float64)
    out = {}
    for role, ids in roles.items():
        ids = np.asarray(ids, np.int64)
        entry = {
            "flows": int(ids.size),
            "mean_Bps": float(rate[ids].mean()),
            "min_Bps": float(rate[ids].min()),
            "max_Bps": float(rate[ids].max()),
        }
        if ideal is not None:
            entry["max_min_mean_Bps"] = float(ideal[ids].mean())
        if ids.size <= 8:
            entry["ids"] = ids.tolist()
        out[role] = entry
    return out


def summarize(
    result, *, bottleneck: int | None = None, max_min_rate=None, since: float | None = None
) -> dict:
    """Figures of a (non-batched) run, JSON-able.

    Args:
        result: :class:`~fabricflow.solve.cc.result.CCResult`.
        bottleneck: link id whose queue to report (default: the link with the largest
            mean queue over the window).
        max_min_rate: ``[F]`` ideal rates (bytes/s) for victim detection (optional).
        since: start of the averaging window, s (default: half the duration).

    Returns:
        dict with ``mean_rate_Bps`` (per flow, over the window), ``jain_fairness`` (Jain's
        index of the rates of the ``jain_flows`` flows that cross the bottleneck link),
        ``bottleneck_link``, ``queue_mean_bytes`` / ``queue_p50_bytes`` /
        ``queue_p99_bytes`` (bottleneck, over the recorded samples of the window),
        ``bottleneck_utilization`` (the bottleneck's throughput over its capacity),
        ``pause_fraction`` (largest fraction of the run any link spent paused;
        ``pause_fraction_per_link`` for all links), ``pause_time_s`` (summed over links),
        ``convergence_time_s`` (:func:`convergence_time`, None if never settled),
        ``fct_s`` (per flow, ``None`` if unfinished), ``victim_flows`` (with
        ``max_min_rate``) and ``deadlocks``.
    """
    if result.rate.ndim != 2:
        raise SpecError("result", "summarize takes a single run; index a batch first (batch_item)")
    since = result.duration / 2 if since is None else since
    rate = result.mean_rate(since)
    window = result.time >= since
    queue = result.queue[window]
    if bottleneck is None:
        bottleneck = int(np.argmax(queue.mean(axis=0)))
    series = queue[:, bottleneck].astype(np.float64)
    pause_fraction = result.pause_time / result.duration
    fct = np.where(np.isfinite(result.finish_time), result.finish_time - result.start, np.nan)
    crossing = np.any(result.links == bottleneck, axis=1)
    settled = convergence_time(result, since=since)
    summary = {
        "mean_rate_Bps": rate,
        # over the flows that share the bottleneck: flows on other links (a victim of
        # PFC, a flow elsewhere) have other fair shares, and mixing them in would read a
        # law that keeps them at their own rate as unfair
        "jain_fairness": jain_fairness(rate[crossing]) if crossing.any() else jain_fairness(rate),
        "jain_flows": int(crossing.sum()) if crossing.any() else int(rate.shape[0]),
        "bottleneck_link": bottleneck,
        "bottleneck_utilization": float(rate[crossing].sum() / result.capacity[bottleneck]),
        "queue_mean_bytes": float(series.mean()),
        "queue_p50_bytes": float(np.percentile(series, 50)),
        "queue_p99_bytes": float(np.percentile(series, 99)),
        "pause_fraction": float(pause_fraction.max()) if pause_fraction.size else 0.0,
        "paused_links": np.flatnonzero(result.pause_time > 0),
        "pause_fraction_per_link": pause_fraction,
        "pause_time_s": float(result.pause_time.sum()),
        "convergence_time_s": None if np.isnan(settled) else settled,
        "fct_s": [None if np.isnan(v) else float(v) for v in fct],
        "finished_flows": int(np.isfinite(result.finish_time).sum()),
        "deadlocks": deadlocks_over_time(result) if result.pfc_mode != "off" else [],
        "status": result.status.name.lower(),
        "window_s": [float(since), float(result.duration)],
    }
    if max_min_rate is not None:
        summary["max_min_rate_Bps"] = np.asarray(max_min_rate, dtype=np.float64)
        summary["victim_flows"] = np.flatnonzero(victim_flows(result, max_min_rate, since=since))
    return summary
