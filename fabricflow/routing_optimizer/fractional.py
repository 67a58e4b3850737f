"""The fractional routing solver: optax (adam) on per-flow softmax logits, jitted.

Given candidate paths ``[F, K, H]`` and flow sizes, the split ``x[f, k]`` (softmax of
logits over the valid paths of flow ``f``) puts ``size[f] * x[f, k]`` bytes on every
link of path ``k``. The drain time of link ``l`` is ``t_l = bytes_l / capacity_l``; the
makespan ``max_l t_l`` is the time at which the last link drains under ideal sharing.

The max is not smooth, so the optimizer descends its log-sum-exp surrogate
``(1 / beta) log sum_l exp(beta t_l / T0)`` (``T0`` the makespan of the even split, so
the drain times are O(1)), with ``beta`` raised geometrically over the run: a small
``beta`` spreads the gradient over many busy links early, a large one makes the
surrogate tight (its gap to the max is at most ``log(L) / beta``) at the end. The exact
makespan is evaluated at every step and the best split seen is returned, so the result
never gets worse than the even split it starts from.

Hot path: one ``segment_sum`` over the ``F * K * H`` link entries per step (and its
transpose, a gather, for the gradient), float32, inside one bounded ``lax.while_loop``; the step
count and the link count are static, nothing else recompiles.

Early stop: a link that lies on every candidate path of a flow carries that flow whatever
the split, so the forced bytes give a lower bound on the makespan
(:func:`forced_lower_bound`; on a Clos, the NIC links of all-to-all traffic). The loop (a
bounded ``lax.while_loop``) stops when the best split meets it, and is skipped when the
even split already does.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

# Sharpness of the surrogate at the start and at the end of a run (drain times are
# normalized to ~1, so 1/beta is the relative resolution of the surrogate).
BETA_START = 20.0
BETA_END = 2000.0
DEFAULT_LEARNING_RATE = 0.1
# Bytes per link entry on the hot path: int32 id, float32 bytes, its cotangent and
# the optimizer's temporaries (measured ~ 30 B; margin for XLA buffers).
BYTES_PER_ENTRY = 48
# Bytes per (flow, path) variable: logits, adam moments, best logits, split, grads.
BYTES_PER_VARIABLE = 48


class FractionalResult(NamedTuple):
    """Output of :func:`solve_fractional` (numpy)."""

    split: np.ndarray  # float64 [F, K], rows sum to 1, zero on padded paths
    makespan_s: float  # exact max drain time of ``split`` (float64 host evaluation)
    history: np.ndarray  # float32 [steps run] exact makespan (s) at each step
    lower_bound_s: float  # makespan no split over these candidates can beat (s)


# Stop once the best makespan is within this factor of the forced-load lower bound (the
# float32 hot path cannot resolve more).
BOUND_RTOL = 1e-5


def forced_lower_bound(paths: np.ndarray, size: np.ndarray, capacity: np.ndarray) -> float:
    """Seconds: a lower bound on the makespan of *any* split over ``paths``.

    A link on every candidate path of a flow carries the whole flow whatever the split
    (the NIC links of a Clos flow, for one); the busiest link counting only such forced
    bytes cannot drain sooner. When the even split already meets it, it is optimal.
    """
    valid = np.any(paths >= 0, axis=2)
    first = paths[:, 0, :]  # every flow has a path in row 0
    forced = first >= 0
    for j in range(1, paths.shape[1]):  # loop over the K candidates, not flows
        inside = np.any(paths[:, j, :, None] == first[:, None, :], axis=1)
        forced &= inside | ~valid[:, j : j + 1]
    per_entry = np.broadcast_to(size[:, None], first.shape)[forced]
    load = np.bincount(first[forced], weights=per_entry, minlength=capacity.shape[0])
    used = load > 0
    return float((load[used] / capacity[used]).max(initial=0.0))


def default_steps(num_flows: int) -> int:
    """Adam steps when the caller gives none: more on small problems (cheap, and they
    are the ones checked against the linear program), fewer on huge ones (each step
    streams every link entry)."""
    if num_flows <= 20_000:
        return 1500
    if num_flows <= 200_000:
        return 600
    return 250


def drain_times(paths: np.ndarray, split: np.ndarray, size: np.ndarray, capacity: np.ndarray):
    """float64 ``[L]`` seconds: bytes on each link / its capacity (0 on unused links).

    ``paths`` int ``[F, K, H]`` (``-1`` padded), ``split`` ``[F, K]``, ``size`` ``[F]``
    bytes, ``capacity`` ``[L]`` bytes/s. A loaded link of capacity 0 gives ``inf``.
    """
    per_entry = np.broadcast_to((size[:, None] * split)[:, :, None], paths.shape)
    used = paths >= 0
    load = np.bincount(paths[used], weights=per_entry[used], minlength=capacity.shape[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(load > 0, load / capacity, 0.0)


def solve_fractional(
    paths: np.ndarray,
    size: np.ndarray,
    capacity: np.ndarray,
    *,
    steps: int,
    learning_rate: float,
    seed: int = 0,
) -> FractionalResult:
    """Minimize the makespan over splits on the candidate ``paths``.

    Args:
        paths: int32 ``[F, K, H]`` link ids, ``-1`` padded; every flow has a path in row 0.
        size: float ``[F]`` bytes (> 0 somewhere).
        capacity: float ``[L]`` bytes/s; links on candidate paths have capacity > 0.
        steps: adam steps (static: a new count compiles anew).
        learning_rate: adam step size on the logits.
        seed: jitter of the initial logits (breaks the symmetry of identical flows).
    """
    num_flows, k, hops = paths.shape
    num_links = int(capacity.shape[0])
    valid = np.any(paths >= 0, axis=2)
    even = np.where(valid, 1.0 / valid.sum(axis=1, keepdims=True), 0.0)
    scale = float(drain_times(paths, even, size, capacity).max(initial=0.0))
    bound = forced_lower_bound(paths, size, capacity) if num_flows else 0.0
    if num_flows == 0 or scale <= bound * (1 + BOUND_RTOL) or k == 1:
        # nothing to split, or the even split meets the bound: it is optimal
        return FractionalResult(even, scale, np.full(0, scale, np.float32), bound)
    ids = np.where(paths >= 0, paths, num_links).reshape(-1).astype(np.int32)
    inv_cap = np.where(capacity > 0, 1.0 / np.where(capacity > 0, capacity, 1.0), 0.0)
    # Work in units of T0 (drain times ~1) and bytes / (T0 capacity): float32-safe.
    weight = (size / scale).astype(np.float32)
    jitter = np.random.default_rng(seed).normal(0.0, 1e-3, (num_flows, k)).astype(np.float32)
    best, history, steps_run = _run(
        jnp.asarray(ids),
        jnp.asarray(weight),
        jnp.asarray(valid),
        jnp.asarray(np.append(inv_cap, 0.0).astype(np.float32)),
        jnp.asarray(jitter),
        jnp.float32(learning_rate),
        jnp.float32(bound / scale * (1 + BOUND_RTOL)),
        steps=int(steps),
        hops=hops,
    )
    split = _softmax_host(np.asarray(best, np.float64), valid)
    fractional = float(drain_times(paths, split, size, capacity).max())
    if fractional > scale:  # never return worse than the even split (float32 rounding)
        split, fractional = even, scale
    history = np.asarray(history)[: int(steps_run)] * np.float32(scale)
    return FractionalResult(split, fractional, history, bound)


def _softmax_host(logits: np.ndarray, valid: np.ndarray) -> np.ndarray:
    z = np.where(valid, logits, -np.inf)
    z = z - z.max(axis=1, keepdims=True)
    e = np.where(valid, np.exp(z), 0.0)
    return e / e.sum(axis=1, keepdims=True)


def masked_softmax(logits, valid):
    """Softmax over the valid paths of each flow (padded paths get exactly 0)."""
    z = jnp.where(valid, logits, -1e30)
    z = z - jax.lax.stop_gradient(z.max(axis=1, keepdims=True))
    e = jnp.where(valid, jnp.exp(z), 0.0)
    return e / e.sum(axis=1, keepdims=True)


def link_times(split, ids, weight, inv_cap, hops: int):
    """``[L + 1]`` drain times (last entry: the padding sentinel, inv_cap 0)."""
    per_entry = jnp.repeat((weight[:, None] * split).reshape(-1), hops)
    load = jax.ops.segment_sum(per_entry, ids, num_segments=inv_cap.shape[0])
    return load * inv_cap


@functools.partial(jax.jit, static_argnames=("steps", "hops"))
def _run(ids, weight, valid, inv_cap, logits0, learning_rate, good_enough, *, steps, hops):
    """``steps`` adam steps at most (a bounded ``while_loop``), stopping early once the
    best exact makespan (in units of the even split's) is ``<= good_enough``."""
    optimizer = optax.adam(learning_rate)
    growth = (BETA_END / BETA_START) ** (1.0 / max(steps - 1, 1))

    def surrogate(logits, beta):
        times = link_times(masked_softmax(logits, valid), ids, weight, inv_cap, hops)
        return jax.nn.logsumexp(beta * times) / beta, times.max()

    grad_fn = jax.value_and_grad(surrogate, has_aux=True)

    def body(carry):
        i, logits, state, best_logits, best_value, history = carry
        beta = BETA_START * growth ** i.astype(jnp.float32)
        (_, exact), grads = grad_fn(logits, beta)
        better = exact < best_value
        best_logits = jnp.where(better, logits, best_logits)
        best_value = jnp.where(better, exact, best_value)
        updates, state = optimizer.update(grads, state, logits)
        return (
            i + 1,
            optax.apply_updates(logits, updates),
            state,
            best_logits,
            best_value,
            history.at[i].set(exact),
        )

    def running(carry):
        return (carry[0] < steps) & (carry[4] > good_enough)

    init = (
        jnp.int32(0),
        logits0,
        optimizer.init(logits0),
        logits0,
        jnp.float32(jnp.inf),
        jnp.zeros(steps, jnp.float32),
    )
    steps_run, logits, _, best_logits, best_value, history = jax.lax.while_loop(running, body, init)
    # the final iterate is evaluated too
    final = link_times(masked_softmax(logits, valid), ids, weight, inv_cap, hops).max()
    best_logits = jnp.where(final < best_value, logits, best_logits)
    return best_logits, history, steps_run
