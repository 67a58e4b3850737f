"""``ff.simulate_cc``: congestion control (and PFC) for routes over a fabric.

The fabric-level door to the fluid integrator of :mod:`fabricflow.solve.cc`, which takes
arrays only. This module reads what the integrator needs from a
:class:`~fabricflow.Fabric` and its :class:`~fabricflow.Routes`: links leaving a switch
(``node_tier[src] != 0``) mark ECN and count as fabric delay, links arriving at a switch
have a PFC ingress buffer, host NICs do neither; each flow's feedback delay is its one-way
path latency plus ``extra_delay``. Example::

    import fabricflow as ff
    from fabricflow.dynamics.scenarios import dumbbell
    sc = dumbbell(2)
    res = ff.simulate_cc(sc.fabric, sc.routes, cc="hpcc", duration=0.02)
    res.mean_rate()          # bytes/s per flow over the second half

A batch of parameter sets (:func:`~fabricflow.solve.parameters.stack_params`), of PFC
settings, or of capacities (``capacity=[B, L]``) runs under ``vmap`` with one
compilation; results then carry a leading ``[batch]`` axis.
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
import numpy as np

from fabricflow.errors import SpecError, check_flag
from fabricflow.fabric.fabric import Fabric
from fabricflow.routing.routes import Routes
from fabricflow.solve.cc.prepare import PreparedRun, prepare_cc
from fabricflow.solve.cc.result import CCResult
from fabricflow.solve.cc.run_cc import run_cc
from fabricflow.solve.pfc.params import PFCParams


def prepare_fabric_run(fabric, routes, *, capacity=None, **options) -> PreparedRun:
    """:func:`~fabricflow.solve.cc.prepare.prepare_cc` for ``routes`` on ``fabric``.

    ``capacity``: ``[L]`` or ``[B, L]`` bytes/s in place of the fabric's (``B`` what-if
    capacity scenarios in one vmapped run). Other options: those of :func:`simulate_cc`.
    """
    if not isinstance(fabric, Fabric):
        raise SpecError("fabric", f"expected a Fabric, got {type(fabric).__name__}")
    if not isinstance(routes, Routes):
        raise SpecError(
            "routes", f"expected Routes (fabricflow.route), got {type(routes).__name__}"
        )
    if routes.num_links != fabric.num_links:
        raise SpecError(
            "routes",
            f"were made for a fabric of {routes.num_links} links, not {fabric.name!r} "
            f"({fabric.num_links} links); route on this fabric",
        )
    if routes.coef is not None:
        raise SpecError(
            "routes",
            "congestion control needs single-path routes (coef is None); route each "
            "path of a multipath split as its own flow",
        )
    node_tier = np.asarray(fabric.node_tier)
    return prepare_cc(
        routes.links,
        fabric.capacity if capacity is None else capacity,
        routes.path_latency(fabric.latency),
        link_latency=fabric.latency,
        marking=node_tier[fabric.link_src] != 0,
        pfc_ingress=node_tier[fabric.link_dst] != 0,
        link_dst_node=fabric.link_dst,
        num_nodes=fabric.num_nodes,
        **options,
    )


def simulate_cc(
    fabric,
    routes,
    *,
    cc="dcqcn",
    size=None,
    start=None,
    params=None,
    overrides: dict | None = None,
    pfc="off",
    pfc_params: PFCParams | None = None,
    trim=None,
    capacity=None,
    initial_rate=None,
    duration: float = 0.01,
    dt: float = 1e-6,
    extra_delay: float = 4e-6,
    records: int = 500,
    dtype=jnp.float32,
    memory_budget: int | None = None,
    max_work: float | None = None,
    progress: Callable[[float, float], None] | None = None,
    throw: bool = True,
) -> CCResult:
    """Simulate congestion control ``cc`` (and PFC) for ``routes`` over ``fabric``.

    Args:
        fabric: :class:`~fabricflow.Fabric`. routes: :class:`~fabricflow.Routes` of it,
            single path per flow (``coef is None``; give each path of a split its own flow).
        cc: ``dcqcn`` (default), ``hpcc``, ``timely``, ``swift``, ``predictive``,
            ``nscc`` or ``rccc``
            (:data:`fabricflow.solve.cc.laws.CC_NAMES`), or a rate law instance.
        size: ``[F]`` bytes per flow (default ``inf``: long-lived). start: ``[F]`` s.
        params: a preset name of the law (DCQCN: ``paper``, ``connectx``; default the
            law's first) or its parameter set, possibly batched (``stack_params``).
        overrides: field -> value (unit strings allowed) applied to the preset.
        pfc: ``off``, ``static`` (also ``on``/True) or ``dynamic`` thresholds.
        pfc_params: :class:`~fabricflow.PFCParams` (default: XOFF 100 KB, hysteresis
            10 KB); fields may be ``[batch]`` arrays.
        trim: packet trimming at the switch egresses instead of losslessness: ``None``
            (off), bytes per egress queue, or ``[L]`` bytes; the excess payload is cut and
            re-sent (``result.retransmitted``, ``result.trimmed``). The Ultra Ethernet
            profile (``nscc``, ``rccc``) runs with trimming and ``pfc="off"``.
        capacity: ``[L]`` or ``[B, L]`` bytes/s replacing the fabric's capacities.
        initial_rate: ``[F]`` bytes/s starting rates (default: the law's, line rate for
            DCQCN and HPCC).
        duration, dt: simulated time and fixed step, s (``dt`` at most the law's stable
            step; 1 us, the default, resolves queue dynamics at 40-400 Gb/s).
        extra_delay: feedback delay added to each flow's one-way path latency, s.
        records: number of time samples kept.
        dtype: ``jnp.float32`` (default) or ``jnp.float64`` (needs x64 enabled).
        memory_budget: refuse (MemoryBudgetError) a run whose arrays need more bytes.
        max_work: refuse (SpecError) a run estimated above this many entry-steps
            (:data:`fabricflow.solve.cc.work.DEFAULT_MAX_WORK`, about an hour on 2 cores).
        progress: ``progress(fraction_done, elapsed_s)`` after each of ~20 chunks.
        throw: raise :class:`SolverError` for a non-finite run instead of returning it
            with ``status == SolverStatus.NONFINITE``.

    Returns:
        :class:`~fabricflow.solve.cc.result.CCResult`.
    """
    if not isinstance(fabric, Fabric):
        raise SpecError("fabric", f"expected a Fabric, got {type(fabric).__name__}")
    throw = check_flag(throw, "throw")  # before the (costly) preparation
    prepared = prepare_fabric_run(
        fabric,
        routes,
        capacity=capacity,
        cc=cc,
        size=size,
        start=start,
        params=params,
        overrides=overrides,
        pfc=pfc,
        pfc_params=pfc_params,
        trim=trim,
        initial_rate=initial_rate,
        duration=duration,
        dt=dt,
        extra_delay=extra_delay,
        records=records,
        dtype=dtype,
        memory_budget=memory_budget,
        max_work=max_work,
    )
    return run_cc(prepared, throw=throw, progress=progress)


__all__ = ["prepare_fabric_run", "simulate_cc"]
