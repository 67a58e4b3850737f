"""The multicommodity linear program over fixed candidate paths, solved by HiGHS
(importable as `lp_oracle`): the optimum the routing optimizer is checked against."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog


def lp_makespan(paths: np.ndarray, size: np.ndarray, capacity: np.ndarray) -> float:
    """min T s.t. sum_{f,k} size_f x_fk [l in path fk] <= T cap_l, sum_k x_fk = 1, x >= 0.

    ``paths`` int ``[F, K, H]`` (``-1`` padded; all-``-1`` rows are not variables).
    """
    num, k, hops = paths.shape
    valid = (paths >= 0).any(axis=2).ravel()
    var = np.flatnonzero(valid)
    flow_of = var // k
    rows, cols = np.nonzero(paths.reshape(num * k, hops)[var] >= 0)
    links = paths.reshape(num * k, hops)[var][rows, cols]
    used, row_of = np.unique(links, return_inverse=True)
    load = sp.coo_matrix(
        (size[flow_of[rows]] / capacity[used][row_of], (row_of, rows)), shape=(used.size, var.size)
    )
    a_ub = sp.hstack([load, -np.ones((used.size, 1))]).tocsr()
    a_eq = sp.hstack(
        [
            sp.coo_matrix(
                (np.ones(var.size), (flow_of, np.arange(var.size))), shape=(num, var.size)
            ),
            sp.csr_matrix((num, 1)),
        ]
    ).tocsr()
    objective = np.zeros(var.size + 1)
    objective[-1] = 1.0
    result = linprog(
        objective,
        A_ub=a_ub,
        b_ub=np.zeros(used.size),
        A_eq=a_eq,
        b_eq=np.ones(num),
        bounds=(0, None),
        method="highs",
    )
    assert result.status == 0, result.message
    return float(result.fun)


def milp_makespan(paths: np.ndarray, size: np.ndarray, capacity: np.ndarray) -> float:
    """The integral optimum: the same program with one path per flow (binary ``x``),
    solved to optimality (relative gap 1e-6) by HiGHS. For tiny instances only."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    num, k, hops = paths.shape
    flat = paths.reshape(num * k, hops)
    var = np.flatnonzero((flat >= 0).any(axis=1))
    flow_of = var // k
    rows, cols = np.nonzero(flat[var] >= 0)
    links = flat[var][rows, cols]
    used, row_of = np.unique(links, return_inverse=True)
    scale = float(size.max())
    load = sp.coo_matrix(
        (size[flow_of[rows]] / scale / capacity[used][row_of] * 1e9, (row_of, rows)),
        shape=(used.size, var.size),
    )
    pick = sp.coo_matrix((np.ones(var.size), (flow_of, np.arange(var.size))), shape=(num, var.size))
    matrix = sp.vstack(
        [sp.hstack([load, -np.ones((used.size, 1))]), sp.hstack([pick, sp.csr_matrix((num, 1))])]
    )
    objective = np.zeros(var.size + 1)
    objective[-1] = 1.0
    result = milp(
        objective,
        constraints=LinearConstraint(
            matrix.tocsr(),
            np.r_[np.full(used.size, -np.inf), np.ones(num)],
            np.r_[np.zeros(used.size), np.ones(num)],
        ),
        integrality=np.r_[np.ones(var.size), 0.0],
        bounds=Bounds(0, np.r_[np.ones(var.size), np.inf]),
        options={"mip_rel_gap": 1e-6, "time_limit": 120.0},
    )
    assert result.status == 0, result.message
    return float(result.fun) * scale / 1e9
