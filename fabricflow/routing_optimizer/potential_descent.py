"""Best-response descent for one-path-per-flow routing, in batches of independent moves.

The makespan ``max_l t_l`` (``t_l`` = bytes on link ``l`` / its capacity) is flat almost
everywhere for single-flow moves: moving a flow off the busiest link rarely lowers the
maximum by itself. The descent therefore works on the smooth potential

    ``Phi = sum_l exp(beta * t_l / scale)``

(``scale`` a reference makespan), whose minimizers approach the makespan's as ``beta``
grows (``max_l t_l <= scale * log(Phi) / beta``), and which rewards draining a busy link
even when another one stays at the maximum. This is the potential behind Raghavan's
derandomized rounding for unsplittable flow (Raghavan, "Probabilistic construction of
deterministic algorithms", JCSS 1988) and the best-response dynamics of congestion games
(Rosenthal 1973): each move that lowers ``Phi`` is a strict improvement, so the descent
terminates.

One round prices, for every flow on a link within ``4 scale / beta`` of the busiest, the
change of ``Phi`` of moving it to each of its other candidates (``[C, K, H]`` arrays) and
keeps each flow's best improving move. It applies at once the best moves, at most ``m``
of them touching any one link (through its old or its new path), when that lowers
``Phi`` (evaluated exactly); otherwise ``m`` halves and the round tries again. At ``m = 1``
the moves touch pairwise disjoint links, so the change of ``Phi`` is exactly the sum of
theirs, negative: every round makes progress, and ``m`` doubles again after a success
(an all-to-all has hundreds of flows on each link: one move per link per round would take
thousands of rounds). The loop is over rounds, never over flows.
"""

from __future__ import annotations

import numpy as np

from fabricflow.link_loads import link_load
from fabricflow.memory_budget import check_memory

# Flows on links whose weight exp(beta (t - t_max) / scale) is below exp(-HOT_SPAN) are
# not priced: their moves barely change the potential.
HOT_SPAN = 4.0
# exp() of more than this overflows float64; larger exponents are clipped (the move
# they price is then simply very bad).
MAX_EXPONENT = 700.0
# A move must lower Phi (in units of the busiest link's term) by more than this.
MIN_GAIN = 1e-9
# A descent stops after a round that lowers Phi by less than this fraction of it.
MIN_ROUND_GAIN = 1e-6
# Moves per link per round: the start and the ceiling of the adaptive cap m.
CAP_START = 16
CAP_MAX = 1024


def batch_makespans(
    paths: np.ndarray, choices: np.ndarray, size: np.ndarray, inv_cap: np.ndarray
) -> np.ndarray:
    """float64 ``[R]`` seconds: the makespan of each of ``R`` assignments ``choices``
    (int ``[R, F]`` path index per flow) over candidates ``paths`` ``[F, K, H]``; one
    ``bincount`` over ``R * L`` bins."""
    num_samples, num_flows = choices.shape
    num_links = inv_cap.shape[0]
    check_memory(
        num_samples * (num_flows * paths.shape[2] * 24 + num_links * 8),
        f"evaluating {num_samples} integral routings of {num_flows:,} flows",
    )
    links = paths[np.arange(num_flows)[None, :], choices]  # [R, F, H]
    used = links >= 0
    ids = (links + (np.arange(num_samples, dtype=np.int64) * num_links)[:, None, None])[used]
    weights = np.broadcast_to(size[None, :, None], links.shape)[used]
    load = np.bincount(ids, weights=weights, minlength=num_samples * num_links)
    return (load.reshape(num_samples, num_links) * inv_cap).max(axis=1, initial=0.0)


def descend(
    paths: np.ndarray,
    size: np.ndarray,
    inv_cap: np.ndarray,
    choice: np.ndarray,
    *,
    beta: float,
    scale: float,
    max_rounds: int,
    max_work: float = float("inf"),
) -> tuple[np.ndarray, int, float]:
    """Lower ``Phi`` (module docstring) by moving flows between their candidates.

    Args:
        paths: int ``[F, K, H]`` candidates (``-1`` padded; all-``-1`` rows invalid).
        size: float64 ``[F]`` bytes; ``inv_cap``: float64 ``[L]`` 1 / (bytes/s), 0 on
            links that carry nothing.
        choice: int ``[F]`` the starting path index of each flow (a valid row).
        beta, scale: the potential's sharpness and reference makespan (s).
        max_rounds: bound on the rounds.
        max_work: bound on the priced comparisons (``C K H H`` per round, summed): the
            descent stops once a round would pass it (deterministic, unlike a time limit).

    Returns:
        ``(choice, rounds, work)``: the new int64 ``[F]`` path indices, the rounds run and
        the comparisons they priced.
    """
    num_flows, k, hops = paths.shape
    num_links = inv_cap.shape[0]
    rows = np.arange(num_flows)
    valid = np.any(paths >= 0, axis=2)
    choice = np.asarray(choice, np.int64).copy()
    load = link_load(paths[rows, choice], size, num_links)
    check_memory(  # the most a round allocates: every flow a mover
        num_flows * k * hops * (hops * 2 + 64),
        f"integral routing descent over {num_flows:,} flows",
    )
    rounds, work, cap = 0, 0.0, CAP_START
    for rounds in range(1, max_rounds + 1):  # noqa: B007 (rounds is reported)
        norm = beta / scale
        x = load * inv_cap * norm  # beta * t / scale per link
        top = float(x.max(initial=0.0))
        current = paths[rows, choice]
        hot = x >= top - HOT_SPAN
        movers = np.flatnonzero(
            np.any((current >= 0) & hot[np.maximum(current, 0)], axis=1)
            & (size > 0)
            & (valid.sum(axis=1) > 1)
        )
        cost = float(movers.size) * k * hops * hops
        if movers.size == 0 or work + cost > max_work:
            break
        work += cost
        gain, best = _best_moves(paths, size, inv_cap, choice, movers, x, norm, top)
        improving = np.flatnonzero(gain < -MIN_GAIN)
        if improving.size == 0:
            break
        phi = np.exp(np.minimum(x - top, MAX_EXPONENT)).sum()
        while True:
            flows, targets = _capped(
                paths, choice, movers[improving], best[improving], gain[improving], num_links, cap
            )
            old = link_load(paths[flows, choice[flows]], size[flows], num_links)
            trial = load + link_load(paths[flows, targets], size[flows], num_links) - old
            trial_phi = np.exp(np.minimum(trial * inv_cap * norm - top, MAX_EXPONENT)).sum()
            if trial_phi < phi or cap == 1:
                break
            cap = max(cap // 2, 1)
        choice[flows] = targets
        load = trial
        cap = min(cap * 2, CAP_MAX)
        if phi - trial_phi < MIN_ROUND_GAIN * phi:
            break  # converged: what is left would move Phi by nothing that matters
        if rounds % 64 == 0:  # recompute from scratch now and then: no drift
            load = link_load(paths[rows, choice], size, num_links)
    return choice, rounds, work


def _best_moves(paths, size, inv_cap, choice, movers, x, norm, top):
    """For each mover: the change of ``Phi / exp(top)`` of its best move (float64 ``[C]``)
    and that move's path index (int64 ``[C]``)."""
    cur = paths[movers, choice[movers]]  # [C, H]
    alt = paths[movers]  # [C, K, H]
    # membership of each link in the other path, OR-ed over the (few) hop positions:
    # contiguous [C, K, H] comparisons instead of a reduction over a [C, K, H, H] array
    alt_in_cur = np.zeros(alt.shape, bool)
    cur_in_alt = np.zeros(alt.shape, bool)
    for h in range(alt.shape[2]):  # loop over hop positions, not flows
        alt_in_cur |= alt == cur[:, None, h : h + 1]
        cur_in_alt |= cur[:, None, :] == alt[:, :, h : h + 1]
    weight = np.exp(np.minimum(x - top, MAX_EXPONENT))  # [L] each link's term of Phi
    grow = (size[movers] * norm)[:, None, None] * inv_cap[np.maximum(alt, 0)]  # [C, K, H]
    added = weight[np.maximum(alt, 0)] * np.expm1(np.minimum(grow, MAX_EXPONENT))
    added = np.where((alt >= 0) & ~alt_in_cur, added, 0.0)
    shrink = (size[movers] * norm)[:, None] * inv_cap[np.maximum(cur, 0)]  # [C, H]
    freed = weight[np.maximum(cur, 0)] * np.expm1(-shrink)  # <= 0
    removed = np.where((cur[:, None, :] >= 0) & ~cur_in_alt, freed[:, None, :], 0.0)
    delta = added.sum(axis=2) + removed.sum(axis=2)
    delta[~np.any(alt >= 0, axis=2)] = np.inf
    delta[np.arange(movers.size), choice[movers]] = np.inf
    best = np.argmin(delta, axis=1)
    return delta[np.arange(movers.size), best], best


def _capped(paths, choice, flows, targets, gain, num_links, cap: int):
    """The moves among ``flows -> targets`` kept, best (most negative ``gain``) first, while
    no link is touched (by an old or a new path) by more than ``cap`` kept moves; at
    ``cap = 1`` the kept moves touch pairwise disjoint links."""
    order = np.argsort(gain, kind="stable")
    flows, targets = flows[order], targets[order]
    old, new = paths[flows, choice[flows]], paths[flows, targets]
    shared = np.any(new[:, :, None] == old[:, None, :], axis=2)  # a link of both: once
    touched = np.concatenate([old, np.where(shared, -1, new)], axis=1)
    rank = np.broadcast_to(np.arange(flows.size)[:, None], touched.shape)
    used = touched >= 0
    links, ranks = touched[used], rank[used]  # row-major: ranks ascending
    by_link = np.argsort(links, kind="stable")  # within a link, ranks stay ascending
    sorted_links = links[by_link]
    start = np.searchsorted(sorted_links, sorted_links, side="left")
    position = np.arange(links.size) - start  # earlier moves touching the same link
    over = np.zeros(flows.size, bool)
    # a move past the cap on one of its links is dropped (counting dropped moves too, so
    # the kept ones never exceed the cap)
    over[ranks[by_link][position >= cap]] = True
    return flows[~over], targets[~over]
