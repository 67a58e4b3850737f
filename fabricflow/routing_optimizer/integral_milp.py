"""The exact integral routing of small instances: a mixed-integer program solved by HiGHS.

Binary ``x[f, k]`` (flow ``f`` on candidate ``k``; flows with one candidate are fixed),
continuous ``T`` (the makespan in units of the incumbent's):

    minimize T  subject to  sum_k x[f, k] = 1  for every flow,
                            fixed_l / c_l + sum_{f, k : l in path(f, k)} size_f x[f, k] / c_l
                                <= T * incumbent   for every link l,
                            lower <= T <= 1.

The upper bound ``T <= 1`` (the local search's result) lets HiGHS prune everything worse
than what is already known; ``scipy.optimize.milp`` is HiGHS's branch and cut (Huangfu
and Hall, "Parallelizing the dual revised simplex method", Math. Prog. Comp. 2018).
The linear relaxation comes first (a proven lower bound; when the incumbent is within
:data:`MIP_REL_GAP` of it there is nothing to search). Otherwise HiGHS stops at a
relative gap of :data:`MIP_REL_GAP` or at the time limit, whichever comes first; its
dual bound is a proven lower bound on the integral optimum. The result is deterministic
unless the time limit ends the search.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fabricflow.memory_budget import check_memory

# Instances with more (flow, path) variables go to the local search alone.
MAX_VARIABLES = 60_000
# Stop when the incumbent is proven within 1 % of the optimum.
MIP_REL_GAP = 1e-2
# Bytes per nonzero of the constraint matrix, HiGHS's copies included (generous).
BYTES_PER_NONZERO = 200


class MilpResult(NamedTuple):
    """What HiGHS returned (``choice`` is ``None`` when it found nothing better)."""

    choice: np.ndarray | None  # int64 [F] path index per flow
    lower_bound_s: float  # proven lower bound on the integral optimum (s), 0 if none
    optimal: bool  # True when HiGHS proved the gap <= MIP_REL_GAP
    message: str


def solve_milp(
    paths: np.ndarray,
    size: np.ndarray,
    capacity: np.ndarray,
    *,
    incumbent_s: float,
    lower_s: float,
    time_limit_s: float,
) -> MilpResult:
    """Solve the program above (``paths`` int ``[F, K, H]``, ``size`` ``[F]`` bytes,
    ``capacity`` ``[L]`` bytes/s, ``incumbent_s`` > 0 the makespan to beat, ``lower_s``
    a known lower bound).

    Its linear relaxation is solved first: when the incumbent is within
    :data:`MIP_REL_GAP` of it, the incumbent is already proven and the branch and cut is
    skipped.
    """
    # scipy is imported here, not at module import: only the integral mode needs it.
    from scipy.optimize import milp

    program = _program(paths, size, capacity, incumbent_s, lower_s)
    relaxed = milp(
        program.objective,
        constraints=program.constraints,
        bounds=program.bounds,
        options={"time_limit": float(time_limit_s)},
    )
    lower = lower_s
    if relaxed.status == 0:
        lower = max(lower, float(relaxed.fun) * incumbent_s)
    if incumbent_s <= lower * (1 + MIP_REL_GAP):
        return MilpResult(None, lower, True, "the incumbent is within the gap of the relaxation")
    result = milp(
        program.objective,
        constraints=program.constraints,
        integrality=np.concatenate([np.ones(program.var.size), [0.0]]),
        bounds=program.bounds,
        options={"time_limit": float(time_limit_s), "mip_rel_gap": MIP_REL_GAP},
    )
    bound = getattr(result, "mip_dual_bound", None)
    if bound is not None and np.isfinite(bound):
        lower = max(lower, float(bound) * incumbent_s)
    if result.x is None:
        return MilpResult(None, lower, False, str(result.message))
    picked = np.rint(result.x[:-1]) > 0.5
    num, k = paths.shape[:2]
    choice = np.zeros(num, np.int64)
    choice[program.var[picked] // k] = program.var[picked] % k
    return MilpResult(choice, lower, result.status == 0, str(result.message))


class _Program(NamedTuple):
    objective: np.ndarray
    constraints: object
    bounds: object
    var: np.ndarray  # flat (f, k) index of each binary


def _program(paths, size, capacity, incumbent_s, lower_s) -> _Program:
    import scipy.sparse as sp
    from scipy.optimize import Bounds, LinearConstraint

    num, k, hops = paths.shape
    valid = np.any(paths >= 0, axis=2)
    free = valid.sum(axis=1) > 1
    var = np.flatnonzero((valid & free[:, None]).ravel())  # flat (f, k) of the binaries
    flat = paths.reshape(num * k, hops)
    inv_cap = np.where(capacity > 0, 1.0 / np.where(capacity > 0, capacity, 1.0), 0.0)
    fixed_rows = np.flatnonzero(~free)
    fixed_links = flat[fixed_rows * k]  # row 0 holds their only path
    used = fixed_links >= 0
    fixed = np.bincount(
        fixed_links[used],
        weights=np.broadcast_to(size[fixed_rows][:, None], fixed_links.shape)[used],
        minlength=capacity.shape[0],
    )
    rows, cols = np.nonzero(flat[var] >= 0)
    links = flat[var][rows, cols]
    check_memory(
        (rows.size + var.size) * BYTES_PER_NONZERO,
        f"the integral routing program of {var.size:,} variables",
    )
    link_ids, link_row = np.unique(links, return_inverse=True)
    flow_of = var // k
    coefficient = size[flow_of[rows]] * inv_cap[links] / incumbent_s
    load = sp.csr_matrix((coefficient, (link_row, rows)), shape=(link_ids.size, var.size))
    flow_row = np.unique(flow_of, return_inverse=True)[1]
    one_path = sp.csr_matrix((np.ones(var.size), (flow_row, np.arange(var.size))))
    flows = one_path.shape[0]
    matrix = sp.vstack(
        [
            sp.hstack([load, -np.ones((link_ids.size, 1))]),
            sp.hstack([one_path, sp.csr_matrix((flows, 1))]),
        ]
    ).tocsr()
    rhs = -fixed[link_ids] * inv_cap[link_ids] / incumbent_s
    objective = np.zeros(var.size + 1)
    objective[-1] = 1.0
    return _Program(
        objective,
        LinearConstraint(
            matrix,
            np.concatenate([np.full(link_ids.size, -np.inf), np.ones(flows)]),
            np.concatenate([rhs, np.ones(flows)]),
        ),
        Bounds(
            np.concatenate([np.zeros(var.size), [lower_s / incumbent_s]]),
            np.concatenate([np.ones(var.size), [1.0]]),
        ),
        var,
    )
