""":func:`calibrate`: nccl-tests logs and measured steps -> a :class:`Calibration`.

The network side is fitted first, on the logs alone (:mod:`.network`); the compute side
then on the measured steps (:mod:`.steps`), with the fitted network held fixed, so that
the GPU's efficiencies absorb no network error the logs already measured. Each side is one
:func:`~.fit.fit`: parameters the inputs cannot determine keep their prior and say so.
"""

from __future__ import annotations

import math
import os

import numpy as np

from fabricflow.collective.nccl_cost import DEFAULT_COST
from fabricflow.errors import SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.fabric.spec import load_fabric
from fabricflow.fitting.fit import FitProblem, FitResult, fit
from fabricflow.fitting.network import LOG_SIGMA as NETWORK_SIGMA
from fabricflow.fitting.network import MIN_SIZE, network_inputs
from fabricflow.fitting.steps import LOG_SIGMA as STEP_SIGMA
from fabricflow.fitting.steps import read_steps, step_inputs
from fabricflow.workload.calibration import (
    GPU_PARAMETERS,
    NETWORK_PARAMETERS,
    STACK_PARAMETERS,
    Calibration,
    Parameter,
    all_parameters,
    apply_network,
    parameter_bounds,
)

__all__ = ["calibrate"]


def _parameters(names, result: FitResult, prior: np.ndarray, what: str) -> dict:
    out = {}
    for i, name in enumerate(names):
        determined = bool(result.determined[i])
        out[name] = Parameter(
            name=name,
            prior=float(prior[i]),
            value=float(result.value[i]),
            uncertainty=float(result.uncertainty[i]),
            determined=determined,
            source=f"fitted to {what}{result.why[i]}" if determined else f"prior: {result.why[i]}",
        )
    return out


def _log_sigma(result: FitResult, measured: np.ndarray) -> float:
    """One sigma of log(measured / calibrated) for a new prediction: the fit's residual
    scatter and the parameters' propagated uncertainty, combined."""
    residual = np.log(measured / result.predicted)
    return float(math.sqrt(np.mean(result.log_sigma**2) + np.mean(residual**2)))


def calibrate(
    nccl_tests=(),
    *,
    fabric: Fabric | str | None = None,
    gpus: int | None = None,
    steps=None,
    op: str | None = None,
    min_size: float = MIN_SIZE,
    parameters=None,
) -> Calibration:
    """Fit the model's physical parameters to a user's measurements.

    Args:
        nccl_tests: paths of nccl-tests logs (any op; the binary named in the log, else
            ``op``), each run on the first GPUs of ``fabric`` (as many as the log lists
            ranks, else ``gpus``).
        fabric: the fabric the logs ran on (a preset name, a YAML path or a Fabric).
        gpus: the logs' GPU count where a log lists no ranks.
        steps: measured steps: the path of a steps YAML file or its list of entries
            (:mod:`fabricflow.fitting.steps`).
        op: the op of logs that do not name their binary.
        min_size: smallest message size fitted (default 1 MiB).
        parameters: names of the parameters to fit (``gpu.<field>``,
            ``network.<field>``); default: every one the inputs bear on. The others keep
            their prior.

    Returns:
        The :class:`~fabricflow.workload.calibration.Calibration`: ``network.*``
        parameters when logs were given, ``gpu.*`` parameters when steps were, each with
        prior, value, uncertainty and whether it was determined, and per input the
        measured, uncalibrated and calibrated values.

    Raises:
        SpecError: no input, a bad log or steps entry, or inputs that contradict each
            other (the message names them).
    """
    allowed = all_parameters()
    wanted = set(allowed) if parameters is None else set(parameters)
    for name in sorted(wanted - set(allowed)):
        raise SpecError("parameters", f"unknown parameter {name!r}", value=name, allowed=allowed)
    paths = [os.fspath(p) for p in ([nccl_tests] if isinstance(nccl_tests, (str, os.PathLike)) else nccl_tests)]  # fmt: skip
    if not paths and steps is None:
        raise SpecError("calibrate", "give nccl-tests logs, measured steps, or both")
    fitted: dict = {}
    inputs: list[dict] = []
    collective_sigma = step_sigma = None
    if paths:
        if fabric is None:
            raise SpecError("--fabric", "the nccl-tests logs need the fabric they ran on")
        network = fabric if isinstance(fabric, Fabric) else load_fabric(fabric)
        logs = network_inputs(paths, network, gpus, op=op, min_size=min_size)
        collective_sigma = _fit_network(network, logs, wanted, fitted, inputs)
    gpu_name = stack_name = None
    if steps is not None:
        source = os.fspath(steps) if isinstance(steps, (str, os.PathLike)) else "steps"
        entries = read_steps(steps) if isinstance(steps, (str, os.PathLike)) else list(steps)
        runs = step_inputs(entries, source)
        gpu_name, stack_name = runs[0].gpu.name, runs[0].stack.name
        step_sigma = _fit_steps(runs, wanted, fitted, inputs)
    return Calibration(
        parameters=fitted,
        gpu=gpu_name,
        stack=stack_name,
        inputs=tuple(inputs),
        step_log_sigma=step_sigma,
        collective_log_sigma=collective_sigma,
    )


def _fit_network(network: Fabric, logs: list, wanted: set, fitted: dict, inputs: list) -> float:
    """Fit the ``network.*`` parameters in ``wanted`` to nccl-tests ``logs`` run on
    ``network``: adds them to ``fitted`` and one entry per log to ``inputs`` (per size:
    measured, uncalibrated and calibrated bus bandwidth, residual); returns the log-space
    sigma of the collective residuals."""
    chosen = [n for n in NETWORK_PARAMETERS if f"network.{n}" in wanted]
    names = tuple(f"network.{n}" for n in chosen)
    prior = np.array([_default(n) for n in chosen], dtype=float)
    measured = np.concatenate([log.time_s for log in logs])

    def predict_network(values: np.ndarray) -> np.ndarray:
        model = _cost(names, values)
        return np.concatenate([log.predict(network, model) for log in logs])

    result = fit(
        FitProblem(
            names,
            prior,
            tuple(parameter_bounds(n) for n in names),
            predict_network,
            measured,
            np.full(measured.size, NETWORK_SIGMA),
        )
    )
    fitted.update(_parameters(names, result, prior, f"{len(logs)} nccl-tests log(s)"))
    start = 0
    for log in logs:
        part = slice(start, start + log.bytes.size)
        start += log.bytes.size
        calibrated = log.busbw(result.predicted[part])
        inputs.append(
            {
                "input": log.name,
                "kind": "nccl-tests",
                "op": log.op,
                "gpus": log.gpus,
                "sizes": [
                    {
                        "bytes": int(b),
                        "measured_busbw": float(m),
                        "uncalibrated_busbw": float(u),
                        "calibrated_busbw": float(c),
                        "residual": float(c / m - 1.0),
                    }
                    for b, m, u, c in zip(
                        log.bytes,
                        log.busbw_GBps,
                        log.busbw(result.prior_predicted[part]),
                        calibrated,
                        strict=True,
                    )
                ],
            }
        )
    return _log_sigma(result, measured)


def _fit_steps(runs: list, wanted: set, fitted: dict, inputs: list) -> float:
    """Fit the ``gpu.*`` and ``stack.*`` parameters in ``wanted`` (those with a positive
    prior) to measured step ``runs``, the network parameters already determined in
    ``fitted`` held fixed: adds them to ``fitted`` and one entry per run to ``inputs``
    (measured, uncalibrated and calibrated step time, residual); returns the log-space
    sigma of the step residuals."""
    gpu = runs[0].gpu
    gpu_name = gpu.name
    stack = runs[0].stack
    # a parameter whose prior is 0 or unset (a host time the preset does not give)
    # has no scale to fit in; it keeps its prior
    fields: list[tuple[str, object, str]] = [("gpu", gpu, f) for f in GPU_PARAMETERS] + [
        ("stack", stack, f) for f in STACK_PARAMETERS
    ]
    fields = [
        (space, spec, f)
        for space, spec, f in fields
        if (getattr(spec, f) or 0) > 0 and f"{space}.{f}" in wanted
    ]
    names = tuple(f"{space}.{f}" for space, _, f in fields)
    prior = np.array([getattr(spec, f) for _, spec, f in fields], dtype=float)
    network_fixed = {k: p for k, p in fitted.items() if p.determined}
    measured = np.array([run.step_time_s for run in runs])

    def predict_steps(values: np.ndarray) -> np.ndarray:
        trial = Calibration(
            {
                **network_fixed,
                **{
                    n: Parameter(n, p, v, 0.0, True, "trial")
                    for n, p, v in zip(names, prior, values, strict=True)
                },
            },
            gpu=gpu_name,
            stack=stack.name,
        )
        return np.array([run.predict(trial) for run in runs])

    result = fit(
        FitProblem(
            names,
            prior,
            tuple(parameter_bounds(n) for n in names),
            predict_steps,
            measured,
            np.full(measured.size, STEP_SIGMA),
        )
    )
    fitted.update(_parameters(names, result, prior, f"{len(runs)} measured step(s)"))
    sigma = _log_sigma(result, measured)
    nothing = Calibration({}, gpu=gpu_name, stack=stack.name)
    for run, cal in zip(runs, result.predicted, strict=True):
        uncal = run.predict(nothing)  # the model with no calibration at all
        inputs.append(
            {
                "input": run.name,
                "kind": "step",
                "measured_step_time_s": run.step_time_s,
                "uncalibrated_step_time_s": float(uncal),
                "calibrated_step_time_s": float(cal),
                "residual": float(cal / run.step_time_s - 1.0),
            }
        )
    return sigma


def _default(field: str) -> float:
    """The default cost model's value of a ``network.`` field (a protocol entry too)."""
    if field.startswith("protocol_efficiency."):
        return float(DEFAULT_COST.protocol_efficiency[field.split(".", 1)[1]])
    return float(getattr(DEFAULT_COST, field))


def _cost(names, values):
    """The default cost model with ``{name: value}`` of the ``network.*`` parameters."""
    return apply_network(
        DEFAULT_COST, {n.split(".", 1)[1]: float(v) for n, v in zip(names, values, strict=True)}
    )
