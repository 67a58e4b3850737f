"""ECMP vs spray vs optimized routing on oversubscribed leaves, per traffic pattern.

For every leaf oversubscription and traffic pattern, the same flows are routed four ways
and timed with the same models (:func:`fabricflow.routing_optimizer.compare.routing_figures`):

* ``ecmp``: per-flow hash over the equal-cost paths (seed 0);
* ``pinned``: one path per flow chosen by :func:`fabricflow.optimize_routing` with
  ``integral=True`` (what per-flow path pinning in the switches can deploy);
* ``spray``: an even split over all equal-cost paths (ideal packet spraying);
* ``optimized``: :func:`fabricflow.optimize_routing`'s fractional split over ``k``
  candidate paths (the makespan lower bound of fixed-path routing).

Per point: ``makespan_s`` (max over links of bytes / capacity), ``completion_s`` (last
flow done under max-min sharing recomputed as flows finish), ``throughput_Bps``
(aggregate max-min rate with every flow active), ``max_utilization`` (busiest link's
busy fraction over the completion), and per tier (``nic_up`` GPU -> leaf, ``leaf_up``
leaf -> spine, ``spine_down``, ``nic_down``) the largest and mean link utilization over
the completion (``tier_max_utilization``, ``tier_mean_utilization``).

Patterns: ``alltoall`` (every GPU to every GPU of another server, as an expert-parallel
dispatch spread over the fabric) and ``permutation`` (GPU ``i`` to ``i + N/2``: every
flow crosses the leaf-spine tier).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from fabricflow.errors import SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.routing.route import route
from fabricflow.routing_optimizer.compare import routing_figures
from fabricflow.routing_optimizer.makespan import optimize_routing
from fabricflow.study.collective_effects import small_clos

ROUTINGS = ("ecmp", "pinned", "spray", "optimized")
PATTERNS = ("alltoall", "permutation")
TIERS = ("nic_up", "leaf_up", "spine_down", "nic_down")
FIGURES = ("makespan_s", "completion_s", "throughput_Bps", "max_utilization")


def pattern_flows(fabric: Fabric, pattern: str) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` int ``[F]`` GPU indices of a traffic pattern (see module doc)."""
    gpus = np.arange(fabric.num_gpus)
    if pattern == "permutation":
        return gpus, (gpus + fabric.num_gpus // 2) % fabric.num_gpus
    if pattern == "alltoall":
        server = gpus // fabric.gpus_per_node
        src, dst = np.meshgrid(gpus, gpus, indexing="ij")
        cross = server[src] != server[dst]
        return src[cross], dst[cross]
    raise SpecError("pattern", f"must be one of {list(PATTERNS)}, got {pattern!r}")


def tier_of_links(fabric: Fabric) -> np.ndarray:
    """Index into :data:`TIERS` of every link, ``-1`` for links in none (NVLink).

    NIC cables split by direction (GPU side up, leaf side down); switch cables by
    whether they climb the tree (``leaf_up``) or descend it (``spine_down``).
    """
    tier_src = np.asarray(fabric.node_tier)[fabric.link_src]
    tier_dst = np.asarray(fabric.node_tier)[fabric.link_dst]
    kind = np.asarray(fabric.link_kinds)[fabric.link_kind_id]
    out = np.full(fabric.num_links, -1, np.int64)
    nic, cable = kind == "nic", kind == "leaf"
    out[nic & (tier_src < tier_dst)] = TIERS.index("nic_up")
    out[nic & (tier_src > tier_dst)] = TIERS.index("nic_down")
    out[cable & (tier_src < tier_dst)] = TIERS.index("leaf_up")
    out[cable & (tier_src > tier_dst)] = TIERS.index("spine_down")
    return out


def _routes(fabric: Fabric, src, dst, size, routing: str, k: int):
    if routing in ("ecmp", "spray"):
        return route(fabric, src, dst, policy=routing, seed=0)
    plan = optimize_routing(fabric, src, dst, size=size, k=k, integral=routing == "pinned")
    return plan.routes()


def routing_point(
    fabric: Fabric, pattern: str, size: float, *, k: int = 8, routings=ROUTINGS
) -> dict:
    """The figures of each of ``routings`` (names from :data:`ROUTINGS`) for one fabric
    and pattern: ``{name: [R]}`` for :data:`FIGURES` and ``{tier_*: [R, T]}``."""
    src, dst = pattern_flows(fabric, pattern)
    sizes = np.full(src.shape[0], float(size))
    tiers = tier_of_links(fabric)
    capacity = np.asarray(fabric.capacity, np.float64)
    out: dict[str, list] = {name: [] for name in FIGURES}
    out["tier_max_utilization"], out["tier_mean_utilization"] = [], []
    for routing in routings:
        routes = _routes(fabric, src, dst, sizes, routing, k)
        figures = routing_figures(routes, sizes, capacity, "batched")
        for name in FIGURES:
            out[name].append(figures[name])
        busy = routes.link_load(sizes) / capacity / figures["completion_s"]
        out["tier_max_utilization"].append(
            [busy[tiers == t].max(initial=0.0) for t in range(len(TIERS))]
        )
        out["tier_mean_utilization"].append(
            [busy[tiers == t].mean() if np.any(tiers == t) else np.nan for t in range(len(TIERS))]
        )
    return {name: np.asarray(values, np.float64) for name, values in out.items()}


def routing_study(
    *,
    gpus: int = 256,
    leaf_down: int = 16,
    leaf_up=(16, 8, 4),
    patterns=PATTERNS,
    sizes: dict | None = None,
    k: int = 8,
    routings=ROUTINGS,
) -> xr.Dataset:
    """Run :func:`routing_point` on 2-tier ToR Clos fabrics of ``gpus`` GPUs (8 per
    server, 400 Gb/s NICs) whose leaves have ``leaf_down`` GPU ports and each of
    ``leaf_up`` uplinks.

    Args:
        sizes: bytes per flow per pattern (default: all-to-all 1 MiB, permutation 64 MiB).
        k: candidate paths per flow for ``pinned`` and ``optimized``.
        routings: which of :data:`ROUTINGS` to run.

    Returns:
        Dataset with dims ``(oversubscription, pattern, routing)`` (+ ``tier``).
    """
    sizes = {"alltoall": 2**20, "permutation": 2**26, **(sizes or {})}
    routings = list(routings)
    unknown = sorted(set(routings) - set(ROUTINGS))
    if unknown or not routings:
        raise SpecError("routings", f"must name some of {list(ROUTINGS)}, got {routings}")
    ups = [int(u) for u in leaf_up]
    if any(u < 1 or u > leaf_down for u in ups):
        raise SpecError("leaf_up", f"must lie in 1..{leaf_down}, got {ups}")
    results = []
    for up in ups:
        fabric = small_clos(attachment="tor", gpus=gpus, leaf_down=leaf_down, leaf_up=up)
        results.append(
            [routing_point(fabric, p, sizes[p], k=k, routings=routings) for p in patterns]
        )
    data_vars = {}
    units = {
        "makespan_s": ("s", "max over links of bytes / capacity"),
        "completion_s": ("s", "last flow done under max-min sharing"),
        "throughput_Bps": ("bytes/s", "aggregate max-min rate, all flows active"),
        "max_utilization": ("1", "busiest link's busy fraction over the completion"),
        "tier_max_utilization": ("1", "largest link busy fraction of the tier"),
        "tier_mean_utilization": ("1", "mean link busy fraction of the tier"),
    }
    for name, (unit, long_name) in units.items():
        values = np.array([[point[name] for point in row] for row in results])
        dims = ("oversubscription", "pattern", "routing") + (("tier",) if values.ndim == 4 else ())
        data_vars[name] = (dims, values, {"units": unit, "long_name": long_name})
    return xr.Dataset(
        data_vars,
        coords={
            "oversubscription": [leaf_down / u for u in ups],
            "pattern": list(patterns),
            "routing": routings,
            "tier": list(TIERS),
        },
        attrs={
            "study": "routing",
            "fabric": f"2-tier ToR Clos, {gpus} GPUs, 8 per server, 400 Gb/s NICs, "
            f"{leaf_down} GPU ports per leaf",
            "num_gpus": gpus,
            "k": k,
            "bytes_per_flow": str(sizes),
        },
    )


__all__ = ["PATTERNS", "ROUTINGS", "TIERS", "pattern_flows", "routing_point", "routing_study"]
