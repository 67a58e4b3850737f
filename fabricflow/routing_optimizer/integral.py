"""Integral routing: one path per flow (per-flow path pinning), never worse than ECMP.

Switches that pin a flow to one path (static routes, per-flow PBR, SDN path pinning)
cannot split it, so the integral plan picks exactly one candidate per flow. Picking them
to minimize the makespan is the unsplittable multicommodity flow problem over fixed
paths (NP-hard); the method is the textbook one, in three stages:

1. **Starts**: ECMP's own path (candidate 0, see :mod:`.ecmp_candidate`), the largest
   share of each flow in the fractional solution, and :data:`ROUNDINGS` randomized
   roundings of it (flow ``f`` takes path ``k`` with probability ``split[f, k]``;
   Raghavan and Thompson, "Randomized rounding", Combinatorica 1987), all evaluated at
   once; the best one is kept. The result is therefore never worse than ECMP.
2. **Repair and local search**: best-response descent on the exponential potential of
   :mod:`.potential_descent` at rising sharpness (:data:`BETAS`), then iterated local
   search: up to :data:`KICKS` times (fewer once :data:`KICK_PATIENCE` kicks in a row
   found nothing), half the flows on the busiest links are moved to a random other
   candidate and the descent repairs the result; a better assignment replaces the best
   one. The search stops early within :data:`FRACTIONAL_RTOL` of the fractional split's
   makespan (near the linear program's optimum, which one path per flow cannot beat). Every stage keeps the best assignment seen.
3. **Exact program** for small instances (at most
   :data:`~.integral_milp.MAX_VARIABLES` flow-path variables): the mixed-integer program
   of :mod:`.integral_milp` (HiGHS), bounded above by stage 2's makespan, which proves the
   result within 1 % of the integral optimum unless the time limit ends it first.

The loops are over rounds, kicks and rounding batches, never over flows. All descents of
one call share a budget of :data:`MAX_WORK` priced comparisons (deterministic, unlike a
time limit), which bounds the search on huge instances.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fabricflow.link_loads import link_load
from fabricflow.routing_optimizer.integral_milp import MAX_VARIABLES, solve_milp
from fabricflow.routing_optimizer.potential_descent import batch_makespans, descend

ROUNDINGS = 32
# ... fewer on huge instances, so that the R x F x K draw stays this many entries at most.
ROUNDING_ENTRIES = 4e7
# Comparisons (C K H H per round) all descents of one call may price together: about a
# minute of numpy on a core; the search keeps its best assignment when it runs out.
MAX_WORK = 2e10
BETAS = (4.0, 8.0, 16.0, 32.0, 64.0, 128.0)
KICKS = 30
# ... stopping after this many kicks in a row that found nothing better.
KICK_PATIENCE = 8
# A kick moves each flow on a busiest link with this probability.
KICK_FRACTION = 0.5
DEFAULT_MAX_ROUNDS = 500
DEFAULT_MILP_TIME_LIMIT_S = 10.0
# Relative tolerance of "at the makespan" and of "meets the lower bound".
TIE_RTOL = 1e-9
# The local search stops once within this of the fractional split's makespan: that split
# is near the linear program's optimum, which no one-path routing beats.
FRACTIONAL_RTOL = 1e-3


class IntegralResult(NamedTuple):
    """Output of :func:`integral_choice`."""

    choice: np.ndarray  # int64 [F] path index per flow
    makespan_s: float  # of ``choice`` (float64)
    start: str  # which start the search grew from: "ecmp", "largest share", "rounding"
    ecmp_makespan_s: float  # of candidate 0 (ECMP's path) for every flow
    rounds: int  # descent rounds, all stages
    kicks: int  # kicks run
    method: str  # "local search", "milp optimal", "milp time limit"
    lower_bound_s: float  # proven lower bound on the integral optimum (s)


def integral_choice(
    paths: np.ndarray,
    split: np.ndarray,
    size: np.ndarray,
    capacity: np.ndarray,
    *,
    lower_bound_s: float = 0.0,
    fractional_s: float = 0.0,
    seed: int = 0,
    milp_time_limit_s: float = DEFAULT_MILP_TIME_LIMIT_S,
    max_rounds: int = DEFAULT_MAX_ROUNDS,
) -> IntegralResult:
    """One path per flow minimizing the makespan (module docstring).

    Args:
        paths: int ``[F, K, H]`` candidates (``-1`` padded), row 0 ECMP's path.
        split: ``[F, K]`` the fractional solution (rows sum to 1).
        size: ``[F]`` bytes; ``capacity`` ``[L]`` bytes/s (> 0 on every candidate link).
        lower_bound_s: a known lower bound on any split's makespan (the search stops
            when it meets it).
        fractional_s: the makespan of ``split`` (the local search stops within
            :data:`FRACTIONAL_RTOL` of it; the exact program still runs on small instances
            unless the bound is met).
        seed: seed of the randomized roundings and of the kicks.
        milp_time_limit_s: seconds the exact program may take (0: skip it).
        max_rounds: bound on the rounds of each descent.
    """
    search = _Search(paths, size, capacity, seed, max_rounds)
    search.lower = max(float(lower_bound_s), _single_flow_bound(paths, size, search.inv_cap))
    start, ecmp_span = search.start(split)
    if paths.shape[1] > 1 and not search.close_enough(fractional_s):
        search.improve(search.best.copy(), BETAS, search.best_span)
        idle = 0
        while search.kicks < KICKS and idle < KICK_PATIENCE and search.work_left > 0:
            if search.close_enough(fractional_s) or not search.kick():
                break
            idle = 0 if search.improved else idle + 1
    method = "local search"
    movable = search.count > 1
    if (
        paths.shape[1] > 1
        and milp_time_limit_s > 0
        and not search.done()
        and int(np.count_nonzero(search.valid[movable])) <= MAX_VARIABLES
    ):
        exact = solve_milp(
            paths,
            size,
            capacity,
            incumbent_s=search.best_span,
            lower_s=search.lower,
            time_limit_s=milp_time_limit_s,
        )
        search.lower = max(search.lower, exact.lower_bound_s)
        if exact.choice is not None:
            search.offer(exact.choice)
        method = "milp optimal" if exact.optimal else "milp time limit"
    return IntegralResult(
        search.best,
        search.best_span,
        start,
        ecmp_span,
        search.rounds,
        search.kicks,
        method,
        min(search.lower, search.best_span),
    )


class _Search:
    """The state of one integral search: the problem, the best assignment so far, the
    counters and the work left (every stage only ever replaces ``best`` by a better one)."""

    def __init__(self, paths, size, capacity, seed: int, max_rounds: int):
        self.paths, self.size, self.max_rounds = paths, size, max_rounds
        self.num_links = capacity.shape[0]
        self.inv_cap = np.where(capacity > 0, 1.0 / np.where(capacity > 0, capacity, 1.0), 0.0)
        self.valid = np.any(paths >= 0, axis=2)
        self.count = self.valid.sum(axis=1)
        self.rng = np.random.default_rng(seed)
        self.rounds = self.kicks = 0
        self.work_left = MAX_WORK
        self.lower = 0.0
        self.improved = False

    def start(self, split) -> tuple[str, float]:
        """Evaluate the starts at once and keep the best; returns its name and ECMP's
        makespan."""
        num_flows, k = split.shape
        starts = {
            "ecmp": np.zeros(num_flows, np.int64),
            "largest share": np.argmax(np.where(self.valid, split, -1.0), axis=1),
        }
        roundings = (
            _sample(split, self.valid, self.count, self.rng)
            if k > 1
            else np.zeros((0, num_flows), np.int64)
        )
        choices = np.concatenate([np.stack(list(starts.values())), roundings])
        spans = batch_makespans(self.paths, choices, self.size, self.inv_cap)
        first = int(np.argmin(spans))
        self.best, self.best_span = choices[first], float(spans[first])
        return (list(starts) + ["rounding"] * roundings.shape[0])[first], float(spans[0])

    def done(self) -> bool:
        """The best assignment meets the lower bound: it is optimal."""
        return self.best_span <= self.lower * (1 + TIE_RTOL)

    def close_enough(self, fractional_s: float) -> bool:
        return self.done() or self.best_span <= fractional_s * (1 + FRACTIONAL_RTOL)

    def offer(self, choice) -> None:
        """Keep ``choice`` if it beats the best; ``improved`` says whether it did."""
        load = link_load(self.paths[np.arange(choice.size), choice], self.size, self.num_links)
        span = float((load * self.inv_cap).max(initial=0.0))
        self.improved = span < self.best_span * (1 - TIE_RTOL)
        if self.improved:
            self.best, self.best_span = choice, span

    def improve(self, choice, betas, scale: float) -> None:
        """Descend from ``choice`` at each sharpness in turn, offering every result."""
        improved = False
        for beta in betas:
            choice, used, spent = descend(
                self.paths,
                self.size,
                self.inv_cap,
                choice,
                beta=beta,
                scale=scale,
                max_rounds=self.max_rounds,
                max_work=self.work_left,
            )
            self.rounds, self.work_left = self.rounds + used, self.work_left - spent
            self.offer(choice.copy())
            improved |= self.improved
        self.improved = improved

    def kick(self) -> bool:
        """Move about half the flows on the busiest links to another candidate at random,
        descend again; False when no flow on them can move."""
        rows = np.arange(self.best.size)
        current = self.paths[rows, self.best]
        load = link_load(current, self.size, self.num_links)
        hot = load * self.inv_cap >= self.best_span * (1 - TIE_RTOL)
        on_hot = np.flatnonzero(
            np.any((current >= 0) & hot[np.maximum(current, 0)], axis=1) & (self.count > 1)
        )
        if on_hot.size == 0:
            return False
        self.kicks += 1
        moved = on_hot[self.rng.random(on_hot.size) < KICK_FRACTION]
        if moved.size == 0:
            moved = on_hot[self.rng.integers(on_hot.size, size=1)]
        choice = self.best.copy()
        count = self.count[moved]
        choice[moved] = (choice[moved] + self.rng.integers(1, count)) % count
        self.improve(choice, BETAS[-3:], self.best_span)
        return True


def _sample(split, valid, count, rng) -> np.ndarray:
    """int64 ``[R, F]``: path indices drawn with probabilities ``split``, ``R`` =
    :data:`ROUNDINGS` (fewer past :data:`ROUNDING_ENTRIES` draws in all)."""
    samples = int(min(ROUNDINGS, max(2, ROUNDING_ENTRIES // max(split.size, 1))))
    cumulative = np.cumsum(np.where(valid, split, 0.0), axis=1)
    draw = rng.random((samples, split.shape[0])) * cumulative[:, -1]
    picked = (cumulative[None, :, :] <= draw[:, :, None]).sum(axis=2)
    return np.minimum(picked, count - 1).astype(np.int64)


def _single_flow_bound(paths, size, inv_cap) -> float:
    """Seconds: no assignment beats the largest flow on its best candidate alone."""
    if paths.shape[0] == 0:
        return 0.0
    alone = np.where(paths >= 0, inv_cap[np.maximum(paths, 0)], 0.0).max(axis=2)
    alone = np.where(np.any(paths >= 0, axis=2), alone, np.inf)
    return float((size * alone.min(axis=1)).max(initial=0.0))
