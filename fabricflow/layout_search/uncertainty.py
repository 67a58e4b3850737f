"""Decisions under uncertainty: which answers the model cannot tell apart, and a robust
objective.

* **Indistinguishable answers.** Two layouts of one job on one fabric share most of the
  model's error (the same GPU, software, kernels), so what matters for choosing between
  them is the error of the *ratio* of their step times:
  :func:`~fabricflow.workload.intervals.relative_log_sigma`. An answer whose step time is
  within ``z sqrt(2) sigma`` of the winner's in log space (``z`` the normal quantile of
  the interval level) is indistinguishable from it; :func:`indistinguishable` lists each
  with the knobs that differ and the parts of the step that differ most.
* **Robust objective** (``step_time_upper``): the answers (the ``top_k`` best by step
  time, exact as ever) are ranked again by an upper quantile of their step time: the
  ``(1 + level) / 2`` quantile over ECMP hash seeds (:data:`ROBUST_SEEDS` routings; a
  fabric with adaptive routing has one) times the upper end of the model's interval
  relative to its point. A layout whose collectives suffer from hash collisions on some
  seeds loses to one that is as fast and steadier.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from fabricflow.workload.intervals import relative_log_sigma

__all__ = ["ROBUST_SEEDS", "indistinguishable", "robust_rank", "upper_step_time"]

ROBUST_SEEDS = 8
"""ECMP hash seeds each answer is timed with under the robust objective."""


def _differences(kwargs: dict, best_kwargs: dict, flatten) -> dict:
    mine, theirs = flatten(kwargs), flatten(best_kwargs)
    return {k: v for k, v in mine.items() if theirs.get(k) != v}


def indistinguishable(
    top: list, level: float, gpu: str, calibration, flatten, moe: bool | None = None
) -> list[dict]:
    """The answers of ``top`` (``[(kwargs, StepResult)]``, best first) the model cannot
    separate from the first at ``level`` (module docstring; ``moe``: the job's model is a
    mixture of experts, None: not known), each with ``step_time_s``,
    ``ratio`` to the winner, ``knobs`` (what differs from the winner) and ``parts`` (the
    step's parts that differ most, seconds, candidate minus winner)."""
    if not top:
        return []
    z = NormalDist().inv_cdf((1 + level) / 2)
    best_kwargs, best = top[0]
    margin = z * math.sqrt(2.0) * relative_log_sigma(gpu, calibration, moe)
    out = []
    for kwargs, result in top[1:]:
        ratio = result.step_time_s / best.step_time_s
        if abs(math.log(ratio)) > margin:
            continue
        parts = {
            key: result.breakdown[key] - best.breakdown.get(key, 0.0) for key in result.breakdown
        }
        largest = sorted(parts, key=lambda key: -abs(parts[key]))[:3]
        out.append(
            {
                "step_time_s": result.step_time_s,
                "ratio": ratio,
                "knobs": _differences(kwargs, best_kwargs, flatten),
                "parts": {key: parts[key] for key in largest if parts[key] != 0.0},
            }
        )
    return out


def upper_step_time(result, per_seed: list[float] | None, level: float) -> float:
    """The robust objective of one answer: the ``(1 + level) / 2`` quantile of its step
    time over routing seeds (``per_seed``; None: its one time) times the upper end of its
    interval relative to the point."""
    times = np.asarray(per_seed if per_seed else [result.step_time_s], dtype=float)
    upper = float(np.quantile(times, (1 + level) / 2))
    interval = result.interval
    factor = 1.0 if interval is None else interval.high / interval.point
    return upper * factor


def robust_rank(top: list, retime, level: float) -> list[tuple]:
    """``top`` ranked by :func:`upper_step_time`: ``[(kwargs, result, upper)]``;
    ``retime(kwargs)`` times an answer over :data:`ROBUST_SEEDS` seeds and returns its
    :class:`~fabricflow.workload.step.StepResult` (``details["variability"]``)."""
    ranked = []
    for kwargs, result in top:
        timed = retime(kwargs)
        per_seed = timed.details.get("variability", {}).get("step_time_s_per_seed")
        ranked.append((kwargs, result, upper_step_time(result, per_seed, level)))
    ranked.sort(key=lambda item: item[2])
    return ranked
