"""``ff.max_min_rates`` / ``ff.max_min_solution``: checked, merged, batched max-min solves.

The pipeline: check inputs on the host (clear errors) -> merge identical flows into
weighted ones (:mod:`.identical_flows`) -> the jitted kernel :func:`.kernel.solve_max_min`
(``vmap``-ed over scenarios when ``capacity``/``weight``/``demand`` carry a batch axis)
-> split merged rates back -> raise :class:`~fabricflow.errors.SolverError` on a bad
status unless ``throw=False``.
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np

from ...errors import SolverError, SpecError
from ...typing import CapacityLike, CoefLike, FlowValuesLike, LinkIdsLike
from ..status import Status
from .identical_flows import merge_identical_flows
from .inputs import check_count, check_flag, check_problem, check_rtol, check_solve_memory
from .kernel import MaxMinSolution, float_dtype, solve_max_min
from .scaling import as_output_dtype, range_scaling


def max_min_rates(
    links: LinkIdsLike,
    capacity: CapacityLike,
    *,
    weight: FlowValuesLike | None = None,
    demand: FlowValuesLike | None = None,
    coef: CoefLike | None = None,
    merge: bool = True,
    max_iters: int | None = None,
    rtol: float | None = None,
    throw: bool = True,
    shard: str | None = None,
) -> np.ndarray:
    """Exact weighted, demand-capped max-min fair rates of ``F`` flows.

    Args:
        links: int ``[F, H]`` link ids per flow, ``-1`` padded (``Routes.links``).
        capacity: ``[L]`` link capacities (bytes/s for a :class:`Fabric`), or
            ``[B, L]`` for ``B`` scenarios solved in one vmapped call (failures, upgrades).
            Capacity 0 (a failed link) gives the flows crossing it rate 0; ``inf`` means
            the link constrains nothing.
        weight: ``[F]`` (or ``[B, F]``) positive weights, default 1: flows sharing a
            bottleneck get rates proportional to their weights.
        demand: ``[F]`` (or ``[B, F]``) rate caps, default none (``inf``).
        coef: ``[F, H]`` fraction of each flow on each entry (``Routes.coef`` for
            multipath splits), default 1.
        merge: solve flows with identical rows (and demand level) as one weighted flow;
            exact, and much faster for multi-channel collectives.
        max_iters: bound on water-filling rounds, an integer ``>= 1`` (default: enough
            for any input).
        rtol: relative tolerance for equal shares, in ``[0, 1e-3]`` (default a few float
            ulps; larger values freeze links of different shares together).
        throw: raise :class:`SolverError` on a bad status; with ``False`` the flows left
            unsettled get NaN.
        shard: spread the solve over the local devices (:mod:`.sharded`): ``None``
            (default: one device), ``"batch"`` (the ``B`` scenarios of a batch split
            across devices), ``"flows"`` (one scenario's flows split across devices, link
            sums reduced across them: for flow sets too large for one device), or
            ``"auto"`` (``batch`` for a batch and ``flows`` for a scenario that would not
            fit one accelerator's memory, when there are several devices; else none).
            The rates equal the single-device ones up to float rounding.

    Returns:
        numpy ``[F]`` (or ``[B, F]``) rates in the unit of ``capacity``: float32 by
        default, float64 when ``capacity`` is float64 and ``jax_enable_x64`` is on, or when
        a rate does not fit float32 (beyond ~3e38, or below its smallest normal ~1e-38).
        A flow crossing no link and with no demand gets ``inf``.

    Range: capacities, demands and weights are scaled by powers of two (exact) before
    the solve, so any magnitude works; when they span more than float32 can resolve
    (over ~2**96 between the smallest and largest), the solve runs in float64, centred
    so that subnormal inputs (below ~2e-308) keep their nonzero rates. Ranges that float64
    cannot hold either (capacity and weight spans together over 2**1900, e.g. ``1e-320``
    next to ``1e300``) raise :class:`~fabricflow.errors.SpecError`.

    Precision: float32 rates agree with the float64 reference to ~1e-6 relative on
    random instances; the error grows like ``eps * capacity / residual`` for a flow
    whose bottleneck link was almost filled by others (enable x64 for such cases).

    Shapes ``[U, H]`` (``U`` = unique flows), ``L`` and ``B`` are static for the jitted
    kernel: new capacities, weights or demands of the same shapes reuse the compilation.

    Example:
        >>> max_min_rates([[0, 1], [0, -1], [1, -1]], [1.0, 1.0])
        array([0.5, 0.5, 0.5], dtype=float32)
    """
    solution = max_min_solution(
        links,
        capacity,
        weight=weight,
        demand=demand,
        coef=coef,
        merge=merge,
        max_iters=max_iters,
        rtol=rtol,
        throw=throw,
        shard=shard,
    )
    return np.asarray(solution.rates)  # Rates [F] or RatesBatch [B, F]


def max_min_solution(
    links: LinkIdsLike,
    capacity: CapacityLike,
    *,
    weight: FlowValuesLike | None = None,
    demand: FlowValuesLike | None = None,
    coef: CoefLike | None = None,
    merge: bool = True,
    max_iters: int | None = None,
    rtol: float | None = None,
    throw: bool = True,
    shard: str | None = None,
) -> MaxMinSolution:
    """Like :func:`max_min_rates` but returns the whole :class:`MaxMinSolution` (numpy).

    ``bottleneck[f]`` is the link that fixed flow ``f``'s rate (``-1``: its demand, or
    nothing); ``rounds`` and ``status`` are scalars (``[B]`` with a batch).
    """
    problem = check_problem(links, capacity, weight, demand, coef)
    merge, throw = check_flag(merge, "merge"), check_flag(throw, "throw")
    max_iters = check_count(max_iters, "max_iters", "bound on water-filling rounds")
    rtol = check_rtol(rtol)
    num_flows, num_hops = problem.links.shape
    shard = resolve_shard(shard, problem.batch, num_flows * num_hops, problem.capacity.shape[-1])
    check_solve_memory(
        num_flows * num_hops, num_flows, problem.capacity.shape[-1], problem.batch, "max_min_rates"
    )
    out_dtype = float_dtype(problem.capacity, problem.weight, problem.demand)
    # Rates scale with capacities and demands, and do not change when every weight is
    # scaled alike: bring both near 1 by powers of two (exact) so that float32 neither
    # overflows nor underflows; a range float32 cannot hold is solved in float64.
    scaling = range_scaling(problem.capacity, problem.weight, problem.demand, out_dtype)
    problem = scaling.apply(problem)
    dtype = jnp.float64 if scaling.float64 else out_dtype
    merged = (
        merge_identical_flows(problem.links, problem.coef, problem.weight, problem.demand)
        if merge
        else None
    )
    if merged is not None and merged.num_unique == num_flows and problem.weight is None:
        merged = None  # nothing merged: solve the original flows directly
    if merged is None:
        args = (problem.links, problem.capacity, problem.weight, problem.demand, problem.coef)
    else:
        args = (merged.links, problem.capacity, merged.weight, merged.demand, merged.coef)
    with jax.enable_x64(True) if scaling.float64 else contextlib.nullcontext():
        solution = _run(
            *args, batch=problem.batch, max_iters=max_iters, rtol=rtol, dtype=dtype, shard=shard
        )

    rates = scaling.restore(np.asarray(solution.rates, np.float64))
    bottleneck = np.asarray(solution.bottleneck)
    status = np.asarray(solution.status)
    if merged is not None:
        rates = merged.split(rates)
        bottleneck = merged.spread(bottleneck)
    unsettled = np.isnan(rates)
    if np.any(status != Status.CONVERGED):
        worst = Status(int(np.max(status)))
        if throw:
            raise SolverError(
                f"max_min_rates: {worst.message} (status {worst.name}, "
                f"{int(np.max(np.asarray(solution.rounds)))} rounds)"
            )
        unsettled |= _unsettled_mask(status, rates.shape)
    rates = as_output_dtype(np.where(unsettled, np.nan, rates), out_dtype)
    return MaxMinSolution(rates, bottleneck, np.asarray(solution.rounds), status)


def _run(links, capacity, weight, demand, coef, *, batch, max_iters, rtol, dtype, shard=None):
    """Call the kernel, vmapped over the batch axis of the per-scenario arrays."""
    if shard is not None:
        return _run_sharded(
            links, capacity, weight, demand, coef, batch, max_iters, rtol, dtype, shard
        )

    def as_jax(a):
        return None if a is None else jnp.asarray(a, dtype)

    links_j = jnp.asarray(links)
    capacity_j, weight_j, demand_j, coef_j = (as_jax(a) for a in (capacity, weight, demand, coef))

    def solve(cap, w, d):
        return solve_max_min(links_j, cap, w, d, coef_j, max_iters=max_iters, rtol=rtol)

    if batch is None:
        return jax.block_until_ready(solve(capacity_j, weight_j, demand_j))
    axes = tuple(None if a is None or a.ndim == 1 else 0 for a in (capacity_j, weight_j, demand_j))
    if capacity_j.ndim == 1:
        capacity_j = jnp.broadcast_to(capacity_j, (batch, *capacity_j.shape))
        axes = (0, *axes[1:])
    return jax.block_until_ready(jax.vmap(solve, in_axes=axes)(capacity_j, weight_j, demand_j))


def _run_sharded(links, capacity, weight, demand, coef, batch, max_iters, rtol, dtype, shard):
    """The same solve through :mod:`.sharded` (``shard`` is ``"flows"`` or ``"batch"``)."""
    from .sharded import sharded_batch_max_min, sharded_max_min

    def as_numpy(a):
        return None if a is None else np.asarray(a, dtype)

    capacity, weight, demand, coef = (as_numpy(a) for a in (capacity, weight, demand, coef))
    if shard == "flows":
        solve = sharded_max_min
    else:
        solve = sharded_batch_max_min
        if capacity.ndim == 1:
            capacity = np.broadcast_to(capacity, (batch, capacity.shape[0]))
    return jax.block_until_ready(
        solve(links, capacity, weight, demand, coef, max_iters=max_iters, rtol=rtol)
    )


SHARD_MODES = ("auto", "batch", "flows")


def resolve_shard(shard, batch: int | None, entries: int, num_links: int) -> str | None:
    """The sharding mode a solve will use: ``None``, ``"batch"`` or ``"flows"``.

    ``"auto"`` picks ``batch`` for a batch and ``flows`` for a single scenario whose
    working set (estimated as :func:`.inputs.check_solve_memory` does) exceeds half of one
    device's memory, when there are several devices; devices that do not report their
    memory (CPUs) never get ``flows`` automatically: they share the host's memory.

    Raises:
        SpecError: (``shard``) not one of :data:`SHARD_MODES` or ``None``, ``"batch"``
            without a batch, or ``"flows"`` with one.
    """
    if shard is None:
        return None
    if not isinstance(shard, str) or shard not in SHARD_MODES:
        raise SpecError("shard", f"must be one of {list(SHARD_MODES)} or None, got {shard!r}")
    if shard == "batch" and batch is None:
        raise SpecError("shard", "'batch' needs a batch of scenarios ([B, L] capacities)")
    if shard == "flows" and batch is not None:
        raise SpecError(
            "shard", "'flows' splits one scenario's flows; use 'batch' for a [B, L] batch"
        )
    if shard != "auto":
        return shard
    devices = jax.devices()
    if len(devices) < 2:
        return None
    if batch is not None:
        return "batch"
    stats = devices[0].memory_stats() or {}
    limit = stats.get("bytes_limit")
    flows = entries  # an upper bound on the flow count, enough for an estimate
    working_set = entries * 16 + flows * 48 + num_links * 40
    return "flows" if limit and working_set > limit / 2 else None


def _unsettled_mask(status: np.ndarray, shape) -> np.ndarray:
    """Flows of a scenario whose status is not CONVERGED: all of them are suspect."""
    bad = np.asarray(status) != Status.CONVERGED
    return np.broadcast_to(bad[..., None] if bad.ndim else bad, shape)
