"""``max_min``: the one max-min entry point of fabricflow (every production caller uses it).

Input: the flows as padded rows (``links`` int ``[F, H]``, ``-1`` padded, with ``coef``
``[F, H]``) or as flat route entries (:class:`~.entries.FlowEntries`), capacities ``[L]``
or a batch ``[B, L]`` of scenarios over the same flows, optional weights and demands.
Pipeline: host checks (a :class:`~fabricflow.errors.SpecError` naming the field) ->
identical rows merged into weighted flows (padded input, exact) -> range scaling by
powers of two (float32 solves) -> one backend -> rates split back -> a bad status raised
as :class:`~fabricflow.errors.SolverError` unless ``throw=False``.

Backends (``method``):

- ``"jax"``: the flat-entry JAX kernel (:mod:`.flat`), shapes padded to a few bucket
  sizes (:mod:`.jax_backend`); runs on CPU and unchanged on an accelerator, batches of
  scenarios in one vmapped call, and across devices with ``shard``.
- ``"numpy"``: the same rounds in float64 numpy (:mod:`.numpy_fill`), dropping frozen
  flows every round and compiling nothing; faster for small problems on a CPU.
- ``"auto"`` (default): ``"jax"`` when sharding was asked for or when an accelerator is
  JAX's default device; ``"numpy"`` on a CPU, where it measured faster at every size
  tried (docs/solve-performance.md), so the planner imports JAX only when it runs on an
  accelerator. ``$FABRICFLOW_MAXMIN_METHOD`` (``jax`` or ``numpy``) overrides what
  ``auto`` picks, for every caller at once (the planner's step model, searches and
  simulations). The result says which ran (``MaxMinSolution.method``).

Every backend gives the max-min fair allocation (it is unique); rates agree to the
solve's float rounding (float64: ~1e-15 relative; float32: ~1e-6).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from typing import NamedTuple

import numpy as np

from fabricflow.errors import SolverError, SpecError, check_flag
from fabricflow.solve.maxmin.entries import FlowEntries, compact_links
from fabricflow.solve.maxmin.identical_flows import merge_identical_flows
from fabricflow.solve.maxmin.inputs import (
    check_count,
    check_problem,
    check_rtol,
    check_solve_memory,
    check_values,
)
from fabricflow.solve.maxmin.numpy_fill import numpy_water_fill
from fabricflow.solve.maxmin.scaling import as_output_dtype, range_scaling
from fabricflow.solve.status import SolverStatus

__all__ = [
    "METHODS",
    "METHOD_ENV",
    "MaxMinSolution",
    "accelerator_present",
    "max_min",
    "resolve_method",
]

METHODS = ("auto", "jax", "numpy")
# Environment variable that overrides what method="auto" picks (jax, numpy or auto).
METHOD_ENV = "FABRICFLOW_MAXMIN_METHOD"


class MaxMinSolution(NamedTuple):
    """Result of :func:`max_min` (numpy arrays; a leading ``B`` axis for a batch).

    Attributes:
        rates: ``[F]`` rates in the unit of ``capacity`` (NaN for flows left unsettled
            with ``throw=False``).
        bottleneck: int64 ``[F]``: the saturated link that fixed each flow's rate, or
            ``-1`` when its demand (or nothing: rate ``inf``) did.
        rounds: int: water-filling rounds run (``[B]`` with a batch).
        status: int: a :class:`~fabricflow.solve.status.SolverStatus` code (``[B]``).
        method: the backend that ran, ``"jax"`` or ``"numpy"``.
    """

    rates: np.ndarray
    bottleneck: np.ndarray
    rounds: np.ndarray | np.integer
    status: np.ndarray | np.integer
    method: str = "numpy"


def default_rtol(dtype) -> float:
    """Relative tolerance for equal shares: a few ulps of the solve's float type."""
    return 1e-6 if np.dtype(dtype) == np.float32 else 1e-12


def _x64_enabled() -> bool:
    """Whether JAX computes in float64 (never imports JAX to find out)."""
    jax = sys.modules.get("jax")
    return bool(jax is not None and jax.config.jax_enable_x64)


def output_dtype(dtype, *arrays) -> np.dtype:
    """The float type of the rates: ``dtype`` when given, else float64 when an input is
    float64 and JAX runs in float64 (``jax_enable_x64``), else float32."""
    if dtype is not None:
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.float64):
            raise SpecError("dtype", f"must be float32 or float64, got {dtype}")
        return dtype
    wide = any(a is not None and np.asarray(a).dtype == np.float64 for a in arrays)
    return np.dtype(np.float64 if wide and _x64_enabled() else np.float32)


def resolve_method(method, num_entries: int = 0, shard=None) -> str:
    """The backend ``method`` stands for: ``"jax"`` or ``"numpy"`` (see the module docs;
    ``num_entries``, the problem's size, is kept for size rules on other devices).

    Raises:
        SpecError: (``method``) not one of :data:`METHODS`; ``"numpy"`` with ``shard``.
    """
    if not isinstance(method, str) or method not in METHODS:
        raise SpecError("method", f"must be one of {list(METHODS)}, got {method!r}")
    if method == "numpy" and shard not in (None, "auto"):
        raise SpecError("method", "'numpy' runs on the host: shard needs method 'jax' or 'auto'")
    if method != "auto":
        return method
    forced = os.environ.get(METHOD_ENV, "").strip().lower()
    if forced in ("jax", "numpy"):
        return "jax" if shard not in (None, "auto") else forced
    if forced not in ("", "auto"):
        raise SpecError(METHOD_ENV, f"must be 'jax', 'numpy' or 'auto', got {forced!r}")
    if shard not in (None, "auto") or accelerator_present():
        return "jax"
    return "numpy"


_ACCELERATOR_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin", "libtpu")


@functools.lru_cache(maxsize=1)
def accelerator_present() -> bool:
    """Whether JAX's default device is an accelerator (GPU/TPU). Answered without
    importing JAX when no accelerator plugin is installed, or ``JAX_PLATFORMS`` says
    ``cpu``; otherwise JAX is asked (once per process)."""
    platforms = os.environ.get("JAX_PLATFORMS", "").strip().lower()
    if platforms == "cpu":
        return False
    if "jax" not in sys.modules and not platforms:
        if not any(importlib.util.find_spec(name) for name in _ACCELERATOR_PLUGINS):
            return False
    import jax  # deferred: an accelerator may be present, JAX must say which

    try:
        return jax.default_backend() != "cpu"
    except RuntimeError:
        return False


def max_min(
    links,
    capacity,
    *,
    coef=None,
    weight=None,
    demand=None,
    method: str = "auto",
    merge: bool = True,
    max_iters: int | None = None,
    rtol: float | None = None,
    throw: bool = True,
    shard: str | None = None,
    dtype=None,
    batch_layout: str = "block",
) -> MaxMinSolution:
    """Exact weighted, demand-capped max-min fair rates.

    Args:
        links: int ``[F, H]`` link ids per flow, ``-1`` padded (``Routes.links``), or a
            :class:`~.entries.FlowEntries` (then ``coef`` lives in it: leave ``coef``
            ``None``).
        capacity: ``[L]`` link capacities (bytes/s for a fabric), or ``[B, L]``: ``B``
            scenarios over the same flows in one call. 0 (a failed link) gives the flows
            crossing it rate 0; ``inf``: the link constrains nothing.
        coef: ``[F, H]`` bytes on each entry's link per byte of the flow's progress
            (multipath fractions, hop loads); default 1.
        weight: ``[F]`` (or ``[B, F]``) positive weights; default 1.
        demand: ``[F]`` (or ``[B, F]``) rate caps; default none (``inf``).
        method: ``"auto"``, ``"jax"`` or ``"numpy"`` (module docs).
        merge: solve identical padded rows (and demand levels) as one weighted flow (exact).
        max_iters: bound on water-filling rounds (default: enough for any input).
        rtol: relative tolerance for equal shares, in ``[0, 1e-3]`` (default a few ulps).
        throw: raise :class:`SolverError` on a bad status; ``False``: unsettled flows
            get NaN and the status comes back.
        shard: spread a JAX solve over the local devices: ``"batch"`` (scenarios split),
            ``"flows"`` (one scenario's flows split), ``"auto"`` (:mod:`.sharded`).
        dtype: float type of the solve and the rates (``float32``/``float64``); default:
            float64 when the inputs are float64 and ``jax_enable_x64`` is on, else
            float32. The numpy backend computes in float64 and returns this type.
        batch_layout: how the JAX backend runs a ``[B, L]`` batch: ``"block"`` (default:
            the scenarios stacked block-diagonally into one problem) or ``"vmap"``
            (:data:`~.jax_backend.BATCH_LAYOUTS`).

    Returns:
        :class:`MaxMinSolution`; ``method`` says which backend ran.

    Shapes that compile (JAX backend): the buckets of entries, flows and used links
    (powers of two, :func:`~.entries.bucket_size`), the dtype and a batch size.

    Example:
        >>> max_min([[0, 1], [0, -1], [1, -1]], [1.0, 1.0]).rates   # parking lot
        array([0.5, 0.5, 0.5], dtype=float32)
    """
    problem, entries = _checked(links, capacity, weight, demand, coef)
    merge, throw = check_flag(merge, "merge"), check_flag(throw, "throw")
    max_iters = check_count(max_iters, "max_iters", "bound on water-filling rounds")
    rtol = check_rtol(rtol)
    out_dtype = output_dtype(dtype, problem.capacity, problem.weight, problem.demand)
    scaling = range_scaling(problem.capacity, problem.weight, problem.demand, out_dtype)
    problem = scaling.apply(problem)
    rows, width = problem.links.shape if entries is None else (entries.num_flows, 1)
    check_solve_memory(
        rows * width if entries is None else entries.num_entries,
        rows,
        problem.capacity.shape[-1],
        problem.batch,
        "max_min_rates",
    )
    entries, merged = _entries(problem, entries, merge)
    weight = problem.weight if merged is None else merged.weight
    demand = problem.demand if merged is None else merged.demand
    num_flows = entries.num_flows
    backend = resolve_method(method, entries.num_entries, shard)
    solve_dtype = np.float64 if (scaling.float64 or backend == "numpy") else out_dtype
    rtol = default_rtol(solve_dtype) if rtol is None else rtol
    max_iters = num_flows + 1 if max_iters is None else max_iters
    batch = problem.batch
    capacity = _per_scenario(problem.capacity, batch, entries.num_links)
    weight = _per_scenario(weight, batch, num_flows, 1.0)
    demand = _per_scenario(demand, batch, num_flows, np.inf)
    if batch_layout not in ("block", "vmap"):
        raise SpecError("batch_layout", f"must be 'block' or 'vmap', got {batch_layout!r}")
    if backend == "numpy":
        rate, bottleneck, rounds, status, unsettled = _numpy_solve(
            entries, capacity, weight, demand, rtol, max_iters
        )
    else:
        # lazy: the JAX backend imports JAX; a numpy solve (and ``import fabricflow``) stays light
        from fabricflow.solve.maxmin.sharded import resolve_shard, run_jax

        rate, bottleneck, rounds, status, unsettled = run_jax(
            entries,
            capacity,
            weight,
            demand,
            dtype=solve_dtype,
            max_iters=max_iters,
            rtol=rtol,
            shard=resolve_shard(shard, batch, entries.num_entries, entries.num_links),
            layout=batch_layout,
        )
    rounds, status = np.asarray(rounds, np.int64), np.asarray(status, np.int64)
    if batch is None:
        rate, bottleneck, unsettled = rate[0], bottleneck[0], unsettled[0]
        rounds, status = rounds[0], status[0]
    rate = scaling.restore(rate)
    if merged is not None:
        rate, bottleneck = merged.split(rate), merged.spread(bottleneck)
        unsettled = merged.spread(unsettled)
    if np.any(status != SolverStatus.CONVERGED):
        worst = SolverStatus(int(np.max(status)))
        if throw:
            raise SolverError(
                f"max_min_rates: {worst.message} (status {worst.name}, "
                f"{int(np.max(rounds))} rounds)"
            )
        bad = status != SolverStatus.CONVERGED
        unsettled = unsettled | (np.isnan(rate) & (bad[..., None] if bad.ndim else bad))
    rates = as_output_dtype(np.where(unsettled, np.nan, rate), out_dtype)
    return MaxMinSolution(rates, bottleneck.astype(np.int64), rounds, status, backend)


def _entries(problem, entries, merge: bool):
    """``(entries, merged)``: the flows to solve as :class:`~.entries.FlowEntries` (the given
    ``entries``, else the padded rows of ``problem``, identical rows merged into one weighted
    flow when ``merge``) and the :func:`~.identical_flows.merge_identical_flows` result
    that spreads the answer back (``None`` when nothing was merged)."""
    merged = None
    if entries is None:
        if merge:
            merged = merge_identical_flows(
                problem.links, problem.coef, problem.weight, problem.demand
            )
            if merged.num_unique == problem.links.shape[0] and problem.weight is None:
                merged = None
        rows, coef = (problem.links, problem.coef) if merged is None else merged[:2]
        entries = FlowEntries.from_padded(rows, coef, problem.capacity.shape[-1])
    return entries, merged


def _checked(links, capacity, weight, demand, coef):
    """``(FlowProblem, FlowEntries or None)``: checked inputs; entries given as such are
    checked here and stand in for ``links``."""
    if not isinstance(links, FlowEntries):
        return check_problem(links, capacity, weight, demand, coef), None
    if coef is not None:
        raise SpecError("coef", "FlowEntries carry their coefficients; leave coef None")
    entries = _check_entries(links, capacity)
    problem = check_problem(np.zeros((entries.num_flows, 0), np.int32), capacity, weight, demand)
    return problem, entries


def _check_entries(entries: FlowEntries, capacity) -> FlowEntries:
    """``entries`` with its constraints verified: offsets, link range, coefficients."""
    start, link = np.asarray(entries.start), np.asarray(entries.link)
    num_links = np.shape(capacity)[-1]
    if start.ndim != 1 or start.size < 1 or start[0] != 0 or np.any(np.diff(start) < 0):
        raise SpecError("links.start", "must be non-decreasing offsets starting at 0")
    if int(start[-1]) != link.size:
        raise SpecError(
            "links.start", f"ends at {int(start[-1])} but there are {link.size} entries"
        )
    if link.size and (int(link.min()) < 0 or int(link.max()) >= num_links):
        raise SpecError("links.link", f"link ids must lie in 0..{num_links - 1}")
    coef = entries.coef
    if coef is not None:
        coef, _ = check_values("links.coef", coef, (link.size,), allow_inf=False)
        keep = coef > 0
        if not keep.all():  # entries that carry nothing constrain nothing
            entries = FlowEntries.from_rows(
                entries.flow_of_entry()[keep], link[keep], coef[keep], entries.num_flows, num_links
            )
    return entries


def _per_scenario(values, batch, size: int, fill: float | None = None) -> np.ndarray:
    """float64 ``[B or 1, size]``: ``values`` broadcast over the scenarios (``fill`` for
    ``None``)."""
    if values is None:
        values = np.full(size, fill)
    values = np.asarray(values, np.float64)
    return np.broadcast_to(values, (batch or 1, size))


def _numpy_solve(entries: FlowEntries, capacity, weight, demand, rtol, max_iters):
    """The numpy backend over each scenario (a batch is solved one scenario after another)."""
    out = []
    coef = entries.coef_or_ones()
    flow = None
    for cap, w, d in zip(capacity, weight, demand, strict=True):
        keep = np.isfinite(cap[entries.link])  # links of infinite capacity constrain nothing
        if keep.all():
            start, link, entry_coef = entries.start, entries.link, coef
        else:
            flow = entries.flow_of_entry() if flow is None else flow
            start = np.zeros(entries.num_flows + 1, np.int64)
            np.cumsum(np.bincount(flow[keep], minlength=entries.num_flows), out=start[1:])
            link, entry_coef = entries.link[keep], coef[keep]
        # Entries over a fraction of a large fabric: solve on the links they use only
        # (renumbered in order, so the sums are the same), so a round costs the entries and
        # their links, not the fabric's links.
        used, link, cap = compact_links(link, cap)
        finite_cap = np.where(np.isfinite(cap), cap, 0.0)
        rate, bottleneck, rounds, unsettled = numpy_water_fill(
            start, link, entry_coef, finite_cap, w, d, rtol=rtol, max_iters=max_iters
        )
        if used is not None:
            bottleneck = np.where(bottleneck >= 0, used[np.maximum(bottleneck, 0)], -1)
        status = SolverStatus.MAX_ITERS_REACHED if unsettled.any() else SolverStatus.CONVERGED
        out.append((rate, bottleneck, rounds, int(status), unsettled))
    rate, bottleneck, rounds, status, unsettled = zip(*out, strict=True)
    return (
        np.stack(rate),
        np.stack(bottleneck),
        np.asarray(rounds),
        np.asarray(status),
        np.stack(unsettled),
    )
