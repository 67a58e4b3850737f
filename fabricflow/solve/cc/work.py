"""Work of a congestion-control run, and the limit that refuses absurd ones.

Work is counted in entry-steps: ``(route entries F x H + links + a fixed per-step cost) x
steps x batch``. Calibrated on the bench (``fabricflow bench cc``): 100k flows x 4 hops x
10k steps ~ 50 s on 2 CPU cores, i.e. ~12.5 ns per entry-step (DCQCN; the other laws are
within a factor of two).
"""

from __future__ import annotations

import math
import numbers

from fabricflow.errors import SpecError

SECONDS_PER_ENTRY_STEP = 12.5e-9
# Fixed cost of one step in entry-steps (the scan's loop overhead and the small per-step
# ops): ~10 us per step for a 2-flow dumbbell on the same machine.
STEP_OVERHEAD_ENTRIES = 800
# Runs estimated above this many entry-steps (~1 hour on 2 cores) are refused unless
# ``max_work`` is raised: they are almost always a unit slip (a 1 ps step, 1000 s).
DEFAULT_MAX_WORK = 3e11
# The step counter is int32 inside the kernel.
MAX_STEPS = 2**31 - 1


def estimate_work(num_flows: int, hops: int, num_links: int, steps: int, batch: int = 0) -> float:
    """Work of a run in entry-steps: ``(F H + L + overhead) x steps x max(batch, 1)``.

    Multiply by :data:`SECONDS_PER_ENTRY_STEP` for seconds on 2 CPU cores.
    """
    return float(num_flows * hops + num_links + STEP_OVERHEAD_ENTRIES) * steps * max(batch, 1)


def check_work(work: float, steps: int, max_work: float | None) -> None:
    """Refuse (SpecError on ``duration``) a run above ``max_work`` (default
    :data:`DEFAULT_MAX_WORK`) entry-steps, saying how long it would take."""
    if max_work is not None and (
        isinstance(max_work, bool)
        or not isinstance(max_work, numbers.Real)
        or math.isnan(max_work)
        or max_work <= 0
    ):
        raise SpecError(
            "max_work",
            f"must be a number > 0 of entry-steps (math.inf: no limit), got {max_work!r}",
        )
    limit = DEFAULT_MAX_WORK if max_work is None else float(max_work)
    if work > limit:
        seconds = work * SECONDS_PER_ENTRY_STEP
        raise SpecError(
            "duration",
            f"the run is estimated at {work:.3g} entry-steps ({steps:.3g} "
            f"steps), about {human_time(seconds)} on 2 CPU cores, over the limit of "
            f"{limit:.3g} (max_work): shorten the duration, raise dt, simulate fewer "
            "flows or batch entries, or pass a larger max_work to run it anyway",
        )


def human_time(seconds: float) -> str:
    """``seconds`` as ``"42 s"``, ``"12 min"``, ``"3.5 h"`` or ``"4.2 days"``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.3g} days"


__all__ = [
    "DEFAULT_MAX_WORK",
    "MAX_STEPS",
    "SECONDS_PER_ENTRY_STEP",
    "STEP_OVERHEAD_ENTRIES",
    "check_work",
    "estimate_work",
    "human_time",
]
