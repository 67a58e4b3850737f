"""``run_cc``: run a prepared congestion-control run and wrap its result (host side).

The *update* half of the prepare/run pair: :func:`run_cc` calls the jitted integrator on
a :class:`~.prepare.PreparedRun` (in one call, or cut into chunks with progress reports),
turns its status into a :class:`SolverError` unless ``throw=False``, and returns a
:class:`~.result.CCResult`. :func:`simulate_arrays` is the two in one call.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from fabricflow.errors import SolverError, SpecError, check_flag
from fabricflow.solve.cc import integrator
from fabricflow.solve.cc.prepare import PreparedRun, prepare_cc
from fabricflow.solve.cc.result import CCResult
from fabricflow.solve.status import SolverStatus


def run_cc(
    prepared: PreparedRun,
    *,
    throw: bool = True,
    outputs=None,
    progress: Callable[[float, float], None] | None = None,
    chunks: int = 20,
) -> CCResult:
    """Run a :class:`~.prepare.PreparedRun` (or wrap kernel ``outputs`` already computed).

    Args:
        prepared: from :func:`~.prepare.prepare_cc`.
        throw: raise :class:`SolverError` when the run went non-finite; with ``False`` the
            result carries ``status == SolverStatus.NONFINITE`` (per batch entry).
        outputs: ``(final state, records)`` of ``prepared.kernel`` (benchmarks compile
            and run the kernel themselves).
        progress: ``progress(fraction_done, elapsed_s)`` after each chunk; the run is
            then cut into ``chunks`` pieces of equal static length (one compilation).
        chunks: number of pieces with ``progress`` (ignored without it).

    Returns:
        :class:`~.result.CCResult`.
    """
    throw = check_flag(throw, "throw")
    if outputs is not None:
        final, recs = outputs
    elif progress is None:
        final, recs = prepared.kernel(*prepared.kernel_args)
    else:
        final, recs = _run_chunked(prepared, progress, chunks)
    nonfinite = np.asarray(final.nonfinite)
    codes = np.where(nonfinite, SolverStatus.NONFINITE, SolverStatus.CONVERGED).astype(np.int32)
    if throw and np.any(nonfinite):
        raise SolverError(
            f"{prepared.law.title} run: {SolverStatus.NONFINITE.message} (status NONFINITE: "
            "non-finite rates or queues); reduce dt or check the parameters"
        )
    config = prepared.config
    times = (np.arange(1, config.num_records + 1) * config.steps_per_record) * config.dt
    return CCResult(
        cc=prepared.law.name,
        time=times,
        rate=np.asarray(recs.rate),
        delivered=np.asarray(recs.delivered),
        queue=np.asarray(recs.queue),
        paused=np.asarray(recs.paused),
        pause_time=np.asarray(final.pause_time)[..., :-1],
        flow_pause_time=np.asarray(final.flow_pause_time),
        finish_time=np.asarray(final.finish, dtype=np.float64),
        law_state={name: np.asarray(value) for name, value in final.law._asdict().items()},
        status=SolverStatus(int(codes)) if codes.ndim == 0 else codes,
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
        retransmitted=np.asarray(final.retransmitted),
        trimmed=np.asarray(final.trimmed)[..., :-1],
        trim=config.trim,
    )


def simulate_arrays(
    links,
    capacity,
    path_latency,
    *,
    throw: bool = True,
    progress: Callable[[float, float], None] | None = None,
    **options,
) -> CCResult:
    """``run_cc(prepare_cc(links, capacity, path_latency, **options))`` in one call."""
    throw = check_flag(throw, "throw")  # before the (costly) preparation
    prepared = prepare_cc(links, capacity, path_latency, **options)
    return run_cc(prepared, throw=throw, progress=progress)


def _run_chunked(prepared: PreparedRun, progress, chunks: int):
    """The kernel run cut into ``chunks`` equal pieces, calling ``progress`` after each."""
    config = prepared.config
    if isinstance(chunks, bool) or not isinstance(chunks, (int, np.integer)) or chunks < 1:
        raise SpecError("chunks", f"must be an integer >= 1, got {chunks!r}")
    chunk = -(-config.num_records // min(int(chunks), config.num_records))
    problem, params, pfc_params, law = (
        prepared.problem,
        prepared.params_arrays,
        prepared.pfc_arrays,
        prepared.law,
    )
    dtype, axes = prepared.dtype, prepared.problem_axes
    if prepared.batched:
        state = integrator.start_batch(problem, params, pfc_params, law, config, dtype, axes)
    else:
        state = integrator.start(problem, params, pfc_params, law, config, dtype)
    record_axis = 1 if prepared.batched else 0
    clock = time.perf_counter()
    pieces = []
    for first in range(0, config.num_records, chunk):
        index = jnp.int32(first)
        if prepared.batched:
            state, recs = integrator.advance_batch(
                state, index, problem, params, pfc_params, law, config, dtype, chunk, axes
            )
        else:
            state, recs = integrator.advance(
                state, index, problem, params, pfc_params, law, config, dtype, chunk
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


__all__ = ["run_cc", "simulate_arrays"]
