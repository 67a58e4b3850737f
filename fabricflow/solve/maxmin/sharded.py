"""The JAX backend on one device or spread over several (``jax.sharding``).

:func:`run_jax` is what :func:`~.engine.max_min` calls for ``method="jax"``. Sharding is
an option of that one solve, in two modes, both exact (the rounds of :mod:`.flat`):

- **batch**: ``B`` scenarios over the same flows are split along a ``"batch"`` mesh
  axis; each device runs the vmapped kernel on its share, with no communication. ``B``
  is padded to a multiple of the device count by repeating the last scenario (the copies
  are dropped).
- **flows**: one scenario whose entries do not fit one device. The flows are split into
  contiguous ranges of about equal entry counts along a ``"flows"`` mesh axis; every
  device keeps all link slots. A round's per-link sums and minima (active weight, frozen
  load, lowest active level) are computed on the local entries and reduced across the
  devices (``psum`` / ``pmin``), plus one "any flow active" reduction for the loop test;
  everything per flow stays local.

In float32 the frozen loads' high parts are exact in any order
(:func:`~.flat.exact_sum_quantum`), so the flow-sharded solve differs from the one-device
one only in the rounding of the small remainders. On one CPU, test with virtual devices:
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` set before JAX starts.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from fabricflow.errors import SpecError
from fabricflow.jax_cache import ensure_persistent_cache
from fabricflow.solve.maxmin.entries import FlowEntries, bucket_size
from fabricflow.solve.maxmin.flat import (
    FlatSolution,
    constrained_links,
    flat_water_fill,
    solve_batch,
    status_of,
)
from fabricflow.solve.maxmin.jax_backend import jax_solve, original_links, pad_problem, x64_mode

__all__ = ["SHARD_MODES", "device_mesh", "resolve_shard", "run_jax"]

FLOWS = "flows"
BATCH = "batch"
SHARD_MODES = ("auto", "batch", "flows")


def device_mesh(axis: str, devices=None) -> Mesh:
    """A one-axis :class:`jax.sharding.Mesh` named ``axis`` over ``devices``
    (default ``jax.devices()``: every local accelerator, or every virtual CPU device)."""
    devices = jax.devices() if devices is None else list(devices)
    if not devices:
        raise SpecError("devices", "need at least one device")
    return Mesh(np.asarray(devices), (axis,))


def resolve_shard(shard, batch: int | None, entries: int, num_links: int) -> str | None:
    """The sharding mode a solve will use: ``None``, ``"batch"`` or ``"flows"``.

    ``"auto"`` picks ``batch`` for a batch and ``flows`` for a single scenario whose
    working set exceeds half of one device's memory, when there are several devices;
    devices that do not report their memory (CPUs) never get ``flows`` automatically:
    they share the host's memory.

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
    working_set = entries * 40 + num_links * 40
    return "flows" if limit and working_set > limit / 2 else None


def run_jax(
    entries: FlowEntries,
    capacity: np.ndarray,
    weight: np.ndarray,
    demand: np.ndarray,
    *,
    dtype,
    max_iters: int,
    rtol: float,
    shard: str | None = None,
    layout: str = "block",
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The flat kernel on ``capacity`` ``[B, L]`` and ``weight``/``demand`` ``[B, F]``
    (``B >= 1``), on one device or sharded. Returns numpy ``(rate [B, F], bottleneck
    [B, F], rounds [B], status [B], unsettled [B, F])``."""
    if shard == "flows":
        return _flow_sharded(entries, capacity[0], weight[0], demand[0], dtype, max_iters, rtol)
    if shard == "batch":
        return _batch_sharded(entries, capacity, weight, demand, dtype, max_iters, rtol)
    if capacity.shape[0] == 1:
        out = jax_solve(
            entries, capacity[0], weight[0], demand[0], dtype=dtype, max_iters=max_iters, rtol=rtol
        )
        return tuple(np.asarray(a)[None] for a in out)  # type: ignore[return-value]
    return jax_solve(
        entries,
        capacity,
        weight,
        demand,
        dtype=dtype,
        max_iters=max_iters,
        rtol=rtol,
        layout=layout,
    )


def _batch_sharded(entries, capacity, weight, demand, dtype, max_iters, rtol):
    """Scenarios split across the devices (padded by repeating the last one)."""
    ensure_persistent_cache()
    mesh = device_mesh(BATCH)
    batch = capacity.shape[0]
    pad = -batch % mesh.size

    def padded(values):
        values = np.asarray(values)
        return np.concatenate([values, np.repeat(values[-1:], pad, axis=0)]) if pad else values

    problem = pad_problem(entries, padded(capacity), padded(weight), padded(demand), dtype)
    solve = _batch_solver(mesh)
    with x64_mode(dtype):
        solution = jax.device_get(
            solve(
                jnp.asarray(problem.link),
                jnp.asarray(problem.flow),
                jnp.asarray(problem.coef),
                jnp.asarray(problem.capacity),
                jnp.asarray(problem.weight),
                jnp.asarray(problem.demand),
                jnp.int32(problem.num_flows),
                jnp.int32(max_iters),
                jnp.asarray(rtol, dtype),
            )
        )
    real = slice(0, problem.num_flows)
    rate = np.asarray(solution.rates, np.float64)[:batch, real]
    bottleneck = original_links(np.asarray(solution.bottleneck)[:batch, real], problem.used_links)
    rounds, status = np.asarray(solution.rounds)[:batch], np.asarray(solution.status)[:batch]
    return rate, bottleneck, rounds, status, np.asarray(solution.unsettled)[:batch, real]


@functools.lru_cache(maxsize=8)
def _batch_solver(mesh: Mesh):
    """The vmapped kernel ``shard_map``-ed over the batch axis of ``mesh`` (jitted)."""
    split, shared = P(BATCH), P()
    in_specs = (shared, shared, shared, split, split, split, shared, shared, shared)
    out_specs = FlatSolution(split, split, split, split, split)  # type: ignore[arg-type]
    return jax.jit(_shard_map(solve_batch, mesh, in_specs, out_specs))


def _flow_sharded(entries: FlowEntries, capacity, weight, demand, dtype, max_iters, rtol):
    """One scenario with its flows split across the devices (module docs)."""
    ensure_persistent_cache()
    mesh = device_mesh(FLOWS)
    devices = mesh.size
    num_flows = entries.num_flows
    # Contiguous flow ranges of about equal entry counts.
    target = np.linspace(0, entries.num_entries, devices + 1)
    bounds = np.searchsorted(entries.start, target, side="left")
    bounds[0], bounds[-1] = 0, num_flows
    bounds = np.maximum.accumulate(np.minimum(bounds, num_flows))
    parts = [entries.select(np.arange(bounds[d], bounds[d + 1])) for d in range(devices)]
    whole = pad_problem(entries, capacity, weight, demand, dtype)  # link compaction
    renumber = np.full(entries.num_links, -1, np.int64)
    renumber[whole.used_links] = np.arange(whole.used_links.size)
    slots = whole.capacity.shape[-1]
    entry_slots = bucket_size(max(p.num_entries for p in parts))
    flow_slots = bucket_size(max(p.num_flows for p in parts) + 1)
    link = np.full((devices, entry_slots), slots - 1, np.int32)
    flow = np.full((devices, entry_slots), flow_slots - 1, np.int32)
    coef = np.zeros((devices, entry_slots), dtype)
    w = np.ones((devices, flow_slots), dtype)
    dem = np.full((devices, flow_slots), np.inf, dtype)
    present = np.zeros((devices, flow_slots), bool)
    for d, part in enumerate(parts):
        n, e = part.num_flows, part.num_entries
        link[d, :e] = renumber[part.link]
        flow[d, :e] = part.flow_of_entry()
        coef[d, :e] = part.coef_or_ones()
        w[d, :n] = weight[bounds[d] : bounds[d + 1]]
        dem[d, :n] = demand[bounds[d] : bounds[d + 1]]
        present[d, :n] = True
    solve = _flow_solver(mesh)
    with x64_mode(dtype):
        rate, bottleneck, rounds, status = jax.device_get(
            solve(
                *(jnp.asarray(a.reshape(-1)) for a in (link, flow, coef, w, dem, present)),
                jnp.asarray(whole.capacity),
                jnp.int32(max_iters),
                jnp.asarray(rtol, dtype),
            )
        )
    rate = np.asarray(rate, np.float64).reshape(devices, flow_slots)
    slot = np.asarray(bottleneck).reshape(devices, flow_slots)
    rate = np.concatenate([rate[d, : p.num_flows] for d, p in enumerate(parts)])
    slot = np.concatenate([slot[d, : p.num_flows] for d, p in enumerate(parts)])
    bottleneck = original_links(slot, whole.used_links)
    unsettled = np.zeros((1, rate.size), dtype=bool) | (np.asarray(status) != 0)
    return (
        rate[None],
        bottleneck[None],
        np.asarray(rounds)[None],
        np.asarray(status)[None],
        unsettled,
    )


@functools.lru_cache(maxsize=8)
def _flow_solver(mesh: Mesh):
    """The kernel ``shard_map``-ed with its entries and flows split over ``mesh``."""
    split, shared = P(FLOWS), P()

    def local(link, flow, coef, weight, demand, present, capacity, max_iters, rtol):
        link, capacity = constrained_links(link, coef, capacity)
        rate, bottleneck, rounds, on = flat_water_fill(
            link, flow, coef, capacity, weight, demand, present, max_iters, rtol, FLOWS
        )
        unsettled = jax.lax.pmax(jnp.any(on).astype(jnp.int32), FLOWS) > 0
        has_nan = jax.lax.pmax(jnp.any(jnp.isnan(rate)).astype(jnp.int32), FLOWS)
        status = status_of(unsettled, jnp.where(has_nan > 0, jnp.nan, 0.0))
        return rate, bottleneck, rounds, status

    in_specs = (split, split, split, split, split, split, shared, shared, shared)
    # rounds and status are equal on all devices by construction (unchecked)
    return jax.jit(_shard_map(local, mesh, in_specs, (split, split, shared, shared)))


def _shard_map(function, mesh, in_specs, out_specs):
    """``shard_map`` without the replication check, across JAX versions: ``jax.shard_map``
    (``check_vma``, JAX >= 0.7) or ``jax.experimental.shard_map`` (``check_rep``)."""
    if hasattr(jax, "shard_map"):
        try:
            return jax.shard_map(
                function, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False
            )
        except TypeError:
            pass
    from jax.experimental.shard_map import shard_map  # older JAX only

    return shard_map(function, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_rep=False)
