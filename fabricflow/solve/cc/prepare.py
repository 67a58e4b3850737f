"""Host side of a congestion-control run: checks, shapes, memory and work (arrays only).

:func:`prepare_cc` is the *allocate* half of an allocate/update pair (as jax-md's
neighbour lists): it validates every input, decides every static shape (hops, ring
slots, records), estimates memory and work and refuses what is too large, and lays out
the device arrays of :class:`~.integrator.Problem`. It cannot be jitted; the jitted half
is :func:`fabricflow.solve.cc.run_cc.run_cc`. Nothing here knows about fabrics or routes:
callers pass link ids, capacities and latencies (``fabricflow.dynamics.congestion.simulate_cc`` does that
for a :class:`~fabricflow.Fabric` and its :class:`~fabricflow.Routes`).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping

import jax.numpy as jnp
import numpy as np

from fabricflow.errors import SpecError
from fabricflow.memory_budget import check_memory
from fabricflow.solve.cc import integrator
from fabricflow.solve.cc.law import RateLaw
from fabricflow.solve.cc.laws import resolve_law
from fabricflow.solve.cc.work import MAX_STEPS, SECONDS_PER_ENTRY_STEP, check_work, estimate_work
from fabricflow.solve.parameters import Parameters
from fabricflow.solve.pfc.params import PFCParams, resolve_pfc_mode


@dataclasses.dataclass(frozen=True)
class Timing:
    """Static timing of a run: step ``dt`` s, ``steps``, records and ring slots."""

    dt: float
    steps: int
    steps_per_record: int
    num_records: int


@dataclasses.dataclass(frozen=True, eq=False)
class PreparedRun:
    """Validated device arrays and static configuration of one run (or one batch).

    ``kernel_args`` are the arguments of :func:`~.integrator.run` (or ``run_batch`` when
    ``batched``); benchmarks use them to time compilation apart. ``work`` is the
    estimated work in entry-steps and ``estimated_s`` the matching time on 2 CPU cores.
    """

    law: RateLaw
    problem: integrator.Problem
    params_arrays: Parameters
    pfc_arrays: PFCParams
    config: integrator.Config
    dtype: object
    batch: int
    problem_axes: tuple | None
    links: np.ndarray
    prev_links: np.ndarray
    capacity: np.ndarray
    size: np.ndarray
    start: np.ndarray
    delay: np.ndarray
    params: Parameters
    pfc_params: PFCParams

    @property
    def batched(self) -> bool:
        return self.batch > 0

    @property
    def work(self) -> float:
        steps = self.config.num_records * self.config.steps_per_record
        num_flows, hops = self.links.shape
        return estimate_work(num_flows, hops, self.capacity.shape[-1], steps, self.batch)

    @property
    def estimated_s(self) -> float:
        return self.work * SECONDS_PER_ENTRY_STEP

    @property
    def kernel(self):
        return integrator.run_batch if self.batched else integrator.run

    @property
    def kernel_args(self) -> tuple:
        args = (self.problem, self.params_arrays, self.pfc_arrays, self.law, self.config)
        if self.batched:
            return (*args, self.dtype, self.problem_axes)
        return (*args, self.dtype)


def prepare_cc(
    links,
    capacity,
    path_latency,
    *,
    cc="dcqcn",
    size=None,
    start=None,
    params=None,
    overrides: dict | None = None,
    marking=None,
    pfc_ingress=None,
    link_dst_node=None,
    num_nodes: int | None = None,
    line_rate=None,
    initial_rate=None,
    link_latency=None,
    pfc="off",
    pfc_params: PFCParams | None = None,
    trim=None,
    duration: float = 0.01,
    dt: float = 1e-6,
    extra_delay: float = 4e-6,
    records: int = 500,
    dtype=jnp.float32,
    memory_budget: int | None = None,
    max_work: float | None = None,
) -> PreparedRun:
    """Check and lay out a congestion-control run on plain arrays (nothing runs yet).

    Every input error, and a run too large for memory (:class:`MemoryBudgetError`) or
    absurdly long (:class:`SpecError` on ``duration``, with the estimated work and time),
    is refused here. Run the result with :func:`fabricflow.solve.cc.run_cc.run_cc`.

    Args:
        links: int ``[F, H]`` link ids, -1 padded (padding at the end of a row).
        capacity: ``[L]`` bytes/s, or ``[B, L]``: ``B`` capacity scenarios in one vmapped
            run (with parameter batches of the same length, or scalar parameters).
        path_latency: ``[F]`` s (one way).
        cc: the rate law: a name (``dcqcn``, ``hpcc``, ``timely``, ``swift``,
            ``predictive``) or a :class:`~.law.RateLaw`.
        size: ``[F]`` bytes per flow (default ``inf``: long-lived). start: ``[F]`` s.
        params: a preset name of the law (default: its first), or its parameter class,
            possibly batched (:func:`~fabricflow.solve.parameters.stack_params`).
        overrides: field -> value (unit strings allowed) applied to the preset.
        marking: bool ``[L]`` switch egress links: they mark ECN and count as fabric
            delay (default all).
        pfc_ingress: bool ``[L]`` links whose receiving end has a PFC ingress buffer
            (default all). link_dst_node / num_nodes: for dynamic thresholds (default:
            every link its own node).
        line_rate: ``[F]`` bytes/s cap of each flow (default: capacity of its first hop).
        initial_rate: ``[F]`` bytes/s starting rate of each flow (default: the law's).
        link_latency: ``[L]`` s, for the time each hop's telemetry lags the sender's rate
            (default: each path's latency spread evenly over its hops).
        pfc: ``off``, ``static`` (also ``on``/True) or ``dynamic``.
        pfc_params: :class:`~fabricflow.solve.pfc.params.PFCParams` (default thresholds),
            fields may be ``[batch]`` arrays.
        trim: packet trimming at the ``marking`` (switch egress) links: ``None`` (off,
            default), bytes (one limit for every switch egress), or ``[L]`` bytes (``inf``:
            that link never trims). A queue above its limit drops the excess payload and
            the senders retransmit it (:mod:`.integrator`).
        duration, dt: simulated time and fixed step, s; ``dt`` must not exceed the law's
            stable step.
        extra_delay: feedback delay added to each flow's path latency, s.
        records: time samples kept (every ``steps // records`` steps).
        dtype: ``jnp.float32`` (default) or ``jnp.float64`` (needs x64 enabled).
        memory_budget: bytes or a size (``"6GiB"``); default: the shared memory policy.
        max_work: refuse a run estimated above this many entry-steps
            (default :data:`~.work.DEFAULT_MAX_WORK`; ``math.inf`` allows anything).

    Returns:
        :class:`PreparedRun`.
    """
    links, valid = _check_links(links)
    capacity = _check_capacity(capacity, links, valid)
    num_links = capacity.shape[-1]
    num_flows, hops = links.shape
    law = resolve_law(cc)
    params = _resolve_params(law, params, overrides)
    pfc_mode = resolve_pfc_mode(pfc)
    pfc_params = _check_pfc_params(pfc_params)
    dtype = _check_dtype(dtype)
    inputs = _flow_inputs(
        num_flows, size, start, path_latency, extra_delay, initial_rate, line_rate, capacity, links
    )
    inputs["hop_offset"] = _hop_offsets(links, valid, inputs["latency"], link_latency)
    timing = _timing(duration, dt, records, law, params, float(np.min(inputs["delay"])))
    delay_steps, hop_delay_steps, ring_slots = _delay_steps(
        inputs["delay"], inputs["hop_offset"], timing
    )
    _check_min_rate(params, inputs["line_rate"])
    batch = _batch(params, pfc_params, capacity)
    _check_size(
        law, timing, num_flows, hops, num_links, ring_slots, batch, dtype, memory_budget, max_work
    )
    marking = _mask(marking, num_links, "marking")
    pfc_ingress = _mask(pfc_ingress, num_links, "pfc_ingress")
    trim_limit = _trim_limit(trim, marking)
    if link_dst_node is None:
        link_dst_node, num_nodes = np.arange(num_links), num_links
    prev_links = _previous_links(links, valid)
    problem = _problem(
        links,
        valid,
        prev_links,
        capacity,
        marking,
        pfc_ingress,
        link_dst_node,
        inputs,
        (delay_steps, hop_delay_steps),
        trim_limit,
    )
    config = integrator.Config(
        dt=timing.dt,
        steps_per_record=timing.steps_per_record,
        num_records=timing.num_records,
        ring_slots=ring_slots,
        pfc_mode=pfc_mode,
        num_nodes=int(num_nodes or num_links),
        trim=trim is not None,
    )
    axes = _problem_axes(capacity)
    return PreparedRun(
        law=law,
        problem=problem,
        params_arrays=params.broadcast(batch),
        pfc_arrays=pfc_params.broadcast(batch),
        config=config,
        dtype=dtype,
        batch=batch,
        problem_axes=axes,
        links=links,
        prev_links=prev_links,
        capacity=capacity,
        size=inputs["size"],
        start=inputs["start"],
        delay=inputs["delay"],
        params=params,
        pfc_params=pfc_params,
    )


def _check_pfc_params(pfc_params) -> PFCParams:
    """``pfc_params`` checked (``PFCParams()`` when ``None``).

    Raises:
        SpecError: not a :class:`PFCParams`, or one with invalid fields.
    """
    pfc_params = PFCParams() if pfc_params is None else pfc_params
    if not isinstance(pfc_params, PFCParams):
        raise SpecError("pfc_params", f"expected PFCParams, got {type(pfc_params).__name__}")
    pfc_params.validate()
    return pfc_params


def _previous_links(links: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """int ``[F, H]``: the link each hop's traffic arrives on (the previous hop of the
    path), -1 at the first hop and on padding."""
    prev_links = np.full_like(links, -1)
    prev_links[:, 1:] = np.where(valid[:, 1:], links[:, :-1], -1)
    return prev_links


def _problem_axes(capacity: np.ndarray) -> tuple | None:
    """The ``vmap`` axis of each :class:`~.integrator.Problem` field for a batch of
    capacity scenarios (``capacity`` ``[B, L]``: ``capacity`` and ``line_rate`` batched
    on axis 0, the rest shared), or ``None`` for one scenario (``[L]``)."""
    if capacity.ndim != 2:
        return None
    batched_fields = {"capacity", "line_rate"}
    return tuple(0 if name in batched_fields else None for name in integrator.Problem._fields)


def _check_links(links) -> tuple[np.ndarray, np.ndarray]:
    links = np.asarray(links)
    if links.ndim != 2 or links.shape[0] == 0 or links.shape[1] == 0:
        raise SpecError("links", f"must be a non-empty int array [F, H], got shape {links.shape}")
    if not np.issubdtype(links.dtype, np.integer):
        raise SpecError("links", f"must be integer link ids, got dtype {links.dtype}")
    valid = links >= 0
    if not np.all(valid[:, 0]):
        raise SpecError("links", "every flow needs at least one hop (row starting with -1)")
    if np.any(valid[:, 1:] & ~valid[:, :-1]):
        raise SpecError("links", "padding (-1) must come at the end of each row")
    return links, valid


def _check_capacity(capacity, links, valid) -> np.ndarray:
    capacity = np.asarray(capacity, dtype=np.float64)
    if capacity.ndim not in (1, 2) or capacity.shape[-1] == 0:
        raise SpecError("capacity", f"must be [L] or [B, L] bytes/s, got shape {capacity.shape}")
    num_links = capacity.shape[-1]
    if np.any(links >= num_links) or np.any(links < -1):
        raise SpecError("links", f"link ids must lie in -1..{num_links - 1}")
    used = capacity[..., np.unique(links[valid])]
    if not np.all(np.isfinite(capacity)) or np.any(used <= 0):
        raise SpecError("capacity", "links used by flows need finite capacity > 0 bytes/s")
    return capacity


def _resolve_params(law: RateLaw, params, overrides):
    if overrides is not None and (
        not isinstance(overrides, Mapping) or not all(isinstance(k, str) for k in overrides)
    ):
        raise SpecError(
            "overrides",
            f"must be a mapping of {law.title} field names to values "
            f"(e.g. {{'{next(iter(law.params_class.FIELDS))}': ...}}), got {overrides!r}",
        )
    if params is None or isinstance(params, str):
        return law.preset(params, **(overrides or {}))
    if not isinstance(params, law.params_class):
        raise SpecError(
            "params",
            f"expected a {law.title} preset name or {law.params_class.__name__}, "
            f"got {type(params).__name__}",
        )
    params = params.replace(**overrides) if overrides else params
    params.validate()
    return params


def _check_dtype(dtype):
    if jnp.dtype(dtype) not in (jnp.float32, jnp.float64):
        raise SpecError("dtype", f"must be float32 or float64, got {dtype!r}")
    return dtype


def _seconds(value, field: str, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise SpecError(field, f"must be a number of seconds, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise SpecError(field, f"must be finite and {'> 0' if positive else '>= 0'} s, got {value}")
    return value


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


def _flow_inputs(
    num_flows, size, start, path_latency, extra_delay, initial_rate, line_rate, capacity, links
) -> dict:
    """Per-flow float64 inputs, checked: size, start, delay, base_rtt, rates."""
    size = np.full(num_flows, np.inf) if size is None else _per_flow(size, "size", num_flows)
    start = np.zeros(num_flows) if start is None else _per_flow(start, "start", num_flows)
    if np.any(np.isnan(size)) or np.any(size <= 0):
        raise SpecError("size", "flow sizes must be > 0 bytes (inf for long-lived flows)")
    if not np.all(np.isfinite(start)) or np.any(start < 0):
        raise SpecError("start", "start times must be finite and >= 0 s")
    latency = _per_flow(path_latency, "path_latency", num_flows)
    if not np.all(np.isfinite(latency)) or np.any(latency < 0):
        raise SpecError("path_latency", "must be finite and >= 0 s")
    extra = _seconds(extra_delay, "extra_delay", positive=False)
    first = capacity[..., links[:, 0]]
    if line_rate is None:
        line = first
    else:
        line = _per_flow(line_rate, "line_rate", num_flows)
        if not np.all(np.isfinite(line)) or np.any(line <= 0):
            raise SpecError("line_rate", "must be finite and > 0 bytes/s")
    initial = np.zeros(num_flows)  # 0: the law's default
    if initial_rate is not None:
        initial = _per_flow(initial_rate, "initial_rate", num_flows)
        if not np.all(np.isfinite(initial)) or np.any(initial <= 0):
            raise SpecError("initial_rate", "must be finite and > 0 bytes/s (one per flow)")
    return {
        "size": size,
        "start": start,
        "latency": latency,
        "delay": latency + extra,
        "base_rtt": 2.0 * latency,
        "line_rate": line,
        "initial_rate": initial,
    }


def _timing(duration, dt, records, law: RateLaw, params, min_delay: float) -> Timing:
    duration = _seconds(duration, "duration", positive=True)
    dt = _seconds(dt, "dt", positive=True)
    stable = law.max_stable_dt(params, min_delay)
    if dt > stable:
        raise SpecError(
            "dt",
            f"{dt:.3g} s exceeds the stable step {stable:.3g} s of {law.title} with these "
            "parameters; use a smaller dt",
        )
    if not math.isfinite(duration / dt):
        raise SpecError(
            "dt",
            f"{dt:.3g} s is too small for a {duration:.3g} s run (the step count "
            "overflows); use a larger dt",
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
    steps_per_record = max(1, steps // int(records))
    return Timing(dt, steps, steps_per_record, max(2, steps // steps_per_record))


def _hop_offsets(links, valid, path_latency, link_latency) -> np.ndarray:
    """``[F, H]`` s from a flow's sender to the start of each hop (0 at hop 0)."""
    if link_latency is None:
        hops = valid.sum(axis=1, keepdims=True)
        per_hop = np.where(valid, path_latency[:, None] / hops, 0.0)
    else:
        latency = np.asarray(link_latency, np.float64)
        if latency.ndim != 1 or latency.shape[0] <= links.max():
            raise SpecError("link_latency", f"must be [L] seconds, got shape {latency.shape}")
        per_hop = np.where(valid, latency[np.where(valid, links, 0)], 0.0)
    return np.cumsum(per_hop, axis=1) - per_hop


def _delay_steps(delay, hop_offset, timing: Timing) -> tuple[np.ndarray, np.ndarray, int]:
    """Steps of each flow's feedback delay ``[F]``, of each hop's telemetry lag behind the
    sender's rate ``[F, H]`` (feedback delay + the latency to the hop), and ring slots."""
    # A feedback delay beyond the end of the run reads only the initial ring values, as a
    # delay of steps + 1 does: the cap changes no result, and keeps the ring (and int32)
    # bounded when the delay is far longer than the run (or dt is tiny).
    cap = min(timing.steps + 1, MAX_STEPS)
    delay_steps = np.clip(np.round(delay / timing.dt), 1, cap).astype(np.int32)
    hop_steps = np.clip(np.round((delay[:, None] + hop_offset) / timing.dt), 1, cap)
    hop_steps = hop_steps.astype(np.int32)
    slots = 1 << int(np.ceil(np.log2(int(hop_steps.max()) + 1)))
    return delay_steps, hop_steps, slots


def _check_min_rate(params, line_rate: np.ndarray) -> None:
    if not hasattr(params, "min_rate"):
        return
    slowest = float(np.min(line_rate))
    lowest = float(np.max(params.min_rate))
    if lowest > slowest:
        raise SpecError(
            "params.min_rate",
            f"{lowest:.4g} B/s exceeds the line rate {slowest:.4g} B/s "
            f"({slowest * 8 / 1e9:.4g} Gb/s) of the slowest flow; the sender could never "
            "slow down (use a min_rate below the line rate)",
        )


def _batch(params, pfc_params: PFCParams, capacity: np.ndarray) -> int:
    sizes = {
        "params": params.batch_size(),
        "pfc_params": pfc_params.batch_size(),
        "capacity": capacity.shape[0] if capacity.ndim == 2 else 0,
    }
    lengths = {size for size in sizes.values() if size}
    if len(lengths) > 1:
        shown = ", ".join(f"{name}: {size}" for name, size in sizes.items() if size)
        field = next(name for name, size in sizes.items() if size and size != max(lengths))
        raise SpecError(field, f"batch lengths differ ({shown}); give one batch length")
    return lengths.pop() if lengths else 0


def _check_size(
    law, timing, num_flows, hops, num_links, ring_slots, batch, dtype, budget, max_work
):
    itemsize = np.dtype(jnp.dtype(dtype)).itemsize
    records = timing.num_records
    flow_rings = 1 + len({"ack", "nack"} & law.signals)  # rate, then per-flow signals
    estimate = (
        max(batch, 1)
        * itemsize
        * (
            records * (2 * num_flows + 2 * num_links)
            + ring_slots * (flow_rings * num_flows + 4 * num_links + 4)
            + 6 * num_flows * hops
            + 20 * num_flows
        )
    )
    # work first: an absurd step count is the cause, the memory of its ring a consequence
    check_work(
        estimate_work(num_flows, hops, num_links, timing.steps, batch), timing.steps, max_work
    )
    check_memory(
        estimate,
        f"{law.title} run ({max(batch, 1)} batch x {records} records x "
        f"({num_flows} flows + {num_links} links), ring {ring_slots} slots)",
        hint="use fewer records, flows or batch entries",
        budget=budget,
        field="memory_budget",
    )
    if timing.steps > MAX_STEPS:
        raise SpecError(
            "duration",
            f"{timing.steps:.3g} steps of dt = {timing.dt:.3g} s; at most {MAX_STEPS} steps "
            "per run: shorten the run or raise dt",
        )


def _mask(values, num_links: int, field: str) -> np.ndarray:
    if values is None:
        return np.ones(num_links, bool)
    mask = np.asarray(values, bool)
    if mask.shape != (num_links,):
        raise SpecError(field, f"must be bool [{num_links}] (one per link), got {mask.shape}")
    return mask


def _trim_limit(trim, marking: np.ndarray) -> np.ndarray:
    """``[L]`` bytes each egress holds before trimming (``inf``: never; NICs never trim)."""
    if trim is None:
        return np.full(marking.shape, np.inf)
    try:
        limit = np.broadcast_to(np.asarray(trim, np.float64), marking.shape)
    except (TypeError, ValueError):
        raise SpecError(
            "trim", f"must be bytes or [{marking.shape[0]}] bytes (one per link), got {trim!r}"
        ) from None
    if np.any(np.isnan(limit)) or np.any(limit <= 0):
        raise SpecError("trim", "trimming limits must be > 0 bytes (inf: no trimming)")
    return np.where(marking, limit, np.inf)


def _spread(ids: np.ndarray, num_links: int) -> np.ndarray:
    """``[F, H]`` link ids with -1 entries sent to extra segments ``L + 1 + (f mod PAD)``."""
    rows = np.arange(ids.shape[0])[:, None] % integrator.PAD_SEGMENTS
    return np.where(ids >= 0, ids, num_links + 1 + rows)


def _problem(
    links,
    valid,
    prev_links,
    capacity,
    marking,
    pfc_ingress,
    link_dst_node,
    inputs,
    delays,
    trim_limit,
) -> integrator.Problem:
    delay_steps, hop_delay_steps = delays
    num_links = capacity.shape[-1]
    sentinel = num_links
    gather = np.where(valid, links, sentinel)
    pad = np.inf * np.ones(capacity.shape[:-1] + (1,))
    marking1 = np.append(marking, False)
    return integrator.Problem(
        links=jnp.asarray(gather, jnp.int32),
        last_hop=jnp.asarray(valid.sum(axis=1) - 1, jnp.int32),
        hop_fabric=jnp.asarray(marking1[gather] & valid),
        capacity=jnp.asarray(np.concatenate([capacity, pad], axis=-1)),
        marking=jnp.asarray(marking1),
        pfc_ingress=jnp.asarray(np.append(pfc_ingress, False)),
        scatter_links=jnp.asarray(_spread(links, num_links), jnp.int32),
        scatter_prev=jnp.asarray(_spread(prev_links, num_links), jnp.int32),
        link_dst_node=jnp.asarray(np.append(np.asarray(link_dst_node), 0), jnp.int32),
        line_rate=jnp.asarray(inputs["line_rate"]),
        size=jnp.asarray(inputs["size"]),
        start=jnp.asarray(inputs["start"]),
        initial_rate=jnp.asarray(inputs["initial_rate"]),
        base_rtt=jnp.asarray(inputs["base_rtt"]),
        feedback_delay=jnp.asarray(inputs["delay"]),
        delay_steps=jnp.asarray(delay_steps, jnp.int32),
        hop_delay_steps=jnp.asarray(hop_delay_steps, jnp.int32),
        trim_limit=jnp.asarray(np.append(trim_limit, np.inf)),
        last_link=jnp.asarray(gather[np.arange(links.shape[0]), valid.sum(axis=1) - 1], jnp.int32),
    )


__all__ = ["PreparedRun", "Timing", "prepare_cc"]
