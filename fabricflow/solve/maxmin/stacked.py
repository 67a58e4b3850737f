"""The ``"vmap"`` layout of :func:`~.batch.max_min_batch`: independent problems padded to
one set of buckets (the largest problem's) and the flat kernel vmapped over the stack."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from fabricflow.errors import SolverError
from fabricflow.solve.maxmin.engine import MaxMinSolution, default_rtol, output_dtype
from fabricflow.solve.maxmin.entries import FlowEntries, bucket_size
from fabricflow.solve.maxmin.flat import solve_stacked
from fabricflow.solve.maxmin.jax_backend import original_links, pad_problem, used_links, x64_mode
from fabricflow.solve.status import SolverStatus

__all__ = ["stacked_solve"]


def stacked_solve(problems, capacities, weights, demands, dtype, rtol, throw):
    """``P`` problems in one vmapped kernel call; a list of :class:`MaxMinSolution`."""
    out_dtype = output_dtype(dtype, *capacities)
    problems = [_positive(p) for p in problems]
    sizes = (
        bucket_size(max(p.num_entries for p in problems)),
        bucket_size(max(p.num_flows for p in problems) + 1),
        bucket_size(max(used_links(p).size for p in problems) + 1),
    )
    padded = []
    for p, c, w, d in zip(problems, capacities, weights, demands, strict=True):
        weight = np.ones(p.num_flows) if w is None else np.asarray(w, np.float64)
        demand = np.full(p.num_flows, np.inf) if d is None else np.asarray(d, np.float64)
        padded.append(pad_problem(p, np.asarray(c, np.float64), weight, demand, out_dtype, sizes))
    num_flows = np.asarray([x.num_flows for x in padded], np.int32)
    rtol = default_rtol(out_dtype) if rtol is None else rtol
    with x64_mode(out_dtype):
        solution = jax.device_get(
            solve_stacked(
                *(
                    jnp.asarray(np.stack([getattr(x, name) for x in padded]))
                    for name in ("link", "flow", "coef", "capacity", "weight", "demand")
                ),
                jnp.asarray(num_flows),
                jnp.int32(int(num_flows.max(initial=0)) + 1),
                jnp.asarray(rtol, out_dtype),
            )
        )
    out = []
    for i, x in enumerate(padded):
        real = slice(0, x.num_flows)
        status = int(np.asarray(solution.status)[i])
        if status != SolverStatus.CONVERGED and throw:
            raise SolverError(f"max_min_batch: problem {i}: {SolverStatus(status).message}")
        rates = np.asarray(solution.rates[i], np.float64)[real]
        rates = np.where(np.asarray(solution.unsettled[i])[real], np.nan, rates).astype(out_dtype)
        bottleneck = original_links(np.asarray(solution.bottleneck[i])[real], x.used_links)
        rounds = np.int64(np.asarray(solution.rounds)[i])
        out.append(MaxMinSolution(rates, bottleneck, rounds, np.int64(status), "jax"))
    return out


def _positive(problem: FlowEntries) -> FlowEntries:
    """``problem`` without the entries of ``coef <= 0`` (they constrain nothing)."""
    if problem.coef is None or bool(np.all(problem.coef > 0)):
        return problem
    keep = problem.coef > 0
    return FlowEntries.from_rows(
        problem.flow_of_entry()[keep],
        problem.link[keep],
        problem.coef[keep],
        problem.num_flows,
        problem.num_links,
    )
