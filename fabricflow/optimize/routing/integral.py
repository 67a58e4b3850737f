"""Integral routing: one path per flow (per-flow path pinning), rounded and improved.

Switches that pin a flow to one path (static routes, per-flow PBR, SDN path pinning)
cannot split it, so the integral plan picks exactly one candidate per flow:

1. **Rounding**: each flow takes its largest share of the fractional solution.
2. **Local search** on the potential ``(makespan, number of links at the makespan)``:
   every round looks at the flows crossing a link at the makespan, prices each of their
   other candidate paths (the drain time of the busiest link of that path once the flow
   moves there) and moves the flows whose best alternative stays strictly below the
   makespan. All such moves are tried at once; if that does not lower the potential,
   the better half, then the better half of that, and so on down to the single best
   move, which always lowers it (its old hot link drops below the makespan and no link
   reaches it). The search stops when no flow on a hot link can move, or after
   ``max_rounds`` rounds.

Each round is vectorized over the flows on hot links (``[C, K, H, H]`` comparisons for
``C`` such flows); the loop is over rounds, never over flows.
"""

from __future__ import annotations

import numpy as np

from ...memory import check_memory

# Relative tolerance for "at the makespan" (float64 drain times).
TIE_RTOL = 1e-9
DEFAULT_MAX_ROUNDS = 2000


def _loads(paths_chosen: np.ndarray, size: np.ndarray, num_links: int) -> np.ndarray:
    used = paths_chosen >= 0
    weights = np.broadcast_to(size[:, None], paths_chosen.shape)[used]
    return np.bincount(paths_chosen[used], weights=weights, minlength=num_links)


def _potential(times: np.ndarray) -> tuple[float, int]:
    top = float(times.max(initial=0.0))
    return top, int(np.count_nonzero(times >= top * (1 - TIE_RTOL))) if top > 0 else 0


def integral_choice(
    paths: np.ndarray,
    split: np.ndarray,
    size: np.ndarray,
    capacity: np.ndarray,
    *,
    max_rounds: int = DEFAULT_MAX_ROUNDS,
) -> tuple[np.ndarray, int]:
    """int64 ``[F]`` chosen path index per flow, and the number of rounds used.

    Args:
        paths: int ``[F, K, H]`` candidates (``-1`` padded); ``split`` ``[F, K]`` the
            fractional solution to round; ``size`` ``[F]`` bytes; ``capacity`` ``[L]``
            bytes/s (positive on every candidate link).
    """
    num_flows, k, hops = paths.shape
    num_links = capacity.shape[0]
    valid = np.any(paths >= 0, axis=2)
    choice = np.argmax(np.where(valid, split, -1.0), axis=1)
    if num_flows == 0 or k == 1:
        return choice, 0
    rows = np.arange(num_flows)
    inv_cap = np.where(capacity > 0, 1.0 / np.where(capacity > 0, capacity, 1.0), 0.0)
    load = _loads(paths[rows, choice], size, num_links)
    rounds = 0
    for rounds in range(1, max_rounds + 1):  # noqa: B007 (rounds is reported)
        times = load * inv_cap
        times[load == 0] = 0.0
        top, count = _potential(times)
        if top == 0.0:
            break
        hot = times >= top * (1 - TIE_RTOL)
        current = paths[rows, choice]  # [F, H]
        on_hot = np.any((current >= 0) & hot[np.maximum(current, 0)], axis=1) & (size > 0)
        movers = np.flatnonzero(on_hot)
        check_memory(
            movers.size * k * hops * hops * 2 + movers.size * k * hops * 16,
            f"integral routing local search over {movers.size:,} flows",
        )
        cur = current[movers]  # [C, H]
        alt = paths[movers]  # [C, K, H]
        shared = np.any(alt[:, :, :, None] == cur[:, None, None, :], axis=3)
        link = np.maximum(alt, 0)
        added = np.where(shared, 0.0, size[movers][:, None, None])
        new_time = np.where(alt >= 0, (load[link] + added) * inv_cap[link], 0.0)
        bottleneck = new_time.max(axis=2)
        bottleneck[~valid[movers]] = np.inf
        bottleneck[np.arange(movers.size), choice[movers]] = np.inf
        best = np.argmin(bottleneck, axis=1)
        best_time = bottleneck[np.arange(movers.size), best]
        improving = np.flatnonzero(best_time < top * (1 - TIE_RTOL))
        if improving.size == 0:
            break
        improving = improving[np.argsort(best_time[improving], kind="stable")]
        batch = improving.size
        while True:
            take = improving[:batch]
            flows = movers[take]
            trial = choice.copy()
            trial[flows] = best[take]
            old_part = _loads(paths[flows, choice[flows]], size[flows], num_links)
            new_part = _loads(paths[flows, trial[flows]], size[flows], num_links)
            trial_load = load - old_part + new_part
            trial_times = trial_load * inv_cap
            trial_times[trial_load <= 0] = 0.0
            if _potential(trial_times) < (top, count) or batch == 1:
                # recompute from scratch: no drift from repeated add/subtract
                choice, load = trial, _loads(paths[rows, trial], size, num_links)
                break
            batch = max(batch // 2, 1)
    return choice, rounds
