"""The least-squares fit behind every calibration: physical parameters from measurements.

The measurements ``y`` (times, seconds) and the model ``f(p)`` are compared in log space,
each residual divided by the measurement's relative noise ``sigma``:
``r = (log f(p) - log y) / sigma``. Parameters are fitted as ``theta = log(p / prior)``
within their physical bounds (an efficiency in ``(0, 1]``).

1. **Identifiability.** The secant Jacobian ``J = dr / dtheta`` at the prior (steps of
   :data:`REACH`, so that a bottleneck that binds once a parameter moved is seen) is factorised with column pivoting (QR): a parameter whose column is, to
   within :data:`RANK_TOLERANCE`, a combination of those before it, or moves the
   residuals by less than one sigma when it doubles (:data:`MIN_SENSITIVITY`), cannot be
   determined by these measurements and keeps its prior. Only as many parameters as
   measurements are fitted.
2. **Fit.** ``scipy.optimize.least_squares`` (trust region, bounds) over the determined
   parameters, from the prior; a poor fit (reduced chi-square above :data:`POOR_FIT`) is
   started again from each parameter's best value over :data:`SCAN` (moved alone), the
   better fit kept.
3. **Uncertainty.** The covariance ``s^2 (J^T J)^-1`` at the solution, ``s^2`` the
   reduced chi-square when there are more measurements than parameters (at least 1);
   a parameter whose one-sigma range exceeds a factor ``e^`` :data:`MAX_LOG_SIGMA` is
   reported as undetermined and the fit runs again without it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

__all__ = ["FitProblem", "FitResult", "fit"]

RANK_TOLERANCE = 1e-6
"""Relative size of a pivot below which a parameter's column is a combination of others."""

MIN_SENSITIVITY = 1.0 / math.log(2.0)
"""Least residual change (in sigmas) per unit of ``theta`` for a parameter to count: a
doubling of it must move the fit by one sigma."""

MAX_LOG_SIGMA = 0.5
"""Largest one-sigma uncertainty of ``log(value)`` of a parameter reported as determined."""

DIFF_STEP = 1e-4
"""Finite-difference step in ``theta`` (relative change of a parameter)."""

REACH = 0.3
"""Step in ``theta`` (about 30 %) of the secant sensitivities the identifiability check
uses, and of the fit's extra starting points: a bound that binds only once a parameter
moved (a network tier that becomes the bottleneck) is seen, where a derivative at the
prior is zero."""

SCAN = (-2 * REACH, -REACH, 0.0, REACH)
"""Moves in ``theta`` each parameter is tried at, alone, when the first fit is poor."""

POOR_FIT = 4.0
"""Reduced chi-square above which the fit is started again from the best value of each
parameter over :data:`SCAN` (the better fit is kept)."""


@dataclasses.dataclass(frozen=True)
class FitProblem:
    """What to fit.

    Attributes:
        names: ``[P]`` parameter names.
        prior: float64 ``[P]`` prior values (> 0).
        bounds: ``[P]`` ``(low, high)`` physical range of each value.
        predict: values float64 ``[P]`` -> predicted measurements float64 ``[M]`` (> 0).
        measured: float64 ``[M]`` measured values (> 0).
        sigma: float64 ``[M]`` relative noise of each measurement (log-space sigma).
    """

    names: tuple[str, ...]
    prior: np.ndarray
    bounds: tuple[tuple[float, float], ...]
    predict: Callable[[np.ndarray], np.ndarray]
    measured: np.ndarray
    sigma: np.ndarray


@dataclasses.dataclass(frozen=True)
class FitResult:
    """The fit.

    Attributes:
        value: float64 ``[P]`` fitted values (the prior where not determined).
        uncertainty: float64 ``[P]`` one-sigma uncertainty of each value (0 where not
            determined).
        determined: bool ``[P]``.
        why: ``[P]`` why a parameter kept its prior; for a determined one, empty or which
            others it is determined jointly with (its uncertainty is then the least-norm
            one of the group).
        predicted: float64 ``[M]`` the model at ``value``.
        prior_predicted: float64 ``[M]`` the model at the prior.
        log_sigma: float64 ``[M]`` one-sigma uncertainty of ``log(predicted)`` from the
            parameters' covariance (delta method).
        chi2: sum of squared normalised residuals at the fit.
    """

    value: np.ndarray
    uncertainty: np.ndarray
    determined: np.ndarray
    why: tuple[str, ...]
    predicted: np.ndarray
    prior_predicted: np.ndarray
    log_sigma: np.ndarray
    chi2: float


def _values(problem: FitProblem, theta: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    values = problem.prior.copy()
    values[chosen] = problem.prior[chosen] * np.exp(theta)
    return values


def _residuals(problem: FitProblem, values: np.ndarray) -> np.ndarray:
    predicted = np.asarray(problem.predict(values), dtype=np.float64)
    return (np.log(predicted) - np.log(problem.measured)) / problem.sigma


def _jacobian(
    problem: FitProblem, values: np.ndarray, chosen: np.ndarray, step: float = DIFF_STEP
) -> np.ndarray:
    """``[M, len(chosen)]`` d residual / d theta by central differences of ``step`` (one-
    sided, or shortened to the bound, at a bound)."""
    base = _residuals(problem, values)
    columns = []
    for index in chosen:
        low, high = problem.bounds[index]
        up_step = min(step, math.log(high / values[index])) if math.isfinite(high) else step
        up, down = values.copy(), values.copy()
        up[index] *= math.exp(up_step)
        down[index] *= math.exp(-step)
        if up_step <= step * 1e-3:
            columns.append((base - _residuals(problem, down)) / step)
        elif down[index] <= low:
            columns.append((_residuals(problem, up) - base) / up_step)
        else:
            columns.append((_residuals(problem, up) - _residuals(problem, down)) / (up_step + step))
    return np.stack(columns, axis=1) if columns else np.zeros((base.size, 0))


def _identifiable(
    jacobian: np.ndarray, limit: int, blocked: dict[int, str] | None = None
) -> tuple[list[int], dict[int, str]]:
    """Columns of ``jacobian`` the measurements determine, and why each other is not
    (``blocked``: columns left out from the start, with their reason)."""
    import scipy.linalg

    why: dict[int, str] = dict(blocked or {})
    norms = np.linalg.norm(jacobian, axis=0)
    for flat in np.flatnonzero(norms < MIN_SENSITIVITY).tolist():
        why.setdefault(flat, "the measurements barely depend on it")
    live = [c for c in range(jacobian.shape[1]) if c not in why]
    if not live:
        return [], why
    _, r, pivots = scipy.linalg.qr(jacobian[:, live], mode="economic", pivoting=True)
    diagonal = np.abs(np.diag(r))
    keep: list[int] = []
    for rank, pivot in enumerate(pivots):
        column = live[int(pivot)]
        if (
            rank < diagonal.size
            and diagonal[rank] > RANK_TOLERANCE * diagonal[0]
            and (len(keep) < limit)
        ):
            keep.append(column)
        elif rank < diagonal.size and diagonal[rank] > RANK_TOLERANCE * diagonal[0]:
            why[column] = (
                f"{limit} measurement(s) determine at most {limit} parameter(s); "
                "the more sensitive ones were fitted"
            )
        else:
            why[column] = "its effect equals a combination of parameters fitted before it"
    return sorted(keep), why


def _solve(problem: FitProblem, chosen: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    """``theta`` of the chosen parameters minimising the residuals. From ``start`` (a
    previous fit's values) when given; otherwise from the prior and, when that fit is
    poor, also from each parameter's best value over :data:`SCAN`."""
    from scipy.optimize import least_squares

    bounds = [problem.bounds[i] for i in chosen]
    low = np.array([math.log(lo / problem.prior[i]) if lo > 0 else -np.inf for i, (lo, _) in zip(chosen, bounds, strict=True)])  # fmt: skip
    high = np.array([math.log(hi / problem.prior[i]) if math.isfinite(hi) else np.inf for i, (_, hi) in zip(chosen, bounds, strict=True)])  # fmt: skip

    def run(start: np.ndarray, evaluations: int):
        return least_squares(
            lambda t: _residuals(problem, _values(problem, t, chosen)),
            np.clip(start, low + 1e-9, high - 1e-9),
            bounds=(low, high),
            method="trf",
            x_scale=1.0,
            diff_step=DIFF_STEP,
            xtol=1e-10,
            ftol=1e-10,
            gtol=1e-10,
            max_nfev=evaluations,  # iterations, roughly: each also takes a Jacobian
        )

    if start is not None:
        return run(start, 30).x
    best = run(np.zeros(chosen.size), 30)
    dof = problem.measured.size - chosen.size
    if dof > 0 and 2 * best.cost / dof > POOR_FIT:
        # a parameter may sit on the wrong side of a kink (a bottleneck that does not
        # bind yet, where the residuals do not move): scan each alone over SCAN, start
        # from the best value of each, keep the better fit
        start = np.zeros(chosen.size)
        for index in range(chosen.size):
            costs = []
            for move in SCAN:
                trial = np.zeros(chosen.size)
                trial[index] = np.clip(move, low[index] + 1e-9, high[index] - 1e-9)
                residual = _residuals(problem, _values(problem, trial, chosen))
                costs.append((float(residual @ residual), trial[index]))
            start[index] = min(costs)[1]
        other = run(start, 30)
        if other.cost < best.cost:
            best = other
    return best.x


def fit(problem: FitProblem) -> FitResult:
    """Fit ``problem`` (module docstring)."""
    count = len(problem.names)
    prior_residuals = _residuals(problem, problem.prior)
    prior_predicted = problem.measured * np.exp(prior_residuals * problem.sigma)
    everything = np.arange(count)
    reach = _jacobian(problem, problem.prior, everything, REACH)
    blocked = _blocked_at_bounds(problem, reach, prior_residuals)
    chosen_list, why = _identifiable(reach, limit=problem.measured.size, blocked=blocked)
    needed: set[int] = set()  # parameters a fit without them was worse for
    joint: dict[int, str] = {}
    previous = None  # (chosen_list, theta, chi2) of the fit before a parameter was dropped
    while True:
        chosen = np.array(chosen_list, dtype=np.int64)
        warm = None
        if previous is not None:  # a refit without one parameter: from the last fit
            warm = np.array([previous[1][previous[0].index(c)] for c in chosen_list])
        theta = _solve(problem, chosen, warm) if chosen.size else np.zeros(0)
        values = _values(problem, theta, chosen)
        residuals = _residuals(problem, values)
        chi2 = float(residuals @ residuals)
        if previous is not None and chi2 > previous[2] + max(1.0, 0.1 * previous[2]):
            # the parameter dropped last was needed after all: restore that fit
            dropped = next(c for c in previous[0] if c not in chosen_list)
            needed.add(dropped)
            why.pop(dropped, None)
            chosen_list, theta, chi2 = previous
            chosen = np.array(chosen_list, dtype=np.int64)
            values = _values(problem, theta, chosen)
            residuals = _residuals(problem, values)
        previous = None
        dof = problem.measured.size - chosen.size
        scale = max(1.0, chi2 / dof) if dof > 0 else 1.0
        local = _jacobian(problem, values, chosen)
        # A parameter that moved an option out of contention (a protocol slower than its
        # table) has no local effect; a secant shows what it holds: its column is the
        # secant's
        secant = _jacobian(problem, values, chosen, REACH)
        flat = np.linalg.norm(local, axis=0) < MIN_SENSITIVITY
        local[:, flat] = secant[:, flat]
        # at the solution, other algorithms or protocols may bind than at the prior: a
        # parameter whose effect there is a combination of others' is dropped, unless the
        # fit needs it (then it is determined jointly with them)
        kept, lost = _identifiable(local, limit=chosen.size)
        dropped_now = [p for p in range(chosen.size) if p not in kept]
        candidates = [p for p in dropped_now if chosen_list[p] not in needed]
        if candidates:
            position = candidates[-1]
            worst = chosen_list[position]
            why[worst] = lost[position] + " (at the fitted values)"
            previous = (chosen_list, theta, chi2)
            chosen_list = [c for c in chosen_list if c != worst]
            continue
        if dropped_now:
            joint.update(_joint_groups(local, chosen_list, problem.names))
        covariance = np.linalg.pinv(local.T @ local) * scale
        theta_sigma = np.sqrt(np.clip(np.diag(covariance), 0.0, None))
        loose = [
            i
            for i, s in zip(chosen_list, theta_sigma, strict=True)
            if s > MAX_LOG_SIGMA and i not in needed
        ]
        if not loose:
            break
        worst = max(loose, key=lambda i: theta_sigma[chosen_list.index(i)])
        why[worst] = (
            f"the measurements leave it uncertain by more than a factor {math.exp(MAX_LOG_SIGMA):.2f}"
        )
        previous = (chosen_list, theta, chi2)
        chosen_list = [c for c in chosen_list if c != worst]
    uncertainty = np.zeros(count)
    uncertainty[chosen] = values[chosen] * theta_sigma
    determined = np.zeros(count, dtype=bool)
    determined[chosen] = True
    # d log(predicted) / d theta = sigma * d residual / d theta
    sensitivity = local * problem.sigma[:, None]
    log_sigma = np.sqrt(
        np.clip(np.einsum("mi,ij,mj->m", sensitivity, covariance, sensitivity), 0, None)
    )
    return FitResult(
        value=values,
        uncertainty=uncertainty,
        determined=determined,
        why=tuple(why.get(i, "") if not determined[i] else joint.get(i, "") for i in range(count)),
        predicted=problem.measured * np.exp(residuals * problem.sigma),
        prior_predicted=prior_predicted,
        log_sigma=log_sigma,
        chi2=chi2,
    )


def _blocked_at_bounds(problem: FitProblem, reach: np.ndarray, residuals: np.ndarray) -> dict:
    """``{parameter index: why}`` for the parameters at a physical bound that the
    measurements would push beyond it (the descent direction from the prior, through the
    secant Jacobian ``reach`` and the prior's ``residuals``, points outside): they cannot
    explain the measurements and are left out from the start."""
    descent = -(reach.T @ residuals)
    blocked = {}
    for i in range(len(problem.names)):
        low, high = problem.bounds[i]
        if (problem.prior[i] >= high * (1 - 1e-12) and descent[i] > 0) or (
            problem.prior[i] <= low * (1 + 1e-12) and low > 0 and descent[i] < 0
        ):
            blocked[i] = "it is at its physical bound and the measurements ask for beyond it"
    return blocked


def _joint_groups(local: np.ndarray, chosen_list: list, names) -> dict:
    """``{parameter index: note}`` for the groups of fitted parameters (``chosen_list``,
    the columns of the Jacobian ``local`` ``[measurements, chosen]``) whose combination
    alone the measurements fix: the columns with weight in the near-null right singular
    vectors; the note names the others of its group."""
    joint = {}
    unit = local / np.maximum(np.linalg.norm(local, axis=0), 1e-300)
    _, singular, vt = np.linalg.svd(unit, full_matrices=True)
    singular = np.concatenate([singular, np.zeros(vt.shape[0] - singular.size)])
    for vector in vt[singular < 1e-6 * max(singular[0], 1e-300)]:
        group = [chosen_list[q] for q in np.flatnonzero(np.abs(vector) > 0.1)]
        for member in group:
            others = [names[o] for o in group if o != member]
            joint[member] = f"; only jointly with {', '.join(others)}"
    return joint
