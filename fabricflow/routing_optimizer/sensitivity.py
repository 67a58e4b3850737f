"""``ff.capacity_sensitivity``: d(makespan)/d(capacity) per link, per link kind and tier.

The makespan ``M(c) = max_l b_l / c_l`` (``b_l`` bytes routed over link ``l``) is not
differentiable where two links tie, so the gradient is taken (``jax.grad``, float64) of
its log-sum-exp surrogate over the loaded links,

    ``S(c) = (M0 / beta) log sum_l exp(beta b_l / (c_l M0))``,

with ``M0`` the makespan at the given capacities (held fixed). ``S >= M`` and
``S - M <= M0 log(L) / beta``; at a unique bottleneck link the gradient tends to the
exact ``-b_l / c_l**2`` on that link and 0 elsewhere, and near ties it spreads over the
links within about ``1 / beta`` of the maximum (a subgradient of the max). The tests
check it against central finite differences of the exact makespan.

Units: seconds per (byte/s) of capacity; multiply by an upgrade in bytes/s to get the
predicted change in seconds (first order: a large upgrade moves the bottleneck).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from fabricflow.errors import SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.routing.routes import Routes
from fabricflow.routing_optimizer.makespan import check_size

DEFAULT_BETA = 1000.0


@dataclasses.dataclass(frozen=True)
class CapacitySensitivity:
    """Gradient of the makespan with respect to link capacities.

    Attributes:
        per_link: float64 ``[L]`` d(makespan)/d(capacity_l), seconds per byte/s (<= 0).
        makespan_s: the exact makespan (s) at the fabric's capacities.
        surrogate_s: the smooth surrogate the gradient is taken of (s, ``>= makespan_s``).
        by_kind: link kind -> sum of ``per_link`` over its links: the change in makespan
            per byte/s added to *every* link of that kind.
        by_tier: ``"kind@tier"`` (kind, and the tier of the link's upper end) -> the same
            sum, separating e.g. up and down links of one kind by level.
        beta: sharpness of the surrogate.
    """

    per_link: np.ndarray
    makespan_s: float
    surrogate_s: float
    by_kind: dict[str, float]
    by_tier: dict[str, float]
    beta: float

    def upgrade_gain_s(self, links: np.ndarray, added_Bps: float | np.ndarray) -> float:
        """First-order makespan reduction (s, >= 0) from adding ``added_Bps`` bytes/s to
        each of ``links`` (int ids)."""
        return float(-(self.per_link[np.asarray(links)] * added_Bps).sum())


def capacity_sensitivity(
    fabric: Fabric, routes: Routes, size, *, beta: float = DEFAULT_BETA
) -> CapacitySensitivity:
    """d(makespan)/d(capacity) of the flows ``routes`` carrying ``size`` bytes each.

    Args:
        fabric: the fabric (its ``capacity``, bytes/s, is the point of the gradient).
        routes: :class:`Routes` of the flows (any policy; ``plan.routes()`` of a
            :class:`~fabricflow.routing_optimizer.RoutingPlan` too).
        size: bytes per flow, scalar or ``[F]``, finite and ``>= 0``.
        beta: sharpness of the surrogate (> 0; larger: closer to the exact max, less
            smooth).

    Raises:
        SpecError: bad size or beta, routes of another fabric, or a loaded link of
            capacity 0 (the makespan would be infinite).
    """
    if not isinstance(routes, Routes):
        raise SpecError("routes", f"expected Routes (ff.route(...)), got {type(routes).__name__}")
    if routes.num_links != fabric.num_links:
        raise SpecError(
            "routes",
            f"routes are over {routes.num_links} links, fabric {fabric.name!r} has "
            f"{fabric.num_links}",
        )
    if (
        isinstance(beta, bool)
        or not isinstance(beta, (int, float))
        or not (math.isfinite(beta) and beta > 0)
    ):
        raise SpecError("beta", f"must be a finite number > 0, got {beta!r}")
    size_arr = check_size(size, routes.num_flows)
    load = routes.link_load(size_arr)
    capacity = np.asarray(fabric.capacity, np.float64)
    loaded = np.flatnonzero(load > 0)
    if np.any(capacity[loaded] <= 0):
        bad = int(loaded[np.flatnonzero(capacity[loaded] <= 0)[0]])
        raise SpecError("routes", f"link {bad} carries traffic but has capacity 0 (failed)")
    per_link = np.zeros(fabric.num_links)
    makespan = float((load[loaded] / capacity[loaded]).max(initial=0.0))
    surrogate = makespan
    if loaded.size:
        with jax.enable_x64(True):
            value, grad = _surrogate_and_grad(
                jnp.asarray(capacity[loaded]), jnp.asarray(load[loaded]), makespan, float(beta)
            )
        per_link[loaded] = np.asarray(grad, np.float64)
        surrogate = float(value)
    kinds = np.asarray(fabric.link_kind)
    upper = np.maximum(fabric.node_tier[fabric.link_src], fabric.node_tier[fabric.link_dst])
    by_kind = {str(kd): float(per_link[kinds == kd].sum()) for kd in np.unique(kinds)}
    labels = np.char.add(np.char.add(kinds.astype(str), "@"), upper.astype(str))
    by_tier = {str(lb): float(per_link[labels == lb].sum()) for lb in np.unique(labels)}
    return CapacitySensitivity(per_link, makespan, surrogate, by_kind, by_tier, float(beta))


def smooth_makespan(capacity, load, scale: float, beta: float):
    """The log-sum-exp surrogate ``S(c)`` (s) of ``max(load / capacity)`` (jax)."""
    return scale / beta * jax.nn.logsumexp(beta * load / (capacity * scale))


def _surrogate_and_grad(capacity, load, scale: float, beta: float):
    return jax.value_and_grad(smooth_makespan)(capacity, load, scale, beta)
