"""The ``top_k`` best *distinct answers* of a search.

Two timed candidates are the same answer when they run the same layout (every
:class:`~fabricflow.workload.layout.Layout` field, overlap switches included) to the same
step time, within :data:`RESULT_RTOL`: e.g. one layout on two placements or rank orders
whose traffic lands alike (on an adaptively routed fabric a scattered placement often
times within a few parts per billion of the contiguous one). Such variants are one line of
the top K, represented by the fastest of them (the first timed on a tie); every variant
stays in the search's dataset with its answer's number. A search may stop when the next
lower bound is no better than the K-th best *answer*: anything left could at best tie one.
"""

from __future__ import annotations

import bisect
import math

# Relative step-time difference below which one layout's variants are the same answer
# (far below the model's accuracy and the 4 digits the CLI prints).
RESULT_RTOL = 1e-6


class TopK:
    """Distinct answers of timed candidates; the ``k`` best of them."""

    def __init__(self, k: int):
        self.k = k
        self._answers: list[list] = []  # answer id -> [time, layout, entry]
        self._by_layout: dict = {}  # layout -> [answer ids]
        self._ranked: list[tuple[float, int]] = []  # sorted (time, answer id)

    def add(self, time_s: float, layout, entry) -> int:
        """Record a timed candidate (``entry``: any object); returns its answer's id."""
        for answer in self._by_layout.get(layout, []):
            best = self._answers[answer][0]
            if abs(time_s - best) <= RESULT_RTOL * max(abs(best), abs(time_s)):
                if time_s < best:  # a faster variant represents the answer
                    self._ranked.remove((best, answer))
                    bisect.insort(self._ranked, (time_s, answer))
                    self._answers[answer] = [time_s, layout, entry]
                return answer
        answer = len(self._answers)
        self._answers.append([time_s, layout, entry])
        self._by_layout.setdefault(layout, []).append(answer)
        bisect.insort(self._ranked, (time_s, answer))
        return answer

    def threshold(self) -> float:
        """The K-th best answer's time (``inf`` until there are K answers)."""
        return self._ranked[self.k - 1][0] if len(self._ranked) >= self.k else math.inf

    def ranked(self) -> list:
        """The entries of the ``k`` best answers, best first (ties: first answer first)."""
        return [self._answers[answer][2] for _, answer in self._ranked[: self.k]]

    def __len__(self) -> int:
        return min(len(self._ranked), self.k)
