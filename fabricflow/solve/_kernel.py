"""Jitted building blocks shared by the max-min and flow-completion kernels.

They take hop-major link ids ``ids`` ``[H, F]`` in which padding is the sentinel id ``L``
(one past the last real link), and reduce one hop at a time (``H`` scatters / gathers of
``[F]`` vectors) so that no ``[F, H]`` float temporaries are built.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .status import Status


def default_rtol(dtype) -> float:
    """Relative tolerance used to call two shares equal: a few ulps of ``dtype``."""
    return 1e-6 if jnp.dtype(dtype) == jnp.float32 else 1e-12


def float_dtype(*arrays):
    """The float dtype of a solve: float64 if any input is float64 and x64 is on, else float32."""
    return jnp.result_type(jnp.float32, *[a for a in arrays if a is not None])


def hop_major(links, coef, capacity):
    """``[F, H]`` links (-1 padded) -> int32 ``[H, F]`` ids with sentinel ``L``.

    Padding, out-of-range ids, entries with ``coef <= 0`` and links of infinite capacity
    (they constrain nothing) map to the sentinel. Returns ``(ids, coef_hm or None,
    out_of_range flag)``.
    """
    num_links = capacity.shape[0]
    ids = links.T.astype(jnp.int32)
    out_of_range = jnp.any(ids >= num_links) | jnp.any(ids < -1)
    unused = (ids < 0) | (ids >= num_links)
    coef_hm = None
    if coef is not None:
        coef_hm = coef.T
        unused |= ~(coef_hm > 0)
    unbounded = jnp.concatenate([capacity == jnp.inf, jnp.ones(1, bool)])
    unused |= gather(unbounded, jnp.where(unused, num_links, ids))
    if coef_hm is not None:
        coef_hm = jnp.where(unused, 0, coef_hm)
    return jnp.where(unused, num_links, ids), coef_hm, out_of_range


def exact_sum_quantum(capacity):
    """Grid step for exact float32 sums of link loads (``None`` for float64).

    Loads on a link never exceed its capacity, so loads rounded down to multiples of
    ``q = 2**(ceil(log2(max capacity)) - 23)`` add up exactly in float32 (every partial
    sum is a multiple of ``q`` below ``2**24 q``); only the small remainders (each
    ``< q``) are summed with rounding. This keeps ``capacity - load`` accurate when a link
    is nearly full, which is what makes float32 rates agree with float64 to ~1e-6.
    """
    if capacity.dtype != jnp.float32:
        return None
    finite = jnp.where(jnp.isfinite(capacity), capacity, 0)
    largest = jnp.maximum(jnp.max(finite, initial=0), jnp.finfo(jnp.float32).tiny * 2**24)
    return jnp.exp2(jnp.ceil(jnp.log2(largest)) - 23)


def residual_capacity(capacity_ext, frozen_rate, ids, coef_hm, quantum, axis_name=None):
    """``capacity - sum of frozen loads`` per slot (>= 0), recomputed from the rates.

    ``axis_name``: inside ``shard_map`` with the flows split across devices, the name of
    the mesh axis over which the per-link loads are summed (``None``: all flows are here).
    """
    slots = capacity_ext.shape[0]
    if quantum is None:
        load = all_reduce(scatter_hops(frozen_rate, ids, coef_hm, slots, "add", 0), axis_name)
        return jnp.maximum(capacity_ext - load, 0)
    high = jnp.zeros(slots, frozen_rate.dtype)
    low = jnp.zeros(slots, frozen_rate.dtype)
    for hop in range(ids.shape[0]):
        values = frozen_rate if coef_hm is None else frozen_rate * coef_hm[hop]
        values_high = jnp.floor(values / quantum) * quantum
        values_low = jnp.where(jnp.isfinite(values), values - values_high, 0)
        high = high.at[ids[hop]].add(values_high, mode="promise_in_bounds")
        low = low.at[ids[hop]].add(values_low, mode="promise_in_bounds")
    # The high parts are multiples of the quantum below 2**24 of it: their sum across
    # devices is exact too, in any order.
    high, low = all_reduce(high, axis_name), all_reduce(low, axis_name)
    return jnp.maximum((capacity_ext - high) - low, 0)


def all_reduce(per_link, axis_name, how: str = "add"):
    """Sum (``add``) or minimum (``min``) of a per-link array over the devices of mesh axis
    ``axis_name`` (inside ``shard_map``); the array itself when ``axis_name`` is None."""
    if axis_name is None:
        return per_link
    return jax.lax.psum(per_link, axis_name) if how == "add" else jax.lax.pmin(per_link, axis_name)


def gather(values, index):
    """``values[index]`` for indices known to be in range (no clamping code)."""
    return values.at[index].get(mode="promise_in_bounds")


def scatter_hops(per_flow, ids, coef_hm, num_slots, how, identity):
    """Per-link reduction (``add`` or ``min``) of ``per_flow[f] * coef[h, f]`` over entries.

    One scatter per hop into a ``[num_slots]`` array (``L + 1``: the last slot is the
    sentinel). Per-hop
    scatters of an ``[F]`` vector avoid materialising ``[H, F]`` temporaries. A
    batch-minor ``per_flow [F, B]`` gives ``[num_slots, B]``: each entry writes a
    contiguous row of ``B`` values (the coefficients ``[H, F]`` are shared by the batch).
    """
    out = jnp.full((num_slots, *per_flow.shape[1:]), identity, per_flow.dtype)
    batch_ones = (1,) * (per_flow.ndim - 1)  # coefficients broadcast over the batch axis
    for hop in range(ids.shape[0]):
        values = per_flow if coef_hm is None else per_flow * coef_hm[hop].reshape(-1, *batch_ones)
        target = out.at[ids[hop]]
        out = (
            target.add(values, mode="promise_in_bounds")
            if how == "add"
            else target.min(values, mode="promise_in_bounds")
        )
    return out


def min_over_hops(per_link, ids, inf):
    """``[F]``: the minimum of ``per_link`` over each flow's hops (``inf`` with no hops)."""
    out = jnp.full(ids.shape[1], inf, per_link.dtype)
    for hop in range(ids.shape[0]):
        out = jnp.minimum(out, gather(per_link, ids[hop]))
    return out


def input_status(nonfinite, infeasible):
    """Status before the loop: NONFINITE / INFEASIBLE if any flag array has a True."""
    bad = jnp.any(jnp.stack([jnp.any(flag) for flag in nonfinite]))
    wrong = jnp.any(jnp.stack([jnp.any(flag) for flag in infeasible]))
    return jnp.where(
        bad, Status.NONFINITE, jnp.where(wrong, Status.INFEASIBLE, Status.CONVERGED)
    ).astype(jnp.int32)


def final_status(start_status, unsettled, values):
    """Status after the loop: keep an input error, else unsettled -> MAX_ITERS_REACHED."""
    return jnp.where(
        start_status != Status.CONVERGED,
        start_status,
        jnp.where(
            unsettled,
            Status.MAX_ITERS_REACHED,
            jnp.where(jnp.any(jnp.isnan(values)), Status.NONFINITE, Status.CONVERGED),
        ),
    ).astype(jnp.int32)
