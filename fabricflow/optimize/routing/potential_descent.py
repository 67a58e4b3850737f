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
change of ``Phi`` of moving it to each of its other candidates (``[C, K, H]`` arrays), keeps
each flow's best improving move, and applies at once a set of moves that touch pairwise
disjoint links (each link keeps the best move that touches it): the change of ``Phi`` is
then exactly the sum of theirs, negative. The loop is over rounds, never over flows.
"""

from __future__ import annotations

import numpy as np

from ...memory import check_memory

# Flows on links whose weight exp(beta (t - t_max) / scale) is below exp(-HOT_SPAN) are
# not priced: their moves barely change the potential.
HOT_SPAN = 4.0
# exp() of more than this overflows float64; larger exponents are clipped (the move
# they price is then simply very bad).
MAX_EXPONENT = 700.0
# A move must lower Phi (in units of the busiest link's term) by more than this.
MIN_GAIN = 1e-9


def link_loads(links: np.ndarray, size: np.ndarray, num_links: int) -> np.ndarray:
    """float64 ``[L]`` bytes: ``size[f]`` on every link of ``links[f]`` (int ``[F, H]``,
    ``-1`` padded)."""
    used = links >= 0
    weights = np.broadcast_to(size[:, None], links.shape)[used]
    return np.bincount(links[used], weights=weights, minlength=num_links)


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
) -> tuple[np.ndarray, int]:
    """Lower ``Phi`` (module docstring) by moving flows between their candidates.

    Args:
        paths: int ``[F, K, H]`` candidates (``-1`` padded; all-``-1`` rows invalid).
        size: float64 ``[F]`` bytes; ``inv_cap``: float64 ``[L]`` 1 / (bytes/s), 0 on
            links that carry nothing.
        choice: int ``[F]`` the starting path index of each flow (a valid row).
        beta, scale: the potential's sharpness and reference makespan (s).
        max_rounds: bound on the rounds.

    Returns:
        ``(choice, rounds)``: the new int64 ``[F]`` path indices and the rounds run.
    """
    num_flows, k, hops = paths.shape
    num_links = inv_cap.shape[0]
    rows = np.arange(num_flows)
    valid = np.any(paths >= 0, axis=2)
    choice = np.asarray(choice, np.int64).copy()
    load = link_loads(paths[rows, choice], size, num_links)
    check_memory(  # the most a round allocates: every flow a mover
        num_flows * k * hops * (hops * 2 + 64),
        f"integral routing descent over {num_flows:,} flows",
    )
    rounds = 0
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
        if movers.size == 0:
            break
        gain, best = _best_moves(paths, size, inv_cap, choice, movers, x, norm, top)
        improving = np.flatnonzero(gain < -MIN_GAIN)
        if improving.size == 0:
            break
        flows, targets = _independent(
            paths, choice, movers[improving], best[improving], gain[improving], num_links
        )
        old = link_loads(paths[flows, choice[flows]], size[flows], num_links)
        choice[flows] = targets
        load += link_loads(paths[flows, targets], size[flows], num_links) - old
        if rounds % 64 == 0:  # recompute from scratch now and then: no drift
            load = link_loads(paths[rows, choice], size, num_links)
    return choice, rounds


def _best_moves(paths, size, inv_cap, choice, movers, x, norm, top):
    """For each mover: the change of ``Phi / exp(top)`` of its best move (float64 ``[C]``)
    and that move's path index (int64 ``[C]``)."""
    cur = paths[movers, choice[movers]]  # [C, H]
    alt = paths[movers]  # [C, K, H]
    alt_in_cur = np.any(alt[:, :, :, None] == cur[:, None, None, :], axis=3)  # [C, K, H]
    cur_in_alt = np.any(cur[:, None, :, None] == alt[:, :, None, :], axis=3)  # [C, K, H]
    step = size[movers] * norm  # beta * size / scale, per flow
    link_a, link_c = np.maximum(alt, 0), np.maximum(cur, 0)
    base_a = x[link_a] - top
    grow = np.minimum(base_a + step[:, None, None] * inv_cap[link_a], MAX_EXPONENT)
    added = np.where((alt >= 0) & ~alt_in_cur, np.exp(grow) - np.exp(base_a), 0.0)
    base_c = x[link_c] - top
    freed = np.exp(base_c - step[:, None] * inv_cap[link_c]) - np.exp(base_c)  # [C, H] <= 0
    removed = np.where((cur[:, None, :] >= 0) & ~cur_in_alt, freed[:, None, :], 0.0)
    delta = added.sum(axis=2) + removed.sum(axis=2)
    delta[~np.any(alt >= 0, axis=2)] = np.inf
    delta[np.arange(movers.size), choice[movers]] = np.inf
    best = np.argmin(delta, axis=1)
    return delta[np.arange(movers.size), best], best


def _independent(paths, choice, flows, targets, gain, num_links):
    """The moves among ``flows -> targets`` kept when every link keeps only the best
    (most negative ``gain``) move touching it, via its old or its new path."""
    order = np.argsort(gain, kind="stable")
    flows, targets = flows[order], targets[order]
    touched = np.concatenate([paths[flows, choice[flows]], paths[flows, targets]], axis=1)
    rank = np.broadcast_to(np.arange(flows.size)[:, None], touched.shape)
    used = touched >= 0
    owner = np.full(num_links, flows.size, np.int64)
    link_ids, first = np.unique(touched[used], return_index=True)  # rank-major order
    owner[link_ids] = rank[used][first]
    keep = np.all(~used | (owner[np.maximum(touched, 0)] == rank), axis=1)
    return flows[keep], targets[keep]
