"""The ``maxmin`` and ``cc`` sweep tasks: one point at a time, or a group in one vmapped call.

A sweep groups grid points that differ only in array values (the task's *batch keys*)
and hands them to the ``*_batch`` function, which solves the whole group with one
compiled, vmapped kernel call (cut into equal chunks only when memory demands it, so the
compilation is shared), sharded across the local devices when there are several
(:mod:`fabricflow.solve.maxmin.sharded`). The batch results equal the per-point ones up
to float rounding.

``maxmin``: max-min fair rates of a traffic pattern routed over a fabric, under link
failures, capacity changes and rate caps. Two failure semantics (``reroute``):

- ``True`` (default, as ``fabricflow step --fail``): routing sees the failed cables and
  routes around them; the steady state once the control plane has converged.
- ``False``: routes stay those of the intact fabric and failed cables get capacity 0,
  so the flows crossing them stall (rate 0, counted in ``stalled_flows``): what a
  network without fast reroute sees before routing reacts.

Both batch: without rerouting every scenario shares one route table and only the
capacities vary; with rerouting each scenario is routed on the host and the routes are
padded to one ``[B, F, H]`` array, vmapped along with the capacities.

``cc``: a DCQCN/PFC fluid simulation (:func:`fabricflow.simulate_cc`, ``cc="dcqcn"``);
the batch keys are the DCQCN parameter fields (``kmin``, ``kmax``, ``pmax``, ``rate_ai``,
``rate_hai``, ``g``, ...), stacked and vmapped in one run.
"""

from __future__ import annotations

import dataclasses
import numbers
import os

import numpy as np

from fabricflow.dynamics.scenarios import build_scenario
from fabricflow.dynamics.summaries import jain_fairness
from fabricflow.errors import MemoryBudgetError, RoutingError, SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.memory_budget import check_memory, memory_budget
from fabricflow.routing.route import route
from fabricflow.solve.maxmin.batch import max_min_batch
from fabricflow.solve.maxmin.checked import max_min_rates
from fabricflow.solve.maxmin.engine import max_min
from fabricflow.solve.maxmin.entries import FlowEntries
from fabricflow.solve.maxmin.link_views import link_utilization
from fabricflow.traffic.patterns import (
    alltoall_flows,
    alltoall_groups,
    incast_flows,
    permutation_flows,
    ring,
)
from fabricflow.units import parse_bandwidth, parse_time

__all__ = [
    "CC_BATCH_KEYS",
    "CC_METRICS",
    "MAXMIN_BATCH_KEYS",
    "MAXMIN_METRICS",
    "cc_batch",
    "failure_capacities",
    "cc_point",
    "maxmin_batch",
    "maxmin_point",
]

TRAFFIC = ("alltoall", "permutation", "ring")

#: Default metrics of ``maxmin``. ``util_<kind>`` is the load of a link kind over its
#: capacity (every link of that kind, failed ones at 0): the mean utilization of the tier.
#: A fabric has ``util_<kind>`` for each of its link kinds; the listed ones are NaN on a
#: fabric without such links.
MAXMIN_METRICS = (
    "total_throughput_Bps",
    "mean_rate_Bps",
    "min_rate_Bps",
    "p50_rate_Bps",
    "jain_fairness",
    "max_utilization",
    "stalled_flows",
    "util_nic",
    "util_leaf",
    "util_spine",
)
#: Arguments that change only array values (capacities, demands, failed cables).
MAXMIN_BATCH_KEYS = frozenset(
    {"capacity_scale", "demand", "fail_kind", "fail_fraction", "fail_seed"}
)

_MAXMIN_ARGS = frozenset(
    {
        "fabric",
        "traffic",
        "flows",
        "group_size",
        "groups",
        "channels",
        "routing",
        "seed",
        "reroute",
        *MAXMIN_BATCH_KEYS,
    }
)


# ----------------------------------------------------------------------------- maxmin
@dataclasses.dataclass(frozen=True)
class _Scenario:
    """One max-min point, ready to solve: routes and per-link capacities (bytes/s)."""

    links: np.ndarray  # int32 [F, H]
    coef: np.ndarray | None  # [F, H] or None
    capacity: np.ndarray  # float64 [L]
    demand: np.ndarray | None  # [F] bytes/s or None


def maxmin_point(**kwargs) -> dict[str, float]:
    """Max-min fair rates of one sweep point (module docs) and their summary figures.

    Keyword args:
        fabric: a :class:`~fabricflow.fabric.fabric.Fabric` (the sweep resolves presets,
            files and dotted overrides).
        traffic: ``alltoall`` (MoE-style, in strided groups of ``group_size``, default 8;
            ``groups`` of them, default all), ``permutation`` (a seeded derangement: one
            flow per GPU), ``ring`` (over all GPUs, ``channels`` rings, default 1), or the
            path of a text file with one ``src,dst`` GPU-index pair per line (``#``
            comments).
        flows: keep only the first ``flows`` flows (default all).
        routing: routing policy (``ecmp`` default, ``spray``, ``multipath``, ...).
        seed: seed of the ECMP hash and of the permutation (default 0).
        fail_kind, fail_fraction, fail_seed: fail a seeded random ``fail_fraction`` of the
            cables of link kind ``fail_kind`` (both directions together).
        reroute: ``True`` (default) routes around the failures; ``False`` keeps the intact
            routes and stalls the flows crossing a failed cable.
        capacity_scale: a factor > 0 on every link, or ``{kind: factor}`` per link kind.
        demand: a per-flow rate cap, bytes/s or a string with units (``"100Gbps"``).

    Returns:
        ``{metric: float}``: :data:`MAXMIN_METRICS` plus ``util_<kind>`` for every link
        kind of the fabric. Rates in bytes/s.
    """
    fabric, routes, options = _routes_for(kwargs)
    scenario = _scenario(fabric, routes, kwargs, options)
    rates = max_min_rates(
        scenario.links,
        scenario.capacity,
        demand=scenario.demand,
        coef=scenario.coef,
    )
    return _maxmin_metrics(fabric, scenario, np.asarray(rates, np.float64))


def maxmin_batch(common: dict, varying: list[dict]) -> list[dict[str, float]]:
    """The points ``common | varying[i]`` solved in one vmapped call (chunked for memory).

    ``varying`` entries hold only :data:`MAXMIN_BATCH_KEYS`. Without rerouting (or without
    failures) the scenarios share one route table; with it, each is routed and the route
    tables are padded to one shape. Equal to :func:`maxmin_point` per point up to float32
    rounding (identical flows are not merged here, an exact transformation either way).

    Raises:
        SpecError: a ``varying`` entry holds a key that is not a batch key.
        RoutingError: a scenario leaves a pair of GPUs disconnected (rerouting).
    """
    if not varying:
        return []
    for entry in varying:
        extra = sorted(set(entry) - MAXMIN_BATCH_KEYS)
        if extra:
            raise SpecError(
                extra[0], f"is not a maxmin batch key; those are {sorted(MAXMIN_BATCH_KEYS)}"
            )
    points = [{**common, **entry} for entry in varying]
    base_fabric, base_routes, options = _routes_for(common, fail=False)
    reroute = options["reroute"]
    scenarios = []
    # Points with the same failures (differing in capacity scale or demand) share them.
    failures: dict[tuple, tuple] = {}
    for point in points:
        key = tuple(repr(point.get(k)) for k in ("fail_kind", "fail_fraction", "fail_seed"))
        if key not in failures:
            fabric, routes = base_fabric, base_routes
            failed = _failed(base_fabric, point)
            if failed is not base_fabric:
                fabric = failed
                if reroute:
                    routes = _route(failed, base_routes.src, base_routes.dst, options)
            failures[key] = (fabric, routes)
        fabric, routes = failures[key]
        scenarios.append(_scenario(fabric, routes, point, options))
    rates = _solve_group(scenarios)
    return [
        _maxmin_metrics(base_fabric, scenario, rate)
        for scenario, rate in zip(scenarios, rates, strict=True)
    ]


maxmin_point.batch_keys = MAXMIN_BATCH_KEYS  # type: ignore[attr-defined]
maxmin_point.run_batch = maxmin_batch  # type: ignore[attr-defined]


def _routes_for(kwargs: dict, fail: bool = True):
    """(fabric as solved, routes, options) of a point; ``fail=False``: the intact fabric."""
    unknown = sorted(set(kwargs) - _MAXMIN_ARGS)
    if unknown:
        raise SpecError(unknown[0], f"is not a maxmin argument; those are {sorted(_MAXMIN_ARGS)}")
    fabric = kwargs.get("fabric")
    if not isinstance(fabric, Fabric):
        raise SpecError(
            "fabric", f"maxmin needs a fabric (a preset name or spec file), got {fabric!r}"
        )
    options = {
        "routing": kwargs.get("routing", "ecmp"),
        "seed": _integer(kwargs.get("seed", 0), "seed", 0),
        "reroute": kwargs.get("reroute", True),
    }
    if not isinstance(options["reroute"], bool):
        raise SpecError("reroute", f"must be true or false, got {options['reroute']!r}")
    src, dst = _traffic(fabric, kwargs, options["seed"])
    intact = _route(fabric, src, dst, options)
    if not fail:
        return fabric, intact, options
    failed = _failed(fabric, kwargs)
    if failed is fabric or not options["reroute"]:
        return failed, intact, options
    return failed, _route(failed, src, dst, options), options


def _route(fabric, src, dst, options):
    try:
        return route(fabric, src, dst, policy=options["routing"], seed=options["seed"])
    except RoutingError as error:
        failures = fabric.meta.get("failed_links", 0)
        raise RoutingError(
            f"{error} (fabric with {failures} failed links; with reroute: false the flows "
            "keep their intact routes and stall instead)"
        ) from None


def _traffic(fabric, kwargs: dict, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` GPU indices of the point's traffic pattern."""
    traffic = kwargs.get("traffic", "alltoall")
    if not isinstance(traffic, str):
        raise SpecError("traffic", f"must be one of {list(TRAFFIC)} or a file, got {traffic!r}")
    gpus = fabric.num_gpus
    if traffic == "alltoall":
        group_size = _integer(kwargs.get("group_size", 8), "group_size", 2)
        groups = kwargs.get("groups")
        groups = None if groups is None else _integer(groups, "groups", 1)
        if group_size > gpus:
            raise SpecError("group_size", f"must be at most the {gpus} GPUs, got {group_size}")
        src, dst = alltoall_groups(gpus, group_size, groups)
    elif traffic == "permutation":
        src, dst = permutation_flows(gpus, seed)
    elif traffic == "ring":
        src, dst = ring(
            np.arange(gpus), channels=_integer(kwargs.get("channels", 1), "channels", 1)
        )
    elif os.path.isfile(traffic):
        src, dst = _read_pairs(traffic)
    else:
        raise SpecError(
            "traffic",
            f"must be one of {list(TRAFFIC)} or an existing file of src,dst lines, got {traffic!r}",
        )
    flows = kwargs.get("flows")
    if flows is not None:
        flows = _integer(flows, "flows", 1)
        src, dst = src[:flows], dst[:flows]
    return np.asarray(src), np.asarray(dst)


def _read_pairs(path: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        table = np.loadtxt(path, delimiter=",", comments="#", ndmin=2)
    except ValueError as error:
        raise SpecError(
            "traffic", f"{path}: expected lines 'src,dst' of GPU indices ({error})"
        ) from None
    if table.shape[1] != 2 or table.shape[0] == 0 or np.any(table != np.round(table)):
        raise SpecError("traffic", f"{path}: expected one or more lines 'src,dst' of GPU indices")
    return table[:, 0].astype(np.int64), table[:, 1].astype(np.int64)


def _failed(fabric, kwargs: dict):
    """``fabric`` with the point's cable failures, or ``fabric`` itself without any."""
    fraction = kwargs.get("fail_fraction", 0.0)
    if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real):
        raise SpecError("fail_fraction", f"must be a number in [0, 1], got {fraction!r}")
    if fraction == 0:
        return fabric
    if "fail_kind" not in kwargs:
        raise SpecError("fail_kind", f"needed with fail_fraction; kinds: {list(fabric.link_kinds)}")
    seed = _integer(kwargs.get("fail_seed", 0), "fail_seed", 0)
    return fabric.without(link_kind=kwargs["fail_kind"], fraction=float(fraction), seed=seed)


def failure_capacities(fabric, kind: str, fractions, seeds) -> np.ndarray:
    """float64 ``[B, L]``: ``fabric.without(link_kind=kind, fraction=f, seed=s).capacity``
    for each pair ``(fractions[i], seeds[i])``, without building ``B`` fabrics: the same
    seeded draw of physical cables (:meth:`Fabric.failed_cables`), applied to the
    capacities only (a bundle keeps the share of its surviving cables).
    """
    fractions = np.asarray(fractions, np.float64)
    seeds = np.asarray(seeds)
    if np.any(fractions < 0) or np.any(fractions > 1):
        raise SpecError("fail_fraction", f"must lie in [0, 1], got {fractions.min()}..")
    cables = np.maximum(fabric.link_cables, 1)
    capacity = np.empty((fractions.size, fabric.num_links))
    for row, (fraction, seed) in enumerate(zip(fractions, seeds, strict=True)):
        try:
            broken = fabric.failed_cables(kind, float(fraction), int(seed))
        except SpecError as error:
            if error.field != "fraction":
                raise
            raise SpecError("fail_fraction", str(error).removeprefix("fraction: ")) from None
        remaining = np.maximum(fabric.link_cables - broken, 0)
        # the expression of Fabric.without, so that both agree to the last bit
        capacity[row] = np.where(remaining == 0, 0.0, fabric.capacity * remaining / cables)
    return capacity


def _scenario(fabric, routes, kwargs: dict, options: dict) -> _Scenario:
    capacity = fabric.capacity * _capacity_scale(fabric, kwargs.get("capacity_scale", 1.0))
    demand = kwargs.get("demand")
    if demand is not None:
        cap = parse_bandwidth(demand, "demand") if isinstance(demand, str) else demand
        if isinstance(cap, bool) or not isinstance(cap, numbers.Real) or not float(cap) > 0:
            raise SpecError("demand", f"must be a rate > 0 (bytes/s or '100Gbps'), got {demand!r}")
        demand = np.full(routes.links.shape[0], float(cap))
    return _Scenario(routes.links, routes.coef, capacity, demand)


def _capacity_scale(fabric, scale) -> np.ndarray | float:
    """Per-link factor ``[L]`` (or a scalar) from a number or a ``{kind: factor}`` map."""

    def factor(value, field):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise SpecError(field, f"must be a finite number > 0, got {value!r}")
        if not 0 < float(value) < np.inf:
            raise SpecError(field, f"must be a finite number > 0, got {value!r}")
        return float(value)

    if isinstance(scale, dict):
        factors = np.ones(fabric.num_links)
        for kind, value in scale.items():
            factors[fabric.links_of_kind(kind)] = factor(value, f"capacity_scale.{kind}")
        return factors
    return factor(scale, "capacity_scale")


def _maxmin_metrics(fabric, scenario: _Scenario, rates: np.ndarray) -> dict[str, float]:
    capacity = scenario.capacity
    utilization = link_utilization(scenario.links, capacity, rates, scenario.coef)
    load = utilization * np.where(capacity > 0, capacity, 0)
    metrics = {
        "total_throughput_Bps": float(rates.sum()),
        "mean_rate_Bps": float(rates.mean()),
        "min_rate_Bps": float(rates.min()),
        "p50_rate_Bps": float(np.median(rates)),
        "jain_fairness": jain_fairness(rates),
        "max_utilization": float(utilization[capacity > 0].max(initial=0.0)),
        "stalled_flows": float(np.count_nonzero(rates <= 0)),
    }
    kind_load = np.bincount(fabric.link_kind_id, load, minlength=len(fabric.link_kinds))
    kind_capacity = np.bincount(fabric.link_kind_id, capacity, minlength=len(fabric.link_kinds))
    for kind in MAXMIN_METRICS:
        if kind.startswith("util_"):
            metrics[kind] = float("nan")  # the fabric has no such links
    for index, kind in enumerate(fabric.link_kinds):
        if kind_capacity[index] > 0:
            metrics[f"util_{kind}"] = float(kind_load[index] / kind_capacity[index])
    return metrics


def _solve_group(scenarios: list[_Scenario]) -> list[np.ndarray]:
    """float64 ``[F_i]`` rates of every scenario, by the max-min engine in batches: one
    ``[B, L]`` batch when every scenario shares its routes, else independent problems
    (:func:`~fabricflow.solve.maxmin.batch.max_min_batch`), chunked to the memory budget."""
    shared = all(s.links is scenarios[0].links for s in scenarios)
    num_flows = max(s.links.shape[0] for s in scenarios)
    hops = max(s.links.shape[1] for s in scenarios)
    num_links = scenarios[0].capacity.shape[0]
    # Per scenario: its entries (when routes differ) and ~24 per-flow and ~16 per-link
    # values of the solve's state and temporaries.
    per_scenario = (0 if shared else num_flows * hops * 16) + num_flows * 96 + num_links * 64
    budget, _ = memory_budget()
    chunk = max(1, min(len(scenarios), int(budget // 2 // max(per_scenario, 1))))
    check_memory(
        chunk * per_scenario + num_flows * hops * 16,
        f"max-min batch of {chunk} scenarios x {num_flows} flows x {hops} hops",
        hint="solve fewer scenarios or flows per group",
    )
    out: list[np.ndarray] = []
    for start in range(0, len(scenarios), chunk):
        part = scenarios[start : start + chunk]
        out.extend(_solve_chunk(part, [s.capacity for s in part], shared))
    return out


def _solve_chunk(part: list[_Scenario], capacities: list[np.ndarray], shared: bool):
    """float64 rates of each scenario of one chunk: one ``[B, L]`` batch when the
    scenarios share their routes, else a batch of independent problems."""
    num_flows = part[0].links.shape[0]
    num_links = capacities[0].shape[0]
    if shared:
        demand = None
        if any(s.demand is not None for s in part):
            demand = np.stack(
                [np.full(num_flows, np.inf) if s.demand is None else s.demand for s in part]
            )
        solution = max_min(
            part[0].links, np.stack(capacities), coef=part[0].coef, demand=demand, dtype=np.float32
        )
        return [np.asarray(r, np.float64) for r in np.atleast_2d(solution.rates)]
    solutions = max_min_batch(
        [FlowEntries.from_padded(s.links, s.coef, num_links) for s in part],
        capacities,
        demands=[s.demand for s in part],
        dtype=np.float32,
    )
    return [np.asarray(solution.rates, np.float64) for solution in solutions]


def _integer(value, field: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise SpecError(field, f"must be an integer >= {low}, got {value!r}")
    return int(value)


# ----------------------------------------------------------------------------- cc
#: Default metrics of ``cc`` (over the second half of the run; the bottleneck is the
#: scenario's link of interest, or the link with the largest mean queue).
CC_METRICS = (
    "throughput_Bps",
    "mean_rate_Bps",
    "bottleneck_utilization",
    "queue_mean_bytes",
    "queue_p99_bytes",
    "queue_max_bytes",
    "pause_fraction",
    "jain_fairness",
)


#: The DCQCN parameter fields (``kmin``, ``kmax``, ``pmax``, ``rate_ai``, ``rate_hai``,
#: ``g``, ``tau``, ``timer``, ``byte_counter``, ...): a group is one vmapped run.
CC_BATCH_KEYS = frozenset(
    {
        "tau",
        "tau_prime",
        "timer",
        "byte_counter",
        "fast_recovery",
        "g",
        "rate_ai",
        "rate_hai",
        "kmin",
        "kmax",
        "pmax",
        "min_rate",
        "initial_alpha",
        "initial_rate_fraction",
        "packet_bytes",
    }
)
CC_TRAFFIC = ("incast", "permutation", "alltoall")
_CC_ARGS = frozenset(
    {
        "fabric",
        "scenario",
        "traffic",
        "flows",
        "link_bandwidth",
        "seed",
        "params",
        "pfc",
        "duration",
        "dt",
        "delay",
        "records",
        *CC_BATCH_KEYS,
    }
)


def cc_point(**kwargs) -> dict[str, float]:
    """DCQCN/PFC dynamics of one point, summarized over the second half of the run.

    Keyword args:
        scenario: a small congestion scenario (``incast``, ``dumbbell``, ``alltoall``,
            ``ring``, ``multi_bottleneck``, ``parking_lot``; ``flows`` is its size knob,
            ``link_bandwidth`` its host links, default ``"40Gbps"``), or
        fabric + traffic: a :class:`Fabric` and ``incast`` (``flows`` senders to GPU 0),
            ``permutation`` or ``alltoall`` (``flows`` GPUs), ECMP-routed with ``seed``.
        params: DCQCN preset (``paper`` default, ``connectx``); the DCQCN fields
            (:data:`CC_BATCH_KEYS`, numbers or unit strings: ``kmax: 400KB``) override it.
        pfc: ``off`` (default), ``on``/``static`` or ``dynamic``.
        duration, dt, delay: simulated time, step and extra CNP delay (s or ``"10ms"``;
            defaults 10 ms, 1 us, 4 us).

    Returns:
        :data:`CC_METRICS`: ``throughput_Bps`` (all flows, mean over the window),
        ``mean_rate_Bps`` (per flow), ``bottleneck_utilization`` (the bottleneck's flows'
        throughput over its capacity), bottleneck queue mean / p99 / max in bytes,
        ``pause_fraction`` (largest fraction of the run any link spent paused) and Jain's
        fairness of the flows' throughputs.
    """
    return cc_batch({k: v for k, v in kwargs.items() if k not in CC_BATCH_KEYS}, [_fields(kwargs)])[
        0
    ]


def cc_batch(common: dict, varying: list[dict]) -> list[dict[str, float]]:
    """The points ``common | varying[i]`` in one vmapped DCQCN run (stacked parameter sets).

    ``varying`` entries hold only DCQCN fields (:data:`CC_BATCH_KEYS`). A batch whose
    arrays would exceed the memory budget is split in halves (estimated before any
    allocation by the simulator).
    """
    # lazy: JAX, only when a cc point runs (maxmin sweeps and their workers never load it)
    from fabricflow.solve.cc.dcqcn import DCQCNParams

    # lazy: JAX, as above
    from fabricflow.solve.parameters import stack_params

    if not varying:
        return []
    for entry in varying:
        extra = sorted(set(entry) - CC_BATCH_KEYS)
        if extra:
            raise SpecError(extra[0], f"is not a cc batch key; those are {sorted(CC_BATCH_KEYS)}")
    unknown = sorted(set(common) - _CC_ARGS)
    if unknown:
        raise SpecError(unknown[0], f"is not a cc argument; those are {sorted(_CC_ARGS)}")
    setup = _cc_setup(common)
    base = DCQCNParams.preset(common.get("params", "paper"), **_fields(common))
    params = [base.replace(**entry) for entry in varying]
    return _cc_run(setup, params, stack_params)


def _fields(kwargs: dict) -> dict:
    return {k: v for k, v in kwargs.items() if k in CC_BATCH_KEYS}


def _cc_setup(common: dict) -> dict:
    """Fabric, routes, bottleneck and run settings of a cc group."""

    def time(key, default):
        value = common.get(key, default)
        return parse_time(value, key) if isinstance(value, str) else float(value)

    scenario, fabric = common.get("scenario"), common.get("fabric")
    flows = _integer(common.get("flows", 8), "flows", 1)
    if (scenario is None) == (fabric is None):
        raise SpecError(
            "scenario", "give either scenario (a small cc scenario) or fabric + traffic"
        )
    if scenario is not None:
        bandwidth = parse_bandwidth(common.get("link_bandwidth", "40Gbps"), "link_bandwidth")
        built = build_scenario(scenario, flows, bandwidth=bandwidth)
        fabric, routes, bottleneck = built.fabric, built.routes, built.bottleneck
    else:
        if not isinstance(fabric, Fabric):
            raise SpecError("fabric", f"expected a fabric, got {fabric!r}")
        routes = _cc_routes(fabric, common.get("traffic", "incast"), flows, common.get("seed", 0))
        bottleneck = None
    return {
        "fabric": fabric,
        "routes": routes,
        "bottleneck": bottleneck,
        "pfc": common.get("pfc", "off"),
        "duration": time("duration", 0.01),
        "dt": time("dt", 1e-6),
        "delay": time("delay", 4e-6),
        "records": _integer(common.get("records", 200), "records", 4),
    }


def _cc_routes(fabric, traffic, flows: int, seed):
    seed = _integer(seed, "seed", 0)
    if traffic == "incast":
        src, dst = incast_flows(fabric.num_gpus, flows, 0, seed)
    elif traffic == "permutation":
        src, dst = permutation_flows(min(flows, fabric.num_gpus), seed)
    elif traffic == "alltoall":
        src, dst = alltoall_flows(np.arange(min(flows, fabric.num_gpus))[None, :])
    else:
        raise SpecError("traffic", f"cc traffic must be one of {list(CC_TRAFFIC)}, got {traffic!r}")
    return route(fabric, src, dst, policy="ecmp", seed=seed)


def _cc_run(setup: dict, params: list, stack_params) -> list[dict[str, float]]:
    import jax

    devices = jax.devices()
    count = len(params)
    if len(devices) > 1:
        params = params + [params[-1]] * (-count % len(devices))  # whole shards
    try:
        result = _cc_simulate(setup, stack_params(params), devices)
    except MemoryBudgetError:
        if count == 1:
            raise
        half = count // 2
        return _cc_run(setup, params[:half], stack_params) + _cc_run(
            setup, params[half:count], stack_params
        )
    return [_cc_metrics(result.batch_item(i), setup) for i in range(count)]


def _cc_simulate(setup: dict, stacked, devices):
    """One vmapped DCQCN run of the stacked parameter sets; with several devices the
    parameter batch is sharded across them (``NamedSharding`` over a ``"batch"`` axis), so
    the jitted run is partitioned along it."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    # lazy: JAX, only when a cc point runs (maxmin sweeps and their workers never load it)
    from fabricflow.dynamics.congestion import prepare_fabric_run, simulate_cc

    # lazy: JAX, as above
    from fabricflow.solve.cc.run_cc import run_cc

    fabric, routes = setup["fabric"], setup["routes"]
    settings = {
        "pfc": setup["pfc"],
        "duration": setup["duration"],
        "dt": setup["dt"],
        "extra_delay": setup["delay"],
        "records": setup["records"],
    }
    if len(devices) == 1:
        return simulate_cc(fabric, routes, cc="dcqcn", params=stacked, **settings)
    # What simulate_cc does, with the parameter arrays placed on the devices first.
    prepared = prepare_fabric_run(fabric, routes, cc="dcqcn", params=stacked, **settings)
    sharding = NamedSharding(Mesh(np.asarray(devices), ("batch",)), PartitionSpec("batch"))

    def place(arrays):
        return jax.tree_util.tree_map(lambda a: jax.device_put(a, sharding), arrays)

    prepared = dataclasses.replace(
        prepared,
        params_arrays=place(prepared.params_arrays),
        pfc_arrays=place(prepared.pfc_arrays),
    )
    return run_cc(prepared)


def _cc_metrics(result, setup: dict) -> dict[str, float]:
    since = result.duration / 2
    rate = result.mean_rate(since)
    window = result.time >= since
    queue = result.queue[window].astype(np.float64)
    bottleneck = setup["bottleneck"]
    if bottleneck is None:
        # The link with the largest mean queue; with no queue anywhere, the busiest link.
        mean_queue = queue.mean(axis=0)
        if mean_queue.max(initial=0.0) > 0:
            bottleneck = int(np.argmax(mean_queue))
        else:
            ids = result.links[result.links >= 0]
            flow_rate = np.broadcast_to(rate[:, None], result.links.shape)[result.links >= 0]
            load = np.bincount(ids, flow_rate, minlength=result.capacity.shape[0])
            busy = np.where(result.capacity > 0, load / np.maximum(result.capacity, 1e-300), 0)
            bottleneck = int(np.argmax(busy))
    series = queue[:, bottleneck]
    crossing = np.any(result.links == bottleneck, axis=1)
    capacity = float(result.capacity[bottleneck])
    pause = result.pause_time / result.duration
    return {
        "throughput_Bps": float(rate.sum()),
        "mean_rate_Bps": float(rate.mean()),
        "bottleneck_utilization": float(rate[crossing].sum() / capacity) if capacity > 0 else 0.0,
        "queue_mean_bytes": float(series.mean()),
        "queue_p99_bytes": float(np.percentile(series, 99)),
        "queue_max_bytes": float(series.max()),
        "pause_fraction": float(pause.max()) if pause.size else 0.0,
        "jain_fairness": jain_fairness(rate),
    }


cc_point.batch_keys = CC_BATCH_KEYS  # type: ignore[attr-defined]
cc_point.run_batch = cc_batch  # type: ignore[attr-defined]
