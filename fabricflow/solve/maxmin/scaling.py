"""Power-of-two scaling of a max-min problem into the range of the solver's float type.

Max-min rates are homogeneous: scaling every capacity and demand by ``a`` scales the
rates by ``a``, and scaling every weight by ``w`` changes nothing (levels scale by
``1 / w``). With ``a`` and ``w`` powers of two the scaling is exact in floating point, so
a problem whose magnitudes would overflow float32 (``1e39`` B/s) or fall into its
subnormals (``1e-40``) is solved near 1 and scaled back without any rounding. Problems
whose values span more than float32 can resolve are solved in float64 instead.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fabricflow.errors import SpecError

# Binary exponents: float32 is normal over 2**-126 .. 2**128. Amounts (capacities,
# demands) and weights are each brought to [0.5, 1) at the top; keeping each range under
# 2**96 leaves 2**30 of headroom for sums of weights over many flows and for rates of
# low-weight flows on small residuals.
FLOAT32_MAX_SPAN = 96
# Magnitudes inside this window are left alone (no scaling needed, results unchanged).
FLOAT32_COMFORT = 60
# float64 is normal over 2**-1022 .. 2**1024. XLA on CPU flushes subnormals to zero, so
# a float64 solve must see no value below 2**-1022 either: a range reaching below
# FLOAT64_COMFORT is centred on 1 instead. Shares are amounts / weights, so the amount and
# weight spans together must stay under FLOAT64_MAX_SPAN to keep every share normal.
FLOAT64_COMFORT = 960
FLOAT64_MAX_SPAN = 1900


class RangeScaling(NamedTuple):
    """Binary exponents applied to a problem; see :func:`range_scaling`."""

    amount_exponent: int  # capacities and demands were multiplied by 2**-amount_exponent
    weight_exponent: int  # weights were multiplied by 2**-weight_exponent
    float64: bool  # solve in float64: the ranges do not fit float32

    def apply(self, problem):
        """The :class:`~.inputs.FlowProblem` with capacities, demands and weights scaled."""

        def scale(values, exponent):
            return None if values is None or exponent == 0 else np.ldexp(values, -exponent)

        return problem._replace(
            capacity=_or(scale(problem.capacity, self.amount_exponent), problem.capacity),
            demand=_or(scale(problem.demand, self.amount_exponent), problem.demand),
            weight=_or(scale(problem.weight, self.weight_exponent), problem.weight),
        )

    def restore(self, rates: np.ndarray) -> np.ndarray:
        """Rates of the scaled problem -> rates of the original one (float64, exact)."""
        return np.ldexp(rates, self.amount_exponent) if self.amount_exponent else rates


def range_scaling(capacity, weight, demand, dtype) -> RangeScaling:
    """Exponents that bring the largest capacity/demand and weight near 1, if needed.

    Args:
        capacity: ``[L]`` or ``[B, L]``; demand, weight: ``[F]`` / ``[B, F]`` or None.
        dtype: the float type the solve would use.
    """
    amounts = [capacity] + ([] if demand is None else [demand])
    amount_low, amount_high = _exponent_range(amounts)
    weight_low, weight_high = _exponent_range([] if weight is None else [weight])
    if np.dtype(dtype) != np.float32:
        return _float64_scaling(amount_low, amount_high, weight_low, weight_high, 0, 0, False)
    comfortable = (
        -FLOAT32_COMFORT <= amount_low
        and amount_high <= FLOAT32_COMFORT
        and -FLOAT32_COMFORT <= weight_low
        and weight_high <= FLOAT32_COMFORT
    )
    if comfortable:
        return RangeScaling(0, 0, False)
    too_wide = (
        amount_high - amount_low > FLOAT32_MAX_SPAN or weight_high - weight_low > FLOAT32_MAX_SPAN
    )
    if too_wide:
        return _float64_scaling(
            amount_low, amount_high, weight_low, weight_high, amount_high, weight_high, True
        )
    return RangeScaling(amount_high, weight_high, False)


def _float64_scaling(
    amount_low, amount_high, weight_low, weight_high, amount_exp, weight_exp, float64
) -> RangeScaling:
    """The scaling of a float64 solve: ``(amount_exp, weight_exp)`` unless that leaves a
    value outside the float64 comfort window (e.g. a subnormal input), then each range is
    centred on 1. Raises SpecError when the ranges are too wide for float64 to hold."""
    span = (amount_high - amount_low) + (weight_high - weight_low)
    if span > FLOAT64_MAX_SPAN:
        field = "capacity" if amount_high - amount_low >= weight_high - weight_low else "weight"
        raise SpecError(
            field,
            f"capacities/demands span 2**{amount_high - amount_low} and weights "
            f"2**{weight_high - weight_low}: together over 2**{FLOAT64_MAX_SPAN}, more "
            "than float64 can solve (subnormal values next to huge ones?)",
        )

    def fits(low, high, exponent):
        return -FLOAT64_COMFORT <= low - exponent and high - exponent <= FLOAT64_COMFORT

    if not fits(amount_low, amount_high, amount_exp):
        amount_exp = (amount_low + amount_high) // 2
    if not fits(weight_low, weight_high, weight_exp):
        weight_exp = (weight_low + weight_high) // 2
    return RangeScaling(amount_exp, weight_exp, float64)


def as_output_dtype(rates: np.ndarray, dtype) -> np.ndarray:
    """``rates`` (float64) cast to ``dtype`` unless that turns a finite rate into ``inf``
    or a nonzero one into 0 or a subnormal: then they stay float64."""
    with np.errstate(over="ignore", under="ignore"):
        cast = rates.astype(dtype)
    if cast.dtype == np.float64:
        return cast
    finite = np.isfinite(rates)
    nonzero = finite & (rates != 0)
    tiny = np.finfo(cast.dtype).tiny
    if np.any(finite & ~np.isfinite(cast)) or np.any(nonzero & (np.abs(cast) < tiny)):
        return rates
    return cast


def _exponent_range(arrays) -> tuple[int, int]:
    """Binary exponents (``frexp``) of the smallest and largest finite positive value."""
    parts = [np.asarray(a, np.float64).ravel() for a in arrays]
    values = np.concatenate(parts) if parts else np.zeros(0)
    values = values[np.isfinite(values) & (values > 0)]
    if values.size == 0:
        return 0, 0
    return int(np.frexp(values.min())[1]), int(np.frexp(values.max())[1])


def _or(value, default):
    return default if value is None else value
