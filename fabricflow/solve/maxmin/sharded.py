"""Max-min solves spread over several devices with ``jax.sharding``.

Two modes, both exact (the same water-filling rounds as :func:`.kernel.solve_max_min`):

- **batch** (:func:`sharded_batch_max_min`): ``B`` scenarios (capacities, demands,
  weights, and optionally routes) are split along a ``"batch"`` mesh axis; each device
  runs the vmapped kernel on its ``B / D`` scenarios with its own loop, no communication.
  ``B`` is padded to a multiple of the device count by repeating the last scenario (the
  copies are dropped from the result). Scenarios that share one route table run the
  batch-minor kernel :func:`.batched.solve_max_min_batch` on each device.
- **flows** (:func:`sharded_max_min`): one scenario whose flows do not fit one device.
  The ``F`` flows are split along a ``"flows"`` mesh axis; every device keeps all ``L``
  link slots. A water-filling round needs three per-link reductions over the flows (the
  active weight, the frozen load, the lowest active level), each computed on the local
  flows and then summed (``psum``) or minimised (``pmin``) across the devices, plus one
  "is any flow still active" reduction for the loop test. Everything else in a round is
  per flow or per link and needs no communication. Link state is replicated; the cost per
  round is ``3 (L + 1)`` values all-reduced.

In float32 the frozen loads are summed exactly in their high part (multiples of a
quantum, see :func:`~fabricflow.solve._kernel.exact_sum_quantum`) in any order, so the
flow-sharded solve differs from the single-device one only by the rounding of the small
remainders: rates agree to float tolerance, and the rounds and bottlenecks are the same
on all but tied instances.

Mesh axes are made over ``jax.devices()`` by default. On one CPU, test with several
virtual devices: ``XLA_FLAGS=--xla_force_host_platform_device_count=4`` set before JAX
starts.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ...errors import SpecError
from .._kernel import default_rtol, final_status, float_dtype
from ..status import Status
from .batched import solve_max_min_batch
from .kernel import MaxMinSolution, prepare_network, solve_max_min, water_fill

__all__ = ["device_mesh", "sharded_batch_max_min", "sharded_max_min"]

FLOWS = "flows"
BATCH = "batch"


def device_mesh(axis: str, devices=None) -> Mesh:
    """A one-axis :class:`jax.sharding.Mesh` named ``axis`` over ``devices``
    (default ``jax.devices()``: every local accelerator, or every virtual CPU device)."""
    devices = jax.devices() if devices is None else list(devices)
    if not devices:
        raise SpecError("devices", "need at least one device")
    return Mesh(np.asarray(devices), (axis,))


def _axis_of(mesh: Mesh | None, axis: str) -> Mesh:
    mesh = device_mesh(axis) if mesh is None else mesh
    if not isinstance(mesh, Mesh) or mesh.axis_names != (axis,):
        raise SpecError(
            "mesh", f"must be a one-axis jax.sharding.Mesh named {axis!r} (device_mesh({axis!r}))"
        )
    return mesh


def _pad_rows(array, rows: int, value):
    """``array`` with ``rows`` extra leading rows filled with ``value``."""
    if rows == 0:
        return array
    pad = np.full((rows, *array.shape[1:]), value, dtype=array.dtype)
    return np.concatenate([array, pad])


def sharded_max_min(
    links, capacity, weight=None, demand=None, coef=None, *, mesh=None, max_iters=None, rtol=None
) -> MaxMinSolution:
    """:func:`.kernel.solve_max_min` with the flows split across the devices of ``mesh``.

    Args:
        links: int ``[F, H]`` link ids, ``-1`` padded.
        capacity: ``[L]`` link capacities (replicated on every device).
        weight, demand: ``[F]`` or ``None``; coef: ``[F, H]`` or ``None`` (as the kernel).
        mesh: a one-axis mesh named ``"flows"`` (default: all of ``jax.devices()``).
        max_iters, rtol: as the kernel (default ``F + 1`` rounds, a few ulps).

    Returns:
        :class:`MaxMinSolution` (jax arrays) for the ``F`` flows, equal to the
        single-device kernel's up to float rounding (module docs). ``F`` is padded to a
        multiple of the device count with flows that take no part (rate 0, bottleneck -1).

    Like the kernel it validates nothing and never raises on values; bad input shows in
    ``status``. Shapes (after padding) and which optional arrays are given are static.
    """
    mesh = _axis_of(mesh, FLOWS)
    links = np.asarray(links)
    dtype = float_dtype(capacity, weight, demand, coef)
    num_flows = links.shape[0]
    pad = -num_flows % mesh.size
    present = _pad_rows(np.ones(num_flows, bool), pad, False)
    arrays = {
        "links": _pad_rows(links.astype(np.int32), pad, -1),
        "weight": None if weight is None else _pad_rows(np.asarray(weight, dtype), pad, 1),
        "demand": None if demand is None else _pad_rows(np.asarray(demand, dtype), pad, np.inf),
        "coef": None if coef is None else _pad_rows(np.asarray(coef, dtype), pad, 0),
    }
    given = tuple(name for name, value in arrays.items() if value is not None)
    solve = _flow_sharded_solver(mesh, given)
    rate, bottleneck, rounds, status = solve(
        *(jnp.asarray(arrays[name]) for name in given),
        jnp.asarray(present),
        jnp.asarray(capacity, dtype),
        jnp.asarray(num_flows + 1 if max_iters is None else max_iters, jnp.int32),
        jnp.asarray(default_rtol(dtype) if rtol is None else rtol, dtype),
    )
    return MaxMinSolution(rate[:num_flows], bottleneck[:num_flows], rounds, status)


@functools.lru_cache(maxsize=32)
def _flow_sharded_solver(mesh: Mesh, given: tuple[str, ...]):
    """The jitted ``shard_map``-ed solve for one mesh and one set of optional arrays."""
    flow_spec = P(FLOWS)

    def local(*args):
        named = dict(zip(given, args[: len(given)], strict=True))
        present, capacity, max_iters, rtol = args[len(given) :]
        net = prepare_network(
            named["links"], capacity, named.get("weight"), named.get("demand"), named.get("coef")
        )
        # Input errors found on any device stop every device; NONFINITE outranks
        # INFEASIBLE as in the single-device kernel.
        nonfinite = jax.lax.pmax((net.start_status == Status.NONFINITE).astype(jnp.int32), FLOWS)
        infeasible = jax.lax.pmax((net.start_status == Status.INFEASIBLE).astype(jnp.int32), FLOWS)
        start = jnp.where(
            nonfinite > 0, Status.NONFINITE, jnp.where(infeasible > 0, Status.INFEASIBLE, 0)
        ).astype(jnp.int32)
        rate, bottleneck, rounds, unsettled = water_fill(
            net, present, max_iters, rtol, start == Status.CONVERGED, axis_name=FLOWS
        )
        # A NaN rate on any device makes the whole solve NONFINITE.
        has_nan = jax.lax.pmax(jnp.any(jnp.isnan(rate)).astype(jnp.int32), FLOWS)
        status = final_status(start, unsettled, jnp.where(has_nan > 0, jnp.nan, 0.0))
        return rate, bottleneck, rounds, status

    in_specs = (*(flow_spec for _ in given), flow_spec, P(), P(), P())
    # rounds and status are equal on all devices by construction (unchecked)
    return jax.jit(_shard_map(local, mesh, in_specs, (flow_spec, flow_spec, P(), P())))


def sharded_batch_max_min(
    links,
    capacity,
    weight=None,
    demand=None,
    coef=None,
    *,
    mesh=None,
    max_iters=None,
    rtol=None,
) -> MaxMinSolution:
    """``B`` max-min scenarios, vmapped, with the batch split across the devices of ``mesh``.

    Args:
        links: int ``[F, H]`` shared routes, or ``[B, F, H]`` one set per scenario
            (rerouted failures; pad every scenario to the same ``F`` and ``H``).
        capacity: ``[B, L]`` capacities per scenario.
        weight, demand: ``None``, ``[F]`` (shared) or ``[B, F]``.
        coef: ``None``, ``[F, H]`` or ``[B, F, H]``.
        mesh: a one-axis mesh named ``"batch"`` (default: all of ``jax.devices()``).
        max_iters, rtol: as :func:`.kernel.solve_max_min`.

    Returns:
        :class:`MaxMinSolution` with a leading ``[B]`` axis, equal to
        ``jax.vmap(solve_max_min)`` on one device: each scenario's solve is the same
        computation wherever it runs.
    """
    mesh = _axis_of(mesh, BATCH)
    capacity = np.asarray(capacity)
    if capacity.ndim != 2:
        raise SpecError("capacity", f"must be [B, L] for a batch, got shape {capacity.shape}")
    batch = capacity.shape[0]
    dtype = float_dtype(capacity, weight, demand, coef)
    links = np.asarray(links).astype(np.int32)
    num_flows = links.shape[-2]
    pad = -batch % mesh.size

    def batched(name, value, ndim):
        """(array padded along the batch, True) for a per-scenario array, else (array, False)."""
        if value is None:
            return None, False
        value = np.asarray(value, np.int32 if name == "links" else dtype)
        if value.ndim == ndim + 1:
            if value.shape[0] != batch:
                raise SpecError(name, f"batch of {value.shape[0]} scenarios, capacity has {batch}")
            # Repeat the last scenario: valid input, its copies are dropped below.
            return np.concatenate([value, np.repeat(value[-1:], pad, axis=0)]), True
        return value, False

    items = {
        "links": batched("links", links, 2),
        "capacity": batched("capacity", capacity, 1),
        "weight": batched("weight", weight, 1),
        "demand": batched("demand", demand, 1),
        "coef": batched("coef", coef, 2),
    }
    given = tuple(name for name, (value, _) in items.items() if value is not None)
    per_scenario = tuple(items[name][1] for name in given)
    solve = _batch_sharded_solver(mesh, given, per_scenario)
    args = []
    for name, split in zip(given, per_scenario, strict=True):
        spec = P(BATCH) if split else P()
        args.append(jax.device_put(items[name][0], NamedSharding(mesh, spec)))
    solution = solve(
        *args,
        jnp.asarray(num_flows + 1 if max_iters is None else max_iters, jnp.int32),
        jnp.asarray(default_rtol(dtype) if rtol is None else rtol, dtype),
    )
    return MaxMinSolution(*(field[:batch] for field in solution))


@functools.lru_cache(maxsize=32)
def _batch_sharded_solver(mesh: Mesh, given: tuple[str, ...], per_scenario: tuple[bool, ...]):
    """The jitted, batch-sharded ``vmap`` of the kernel for one argument layout."""

    shared_routes = (
        not per_scenario[0]
        and ("weight" not in given or not per_scenario[given.index("weight")])
        and ("coef" not in given or not per_scenario[given.index("coef")])
    )

    def call(solver):
        """``solver`` on the positional arguments ``(*given, max_iters, rtol)``."""

        def run(*args):
            named = dict(zip(given, args[: len(given)], strict=True))
            max_iters, rtol = args[len(given) :]
            return solver(
                named["links"],
                named["capacity"],
                named.get("weight"),
                named.get("demand"),
                named.get("coef"),
                max_iters=max_iters,
                rtol=rtol,
            )

        return run

    one = call(solve_max_min)
    # One route table: the batch-minor kernel (one index per entry for all scenarios).
    shared = call(solve_max_min_batch)

    in_axes = (*(0 if split else None for split in per_scenario), None, None)
    local = shared if shared_routes else jax.vmap(one, in_axes=in_axes)
    in_specs = (*(P(BATCH) if split else P() for split in per_scenario), P(), P())
    out_specs = MaxMinSolution(P(BATCH), P(BATCH), P(BATCH), P(BATCH))  # type: ignore[arg-type]
    return jax.jit(_shard_map(local, mesh, in_specs, out_specs))


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
    from jax.experimental.shard_map import shard_map

    return shard_map(function, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_rep=False)
