"""Host side of the JAX backend: compact the links, pad to buckets, run the flat kernel.

Only the links some entry uses are kept (renumbered ``0..U-1``), so a small problem on a
large fabric costs its own links; entries, flows and link slots are padded to
:func:`~.entries.bucket_size` (one spare flow slot and one spare link slot at least: the
padding entries' sentinel flow and the sentinel link). Every shape a process sees is
therefore one of a few per octave of each axis, compiled once and kept by the persistent
compilation cache (:mod:`fabricflow.jax_cache`).

This module imports JAX; the engine (:mod:`.engine`) reaches it only through the backends
that run JAX (:mod:`.sharded`, :mod:`.stacked`), so a numpy-only solve never loads JAX.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fabricflow.jax_cache import ensure_persistent_cache
from fabricflow.solve.maxmin.entries import FlowEntries, block_diagonal, bucket_size
from fabricflow.solve.maxmin.flat import solve_flat, solve_flat_batch
from fabricflow.solve.status import SolverStatus

__all__ = [
    "BATCH_LAYOUTS",
    "PaddedProblem",
    "jax_solve",
    "original_links",
    "pad_problem",
    "used_links",
    "x64_mode",
]


class PaddedProblem(NamedTuple):
    """Kernel arrays of a flat problem (numpy, padded) and the map back.

    ``link``/``flow``/``coef`` ``[E_b]``; ``capacity`` ``[..., S_b]``; ``weight``,
    ``demand`` ``[..., F_b]``; ``used_links`` int64 ``[U]``: the original id of each link
    slot; ``num_flows``: the real flows (the first slots)."""

    link: np.ndarray
    flow: np.ndarray
    coef: np.ndarray
    capacity: np.ndarray
    weight: np.ndarray
    demand: np.ndarray
    used_links: np.ndarray
    num_flows: int


def used_links(entries: FlowEntries) -> np.ndarray:
    """int64 ``[U]``: the links some entry uses, ascending."""
    mark = np.zeros(entries.num_links, dtype=bool)
    mark[entries.link] = True
    return np.flatnonzero(mark)


def pad_problem(
    entries: FlowEntries, capacity, weight, demand, dtype, sizes: tuple[int, int, int] | None = None
) -> PaddedProblem:
    """Compact and pad ``entries`` with ``capacity`` ``[L]``/``[B, L]`` and ``weight``,
    ``demand`` ``[F]``/``[B, F]`` (float64 numpy) for the kernel, in ``dtype``.
    ``sizes``: ``(entry, flow, link)`` slots to pad to (default their buckets)."""
    num_flows, num_entries = entries.num_flows, entries.num_entries
    used = used_links(entries)
    renumber = np.zeros(entries.num_links, np.int64)
    renumber[used] = np.arange(used.size)
    if sizes is None:
        sizes = bucket_size(num_entries), bucket_size(num_flows + 1), bucket_size(used.size + 1)
    entry_slots, flow_slots, slots = sizes
    link = np.full(entry_slots, slots - 1, np.int32)
    link[:num_entries] = renumber[entries.link]
    flow = np.full(entry_slots, flow_slots - 1, np.int32)
    flow[:num_entries] = entries.flow_of_entry()
    coef = np.zeros(entry_slots, dtype)
    coef[:num_entries] = entries.coef_or_ones()
    capacity = np.asarray(capacity)
    lead = capacity.shape[:-1]
    cap = np.zeros((*lead, slots), dtype)
    cap[..., : used.size] = capacity[..., used]

    def per_flow(values, fill):
        out = np.full((*np.shape(values)[:-1], flow_slots), fill, dtype)
        out[..., :num_flows] = values
        return out

    return PaddedProblem(
        link,
        flow,
        coef,
        cap,
        per_flow(weight, 1.0),
        per_flow(demand, np.inf),
        used,
        num_flows,
    )


# How a batch of scenarios over the same flows runs: "block" (the B copies stacked
# block-diagonally into one flat problem) or "vmap" (the kernel vmapped over the batch).
# On 2 CPU cores block ran 1.5-2.7x faster per scenario than vmap (B = 8..32 collective
# phases of 50k-200k entries; docs/solve-performance.md).
BATCH_LAYOUTS = ("block", "vmap")


def jax_solve(
    entries: FlowEntries,
    capacity: np.ndarray,
    weight: np.ndarray,
    demand: np.ndarray,
    *,
    dtype,
    max_iters: int,
    rtol: float,
    layout: str = "block",
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The flat kernel on ``entries``; ``capacity`` ``[L]`` or ``[B, L]`` (then
    ``weight``/``demand`` ``[B, F]``: one call, laid out as ``layout``, one of
    :data:`BATCH_LAYOUTS`). Returns numpy ``(rate, bottleneck (original link ids, -1),
    rounds, status, unsettled)`` with the batch axis first."""
    capacity = np.asarray(capacity)
    if capacity.ndim == 2 and layout == "block":
        return _block_solve(entries, capacity, weight, demand, dtype, max_iters, rtol)
    ensure_persistent_cache()
    padded = pad_problem(entries, capacity, weight, demand, dtype)
    with x64_mode(dtype):
        solver = solve_flat_batch if padded.capacity.ndim == 2 else solve_flat
        solution = solver(
            jnp.asarray(padded.link),
            jnp.asarray(padded.flow),
            jnp.asarray(padded.coef),
            jnp.asarray(padded.capacity),
            jnp.asarray(padded.weight),
            jnp.asarray(padded.demand),
            jnp.int32(padded.num_flows),
            jnp.int32(max_iters),
            jnp.asarray(rtol, dtype),
        )
        solution = jax.device_get(solution)
    real = slice(0, padded.num_flows)
    rate = np.asarray(solution.rates, np.float64)[..., real]
    bottleneck = original_links(np.asarray(solution.bottleneck)[..., real], padded.used_links)
    unsettled = np.asarray(solution.unsettled)[..., real]
    return rate, bottleneck, np.asarray(solution.rounds), np.asarray(solution.status), unsettled


def _block_solve(entries, capacity, weight, demand, dtype, max_iters, rtol):
    """``B`` scenarios as one block-diagonal problem (scenario ``b``'s links offset by
    ``b L``, its flows by ``b F``); per-scenario status from its own flows."""
    batch, num_links = capacity.shape
    num_flows = entries.num_flows
    stacked, _, _ = block_diagonal([entries] * batch)
    rate, bottleneck, rounds, _, unsettled = jax_solve(
        stacked,
        capacity.reshape(-1),
        np.asarray(weight).reshape(-1),
        np.asarray(demand).reshape(-1),
        dtype=dtype,
        max_iters=max_iters,
        rtol=rtol,
    )
    rate = rate.reshape(batch, num_flows)
    unsettled = unsettled.reshape(batch, num_flows)
    offset = (np.arange(batch) * num_links)[:, None]
    bottleneck = bottleneck.reshape(batch, num_flows)
    bottleneck = np.where(bottleneck >= 0, bottleneck - offset, -1)
    status = np.where(
        unsettled.any(axis=1),
        SolverStatus.MAX_ITERS_REACHED,
        np.where(np.isnan(rate).any(axis=1), SolverStatus.NONFINITE, SolverStatus.CONVERGED),
    )
    return rate, bottleneck, np.full(batch, int(rounds)), status.astype(np.int32), unsettled


def x64_mode(dtype):
    """JAX's float64 mode for a float64 solve (the global setting is left alone)."""
    return jax.enable_x64(True) if np.dtype(dtype) == np.float64 else contextlib.nullcontext()


def original_links(slot: np.ndarray, used_links: np.ndarray) -> np.ndarray:
    """Link ids of the kernel's link slots ``slot`` (``-1`` stays ``-1``)."""
    if used_links.size == 0:
        return np.full(slot.shape, -1, np.int64)
    return np.where(slot >= 0, used_links[np.clip(slot, 0, used_links.size - 1)], -1)
