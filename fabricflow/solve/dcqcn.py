"""``simulate_dcqcn``: DCQCN congestion control over PFC on any fabric and routes.

The host side (this module) validates inputs, turns a :class:`Fabric` + :class:`Routes`
into padded arrays (sentinel link id ``L``), estimates memory, runs the jitted kernel
(:mod:`.dcqcn_kernel`) and wraps the result. Example::

    import fabricflow as ff
    from fabricflow.cc_scenarios import dumbbell
    sc = dumbbell(2)
    res = ff.simulate_dcqcn(sc.fabric, sc.routes, params="paper", duration=0.02)
    res.mean_rate()          # bytes/s per flow over the second half

A batch of parameter sets (:func:`~fabricflow.solve.dcqcn_params.stack_params`) runs
under ``vmap`` with one compilation; results then carry a leading ``[batch]`` axis.
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

from ..errors import MemoryBudgetError, SolverError, SpecError
from . import dcqcn_kernel as kernel
from .dcqcn_params import DCQCNParams, PFCParams

DEFAULT_MEMORY_BUDGET = 4 * 2**30


@dataclasses.dataclass(frozen=True, eq=False)
class DCQCNResult:
    """Outcome of a DCQCN run. Arrays are numpy; a parameter batch adds a leading axis.

    Attributes:
        time: ``[R]`` s, time of each record.
        rate: ``[R, F]`` DCQCN current rate R_C, bytes/s.
        delivered: ``[R, F]`` cumulative delivered bytes.
        queue: ``[R, L]`` egress queue per link, bytes.
        paused: ``[R, L]`` bool, PFC pause state of each link (its egress stopped).
        pause_time: ``[L]`` s each link spent paused (exact, every step).
        flow_pause_time: ``[F]`` s each flow spent with a paused link on its path.
        finish_time: ``[F]`` s completion time (``inf``: not finished).
        alpha, target_rate: ``[F]`` final alpha and R_T.
        status: ``ok`` or ``nonfinite``.
        links, capacity, size, start, delay: the problem (``[F, H]`` -1 padded, ``[L]``
            bytes/s, ``[F]`` bytes, ``[F]`` s, ``[F]`` s feedback delay).
        prev_links: ``[F, H]`` ingress link of each hop (-1 for hop 0).
        dt, duration: s. params, pfc_params, pfc_mode: what ran.
    """

    time: np.ndarray
    rate: np.ndarray
    delivered: np.ndarray
    queue: np.ndarray
    paused: np.ndarray
    pause_time: np.ndarray
    flow_pause_time: np.ndarray
    finish_time: np.ndarray
    alpha: np.ndarray
    target_rate: np.ndarray
    status: str | np.ndarray
    links: np.ndarray
    prev_links: np.ndarray
    capacity: np.ndarray
    size: np.ndarray
    start: np.ndarray
    delay: np.ndarray
    dt: float
    duration: float
    params: DCQCNParams
    pfc_params: PFCParams
    pfc_mode: str

    @property
    def num_flows(self) -> int:
        return int(self.links.shape[0])

    @property
    def num_links(self) -> int:
        return int(self.capacity.shape[0])

    def mean_rate(self, since: float | None = None) -> np.ndarray:
        """Time-averaged delivered throughput per flow (bytes/s) from ``since`` (default:
        half the duration) to the end, from the cumulative delivered bytes (exact)."""
        since = self.duration / 2 if since is None else since
        index = int(np.searchsorted(self.time, since, side="left"))
        index = min(index, self.time.shape[0] - 1)
        if index == self.time.shape[0] - 1:
            raise SpecError("since", f"must be earlier than the last record {self.time[-1]:.3g} s")
        delivered = self.delivered.astype(np.float64)
        span = self.time[-1] - self.time[index]
        return (delivered[..., -1, :] - delivered[..., index, :]) / span


def simulate_dcqcn(fabric, routes, *, size=None, start=None, params="paper",
                   overrides: dict | None = None, pfc="off", pfc_params: PFCParams | None = None,
                   duration: float = 0.01, dt: float = 1e-6, extra_delay: float = 4e-6,
                   records: int = 500, dtype=jnp.float32,
                   memory_budget: int = DEFAULT_MEMORY_BUDGET, throw: bool = True) -> DCQCNResult:
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
        memory_budget: refuse (MemoryBudgetError) to allocate more than this many bytes.
        throw: raise :class:`SolverError` for a non-finite run instead of returning it.

    Returns:
        :class:`DCQCNResult`.
    """
    if routes.coef is not None:
        raise SpecError("routes", "DCQCN needs single-path routes (coef is None); route each "
                        "path of a multipath split as its own flow")
    node_tier = np.asarray(fabric.node_tier)
    marking = node_tier[fabric.link_src] != 0
    pfc_ingress = node_tier[fabric.link_dst] != 0
    path_latency = routes.path_latency(fabric.latency)
    return simulate_dcqcn_arrays(
        routes.links, fabric.capacity, path_latency, size=size, start=start, params=params,
        overrides=overrides, marking=marking, pfc_ingress=pfc_ingress,
        link_dst_node=fabric.link_dst, num_nodes=fabric.num_nodes, pfc=pfc,
        pfc_params=pfc_params, duration=duration, dt=dt, extra_delay=extra_delay,
        records=records, dtype=dtype, memory_budget=memory_budget, throw=throw)


def simulate_dcqcn_arrays(links, capacity, path_latency, *, size=None, start=None,
                          params="paper", overrides: dict | None = None, marking=None,
                          pfc_ingress=None, link_dst_node=None, num_nodes: int | None = None,
                          line_rate=None, pfc="off", pfc_params: PFCParams | None = None,
                          duration: float = 0.01, dt: float = 1e-6, extra_delay: float = 4e-6,
                          records: int = 500, dtype=jnp.float32,
                          memory_budget: int = DEFAULT_MEMORY_BUDGET,
                          throw: bool = True, prepare_only: bool = False):
    """:func:`simulate_dcqcn` on plain arrays.

    Args:
        links: int ``[F, H]`` link ids, -1 padded (padding at the end of a row).
        capacity: ``[L]`` bytes/s. path_latency: ``[F]`` s (one way).
        marking: bool ``[L]`` links whose egress marks ECN (default all).
        pfc_ingress: bool ``[L]`` links whose receiving end has a PFC ingress buffer
            (default all). link_dst_node / num_nodes: for dynamic thresholds (default:
            every link its own node).
        line_rate: ``[F]`` bytes/s cap of each flow (default: capacity of its first hop).
        prepare_only: return the validated :class:`PreparedRun` without running it.
        Other arguments: see :func:`simulate_dcqcn`.
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
    extra_delay = float(extra_delay)
    if not math.isfinite(extra_delay) or extra_delay < 0:
        raise SpecError("extra_delay", f"must be finite and >= 0 s, got {extra_delay}")
    stable = params.max_stable_dt()
    if dt > stable:
        raise SpecError("dt", f"{dt:.3g} s exceeds the stable step {stable:.3g} s for these "
                        "parameters (min(tau, 2T, 2 tau'/g) / 2); use a smaller dt")
    steps = int(round(duration / dt))
    if steps < 2:
        raise SpecError("duration", f"{duration:.3g} s is less than 2 steps of dt = {dt:.3g} s; "
                        "simulate longer or use a smaller dt")
    if records < 2:
        raise SpecError("records", "need at least 2 records")
    steps_per_record = max(1, steps // records)
    num_records = max(2, steps // steps_per_record)

    size = np.full(num_flows, np.inf) if size is None else np.broadcast_to(
        np.asarray(size, dtype=np.float64), (num_flows,)).copy()
    start = np.zeros(num_flows) if start is None else np.broadcast_to(
        np.asarray(start, dtype=np.float64), (num_flows,)).copy()
    if np.any(np.isnan(size)) or np.any(size <= 0):
        raise SpecError("size", "flow sizes must be > 0 bytes (inf for long-lived flows)")
    if not np.all(np.isfinite(start)) or np.any(start < 0):
        raise SpecError("start", "start times must be finite and >= 0 s")
    path_latency = np.broadcast_to(np.asarray(path_latency, dtype=np.float64), (num_flows,))
    if not np.all(np.isfinite(path_latency)) or np.any(path_latency < 0):
        raise SpecError("path_latency", "must be finite and >= 0 s")
    delay = path_latency + extra_delay
    delay_steps = np.maximum(1, np.round(delay / dt)).astype(np.int32)
    ring_slots = 1 << int(np.ceil(np.log2(int(delay_steps.max()) + 1)))

    marking = np.ones(num_links, bool) if marking is None else np.asarray(marking, bool)
    pfc_ingress = np.ones(num_links, bool) if pfc_ingress is None else np.asarray(pfc_ingress, bool)
    if link_dst_node is None:
        link_dst_node, num_nodes = np.arange(num_links), num_links
    link_dst_node = np.asarray(link_dst_node, dtype=np.int32)
    first_hop = links[:, 0]
    line_rate = capacity[first_hop] if line_rate is None else np.broadcast_to(
        np.asarray(line_rate, dtype=np.float64), (num_flows,))
    slowest = float(np.min(line_rate))
    if float(np.max(params.min_rate)) > slowest:
        raise SpecError("params.min_rate", f"{float(np.max(params.min_rate)):.4g} B/s exceeds the "
                        f"line rate {slowest:.4g} B/s ({slowest * 8 / 1e9:.4g} Gb/s) of the slowest "
                        "flow; DCQCN could never slow down (use a min_rate below the line rate)")

    batch = _batch_size(params)
    pfc_batch = _batch_size(pfc_params, "pfc_params")
    if batch and pfc_batch and batch != pfc_batch:
        raise SpecError("pfc_params", f"batch of {pfc_batch} PFC settings does not match the "
                        f"batch of {batch} DCQCN parameter sets")
    batch = max(batch, pfc_batch)
    itemsize = np.dtype(jnp.dtype(dtype)).itemsize
    estimate = max(batch, 1) * itemsize * (
        num_records * (2 * num_flows + 2 * num_links)
        + ring_slots * (num_flows + num_links + 1) + 6 * num_flows * hops + 14 * num_flows)
    if estimate > memory_budget:
        raise MemoryBudgetError(
            f"DCQCN run needs about {estimate / 2**30:.2f} GiB ({max(batch, 1)} batch x {num_records} "
            f"records x ({num_flows} flows + {num_links} links), ring {ring_slots} slots); budget "
            f"{memory_budget / 2**30:.2f} GiB: use fewer records, flows or batch entries")

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
        line_rate=jnp.asarray(line_rate), size=jnp.asarray(size), start=jnp.asarray(start),
        delay_steps=jnp.asarray(delay_steps, jnp.int32))
    config = kernel.Config(dt=dt, steps_per_record=steps_per_record, num_records=num_records,
                           ring_slots=ring_slots, pfc_mode=pfc_mode,
                           num_nodes=int(num_nodes or num_links))
    prepared = PreparedRun(
        problem=problem, params_arrays=_as_arrays(params, batch),
        pfc_arrays=_as_arrays(pfc_params, batch),
        config=config, dtype=dtype, batched=bool(batch), links=links, prev_links=prev_links,
        capacity=capacity, size=size, start=start, delay=delay, params=params,
        pfc_params=pfc_params)
    if prepare_only:
        return prepared
    return run_prepared(prepared, throw=throw)


@dataclasses.dataclass(frozen=True, eq=False)
class PreparedRun:
    """Validated device arrays and static configuration of one run (or one batch).

    ``kernel_args`` are the arguments of :func:`fabricflow.solve.dcqcn_kernel.run` (or
    ``run_batch`` when ``batched``); benchmarks use them to time compilation apart.
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
    def kernel(self):
        return kernel.run_batch if self.batched else kernel.run

    @property
    def kernel_args(self) -> tuple:
        return (self.problem, self.params_arrays, self.pfc_arrays, self.config, self.dtype)


def run_prepared(prepared: PreparedRun, *, throw: bool = True, outputs=None) -> DCQCNResult:
    """Run (or take the kernel ``outputs`` of) a :class:`PreparedRun`; wrap the result."""
    final, recs = prepared.kernel(*prepared.kernel_args) if outputs is None else outputs
    nonfinite = np.asarray(final.nonfinite)
    status = np.where(nonfinite, "nonfinite", "ok")
    if throw and np.any(nonfinite):
        raise SolverError("DCQCN run produced non-finite rates or queues (status nonfinite); "
                          "reduce dt or check the parameters")
    config = prepared.config
    times = (np.arange(1, config.num_records + 1) * config.steps_per_record) * config.dt
    return DCQCNResult(
        time=times, rate=np.asarray(recs.rate), delivered=np.asarray(recs.delivered),
        queue=np.asarray(recs.queue), paused=np.asarray(recs.paused),
        pause_time=np.asarray(final.pause_time)[..., :-1],
        flow_pause_time=np.asarray(final.flow_pause_time),
        finish_time=np.asarray(final.finish, dtype=np.float64),
        alpha=np.asarray(final.alpha), target_rate=np.asarray(final.rt),
        status=str(status) if status.ndim == 0 else status,
        links=prepared.links, prev_links=prepared.prev_links, capacity=prepared.capacity,
        size=prepared.size, start=prepared.start, delay=prepared.delay, dt=config.dt,
        duration=float(times[-1]), params=prepared.params, pfc_params=prepared.pfc_params,
        pfc_mode=config.pfc_mode)


def _spread(ids: np.ndarray, num_links: int) -> np.ndarray:
    """``[F, H]`` link ids with -1 entries sent to extra segments ``L + 1 + (f mod PAD)``."""
    rows = np.arange(ids.shape[0])[:, None] % kernel.PAD_SEGMENTS
    return np.where(ids >= 0, ids, num_links + 1 + rows)


def _resolve_params(params, overrides) -> DCQCNParams:
    if isinstance(params, str):
        return DCQCNParams.preset(params, **(overrides or {}))
    if not isinstance(params, DCQCNParams):
        raise SpecError("params", f"expected a preset name or DCQCNParams, got {type(params).__name__}")
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


def _positive(value, field: str) -> float:
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
