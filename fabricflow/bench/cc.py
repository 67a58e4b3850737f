"""Bench section ``cc``: congestion-control fluid steps at scale, and
1,000 parameter sets per rate law in one compiled call.

* Scale, every law (DCQCN, HPCC, TIMELY, Swift, predictive): 100,000 flows x 10,000
  steps (DCQCN's target <= 60 s on the 2-core machine); ``--gpu`` (only with a GPU):
  1,000,000 flows x 10,000 steps. The traffic is random host pairs on a synthetic 2-tier
  leaf-spine (32 hosts per leaf, 16 spines, 4-hop paths between leaves), long-lived
  flows, default parameters, static PFC on, 100 records.
* Batch, every law: 1,000 parameter sets drawn log-uniformly around the defaults, on a
  16-to-1 incast with a victim (40 Gb/s, PFC on, 2 ms at 1 us), vmapped in one call of
  one compiled kernel; reports compile and run time and the spread of the outcomes.

``--quick``: 10,000 flows x 1,000 steps and 100 sets.
"""

from __future__ import annotations

import os
import resource

import numpy as np

from fabricflow.bench._measure import measured
from fabricflow.dynamics.congestion import prepare_fabric_run
from fabricflow.dynamics.scenarios import incast
from fabricflow.solve.cc.laws import CC_NAMES, resolve_law
from fabricflow.solve.cc.prepare import prepare_cc
from fabricflow.solve.cc.run_cc import run_cc
from fabricflow.solve.parameters import stack_params
from fabricflow.solve.status import SolverStatus


def leaf_spine_flows(
    num_flows: int,
    *,
    hosts_per_leaf: int = 32,
    spines: int = 16,
    bandwidth: float = 50e9,
    seed: int = 0,
):
    """Random flows on a synthetic leaf-spine as plain arrays.

    Returns ``(links [F, 4], capacity [L], marking [L], pfc_ingress [L], path_latency [F])``.
    Link layout: host up (G), host down (G), leaf->spine (Lf*S), spine->leaf (Lf*S).
    """
    rng = np.random.default_rng(seed)
    hosts = max(2 * hosts_per_leaf, int(np.ceil(num_flows / 4 / hosts_per_leaf)) * hosts_per_leaf)
    leaves = hosts // hosts_per_leaf
    src = rng.integers(0, hosts, num_flows)
    dst = (src + rng.integers(1, hosts, num_flows)) % hosts
    spine = rng.integers(0, spines, num_flows)
    src_leaf, dst_leaf = src // hosts_per_leaf, dst // hosts_per_leaf
    up, down = src, hosts + dst
    leaf_up = 2 * hosts + src_leaf * spines + spine
    spine_down = 2 * hosts + leaves * spines + dst_leaf * spines + spine
    same = src_leaf == dst_leaf
    links = np.stack(
        [
            up,
            np.where(same, down, leaf_up),
            np.where(same, -1, spine_down),
            np.where(same, -1, down),
        ],
        axis=1,
    )
    num_links = 2 * hosts + 2 * leaves * spines
    capacity = np.full(num_links, bandwidth)
    marking = np.arange(num_links) >= hosts  # switch egress: all but host uplinks
    pfc_ingress = (np.arange(num_links) < hosts) | (np.arange(num_links) >= 2 * hosts)
    path_latency = (links >= 0).sum(axis=1) * 1e-6
    return links.astype(np.int32), capacity, marking, pfc_ingress, path_latency


def _case(num_flows: int, steps: int, result: dict, prefix: str, cc: str = "dcqcn") -> None:
    import jax

    links, capacity, marking, pfc_ingress, path_latency = leaf_spine_flows(num_flows)
    dt = 1e-6
    with measured(result, f"{prefix}_prepare"):
        prepared = prepare_cc(
            links,
            capacity,
            path_latency,
            cc=cc,
            marking=marking,
            pfc_ingress=pfc_ingress,
            pfc="static",
            dt=dt,
            duration=steps * dt,
            records=100,
        )
    args = prepared.kernel_args
    with measured(result, f"{prefix}_compile"):
        compiled = prepared.kernel.lower(*args).compile()
    before = resource.getrusage(resource.RUSAGE_SELF)
    with measured(result, f"{prefix}_run"):
        outputs = jax.block_until_ready(compiled(*args[:3]))
    after = resource.getrusage(resource.RUSAGE_SELF)
    # Process CPU time: on a shared machine wall time also counts waiting for the cores.
    result[f"{prefix}_run_cpu_s"] = (
        after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    )
    result[f"{prefix}_load_average_1min"] = os.getloadavg()[0]
    res = run_cc(prepared, outputs=outputs)
    result[f"{prefix}_flows"] = num_flows
    result[f"{prefix}_hops"] = int(links.shape[1])
    result[f"{prefix}_steps"] = steps
    result[f"{prefix}_ns_per_flow_step"] = result[f"{prefix}_run_s"] / (num_flows * steps) * 1e9
    result[f"{prefix}_status"] = SolverStatus(int(np.max(res.status))).name.lower()
    result[f"{prefix}_mean_rate_Gbps"] = float(np.mean(res.mean_rate()) * 8 / 1e9)
    result[f"{prefix}_paused_link_fraction"] = float(np.mean(res.pause_time > 0))


#: Per law: parameter -> (low, high) of its log-uniform draw for the batch case.
BATCH_RANGES = {
    "dcqcn": {"kmin": (2e3, 50e3), "kmax": (100e3, 1.6e6), "rate_ai": (1e6 / 8, 200e6 / 8)},
    "hpcc": {"eta": (0.8, 0.99), "expected_flows": (10.0, 1000.0)},
    "timely": {"beta": (0.1, 0.9), "rate_ai": (1e6 / 8, 100e6 / 8)},
    "swift": {"base_target": (10e-6, 100e-6), "beta": (0.2, 0.9)},
    "predictive": {"target_delay": (0.5e-6, 10e-6), "horizon": (5e-6, 50e-6)},
    "nscc": {"target": (4e-6, 12e-6), "gamma": (0.2, 0.9)},
    "rccc": {"pull_rate": (0.8, 1.0), "max_wnd_bdp": (0.5, 3.0)},
}


def parameter_batch(cc: str, count: int, seed: int = 0):
    """``count`` parameter sets of law ``cc`` drawn log-uniformly (:data:`BATCH_RANGES`)."""
    law = resolve_law(cc)
    rng = np.random.default_rng(seed)
    draws = {
        name: np.exp(rng.uniform(np.log(low), np.log(high), count))
        for name, (low, high) in BATCH_RANGES[cc].items()
    }
    base = law.preset()
    return stack_params([base.replace(**{k: v[i] for k, v in draws.items()}) for i in range(count)])


def _batch_case(cc: str, count: int, result: dict) -> None:
    """``count`` parameter sets of ``cc`` in one vmapped call of one compiled kernel."""
    import jax

    scenario = incast(16, bandwidth=40e9 / 8)
    prefix = f"batch_{cc}"
    with measured(result, f"{prefix}_prepare"):
        prepared = prepare_fabric_run(
            scenario.fabric,
            scenario.routes,
            cc=cc,
            params=parameter_batch(cc, count),
            pfc="static",
            duration=2e-3,
            dt=1e-6,
            records=20,
        )
    args = prepared.kernel_args
    with measured(result, f"{prefix}_compile"):
        compiled = prepared.kernel.lower(*args).compile()
    before = resource.getrusage(resource.RUSAGE_SELF)
    with measured(result, f"{prefix}_run"):
        outputs = jax.block_until_ready(compiled(*args[:3]))  # one call, the whole batch
    after = resource.getrusage(resource.RUSAGE_SELF)
    result[f"{prefix}_run_cpu_s"] = (
        after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    )
    result[f"{prefix}_load_average_1min"] = os.getloadavg()[0]
    res = run_cc(prepared, outputs=outputs, throw=False)
    rate = res.mean_rate()  # [B, F]
    utilization = rate[:, scenario.roles["incast"]].sum(axis=1) / float(
        scenario.fabric.capacity[scenario.bottleneck]
    )
    result[f"{prefix}_sets"] = count
    result[f"{prefix}_calls"] = 1
    result[f"{prefix}_steps"] = 2000
    result[f"{prefix}_converged"] = int(np.sum(np.asarray(res.status) == 0))
    result[f"{prefix}_utilization_range"] = [float(utilization.min()), float(utilization.max())]
    result[f"{prefix}_us_per_set"] = result[f"{prefix}_run_s"] / count * 1e6


def run(options) -> dict:
    import jax

    quick = bool(getattr(options, "quick", False))
    result: dict = {}
    flows, steps, sets = (10_000, 1_000, 100) if quick else (100_000, 10_000, 1_000)
    for cc in CC_NAMES:
        prefix = "cpu" if cc == "dcqcn" else f"cpu_{cc}"
        _case(flows, steps, result, prefix, cc)
        _batch_case(cc, sets, result)
    if quick:
        result["target"] = "quick smoke test (no target)"
    else:
        result["cpu_target_s"] = 60.0
        result["cpu_within_target"] = result["cpu_run_s"] <= 60.0
    if getattr(options, "gpu", False):
        if any(d.platform == "gpu" for d in jax.devices()):
            _case(1_000_000, 10_000, result, "gpu")
            result["gpu_target_s"] = 60.0
            result["gpu_within_target"] = result["gpu_run_s"] <= 60.0
        else:
            result["gpu"] = "skipped: no GPU visible to JAX"
    return result
