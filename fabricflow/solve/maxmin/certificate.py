"""``ff.certify_max_min``: check that given rates are feasible and max-min fair.

Bottleneck theorem (Bertsekas & Gallager; docs/references.md §1): a feasible
allocation is weighted max-min fair iff every flow either runs at its demand or crosses
a *saturated* link on which its normalised rate ``rate / weight`` is the largest among
the flows on that link. The check is host-side float64 numpy, independent of the
solver, ``O(F H)``.
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.link_loads import link_load
from fabricflow.solve.maxmin.inputs import as_array, check_problem
from fabricflow.typing import CapacityLike, CoefLike, FlowValuesLike, LinkIdsLike

# Beyond this tolerance any allocation would pass: refused rather than certified.
MAX_CERTIFY_RTOL = 0.1


class Certificate(NamedTuple):
    """Outcome of :func:`certify_max_min`.

    Attributes:
        feasible: no link carries more than its capacity and no flow exceeds its demand
            or is negative (within ``rtol``).
        max_min: ``feasible`` and every flow is certified.
        certified: bool ``[F]``: the flow has a bottleneck link (or is demand-limited, or
            is unconstrained with rate ``inf``).
        bottleneck: int64 ``[F]``: a certifying link per flow, ``-1`` if demand-limited,
            unconstrained or not certified.
        load: float64 ``[L]`` link loads.
        max_overload: largest ``load / capacity - 1`` over links (``<= rtol`` if feasible).
    """

    feasible: bool
    max_min: bool
    certified: np.ndarray
    bottleneck: np.ndarray
    load: np.ndarray
    max_overload: float

    def __bool__(self) -> bool:
        return bool(self.max_min)


def certify_max_min(
    links: LinkIdsLike,
    capacity: CapacityLike,
    rates: FlowValuesLike,
    *,
    weight: FlowValuesLike | None = None,
    demand: FlowValuesLike | None = None,
    coef: CoefLike | None = None,
    rtol: float = 1e-5,
) -> Certificate:
    """Certify ``rates`` as the weighted, demand-capped max-min fair allocation.

    Args:
        links, capacity, weight, demand, coef: as for :func:`fabricflow.max_min_rates`
            (unbatched).
        rates: ``[F]`` the allocation to check, in the unit of ``capacity``.
        rtol: relative tolerance (1e-5 suits float32 rates; use ~1e-9 for float64).

    Returns:
        :class:`Certificate` (truthy when the rates are max-min fair).

    Example:
        >>> bool(certify_max_min([[0, 1], [0, -1], [1, -1]], [1.0, 1.0], [0.5, 0.5, 0.5]))
        True
    """
    if (
        isinstance(rtol, bool)
        or not isinstance(rtol, numbers.Real)
        or not 0 <= float(rtol) < MAX_CERTIFY_RTOL
    ):
        raise SpecError(
            "rtol",
            f"must be a number in [0, {MAX_CERTIFY_RTOL:g}) (relative tolerance), got {rtol!r}",
        )
    problem = check_problem(links, capacity, weight, demand, coef)
    if problem.batch is not None:
        raise SpecError("capacity", "certify_max_min takes one scenario; loop over the batch axis")
    links, capacity = problem.links, np.asarray(problem.capacity, np.float64)
    num_flows, num_links = links.shape[0], capacity.shape[0]
    rates = as_array("rates", rates)
    if rates.dtype == object or not (
        np.issubdtype(rates.dtype, np.integer) or np.issubdtype(rates.dtype, np.floating)
    ):
        raise SpecError("rates", f"must be a real numeric array, got dtype {rates.dtype}")
    rates = rates.astype(np.float64)
    if rates.shape != (num_flows,):
        raise SpecError("rates", f"must have shape [{num_flows}], got {list(rates.shape)}")
    weight = (
        np.ones(num_flows) if problem.weight is None else np.asarray(problem.weight, np.float64)
    )
    demand = (
        np.full(num_flows, np.inf)
        if problem.demand is None
        else np.asarray(problem.demand, np.float64)
    )

    entry_flow, entry_hop = np.nonzero(links >= 0)
    entry_link = links[entry_flow, entry_hop].astype(np.int64)
    entry_coef = (
        np.ones(entry_flow.size)
        if problem.coef is None
        else np.asarray(problem.coef, np.float64)[entry_flow, entry_hop]
    )
    bounded = np.isfinite(capacity[entry_link])
    entry_flow, entry_link, entry_coef = (
        entry_flow[bounded],
        entry_link[bounded],
        entry_coef[bounded],
    )

    with np.errstate(invalid="ignore"):
        load = link_load(links, rates, num_links, problem.coef)
    # Links of infinite capacity constrain nothing: they carry no load in the certificate.
    load = np.where(np.isfinite(capacity), load, 0.0)
    slack = rtol * np.where(np.isfinite(capacity), np.maximum(capacity, 0), 0.0)
    overload = load - capacity
    feasible = bool(
        np.all(np.isfinite(load[np.isfinite(capacity)]))
        and np.all(overload <= slack + 1e-300)
        and np.all(rates >= 0)
        and np.all(rates <= demand * (1 + rtol))
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(capacity > 0, load / capacity - 1, np.where(load > 0, np.inf, 0.0))
    max_overload = float(ratio.max(initial=0.0))

    saturated = load >= capacity - slack
    normalised = rates / weight
    link_top = np.full(num_links, -np.inf)
    with np.errstate(invalid="ignore"):  # NaN rates propagate and fail the check below
        np.maximum.at(link_top, entry_link, normalised[entry_flow])
    entry_ok = saturated[entry_link] & (normalised[entry_flow] >= link_top[entry_link] * (1 - rtol))
    bottleneck = np.full(num_flows, -1, dtype=np.int64)
    bottleneck[entry_flow[entry_ok][::-1]] = entry_link[entry_ok][::-1]  # first hop wins
    crosses_any = np.bincount(entry_flow, minlength=num_flows) > 0
    at_demand = rates >= demand * (1 - rtol)
    unconstrained = np.isinf(rates) & ~crosses_any & np.isinf(demand)
    certified = (bottleneck >= 0) | at_demand | unconstrained
    bottleneck[at_demand & (bottleneck < 0)] = -1
    return Certificate(
        feasible, bool(feasible and certified.all()), certified, bottleneck, load, max_overload
    )
