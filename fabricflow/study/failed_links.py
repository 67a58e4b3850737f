"""Sensitivity to failed cables: throughput, collective and step time vs failed fraction.

For each cable kind (``leaf``: leaf-spine cables, ``spine``: spine-core cables of a
3-tier Clos), failed fraction and seed, a copy of the fabric with that many cables cut
(:meth:`Fabric.without`; both directions fail) is routed again (routing has reconverged
around the failures) and measured:

* ``permutation_throughput_Bps`` / ``permutation_min_rate_Bps``: aggregate and slowest
  max-min fair rate of a permutation across the bisection (GPU ``i`` sends to
  ``i + N/2``), per routing (ECMP hash, spray over all surviving equal-cost paths);
* ``allreduce_busbw_Bps``: ring AllReduce bus bandwidth (slowest group) of data-parallel
  groups strided over the fabric (:func:`fabricflow.collective_time`), per routing;
* ``step_time_s``: a training step (:func:`fabricflow.step_time`) with the job's servers
  scattered over the fabric (a shared cluster's placement), under per-flow ECMP (spray
  costs the step model ~10x more time per point; ``fabricflow step --routing spray
  --fail KIND:FRACTION`` times single points).

Failure sets are nested per seed: seed ``s`` orders the cables of a kind at random and
fraction ``x`` fails the first ``round(x * cables)`` of them, so a larger fraction adds
failures to a smaller one's (a curve per seed reads as failures accumulating). Fraction
0 is the healthy fabric, shared by all seeds and kinds.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from fabricflow.collective import make_groups
from fabricflow.collective.timing import collective_time
from fabricflow.errors import SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.fabric.spec import build_fabric
from fabricflow.routing.route import route
from fabricflow.solve.maxmin.checked import max_min_rates
from fabricflow.workload.layout import Layout
from fabricflow.workload.step import step_time

FRACTIONS = (0.0, 0.005, 0.01, 0.02, 0.05, 0.10)


def three_tier_clos(gpus: int = 1024, *, leaf_up: int = 8, name: str | None = None) -> Fabric:
    """A 3-tier Clos of 8-GPU servers with ToR attachment and 400 Gb/s NICs: leaves of
    16 down / ``leaf_up`` up ports (``16 / leaf_up`` oversubscription), spines of 8 down /
    8 up, core switches of 16 down. Cable kinds: ``leaf`` (leaf-spine), ``spine``
    (spine-core)."""
    spec = {
        "name": name or f"clos3-tor-{gpus}-16to{leaf_up}",
        "gpus": gpus,
        "gpus_per_node": 8,
        "scale_up": {"domain_size": 8, "bandwidth_bidirectional": "900GB/s", "latency": "0.5us"},
        "topology": {
            "type": "clos",
            "attachment": "tor",
            "nic_bandwidth": "400Gbps",
            "nic_latency": "0.6us",
            "tiers": [
                {"name": "leaf", "down_ports": 16, "up_ports": leaf_up, "latency": "0.6us"},
                {"name": "spine", "down_ports": 8, "up_ports": 8, "latency": "0.6us"},
                {"name": "core", "down_ports": 16},
            ],
        },
    }
    return build_fabric(spec)


def cables_of_kind(fabric: Fabric, kind: str) -> np.ndarray:
    """Link ids (the ``src < dst`` direction) of the cables of ``kind``, int64 ``[C]``."""
    links = fabric.links_of_kind(kind)
    return links[fabric.link_src[links] < fabric.link_dst[links]]


def failure_sets(fabric: Fabric, kind: str, fractions, seeds) -> dict[tuple, np.ndarray]:
    """``(fraction, seed) -> failed cable ids``, nested in ``fraction`` for each seed."""
    cables = cables_of_kind(fabric, kind)
    if cables.size == 0:
        raise SpecError("kinds", f"fabric {fabric.name!r} has no {kind!r} cables")
    sets = {}
    for seed in seeds:
        order = np.random.default_rng(seed).permutation(cables)
        for fraction in fractions:
            sets[(fraction, seed)] = order[: int(round(fraction * cables.size))]
    return sets


def _permutation(fabric: Fabric) -> tuple[np.ndarray, np.ndarray]:
    src = np.arange(fabric.num_gpus)
    return src, (src + fabric.num_gpus // 2) % fabric.num_gpus


def _measure(
    fabric: Fabric, routings, groups, allreduce_bytes: float, step: dict | None
) -> dict[str, np.ndarray | float]:
    """The metrics of one (possibly failed) fabric; per-routing ones as ``[R]`` arrays."""
    src, dst = _permutation(fabric)
    throughput, slowest, busbw = [], [], []
    for routing in routings:
        routes = route(fabric, src, dst, policy=routing, seed=0)
        rates = np.asarray(max_min_rates(routes.links, fabric.capacity, coef=routes.coef))
        throughput.append(float(rates.astype(np.float64).sum()))
        slowest.append(float(rates.min()))
        result = collective_time(
            fabric, "all_reduce", groups, allreduce_bytes, algorithm="ring", routing=routing, seed=0
        )
        busbw.append(float(result.busbw_Bps))
    out: dict[str, np.ndarray | float] = {
        "permutation_throughput_Bps": np.array(throughput),
        "permutation_min_rate_Bps": np.array(slowest),
        "allreduce_busbw_Bps": np.array(busbw),
    }
    if step is not None:
        timed = step_time(
            step["model"],
            step["gpu"],
            step["layout"],
            fabric,
            placement="scattered",
            placement_seed=0,
            routing="ecmp",
        )
        out["step_time_s"] = float(timed.step_time_s)
    return out


def failed_links_study(
    fabric: Fabric,
    *,
    kinds=("leaf", "spine"),
    fractions=FRACTIONS,
    seeds=(0, 1, 2, 3),
    routings=("ecmp", "spray"),
    group_size: int = 32,
    allreduce_bytes: float = 2**28,
    model: str | None = "mixtral-8x7b",
    gpu: str = "h100-sxm",
    layout: Layout | None = None,
) -> xr.Dataset:
    """Measure ``fabric`` with every failure set (see the module docstring).

    Args:
        fabric: a Clos whose cable kinds include ``kinds``.
        kinds: cable kinds to fail (one at a time).
        fractions: failed fractions of that kind's cables, each in [0, 1].
        seeds: failure-set seeds.
        routings: routings (``ecmp``, ``spray``, ...) of the permutation and the AllReduce.
        group_size: AllReduce group size (groups strided over the fabric: one member
            per server slot, as data-parallel groups are).
        allreduce_bytes: AllReduce message, bytes.
        model, gpu, layout: the training job for ``step_time_s`` (``model=None``: no step
            time); the default layout is TP 2 x EP 8 with all GPUs in data parallel.

    Returns:
        Dataset with dims ``(link_kind, fraction, seed, routing)`` (``step_time_s``
        without ``routing``) and ``failed_cables (link_kind, fraction, seed)``.
    """
    fractions = np.asarray(fractions, dtype=np.float64)
    if fractions.ndim != 1 or np.any(~np.isfinite(fractions)) or np.any(fractions < 0):
        raise SpecError("fractions", f"must be a list of fractions in [0, 1], got {fractions}")
    if np.any(fractions > 1):
        raise SpecError("fractions", f"must lie in [0, 1], got {fractions}")
    seeds = [int(s) for s in seeds]
    routings = list(routings)
    groups = make_groups(fabric.num_gpus, group_size, layout="strided")
    step = None
    if model is not None:
        layout = layout or Layout(
            tp=2,
            ep=8,
            dp=fabric.num_gpus // 2,
            micro_batch=1,
            global_batch=fabric.num_gpus,
            seq_len=4096,
        )
        step = {"model": model, "gpu": gpu, "layout": layout}
    healthy = _measure(fabric, routings, groups, allreduce_bytes, step)
    shape = (len(kinds), fractions.size, len(seeds))
    values = {name: np.full(shape + np.shape(v), np.nan) for name, v in healthy.items()}
    failed_cables = np.zeros(shape, np.int64)
    for k, kind in enumerate(kinds):
        sets = failure_sets(fabric, kind, fractions, seeds)
        for f, fraction in enumerate(fractions):
            for s, seed in enumerate(seeds):
                cut = sets[(fraction, seed)]
                failed_cables[k, f, s] = cut.size
                metrics = (
                    healthy
                    if cut.size == 0
                    else _measure(
                        fabric.without(links=cut), routings, groups, allreduce_bytes, step
                    )
                )
                for name, value in metrics.items():
                    values[name][k, f, s] = value
    dims = ("link_kind", "fraction", "seed")
    units = {
        "permutation_throughput_Bps": ("bytes/s", "aggregate max-min rate, i -> i + N/2"),
        "permutation_min_rate_Bps": ("bytes/s", "slowest flow's max-min rate, i -> i + N/2"),
        "allreduce_busbw_Bps": ("bytes/s", f"ring AllReduce busbw, strided groups of {group_size}"),
        "step_time_s": ("s", f"{model} step time, scattered servers, ECMP"),
    }
    data_vars = {
        name: (
            dims + (("routing",) if value.ndim == 4 else ()),
            value,
            {"units": units[name][0], "long_name": units[name][1]},
        )
        for name, value in values.items()
    }
    data_vars["failed_cables"] = (dims, failed_cables, {"units": "cables"})
    return xr.Dataset(
        data_vars,
        coords={
            "link_kind": list(kinds),
            "fraction": ("fraction", fractions, {"units": "1", "long_name": "failed fraction"}),
            "seed": seeds,
            "routing": routings,
        },
        attrs={
            "study": "failed_links",
            "fabric": fabric.name,
            "num_gpus": fabric.num_gpus,
            "allreduce_bytes": float(allreduce_bytes),
            "model": model or "",
            "gpu": gpu,
            "layout": repr(layout) if layout is not None else "",
            "failures": "nested per seed; routes recomputed around the failed cables",
        },
    )


__all__ = ["FRACTIONS", "cables_of_kind", "failed_links_study", "failure_sets", "three_tier_clos"]
