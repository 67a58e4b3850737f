"""``simulate_dcqcn``: DCQCN congestion control over PFC on any fabric and routes.

The host side (this module) validates inputs, turns a :class:`Fabric` + :class:`Routes`
into padded arrays (sentinel link id ``L``), estimates memory and work, runs the jitted
kernel (:mod:`.kernel`) and wraps the result. Example::

    import fabricflow as ff
    from fabricflow.study.cc_scenarios import dumbbell
    sc = dumbbell(2)
    res = ff.simulate_dcqcn(sc.fabric, sc.routes, params="paper", duration=0.02)
    res.mean_rate()          # bytes/s per flow over the second half

A batch of parameter sets (:func:`~fabricflow.solve.dcqcn.params.stack_params`) runs
under ``vmap`` with one compilation; results then carry a leading ``[batch]`` axis.

The array API is split like an allocate/update pair: :func:`prepare_dcqcn` (host side:
checks, shapes, memory and work estimates; cannot be jitted) returns a
:class:`PreparedRun`, and :func:`run_dcqcn` runs it (jitted, fixed shapes), in chunks with
progress reports when asked.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import time
import warnings
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from ...errors import SolverError, SpecError
from ...memory import check_memory
from ..maxmin.inputs import check_flag
from ..status import Status
from . import kernel
from .params import DCQCNParams, PFCParams
from .result import DCQCNResult

# Work of a run, in entry-steps: (route entries F x H + links + a fixed per-step cost)
# x steps x batch. Calibrated on the bench (``fabricflow bench dcqcn``): 100k flows x
# 4 hops x 10k steps ~ 50 s on 2 CPU cores, i.e. ~12.5 ns per entry-step.
SECONDS_PER_ENTRY_STEP = 12.5e-9
# Fixed cost of one step in entry-steps (the scan's loop overhead and the small per-step
# ops): ~10 us per step for a 2-flow dumbbell on the same machine.
STEP_OVERHEAD_ENTRIES = 800
# Runs estimated above this many entry-steps (~1 hour on 2 cores) are refused unless
# ``max_work`` is raised: they are almost always a unit slip (a 1 ps step, 1000 s).
DEFAULT_MAX_WORK = 3e11
# The step counter is int32 inside the kernel.
MAX_STEPS = 2**31 - 1


def simulate_dcqcn(
    fabric,
    routes,
    *,
    size=None,
    start=None,
    params="paper",
    overrides: dict | None = None,
    pfc="off",
    pfc_params: PFCParams | None = None,
    duration: float = 0.01,
    dt: float = 1e-6,
    extra_delay: float = 4e-6,
    records: int = 500,
    dtype=jnp.float32,
    memory_budget: int | None = None,
    max_work: float | None = None,
    progress: Callable[[float, float], None] | None = None,
    throw: bool = True,
) -> DCQCNResult:
    """Simulate DCQCN (and PFC) for ``routes`` over ``fabric``.

    Links leaving a switch (``node_tier[src] != 0``) mark ECN; links arriving at a switch
    have a PFC ingress buffer whose XOFF pauses them. Host NICs neither mark nor pause.
    The CNP feedback delay of a flow is its one-way path latency plus ``extra_delay``.
    Stable steps: ``dt <= params.max_stable_dt()`` (25 us paper, 2 us ConnectX); 1 us
    (default) resolves queue dynamics at 40-400 Gb/s.

    Args:
        fabric: :class:`~fabricflow.fabric.fabric.Fabric` (capacity, latency, node_tier).
        routes: :class:`~fabricflow.routing.routes.Routes`, single path per flow
            (``coef is None``; give each path of a split its own flow).
        size: ``[F]`` bytes per flow (default ``inf``: long-lived).
        start: ``[F]`` start times, s (default 0).
        params: a preset name (``paper``, ``connectx``) or :class:`DCQCNParams`, possibly
            batched (:func:`stack_params`) to vmap over parameter sets.
        overrides: field -> value (unit strings allowed) applied to the preset.
        pfc: ``off``, ``static`` (also ``on``/True) or ``dynamic`` thresholds.
        pfc_params: :class:`PFCParams` (default thresholds: XOFF 100 KB, hysteresis 10 KB);
            fields may be ``[batch]`` arrays to sweep PFC settings (alone or alongside a
            DCQCN batch of the same length) in the same vmapped run.
        duration, dt: simulated time and fixed step, s. ``dt`` must not exceed
            ``params.max_stable_dt()``.
        extra_delay: CNP feedback delay added to each flow's path latency, s.
        records: number of time samples kept (decimation: every ``steps // records`` steps).
        dtype: ``jnp.float32`` (default) or ``jnp.float64`` (needs x64 enabled).
        memory_budget: bytes or a size (``"6GiB"``); refuse (MemoryBudgetError) a run
            whose arrays need more.
            Default: the shared policy of :func:`fabricflow.memory.memory_budget`
            (``$FABRICFLOW_MEMORY_BUDGET`` or 75 % of the memory limit).
        max_work: refuse (SpecError) a run estimated at more entry-steps than this
            (default :data:`DEFAULT_MAX_WORK`, about an hour on 2 CPU cores; ``math.inf``
            allows anything). See :func:`estimate_work`.
        progress: ``progress(fraction_done, elapsed_s)``, called after each chunk of the
            run (the run is then cut into about 20 chunks; the results are the same).
        throw: raise :class:`SolverError` for a non-finite run instead of returning it
            with ``status == Status.NONFINITE``.

    Returns:
        :class:`~fabricflow.solve.dcqcn.result.DCQCNResult`.
    """
    from ...fabric.fabric import Fabric
    from ...routing.routes import Routes

    if not isinstance(fabric, Fabric):
        raise SpecError("fabric", f"expected a Fabric, got {type(fabric).__name__}")
    throw = check_flag(throw, "throw")  # before the (costly) preparation
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
            "DCQCN needs single-path routes (coef is None); route each "
            "path of a multipath split as its own flow",
        )
    node_tier = np.asarray(fabric.node_tier)
    marking = node_tier[fabric.link_src] != 0
    pfc_ingress = node_tier[fabric.link_dst] != 0
    path_latency = routes.path_latency(fabric.latency)
    prepared = prepare_dcqcn(
        routes.links,
        fabric.capacity,
        path_latency,
        size=size,
        start=start,
        params=params,
        overrides=overrides,
        marking=marking,
        pfc_ingress=pfc_ingress,
        link_dst_node=fabric.link_dst,
        num_nodes=fabric.num_nodes,
        pfc=pfc,
        pfc_params=pfc_params,
        duration=duration,
        dt=dt,
        extra_delay=extra_delay,
        records=records,
        dtype=dtype,
        memory_budget=memory_budget,
        max_work=max_work,
    )
    return run_dcqcn(prepared, throw=throw, progress=progress)


def simulate_dcqcn_arrays(
    links,
    capacity,
    path_latency,
    *,
    throw: bool = True,
    progress: Callable[[float, float], None] | None = None,
    prepare_only: bool = False,
    **options,
) -> DCQCNResult | PreparedRun:
    """Deprecated: ``run_dcqcn(prepare_dcqcn(links, capacity, path_latency, **options))``.

    ``prepare_only=True`` (its old spelling of the prepare/run split) returns
    ``prepare_dcqcn(links, capacity, path_latency, **options)``, a :class:`PreparedRun`
    not yet run.
    """
    warnings.warn(
        "simulate_dcqcn_arrays is deprecated; use prepare_dcqcn + run_dcqcn",
        DeprecationWarning,
        stacklevel=2,
    )
    if prepare_only:
        return prepare_dcqcn(links, capacity, path_latency, **options)
    return run_dcqcn(
        prepare_dcqcn(links, capacity, path_latency, **options), throw=throw, progress=progress
    )


def prepare_dcqcn(
    links,
    capacity,
    path_latency,
    *,
    size=None,
    start=None,
    params="paper",
    overrides: dict | None = None,
    marking=None,
    pfc_ingress=None,
    link_dst_node=None,
    num_nodes: int | None = None,
    line_rate=None,
    pfc="off",
    pfc_params: PFCParams | None = None,
    duration: float = 0.01,
    dt: float = 1e-6,
    extra_delay: float = 4e-6,
    records: int = 500,
    dtype=jnp.float32,
    memory_budget: int | None = None,
    max_work: float | None = None,
) -> PreparedRun:
    """Check and lay out a DCQCN run on plain arrays (host side; nothing runs yet).

    Every input error, and a run too large for memory (:class:`MemoryBudgetError`) or
    absurdly long (:class:`SpecError` on ``duration``, with the estimated work and time),
    is refused here. Run the result with :func:`run_dcqcn`.

    Args:
        links: int ``[F, H]`` link ids, -1 padded (padding at the end of a row).
        capacity: ``[L]`` bytes/s. path_latency: ``[F]`` s (one way).
        marking: bool ``[L]`` links whose egress marks ECN (default all).
        pfc_ingress: bool ``[L]`` links whose receiving end has a PFC ingress buffer
            (default all). link_dst_node / num_nodes: for dynamic thresholds (default:
            every link its own node).
        line_rate: ``[F]`` bytes/s cap of each flow (default: capacity of its first hop).
        Other arguments: see :func:`simulate_dcqcn`.

    Returns:
        :class:`PreparedRun`.
    """
    links = np.asarray(links)
    if links.ndim != 2 or links.shape[0] == 0 or links.shape[1] == 0:
        raise SpecError("links", f"must be a non-empty int array [F, H], got shape {links.shape}")
    capacity = np.asarray(capacity, dtype=np.float64)
    num_links = capacity.shape[0]
    num_flows, hops = links.shape
    if np.any(links >= num_links) or np.any(links < -1):
        raise SpecError("links", f"link ids must lie in -1..{num_links - 1}")
    valid = links >= 0
    if not np.all(valid[:, 0]):
        raise SpecError("links", "every flow needs at least one hop (row starting with -1)")
    if np.any(valid[:, 1:] & ~valid[:, :-1]):
        raise SpecError("links", "padding (-1) must come at the end of each row")
    if not np.all(np.isfinite(capacity)) or np.any(capacity[np.unique(links[valid])] <= 0):
        raise SpecError("capacity", "links used by flows need finite capacity > 0 bytes/s")
    params = _resolve_params(params, overrides)
    pfc_mode = _resolve_pfc(pfc)
    pfc_params = PFCParams() if pfc_params is None else pfc_params
    pfc_params.validate()
    duration = _positive(duration, "duration")
    dt = _positive(dt, "dt")
    if isinstance(extra_delay, bool) or not isinstance(extra_delay, numbers.Real):
        raise SpecError("extra_delay", f"must be a number of seconds, got {extra_delay!r}")
    extra_delay = float(extra_delay)
    if jnp.dtype(dtype) not in (jnp.float32, jnp.float64):
        raise SpecError("dtype", f"must be float32 or float64, got {dtype!r}")
    if not math.isfinite(extra_delay) or extra_delay < 0:
        raise SpecError("extra_delay", f"must be finite and >= 0 s, got {extra_delay}")
    stable = params.max_stable_dt()
    if dt > stable:
        raise SpecError(
            "dt",
            f"{dt:.3g} s exceeds the stable step {stable:.3g} s for these "
            "parameters (min(tau, 2T, 2 tau'/g) / 2); use a smaller dt",
        )
    if not math.isfinite(duration / dt):
        raise SpecError(
            "dt",
            f"{dt:.3g} s is too small for a {duration:.3g} s run (the step "
            "count overflows); use a larger dt",
        )
    steps = int(round(duration / dt))
    if steps < 2:
        raise SpecError(
            "duration",
            f"{duration:.3g} s is less than 2 steps of dt = {dt:.3g} s; "
            "simulate longer or use a smaller dt",
        )
    if isinstance(records, bool) or not isinstance(records, (int, np.integer)) or records < 2:
        raise SpecError("records", f"must be an integer >= 2, got {records!r}")
    steps_per_record = max(1, steps // records)
    num_records = max(2, steps // steps_per_record)

    size = np.full(num_flows, np.inf) if size is None else _per_flow(size, "size", num_flows)
    start = np.zeros(num_flows) if start is None else _per_flow(start, "start", num_flows)
    if np.any(np.isnan(size)) or np.any(size <= 0):
        raise SpecError("size", "flow sizes must be > 0 bytes (inf for long-lived flows)")
    if not np.all(np.isfinite(start)) or np.any(start < 0):
        raise SpecError("start", "start times must be finite and >= 0 s")
    path_latency = np.broadcast_to(np.asarray(path_latency, dtype=np.float64), (num_flows,))
    if not np.all(np.isfinite(path_latency)) or np.any(path_latency < 0):
        raise SpecError("path_latency", "must be finite and >= 0 s")
    delay = path_latency + extra_delay
    # A feedback delay beyond the end of the run reads only the initial ring values, as a
    # delay of steps + 1 does: the cap changes no result, and keeps the ring (and int32)
    # bounded when the delay is far longer than the run (or dt is tiny).
    delay_steps = np.clip(np.round(delay / dt), 1, min(steps + 1, MAX_STEPS)).astype(np.int32)
    ring_slots = 1 << int(np.ceil(np.log2(int(delay_steps.max()) + 1)))

    marking = np.ones(num_links, bool) if marking is None else np.asarray(marking, bool)
    pfc_ingress = np.ones(num_links, bool) if pfc_ingress is None else np.asarray(pfc_ingress, bool)
    if link_dst_node is None:
        link_dst_node, num_nodes = np.arange(num_links), num_links
    link_dst_node = np.asarray(link_dst_node, dtype=np.int32)
    first_hop = links[:, 0]
    line_rate = (
        capacity[first_hop]
        if line_rate is None
        else np.broadcast_to(np.asarray(line_rate, dtype=np.float64), (num_flows,))
    )
    slowest = float(np.min(line_rate))
    if float(np.max(params.min_rate)) > slowest:
        raise SpecError(
            "params.min_rate",
            f"{float(np.max(params.min_rate)):.4g} B/s exceeds the "
            f"line rate {slowest:.4g} B/s ({slowest * 8 / 1e9:.4g} Gb/s) of the slowest "
            "flow; DCQCN could never slow down (use a min_rate below the line rate)",
        )

    batch = _batch_size(params)
    pfc_batch = _batch_size(pfc_params, "pfc_params")
    if batch and pfc_batch and batch != pfc_batch:
        raise SpecError(
            "pfc_params",
            f"batch of {pfc_batch} PFC settings does not match the "
            f"batch of {batch} DCQCN parameter sets",
        )
    batch = max(batch, pfc_batch)
    itemsize = np.dtype(jnp.dtype(dtype)).itemsize
    estimate = (
        max(batch, 1)
        * itemsize
        * (
            num_records * (2 * num_flows + 2 * num_links)
            + ring_slots * (num_flows + num_links + 1)
            + 6 * num_flows * hops
            + 14 * num_flows
        )
    )
    # work first: an absurd step count is the cause, the memory of its ring a consequence
    _check_work(estimate_work(num_flows, hops, num_links, steps, batch), steps, max_work)
    check_memory(
        estimate,
        f"DCQCN run ({max(batch, 1)} batch x {num_records} records x "
        f"({num_flows} flows + {num_links} links), ring {ring_slots} slots)",
        hint="use fewer records, flows or batch entries",
        budget=memory_budget,
        field="memory_budget",
    )
    if steps > MAX_STEPS:
        raise SpecError(
            "duration",
            f"{duration:.3g} s at dt = {dt:.3g} s is {steps:.3g} steps; "
            f"at most {MAX_STEPS} steps per run: shorten the run or raise dt",
        )

    prev_links = np.full_like(links, -1)
    prev_links[:, 1:] = np.where(valid[:, 1:], links[:, :-1], -1)
    sentinel = num_links
    problem = kernel.Problem(
        links=jnp.asarray(np.where(valid, links, sentinel), jnp.int32),
        prev_links=jnp.asarray(np.where(prev_links >= 0, prev_links, sentinel), jnp.int32),
        last_hop=jnp.asarray(valid.sum(axis=1) - 1, jnp.int32),
        capacity=jnp.asarray(np.append(capacity, np.inf)),
        marking=jnp.asarray(np.append(marking, False)),
        pfc_ingress=jnp.asarray(np.append(pfc_ingress, False)),
        scatter_links=jnp.asarray(_spread(links, num_links), jnp.int32),
        scatter_prev=jnp.asarray(_spread(prev_links, num_links), jnp.int32),
        link_dst_node=jnp.asarray(np.append(link_dst_node, 0), jnp.int32),
        line_rate=jnp.asarray(line_rate),
        size=jnp.asarray(size),
        start=jnp.asarray(start),
        delay_steps=jnp.asarray(delay_steps, jnp.int32),
    )
    config = kernel.Config(
        dt=dt,
        steps_per_record=steps_per_record,
        num_records=num_records,
        ring_slots=ring_slots,
        pfc_mode=pfc_mode,
        num_nodes=int(num_nodes or num_links),
    )
    prepared = PreparedRun(
        problem=problem,
        params_arrays=_as_arrays(params, batch),
        pfc_arrays=_as_arrays(pfc_params, batch),
        config=config,
        dtype=dtype,
        batched=bool(batch),
        links=links,
        prev_links=prev_links,
        capacity=capacity,
        size=size,
        start=start,
        delay=delay,
        params=params,
        pfc_params=pfc_params,
    )
    return prepared


@dataclasses.dataclass(frozen=True, eq=False)
class PreparedRun:
    """Validated device arrays and static configuration of one run (or one batch).

    ``kernel_args`` are the arguments of :func:`fabricflow.solve.dcqcn.kernel.run` (or
    ``run_batch`` when ``batched``); benchmarks use them to time compilation apart.
    ``work`` is the estimated work in entry-steps and ``estimated_s`` the matching
    run time on 2 CPU cores (see :func:`estimate_work`).
    """

    problem: kernel.Problem
    params_arrays: DCQCNParams
    pfc_arrays: PFCParams
    config: kernel.Config
    dtype: object
    batched: bool
    links: np.ndarray
    prev_links: np.ndarray
    capacity: np.ndarray
    size: np.ndarray
    start: np.ndarray
    delay: np.ndarray
    params: DCQCNParams
    pfc_params: PFCParams

    @property
    def work(self) -> float:
        config = self.config
        steps = config.num_records * config.steps_per_record
        batch = int(np.asarray(self.params_arrays.tau).shape[0]) if self.batched else 0
        return estimate_work(
            self.links.shape[0], self.links.shape[1], self.capacity.shape[0], steps, batch
        )

    @property
    def estimated_s(self) -> float:
        return self.work * SECONDS_PER_ENTRY_STEP

    @property
    def kernel(self):
        return kernel.run_batch if self.batched else kernel.run

    @property
    def kernel_args(self) -> tuple:
        return (self.problem, self.params_arrays, self.pfc_arrays, self.config, self.dtype)


def run_dcqcn(
    prepared: PreparedRun,
    *,
    throw: bool = True,
    outputs=None,
    progress: Callable[[float, float], None] | None = None,
    chunks: int = 20,
) -> DCQCNResult:
    """Run a :class:`PreparedRun` (or wrap kernel ``outputs`` already computed).

    Args:
        prepared: from :func:`prepare_dcqcn`.
        throw: raise :class:`SolverError` when the run went non-finite; with ``False`` the
            result carries ``status == Status.NONFINITE`` (per batch entry).
        outputs: ``(final state, records)`` of ``prepared.kernel`` (benchmarks compile
            and run the kernel themselves).
        progress: ``progress(fraction_done, elapsed_s)`` after each chunk; the run is
            then cut into ``chunks`` pieces of equal static length (one compilation).
        chunks: number of pieces with ``progress`` (ignored without it).

    Returns:
        :class:`~fabricflow.solve.dcqcn.result.DCQCNResult`.
    """
    throw = check_flag(throw, "throw")
    if outputs is not None:
        final, recs = outputs
    elif progress is None:
        final, recs = prepared.kernel(*prepared.kernel_args)
    else:
        final, recs = _run_chunked(prepared, progress, chunks)
    nonfinite = np.asarray(final.nonfinite)
    codes = np.where(nonfinite, Status.NONFINITE, Status.CONVERGED).astype(np.int32)
    if throw and np.any(nonfinite):
        raise SolverError(
            f"DCQCN run: {Status.NONFINITE.message} (status NONFINITE: "
            "non-finite rates or queues); reduce dt or check the parameters"
        )
    config = prepared.config
    times = (np.arange(1, config.num_records + 1) * config.steps_per_record) * config.dt
    return DCQCNResult(
        time=times,
        rate=np.asarray(recs.rate),
        delivered=np.asarray(recs.delivered),
        queue=np.asarray(recs.queue),
        paused=np.asarray(recs.paused),
        pause_time=np.asarray(final.pause_time)[..., :-1],
        flow_pause_time=np.asarray(final.flow_pause_time),
        finish_time=np.asarray(final.finish, dtype=np.float64),
        alpha=np.asarray(final.alpha),
        target_rate=np.asarray(final.rt),
        status=Status(int(codes)) if codes.ndim == 0 else codes,
        links=prepared.links,
        prev_links=prepared.prev_links,
        capacity=prepared.capacity,
        size=prepared.size,
        start=prepared.start,
        delay=prepared.delay,
        dt=config.dt,
        duration=float(times[-1]),
        params=prepared.params,
        pfc_params=prepared.pfc_params,
        pfc_mode=config.pfc_mode,
    )


def estimate_work(num_flows: int, hops: int, num_links: int, steps: int, batch: int = 0) -> float:
    """Work of a run in entry-steps: ``(F H + L + overhead) x steps x max(batch, 1)``.

    Multiply by :data:`SECONDS_PER_ENTRY_STEP` for seconds on 2 CPU cores.
    """
    return float(num_flows * hops + num_links + STEP_OVERHEAD_ENTRIES) * steps * max(batch, 1)


def _check_work(work: float, steps: int, max_work: float | None) -> None:
    if max_work is not None and (
        isinstance(max_work, bool)
        or not isinstance(max_work, numbers.Real)
        or math.isnan(max_work)
        or max_work <= 0
    ):
        raise SpecError(
            "max_work",
            f"must be a number > 0 of entry-steps (math.inf: no limit), got {max_work!r}",
        )
    limit = DEFAULT_MAX_WORK if max_work is None else float(max_work)
    if work > limit:
        seconds = work * SECONDS_PER_ENTRY_STEP
        raise SpecError(
            "duration",
            f"the run is estimated at {work:.3g} entry-steps ({steps:.3g} "
            f"steps), about {_human_time(seconds)} on 2 CPU cores, over the limit of "
            f"{limit:.3g} (max_work): shorten the duration, raise dt, simulate fewer "
            "flows or batch entries, or pass a larger max_work to run it anyway",
        )


def _human_time(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.3g} days"


def _run_chunked(prepared: PreparedRun, progress, chunks: int):
    """The kernel run cut into ``chunks`` equal pieces, calling ``progress`` after each."""
    config = prepared.config
    if isinstance(chunks, bool) or not isinstance(chunks, (int, np.integer)) or chunks < 1:
        raise SpecError("chunks", f"must be an integer >= 1, got {chunks!r}")
    chunk = -(-config.num_records // min(int(chunks), config.num_records))
    problem, params, pfc_params, _, dtype = prepared.kernel_args
    begin, advance = (
        (kernel.start_batch, kernel.advance_batch)
        if prepared.batched
        else (kernel.start, kernel.advance)
    )
    record_axis = 1 if prepared.batched else 0
    clock = time.perf_counter()
    state = begin(problem, params, pfc_params, config, dtype)
    pieces = []
    for first in range(0, config.num_records, chunk):
        state, recs = advance(
            state, jnp.int32(first), problem, params, pfc_params, config, dtype, chunk
        )
        pieces.append(jax.device_get(recs))
        done = min(first + chunk, config.num_records) / config.num_records
        progress(done, time.perf_counter() - clock)
    recs = jax.tree_util.tree_map(
        lambda *parts: np.concatenate(parts, axis=record_axis).take(
            np.arange(config.num_records), axis=record_axis
        ),
        *pieces,
    )
    return state, recs


def _spread(ids: np.ndarray, num_links: int) -> np.ndarray:
    """``[F, H]`` link ids with -1 entries sent to extra segments ``L + 1 + (f mod PAD)``."""
    rows = np.arange(ids.shape[0])[:, None] % kernel.PAD_SEGMENTS
    return np.where(ids >= 0, ids, num_links + 1 + rows)


def _resolve_params(params, overrides) -> DCQCNParams:
    if overrides is not None and (
        not isinstance(overrides, Mapping) or not all(isinstance(k, str) for k in overrides)
    ):
        raise SpecError(
            "overrides",
            f"must be a mapping of DCQCN field names to values (e.g. {{'kmax': '400KB'}}), "
            f"got {overrides!r}",
        )
    if isinstance(params, str):
        return DCQCNParams.preset(params, **(overrides or {}))
    if not isinstance(params, DCQCNParams):
        raise SpecError(
            "params", f"expected a preset name or DCQCNParams, got {type(params).__name__}"
        )
    params = params.replace(**overrides) if overrides else params
    params.validate()
    return params


def _resolve_pfc(pfc) -> str:
    if pfc is True or pfc == "on":
        return "static"
    if pfc is False or pfc is None:
        return "off"
    if pfc not in kernel.PFC_MODES:
        raise SpecError("pfc", f"unknown PFC mode {pfc!r}; choose on, off, static or dynamic")
    return pfc


def _per_flow(values, field: str, num_flows: int) -> np.ndarray:
    """float64 ``[F]`` from a scalar or ``[F]`` numbers (SpecError naming ``field``)."""
    try:
        array = np.asarray(values)
        if array.dtype == bool or not (
            np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)
        ):
            raise TypeError(f"dtype {array.dtype}")
        return np.broadcast_to(array.astype(np.float64), (num_flows,)).copy()
    except (TypeError, ValueError) as error:
        raise SpecError(
            field, f"must be a number or {num_flows} numbers (one per flow), got {error}"
        ) from None


def _positive(value, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise SpecError(field, f"must be a number of seconds, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise SpecError(field, f"must be finite and > 0 s, got {value}")
    return value


def _batch_size(params, field: str = "params") -> int:
    """Length of the batch axis of a parameter dataclass (0 when every field is scalar)."""
    shapes = {np.shape(getattr(params, f.name)) for f in dataclasses.fields(params)}
    if shapes == {()}:
        return 0
    lengths = {shape[0] for shape in shapes if shape}
    if len(lengths) != 1 or any(len(shape) > 1 for shape in shapes):
        raise SpecError(field, f"batched parameters need 1-d fields of one length, got {shapes}")
    return lengths.pop()


def _as_arrays(params, batch: int):
    """Same dataclass with numpy leaves, every field broadcast to ``[batch]`` if batch > 0."""
    values = {}
    for f in dataclasses.fields(params):
        value = np.asarray(getattr(params, f.name), dtype=np.float64)
        values[f.name] = np.broadcast_to(value, (batch,)).copy() if batch else value
    return type(params)(**values)
