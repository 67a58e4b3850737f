"""``ff.optimize_routing``: split flows over candidate paths to minimize the makespan.

Pipeline (host -> jit -> host):

1. candidate paths, ``[F, K, H]`` (:func:`fabricflow.routing.candidates.candidate_paths`),
   ECMP's own path first (:mod:`.ecmp_candidate`), so that no plan is worse than ECMP;
2. the fractional split by optax on softmax logits (:mod:`.fractional`);
3. with ``integral=True``, one path per flow: roundings, a local search and, on small
   instances, an exact mixed-integer program (:mod:`.integral`).

Memory is estimated and checked (:func:`fabricflow.memory_budget.check_memory`) before the
candidate arrays and the optimizer state are allocated.
"""

from __future__ import annotations

import math
import time

import numpy as np

from fabricflow.errors import RoutingError, SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.memory_budget import check_memory
from fabricflow.routing.candidates import candidate_paths
from fabricflow.routing.route import validate_endpoints
from fabricflow.routing_optimizer import fractional
from fabricflow.routing_optimizer.ecmp_candidate import with_ecmp_first
from fabricflow.routing_optimizer.fractional import drain_times, solve_fractional
from fabricflow.routing_optimizer.integral import DEFAULT_MILP_TIME_LIMIT_S, integral_choice
from fabricflow.routing_optimizer.plan import RoutingPlan

OBJECTIVES = ("makespan",)
MAX_K = 64


def optimize_routing(
    fabric: Fabric,
    src,
    dst,
    *,
    size,
    k: int = 8,
    objective: str = "makespan",
    integral: bool = False,
    steps: int | None = None,
    learning_rate: float | None = None,
    seed: int = 0,
    milp_time_limit_s: float = DEFAULT_MILP_TIME_LIMIT_S,
) -> RoutingPlan:
    """Route flows ``src[i] -> dst[i]`` over up to ``k`` candidate paths each, minimizing
    the makespan (max over links of bytes / capacity).

    Args:
        fabric: the network (failed links are avoided).
        src, dst: int ``[F]`` GPU indices, ``src != dst``.
        size: bytes per flow, a scalar or ``[F]``; finite and ``>= 0``.
        k: candidate paths per flow, ``1..64`` (equal-cost paths on Clos; shortest and
            near-shortest on torus and dragonfly); the first is the path ECMP's hash
            (``ff.route(..., policy="ecmp", seed=seed)``) gives the flow.
        objective: ``"makespan"``.
        integral: one path per flow (per-flow path pinning) instead of a split. Either
            way the plan's makespan is at most ECMP's on the same flows.
        steps: the most adam steps (default by problem size: 1500 up to 20k flows, 600
            up to 200k, 250 beyond); the run stops early when the split meets the
            forced-load lower bound (see :mod:`.fractional`).
        learning_rate: adam step size on the logits (default 0.1).
        seed: seed of the ECMP hash, of the candidate choice, of the initial jitter and
            of the integral mode's roundings.
        milp_time_limit_s: integral mode: seconds HiGHS may spend on the exact program
            of instances of up to 60,000 flow-path variables (0 skips it; the result is
            deterministic unless this limit ends the search).

    Returns:
        :class:`RoutingPlan`.

    Raises:
        SpecError: bad ``k``, ``size``, ``objective``, ``steps``, ``learning_rate``,
            ``seed`` or endpoints (naming the field).
        RoutingError: flows with no working path.
        MemoryBudgetError: the problem would not fit in memory.

    Complexity: per adam step, one scatter-add and one gather over ``F * K * H`` link
    entries; memory about 50 bytes per entry.

    Example::

        plan = ff.optimize_routing(fabric, src, dst, size=1e6, k=4)
        rates = ff.max_min_rates(plan.routes().links, fabric.capacity,
                                 coef=plan.routes().coef)
    """
    started = time.perf_counter()
    if not isinstance(fabric, Fabric):
        raise SpecError(
            "fabric",
            f"expected a Fabric (fabricflow.load_fabric(name)), got {type(fabric).__name__}",
        )
    src_arr, dst_arr = validate_endpoints(fabric, src, dst)
    num = src_arr.shape[0]
    size_arr = check_size(size, num)
    k = check_k(k)
    steps, learning_rate = _check_options(
        num,
        objective=objective,
        integral=integral,
        seed=seed,
        steps=steps,
        learning_rate=learning_rate,
        milp_time_limit_s=milp_time_limit_s,
    )
    paths, capacity = _checked_paths(fabric, src_arr, dst_arr, k, int(seed))
    solved = solve_fractional(
        paths,
        size_arr,
        capacity,
        steps=int(steps),
        learning_rate=float(learning_rate),
        seed=int(seed),
    )
    split, makespan = solved.split, solved.makespan_s
    ecmp_split = np.zeros_like(split)
    ecmp_split[:, 0] = 1.0
    ecmp_makespan = float(drain_times(paths, ecmp_split, size_arr, capacity).max(initial=0.0))
    if makespan > ecmp_makespan:  # the optimizer stopped short of ECMP: keep ECMP
        split, makespan = ecmp_split, ecmp_makespan
    fractional_makespan, pinned = makespan, None
    if integral:
        pinned = integral_choice(
            paths,
            split,
            size_arr,
            capacity,
            lower_bound_s=solved.lower_bound_s,
            fractional_s=fractional_makespan,
            seed=int(seed),
            milp_time_limit_s=float(milp_time_limit_s),
        )
        split = np.zeros_like(split)
        split[np.arange(num), pinned.choice] = 1.0
        makespan = float(drain_times(paths, split, size_arr, capacity).max(initial=0.0))
    return RoutingPlan(
        fabric=fabric,
        src=src_arr,
        dst=dst_arr,
        size=size_arr,
        paths=paths,
        split=split,
        makespan_s=makespan,
        objective=objective,
        integral=bool(integral),
        fractional_makespan_s=fractional_makespan,
        steps=int(solved.history.size),
        lower_bound_s=solved.lower_bound_s,
        history=solved.history,
        rounds=0 if pinned is None else pinned.rounds,
        seconds=time.perf_counter() - started,
        ecmp_makespan_s=ecmp_makespan,
        integral_method="" if pinned is None else pinned.method,
        integral_lower_bound_s=float("nan") if pinned is None else pinned.lower_bound_s,
    )


def _check_options(
    num: int, *, objective, integral, seed, steps, learning_rate, milp_time_limit_s
) -> tuple[int, float]:
    """Check :func:`optimize_routing`'s options (:class:`SpecError` naming the one that is
    wrong); returns ``(steps, learning_rate)`` with their defaults for ``num`` flows filled
    in."""
    if objective not in OBJECTIVES:
        raise SpecError("objective", f"must be one of {list(OBJECTIVES)}, got {objective!r}")
    if not isinstance(integral, (bool, np.bool_)):
        raise SpecError("integral", f"must be True or False, got {integral!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**63:
        raise SpecError("seed", f"must be an integer in 0..2**63-1, got {seed!r}")
    if steps is None:
        steps = fractional.default_steps(num)
    if (
        isinstance(steps, bool)
        or not isinstance(steps, (int, np.integer))
        or not 1 <= steps <= 10**6
    ):
        raise SpecError("steps", f"must be an integer in 1..1000000, got {steps!r}")
    if learning_rate is None:
        learning_rate = fractional.DEFAULT_LEARNING_RATE
    if (
        isinstance(learning_rate, bool)
        or not isinstance(learning_rate, (int, float, np.floating, np.integer))
        or not math.isfinite(learning_rate)
        or learning_rate <= 0
    ):
        raise SpecError("learning_rate", f"must be a finite number > 0, got {learning_rate!r}")
    if (
        isinstance(milp_time_limit_s, bool)
        or not isinstance(milp_time_limit_s, (int, float, np.floating, np.integer))
        or not math.isfinite(milp_time_limit_s)
        or milp_time_limit_s < 0
    ):
        raise SpecError(
            "milp_time_limit_s",
            f"must be a finite number of seconds >= 0, got {milp_time_limit_s!r}",
        )
    return int(steps), float(learning_rate)


def _checked_paths(
    fabric: Fabric, src: np.ndarray, dst: np.ndarray, k: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` candidate paths of every flow (int ``[F, k, H]`` link ids, ``-1``
    padded; ECMP's path first) and the fabric's capacity (float64 ``[L]``, B/s). Refuses,
    before the optimizer allocates, a problem too large for memory, and raises
    :class:`RoutingError` for a candidate path over a link of capacity 0."""
    paths = candidate_paths(fabric, src, dst, k, seed)
    paths = with_ecmp_first(fabric, src, dst, paths, seed)
    num, hops = src.shape[0], paths.shape[2]
    check_memory(
        num * k * hops * fractional.BYTES_PER_ENTRY + num * k * fractional.BYTES_PER_VARIABLE,
        f"optimizing the routing of {num:,} flows over {k} paths of up to {hops} links",
        hint="optimize fewer flows at a time or lower k",
    )
    capacity = np.asarray(fabric.capacity, np.float64)
    on_path = paths[paths >= 0]
    if on_path.size and np.any(capacity[on_path] <= 0):
        # Routers avoid failed links; a working link of capacity 0 is a broken spec.
        raise RoutingError("a candidate path crosses a link of capacity 0")
    return paths, capacity


def check_k(k) -> int:
    """``k`` as an int in ``1..MAX_K`` (SpecError otherwise)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= MAX_K:
        raise SpecError(
            "k", f"candidate paths per flow must be an integer in 1..{MAX_K}, got {k!r}"
        )
    return int(k)


def check_size(size, num: int) -> np.ndarray:
    """float64 ``[num]`` bytes per flow from a scalar or an array (SpecError otherwise)."""
    try:
        arr = np.asarray(size, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise SpecError(
            "size", f"must be a number or an array of bytes per flow ({error})"
        ) from None
    if arr.ndim == 0:
        arr = np.full(num, float(arr))
    if arr.shape != (num,):
        raise SpecError("size", f"must be a scalar or shape ({num},) like src, got {arr.shape}")
    bad = ~np.isfinite(arr) | (arr < 0)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise SpecError(
            "size", f"bytes per flow must be finite and >= 0; flow {first} has {arr[first]!r}"
        )
    return arr
