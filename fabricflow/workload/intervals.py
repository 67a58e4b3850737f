"""Prediction intervals of step and collective times: how sure a prediction is.

**Uncalibrated**, an interval comes from the model's own errors on published runs: the
log-ratios ``log(measured / predicted)`` of the step-validation study's runs
(:mod:`fabricflow.study.step_validation`), stored by class in
``presets/step_intervals.json`` (written by ``python -m fabricflow.study.step_intervals``,
which predicts every run the study has). A prediction's class is (GPU generation,
dense or MoE, precision); when that class has fewer than :data:`MIN_RUNS` runs, the rows
of the next class of :data:`POOLING` are used: (generation, dense/MoE), (dense/MoE,
precision), dense/MoE, then all rows. The interval
at level ``L`` is ``[t exp(q_lo), t exp(q_hi)]`` with ``q_lo``, ``q_hi`` the empirical
``(1 - L) / 2`` and ``(1 + L) / 2`` quantiles of those log-ratios (linear interpolation
between order statistics, numpy's default), widened to contain the point ``t`` itself.
Collective times use the published nccl-tests bus bandwidths the same way.

**Calibrated** (:class:`~fabricflow.workload.calibration.Calibration`), an interval is
``t exp(+-z s)`` with ``z`` the normal quantile of ``(1 + L) / 2`` and ``s`` the
calibration's log-sigma (residual scatter and propagated parameter uncertainty) combined
with the spread the study measured between runs of one GPU and software release once
each group's own offset is removed (what a calibration on one run cannot remove).

An interval never excludes its point prediction. See docs/calibration.md.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from importlib import resources
from statistics import NormalDist

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.workload.calibration import Calibration

__all__ = [
    "DEFAULT_LEVEL",
    "INTERVALS_FILE",
    "MIN_RUNS",
    "POOLING",
    "Interval",
    "check_level",
    "collective_interval",
    "gpu_generation",
    "interval_table",
    "relative_log_sigma",
    "step_interval",
]

DEFAULT_LEVEL = 0.8
"""The default level of a prediction interval: 80 % of outcomes inside."""

MIN_RUNS = 6
"""Fewest runs of a class whose residual quantiles stand for it; fewer pool upwards."""

INTERVALS_FILE = "step_intervals.json"

# GPU preset -> generation (the class of an uncalibrated interval); other names by prefix.
_GENERATIONS = {
    "a100": "ampere",
    "h100": "hopper",
    "h800": "hopper",
    "h200": "hopper",
    "h20": "hopper",
    "b200": "blackwell",
    "gb200": "blackwell",
    "b300": "blackwell",
    "gb300": "blackwell",
    "mi300": "cdna3",
    "mi325": "cdna3",
    "mi355": "cdna4",
    "tpu-v4": "tpu-v4",
    "tpu-v5": "tpu-v5",
}


def gpu_generation(name: str) -> str:
    """The generation of a GPU preset name (``h100-sxm`` -> ``hopper``); ``unknown``."""
    for prefix in sorted(_GENERATIONS, key=len, reverse=True):
        if name.startswith(prefix):
            return _GENERATIONS[prefix]
    return "unknown"


@dataclasses.dataclass(frozen=True)
class Interval:
    """A prediction interval ``[low, high]`` around ``point`` at ``level``.

    Attributes:
        point, low, high: the prediction and the interval's ends (same unit).
        level: the share of outcomes the interval is built to contain (0.8).
        method: ``published-runs`` (the model's residuals on published runs) or
            ``calibration`` (the fit's uncertainty).
        basis: what the interval was built from (the class and how many runs, or the
            calibration's sigma).
    """

    point: float
    low: float
    high: float
    level: float
    method: str
    basis: str

    def inverse(self, numerator: float) -> Interval:
        """The interval of ``numerator / quantity`` (tokens/s, MFU from a time)."""
        return dataclasses.replace(
            self,
            point=numerator / self.point,
            low=numerator / self.high,
            high=numerator / self.low,
        )

    def to_list(self) -> list[float]:
        return [float(self.low), float(self.high)]


def check_level(level) -> float:
    """``level`` as a float in (0, 1); SpecError otherwise."""
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise SpecError("interval_level", f"must be a number in (0, 1), got {level!r}")
    return float(level)


@functools.cache
def interval_table() -> dict:
    """The shipped residual table (``presets/step_intervals.json``)."""
    path = resources.files("fabricflow.workload") / "presets" / INTERVALS_FILE
    return json.loads(path.read_text(encoding="utf-8"))


def _quantile_interval(point: float, log_ratios: np.ndarray, level: float) -> tuple[float, float]:
    low_q, high_q = np.quantile(log_ratios, [(1 - level) / 2, (1 + level) / 2])
    return point * math.exp(min(float(low_q), 0.0)), point * math.exp(max(float(high_q), 0.0))


POOLING = (
    ("generation", "moe", "precision"),
    ("generation", "moe"),
    ("moe", "precision"),
    ("moe",),
    (),
)
"""The classes tried in turn, narrowest first: the first with :data:`MIN_RUNS` runs
stands for a prediction (dense and MoE are kept apart longest: their errors differ most)."""


def _pooled(rows: list[dict], keys: dict) -> tuple[np.ndarray, str]:
    """Log-ratios of the first class of :data:`POOLING` with :data:`MIN_RUNS` rows or
    more (all rows at last), and its description."""
    for names in POOLING:
        chosen = [r for r in rows if all(r[name] == keys[name] for name in names)]
        if len(chosen) >= MIN_RUNS or not names:
            label = ", ".join(_label(name, keys[name]) for name in names) or "all classes"
            return np.array([r["log_ratio"] for r in chosen], dtype=float), label
    raise AssertionError("unreachable: the last class takes every row")


def _label(name: str, value) -> str:
    if name == "moe":
        return "MoE" if value else "dense"
    return f"{name} {value}"


def _calibrated(point: float, sigma: float, level: float, basis: str) -> Interval:
    z = NormalDist().inv_cdf((1 + level) / 2)
    return Interval(
        point,
        point * math.exp(-z * sigma),
        point * math.exp(z * sigma),
        level,
        "calibration",
        basis,
    )


def step_interval(
    point_s: float,
    *,
    gpu: str,
    moe: bool,
    precision: str,
    level: float = DEFAULT_LEVEL,
    calibration: Calibration | None = None,
    stack: str | None = None,
) -> Interval:
    """The prediction interval of a step time ``point_s`` (seconds) of a job on ``gpu``
    (preset name), dense or MoE, in ``precision`` (module docstring), run with the
    software ``stack`` (a preset's name).

    With a ``calibration`` whose steps were measured on ``gpu`` with that stack, the
    calibrated interval; otherwise the published-runs one (a calibration made with
    another software stack does not vouch for this one)."""
    level = check_level(level)
    table = interval_table()
    if (
        calibration is not None
        and calibration.gpu == gpu
        and (calibration.stack is None or stack is None or calibration.stack == stack)
        and calibration.step_log_sigma is not None
    ):
        spread = _spread(bool(moe))
        sigma = math.hypot(calibration.step_log_sigma, spread)
        return _calibrated(
            point_s,
            sigma,
            level,
            f"calibration on {gpu}: fit log-sigma {calibration.step_log_sigma:.3f}, "
            f"within-release spread of {'MoE' if moe else 'dense'} runs {spread:.3f}",
        )
    keys = {"generation": gpu_generation(gpu), "moe": bool(moe), "precision": precision}
    ratios, label = _pooled(table["steps"], keys)
    low, high = _quantile_interval(point_s, ratios, level)
    return Interval(point_s, low, high, level, "published-runs", f"{label} ({ratios.size} runs)")


def collective_interval(
    point_s: float, *, level: float = DEFAULT_LEVEL, calibration: Calibration | None = None
) -> Interval:
    """The prediction interval of a collective time ``point_s`` (seconds)."""
    level = check_level(level)
    if calibration is not None and calibration.collective_log_sigma is not None:
        return _calibrated(
            point_s,
            calibration.collective_log_sigma,
            level,
            f"calibration: fit log-sigma {calibration.collective_log_sigma:.3f}",
        )
    rows = interval_table()["collectives"]
    ratios = np.array([r["log_ratio"] for r in rows], dtype=float)
    low, high = _quantile_interval(point_s, ratios, level)
    return Interval(
        point_s,
        low,
        high,
        level,
        "published-runs",
        f"published nccl-tests bus bandwidths ({ratios.size} cases)",
    )


def _spread(moe: bool | None) -> float:
    """The table's within-(GPU, release) spread of dense or MoE runs (None: all)."""
    spreads = interval_table()["calibrated_log_sigma"]
    key = "all" if moe is None else ("moe" if moe else "dense")
    return float(spreads.get(key, spreads["all"]))


def relative_log_sigma(
    gpu: str, calibration: Calibration | None = None, moe: bool | None = None
) -> float:
    """One sigma of the error of the *ratio* of two step times predicted for one GPU and
    software stack, in log space: the part of the model's error that does not cancel
    between two layouts of one job. It is the spread between runs of one GPU and release
    once each group's own offset is removed (``calibrated_log_sigma`` of the table, of
    dense or MoE runs), with
    a calibration's own sigma added for a calibrated GPU. Used to tell which optimizer
    candidates the model cannot separate."""
    spread = _spread(moe)
    if calibration is not None and calibration.gpu == gpu and calibration.step_log_sigma:
        return math.hypot(spread, calibration.step_log_sigma)
    return spread
