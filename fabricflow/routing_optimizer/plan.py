""":class:`RoutingPlan`: the result of :func:`fabricflow.optimize_routing`."""

from __future__ import annotations

import dataclasses

import numpy as np

from fabricflow.fabric.fabric import Fabric
from fabricflow.routing.multipath_rows import merge_row_entries
from fabricflow.routing.routes import Routes
from fabricflow.routing_optimizer.compare import compare_routings
from fabricflow.routing_optimizer.fractional import drain_times


@dataclasses.dataclass(frozen=True, eq=False)
class RoutingPlan:
    """Candidate paths and the optimized split of every flow over them.

    Attributes:
        fabric: the fabric the plan was made for.
        src, dst: int64 ``[F]`` GPU indices.
        size: float64 ``[F]`` bytes per flow.
        paths: int32 ``[F, K, H]`` candidate link ids, ``-1`` padded; a flow with fewer
            than ``K`` distinct paths has all-``-1`` rows, which carry no traffic.
        split: float64 ``[F, K]`` share of each flow on each path: non-negative, each row
            sums to 1, zero on padded rows; one-hot rows when ``integral``.
        makespan_s: max over links of (bytes on the link / capacity) for ``split``, in
            seconds: when the last link drains under ideal sharing, a lower bound on the
            completion of the whole flow set.
        objective: ``"makespan"``.
        integral: one path per flow (path pinning) rather than a split.
        fractional_makespan_s: the makespan of the fractional solution (equal to
            ``makespan_s`` unless ``integral``).
        steps: adam steps run (0 when the even split is already optimal);
            ``history``: float32 ``[steps]`` exact makespan (s) at each step; ``rounds``:
            descent rounds of the integral mode (0 otherwise).
        lower_bound_s: no split over these candidates has a smaller makespan: the
            busiest link counting only bytes it carries on every candidate of a flow.
        seconds: wall time of the optimization (candidates, solve, rounding).
        ecmp_makespan_s: the makespan of ECMP's hash on the same flows (candidate 0 of
            every flow); ``makespan_s <= ecmp_makespan_s`` always.
        integral_method: how the integral plan was found: ``"local search"``,
            ``"milp optimal"`` (HiGHS proved it within 1 % of the integral optimum) or
            ``"milp time limit"``; ``""`` for a fractional plan.
        integral_lower_bound_s: a proven lower bound on the makespan of any one-path
            routing over these candidates (``nan`` for a fractional plan): the integral
            plan is within ``makespan_s / integral_lower_bound_s`` of the optimum.
    """

    fabric: Fabric
    src: np.ndarray
    dst: np.ndarray
    size: np.ndarray
    paths: np.ndarray
    split: np.ndarray
    makespan_s: float
    objective: str
    integral: bool
    fractional_makespan_s: float
    steps: int
    lower_bound_s: float
    history: np.ndarray
    rounds: int
    seconds: float
    ecmp_makespan_s: float = float("nan")
    integral_method: str = ""
    integral_lower_bound_s: float = float("nan")

    @property
    def num_flows(self) -> int:
        return int(self.paths.shape[0])

    def link_times(self) -> np.ndarray:
        """float64 ``[L]`` seconds: bytes on each link / its capacity under ``split``."""
        return drain_times(self.paths, self.split, self.size, self.fabric.capacity)

    def routes(self) -> Routes:
        """The plan as :class:`Routes` (policy ``"optimized"``) for ``max_min_rates``,
        ``max_min_completion`` and the collective model.

        ``links`` int32 ``[F, W]`` with ``coef`` the share of the flow on each link: the
        ``K`` paths side by side (``W <= K * H``), entries of a link shared by several
        paths of a flow merged into one with the summed share, unused paths dropped.
        """
        num, k, hops = self.paths.shape
        share = np.broadcast_to(self.split[:, :, None], self.paths.shape)
        carried = (self.paths >= 0) & (share > 0)
        links = np.where(carried, self.paths, -1).reshape(num, k * hops)
        coef = np.where(carried, share, 0.0).reshape(num, k * hops)
        if num:
            links, coef = merge_row_entries(links, coef)
        return Routes(links, coef, self.src, self.dst, self.fabric.num_links, "optimized")

    def summary(self, *, seed: int = 0, completion_mode: str = "batched") -> dict:
        """The plan against ECMP and spray on the same flows (see :mod:`.compare`)."""
        return compare_routings(self, seed=seed, completion_mode=completion_mode)

    def __repr__(self) -> str:
        return (
            f"RoutingPlan(flows={self.num_flows}, k={self.paths.shape[1]}, "
            f"makespan_s={self.makespan_s:.6g}, integral={self.integral})"
        )
