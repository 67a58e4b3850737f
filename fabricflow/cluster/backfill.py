"""The job queue and the backfill policies of the cluster simulator.

The queue is kept in scheduling order: priority (higher first), then jobs re-queued after a
failure or a preemption (they keep their progress), then arrival, then trace order. Each
scheduling pass walks it in that order; what may start depends on the policy
(:data:`BACKFILL`):

- ``easy``: EASY backfill with a reservation, as Slurm's backfill scheduler does for the
  job at the head of the queue. The first job that cannot start gets a *reservation*:
  the earliest time (the *shadow time*) at which the GPUs that running jobs release at
  their expected ends (and failed GPUs at their repairs) let the scheduler place it, and
  the GPUs it would take then. A later job may start now only if it is expected to end
  by the shadow time, or if it can be placed without the reserved GPUs that are free now;
  so backfilling never delays the head job's expected start. The reservation is computed
  again at every pass (ends move with failures and slowdowns).
- ``greedy``: every job that can be placed starts; one that cannot is skipped. A large job
  can wait while smaller ones keep starting (no reservation).
- ``none``: first come, first served: nothing starts past the first job that cannot.

Higher-priority jobs may preempt lower ones under every policy (the scheduler's
``victims``). :func:`reservation` is the shadow-time search; :func:`place_without` places
a job with some GPUs held back.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Sequence

import numpy as np

from fabricflow.cluster.state import ClusterState
from fabricflow.errors import SpecError

BACKFILL = ("easy", "greedy", "none")


def check_backfill(value: object) -> str:
    """``value`` if it is one of :data:`BACKFILL`, else a SpecError naming ``backfill``."""
    if value not in BACKFILL:
        raise SpecError("backfill", f"unknown backfill policy {value!r}; one of {list(BACKFILL)}")
    return str(value)


class JobQueue:
    """Job keys in scheduling order: ``order_key(key)`` tuples, smallest first.

    Insertion and removal are a bisection and a list move (no sort per pass); ``sizes``
    counts the queued jobs of each GPU count, so that a pass can stop once every job left
    is at least as large as one that could not be placed.
    """

    def __init__(self) -> None:
        self._order: list[tuple] = []
        self._where: dict[int, tuple] = {}
        self.sizes: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, key: int) -> bool:
        return key in self._where

    def __iter__(self) -> Iterator[int]:
        return iter([entry[-1] for entry in self._order])

    def add(self, key: int, order: tuple, size: int) -> None:
        """Queue ``key`` (``order``: its sort tuple, ``size``: its GPUs)."""
        entry = (*order, key)
        bisect.insort(self._order, entry)
        self._where[key] = (entry, size)
        self.sizes[size] = self.sizes.get(size, 0) + 1

    def remove(self, key: int) -> None:
        """Take ``key`` out of the queue (no-op when absent)."""
        found = self._where.pop(key, None)
        if found is None:
            return
        entry, size = found
        index = bisect.bisect_left(self._order, entry)
        del self._order[index]
        self.sizes[size] -= 1
        if not self.sizes[size]:
            del self.sizes[size]


class SizesLeft:
    """The GPU counts of the jobs a pass has not reached yet (to stop it early)."""

    def __init__(self, sizes: dict[int, int]):
        self.left = dict(sizes)
        self.smallest = min(self.left, default=math.inf)

    def passed(self, size: int) -> None:
        self.left[size] -= 1
        if not self.left[size]:
            del self.left[size]
            if size == self.smallest:
                self.smallest = min(self.left, default=math.inf)


def place_without(scheduler, state: ClusterState, request, load, gpus: np.ndarray):
    """``scheduler.place`` with the free GPUs among ``gpus`` held back (a reservation)."""
    if not gpus.size:
        return scheduler.place(state, request, load)
    with state.held_back(gpus):
        return scheduler.place(state, request, load)


def reservation(
    scheduler,
    state: ClusterState,
    request,
    releases: Sequence[tuple[float, str, object, int]],
) -> tuple[float, np.ndarray] | None:
    """``(shadow time, GPUs)``: the earliest of the ``releases`` after which ``request``
    can be placed, and where; None when it cannot even after all of them.

    Args:
        scheduler: the placement policy (``place``).
        state: the cluster now (not changed).
        request: the job (``gpus``, ...).
        releases: ``(time, "job", key, GPUs)`` (a running job ends and frees its GPUs)
            or ``(time, "gpus", int64 array, count)`` (failed GPUs come back), in any
            order; the last item is how many GPUs the release frees.

    Placement is monotone in the free GPUs (more free GPUs never make a job unplaceable
    under the whole-server rules), so the earliest time is found by bisection over the
    releases sorted by time: about ``log2(len(releases))`` placements on copies of the
    state.
    """
    ordered = sorted(releases, key=lambda item: item[0])
    if not ordered:
        return None
    freed = np.cumsum([item[3] for item in ordered])
    if state.num_free + freed[-1] < request.gpus:
        return None
    low = int(np.searchsorted(state.num_free + freed, request.gpus))  # fewer cannot do
    high = len(ordered) - 1
    found = None
    while low <= high:
        middle = (low + high) // 2
        trial = _released(state, ordered[: middle + 1])
        gpus = scheduler.place(trial, request, None)
        if gpus is None:
            low = middle + 1
        else:
            found = (ordered[middle][0], np.asarray(gpus, dtype=np.int64))
            high = middle - 1
    return found


def _released(state: ClusterState, items) -> ClusterState:
    keys = [int(what) for _, kind, what, _ in items if kind == "job"]
    up = [np.asarray(what, dtype=np.int64) for _, kind, what, _ in items if kind == "gpus"]
    return state.projected(keys, np.concatenate(up) if up else np.zeros(0, dtype=np.int64))
