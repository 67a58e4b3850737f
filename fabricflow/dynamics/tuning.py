"""``ff.tune_cc``: congestion-control parameters tuned by gradient through the fluid model.

The fluid integrator is written in JAX, so the objective of a run -- a function of the
bottleneck's utilization, its queue and the flows' throughput over the second half of the
run -- has a gradient with respect to the law's parameters: ``jax.grad`` differentiates
through every step of the ``lax.scan`` (with each record's steps recomputed on the way
back, ``jax.checkpoint``, so memory holds one state per record rather than per step), in
float64. :class:`TuningProblem` is that objective and its gradient; :func:`tune_cc` runs
projected Adam (optax) on it inside box constraints.

Parameters move in normalized coordinates ``z in [0, 1]`` with ``p = low (high / low)^z``
(every parameter is positive and acts multiplicatively), so one learning rate fits
thresholds in bytes and gains alike; the box is the projection ``clip(z, 0, 1)``.
Default boxes are a factor of 4 around the starting value, within the field's range.

Example::

    import fabricflow as ff
    from fabricflow.dynamics.scenarios import incast
    tuned = ff.tune_cc(incast(8), "dcqcn", parameters=["kmin", "kmax", "rate_ai"])
    tuned.objective, tuned.default_objective, tuned.params

The gradients are those of the discretized fluid: exact derivatives of the Euler steps,
which are piecewise smooth (queues clip at zero, RED saturates, PFC and timers switch);
within a smooth piece they agree with central finite differences (tests).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from fabricflow import schema
from fabricflow.dynamics.congestion import prepare_fabric_run
from fabricflow.errors import SpecError
from fabricflow.solve.cc import integrator
from fabricflow.solve.cc.prepare import PreparedRun
from fabricflow.solve.parameters import Parameters

#: Named objectives (smaller is better) over the run's metrics (see :func:`metrics`):
#: ``throughput-delay`` trades utilization against queueing delay at ``delay_weight`` per
#: second (the default 1e4 /s: 10 us of queue cost as much as 10 % of the link).
OBJECTIVES = ("throughput-delay", "throughput", "delay")


def metrics(records, problem: integrator.Problem, config, bottleneck: int, since: float):
    """JAX scalars of a run over ``[since, end]``: ``utilization`` (throughput of the flows
    through ``bottleneck`` over its capacity), ``throughput_Bps`` (all flows),
    ``queue_bytes`` and ``queue_delay_s`` (mean at the bottleneck), ``queue_rms_bytes``."""
    record_s = config.steps_per_record * config.dt
    first = min(max(int(round(since / record_s)) - 1, 0), config.num_records - 2)
    span = (config.num_records - 1 - first) * record_s
    delivered = records.delivered
    rate = (delivered[-1] - delivered[first]) / span
    crossing = jnp.any(problem.links == bottleneck, axis=1)
    capacity = problem.capacity[bottleneck]
    queue = records.queue[first + 1 :, bottleneck]
    return {
        "utilization": jnp.sum(jnp.where(crossing, rate, 0.0)) / capacity,
        "throughput_Bps": jnp.sum(rate),
        "queue_bytes": jnp.mean(queue),
        "queue_delay_s": jnp.mean(queue) / capacity,
        "queue_rms_bytes": jnp.sqrt(jnp.mean(queue * queue)),
    }


def _objective_function(objective, delay_weight: float) -> Callable:
    if callable(objective):
        return objective
    if objective == "throughput-delay":
        return lambda m: -m["utilization"] + delay_weight * m["queue_delay_s"]
    if objective == "throughput":
        return lambda m: -m["utilization"]
    if objective == "delay":
        return lambda m: m["queue_delay_s"]
    raise SpecError(
        "objective",
        f"unknown objective {objective!r}; choose one of {list(OBJECTIVES)} or "
        "pass a function of the metrics",
    )


def _scenario_parts(scenario):
    """``(fabric, routes, bottleneck)`` of a Scenario (or a ``(fabric, routes[, link])``)."""
    if isinstance(scenario, tuple):
        fabric, routes, *rest = scenario
        return fabric, routes, (rest[0] if rest else None)
    if not all(hasattr(scenario, name) for name in ("fabric", "routes")):
        raise SpecError(
            "scenario",
            "expected a scenario (fabricflow.dynamics.scenarios) or a (fabric, routes) tuple, "
            f"got {type(scenario).__name__}",
        )
    return scenario.fabric, scenario.routes, getattr(scenario, "bottleneck", None)


@dataclasses.dataclass(frozen=True, eq=False)
class TuningProblem:
    """The objective of one scenario as a function of some of a law's parameters.

    Build it with :meth:`build`; :meth:`value` and :meth:`gradient` take parameter values in
    their SI units (``{"kmin": 20e3, ...}``); :meth:`normalized` is the jitted
    ``z -> (objective, d objective / d z)`` the optimizer uses.
    """

    names: tuple
    low: np.ndarray
    high: np.ndarray
    base: Parameters
    prepared: PreparedRun
    bottleneck: int
    since: float
    objective: Callable

    @classmethod
    def build(
        cls,
        scenario,
        cc: str = "dcqcn",
        objective="throughput-delay",
        parameters: Sequence[str] = (),
        *,
        bounds: dict | None = None,
        base=None,
        delay_weight: float = 1e4,
        duration: float = 0.005,
        dt: float = 1e-6,
        pfc: str = "off",
        records: int = 50,
        extra_delay: float = 4e-6,
    ) -> TuningProblem:
        fabric, routes, bottleneck = _scenario_parts(scenario)
        with jax.enable_x64(True):
            prepared = prepare_fabric_run(
                fabric,
                routes,
                cc=cc,
                params=base,
                pfc=pfc,
                duration=duration,
                dt=dt,
                records=records,
                extra_delay=extra_delay,
                dtype=jnp.float64,
            )
        law = prepared.law
        names = tuple(parameters) or tuple(_default_names(law.name))
        unknown = [name for name in names if name not in law.params_class.FIELDS]
        if unknown:
            raise SpecError(
                "parameters",
                f"{unknown[0]!r} is not a {law.title} parameter; those are "
                f"{sorted(law.params_class.FIELDS)}",
            )
        low, high = _bounds(prepared.params, names, {} if bounds is None else bounds)
        if bottleneck is None:
            bottleneck = _busiest_link(routes.links, fabric.capacity)
        num_links = int(np.asarray(fabric.capacity).shape[0])
        bottleneck = schema.integer(bottleneck, "bottleneck", minimum=0, maximum=num_links - 1)
        return cls(
            names=names,
            low=low,
            high=high,
            base=prepared.params,
            prepared=prepared,
            bottleneck=int(bottleneck),
            since=prepared.config.num_records * prepared.config.steps_per_record * dt / 2,
            objective=_objective_function(objective, delay_weight),
        )

    def to_params(self, z) -> Parameters:
        """The parameter set at normalized coordinates ``z`` (``[len(names)]`` in [0, 1])."""
        values = jnp.exp(jnp.log(self.low) + z * (jnp.log(self.high) - jnp.log(self.low)))
        fields = {name: values[i] for i, name in enumerate(self.names)}
        base = {f.name: getattr(self.base, f.name) for f in dataclasses.fields(self.base)}
        return type(self.base)(**{**base, **fields})

    def to_z(self, values: dict) -> np.ndarray:
        chosen = np.array([float(values[name]) for name in self.names])
        return (np.log(chosen) - np.log(self.low)) / (np.log(self.high) - np.log(self.low))

    def loss(self, z):
        """``(objective, metrics)`` at ``z`` (traceable; metrics as :func:`metrics`)."""
        prepared = self.prepared
        _, records = integrator.run_remat(
            prepared.problem,
            self.to_params(z),
            prepared.pfc_arrays,
            prepared.law,
            prepared.config,
            jnp.float64,
        )
        problem = integrator.cast(prepared.problem, self.base, prepared.pfc_arrays, jnp.float64)[0]
        values = metrics(records, problem, prepared.config, self.bottleneck, self.since)
        return self.objective(values), values

    @functools.cached_property
    def normalized(self) -> Callable:
        """Jitted ``z -> ((objective, metrics), gradient in z)`` (float64; compiled once,
        on first use, for the value, the gradient and the metrics alike)."""
        return jax.jit(jax.value_and_grad(self.loss, has_aux=True))

    def _at(self, values: dict):
        with jax.enable_x64(True):
            (value, found), grad = self.normalized(jnp.asarray(self.to_z(values)))
            return float(value), {k: float(v) for k, v in found.items()}, np.asarray(grad)

    def value(self, values: dict) -> float:
        """The objective for ``values`` of :attr:`names` (SI units)."""
        return self._at(values)[0]

    def metrics_at(self, values: dict) -> dict:
        """The run's :func:`metrics` (floats) for ``values`` of :attr:`names`."""
        return self._at(values)[1]

    def gradient(self, values: dict) -> dict:
        """``d objective / d parameter`` (per SI unit of each) at ``values``."""
        grad_z = self._at(values)[2]
        scale = np.log(self.high) - np.log(self.low)  # dz/dp = 1 / (p log(high/low))
        chosen = np.array([float(values[name]) for name in self.names])
        return {
            name: float(grad_z[i]) / (chosen[i] * scale[i]) for i, name in enumerate(self.names)
        }


@dataclasses.dataclass(frozen=True)
class CCTuning:
    """Outcome of :func:`tune_cc`.

    Attributes:
        cc: the law. names: the tuned parameters. params / default_params: the best and the
            starting parameter sets. objective / default_objective: their objectives.
        metrics / default_metrics: their runs' metrics (:func:`metrics`).
        history: objective at every step. bounds: name -> (low, high). seconds: wall time.
    """

    cc: str
    names: tuple
    params: Parameters
    default_params: Parameters
    objective: float
    default_objective: float
    metrics: dict
    default_metrics: dict
    history: list
    bounds: dict
    seconds: float

    def summary(self) -> dict:
        """JSON-able: the tuned and default values of each parameter, objectives, metrics."""
        return {
            "cc": self.cc,
            "tuned": {name: float(getattr(self.params, name)) for name in self.names},
            "default": {name: float(getattr(self.default_params, name)) for name in self.names},
            "objective": self.objective,
            "default_objective": self.default_objective,
            "metrics": self.metrics,
            "default_metrics": self.default_metrics,
            "steps": len(self.history),
            "seconds": self.seconds,
        }


def tune_cc(
    scenario,
    cc: str = "dcqcn",
    objective="throughput-delay",
    parameters: Sequence[str] = (),
    *,
    bounds: dict | None = None,
    base=None,
    steps: int = 30,
    learning_rate: float = 0.05,
    delay_weight: float = 1e4,
    duration: float = 0.005,
    dt: float = 1e-6,
    pfc: str = "off",
    records: int = 50,
    extra_delay: float = 4e-6,
) -> CCTuning:
    """Tune ``parameters`` of rate law ``cc`` on ``scenario`` by gradient through the fluid.

    Args:
        scenario: a scenario of :mod:`fabricflow.dynamics.scenarios` (its bottleneck is
            the link the objective reads; for a union, the first part's), a
            ``(fabric, routes[, bottleneck_link])`` tuple, or a :class:`TuningProblem`
            already built (then ``cc``, ``objective``, ``parameters`` and the run options are
            its own; its compiled gradient is reused).
        cc: ``dcqcn``, ``hpcc``, ``timely``, ``swift`` or ``predictive``.
        objective: one of :data:`OBJECTIVES` or ``f(metrics) -> scalar`` (JAX; smaller is
            better) over the keys of :func:`metrics`.
        parameters: the parameter names to tune (default: DCQCN ``kmin, kmax, pmax, rate_ai``;
            HPCC ``eta, expected_flows``; TIMELY ``beta, rate_ai``; Swift ``base_target,
            beta``; predictive ``target_delay, horizon``).
        bounds: name -> ``(low, high)`` in SI units (default: x/4 .. 4x the starting value,
            within the field's range).
        base: the starting parameters (a preset name or set; default the law's default).
        steps, learning_rate: projected Adam (optax) in normalized coordinates.
        delay_weight: s^-1, the weight of queueing delay in ``throughput-delay``.
        duration, dt, pfc, records, extra_delay: the run (float64), as in ``simulate_cc``.

    Returns:
        :class:`CCTuning` (the best point seen, never worse than the start).
    """
    import optax  # deferred: the optimizer library is needed by this function only

    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise SpecError("steps", f"must be an integer >= 1, got {steps!r}")
    began = time.perf_counter()
    problem = scenario
    if not isinstance(scenario, TuningProblem):
        problem = TuningProblem.build(
            scenario,
            cc,
            objective,
            parameters,
            bounds=bounds,
            base=base,
            delay_weight=delay_weight,
            duration=duration,
            dt=dt,
            pfc=pfc,
            records=records,
            extra_delay=extra_delay,
        )
    with jax.enable_x64(True):
        step = problem.normalized
        z = jnp.asarray(problem.to_z({n: getattr(problem.base, n) for n in problem.names}))
        z0 = z
        optimizer = optax.adam(learning_rate)
        state = optimizer.init(z)
        history, best_z, best = [], z, np.inf
        for _ in range(steps):
            (value, _), grad = step(z)
            history.append(float(value))
            if float(value) < best:
                best, best_z = float(value), z
            updates, state = optimizer.update(grad, state, z)
            z = optax.projections.projection_box(optax.apply_updates(z, updates), 0.0, 1.0)
        default_objective = history[0]
        tuned, start = problem.to_params(best_z), problem.to_params(z0)
        chosen = {n: float(getattr(tuned, n)) for n in problem.names}
        started = {n: float(getattr(start, n)) for n in problem.names}
    return CCTuning(
        cc=problem.prepared.law.name,
        names=problem.names,
        params=_plain(tuned),
        default_params=_plain(start),
        objective=best,
        default_objective=default_objective,
        metrics=problem.metrics_at(chosen),
        default_metrics=problem.metrics_at(started),
        history=history,
        bounds={
            n: (float(problem.low[i]), float(problem.high[i])) for i, n in enumerate(problem.names)
        },
        seconds=time.perf_counter() - began,
    )


def _plain(params: Parameters) -> Parameters:
    return type(params)(**{k: float(np.asarray(v)) for k, v in params.values().items()})


def _default_names(cc: str) -> tuple:
    return {
        "dcqcn": ("kmin", "kmax", "pmax", "rate_ai"),
        "hpcc": ("eta", "expected_flows"),
        "timely": ("beta", "rate_ai"),
        "swift": ("base_target", "beta"),
        "predictive": ("target_delay", "horizon"),
    }[cc]


def _bounds(base: Parameters, names, given) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds of the tuned parameters ``names`` (SI units): ``given``
    (name -> ``(low, high)``, two finite numbers) or x/4 .. 4x the start, within the
    field's range. A key that names no tuned parameter is refused with the closest."""
    if not isinstance(given, dict):
        raise SpecError("bounds", f"expected a mapping name -> (low, high), got {given!r:.60}")
    for key in given:
        if key not in names:
            fields = type(base).FIELDS
            hint = (
                f"{key!r} is a parameter of the law but not tuned; add it to parameters"
                if key in fields
                else f"unknown parameter {key!r}; the tuned ones are {list(names)}"
            )
            raise SpecError(f"bounds.{key}", hint, value=key, allowed=names)
    low, high = [], []
    for name in names:
        value = float(np.asarray(getattr(base, name)))
        bound = type(base).FIELDS[name][1]
        pair = given.get(name, (value / 4, value * 4))
        field = f"bounds.{name}"
        if isinstance(pair, (str, bytes, dict)) or not hasattr(pair, "__len__") or len(pair) != 2:
            raise SpecError(field, f"expected (low, high), two numbers, got {pair!r:.60}")
        lo = schema.number(pair[0], f"{field}[0]", above=0)
        hi = schema.number(pair[1], f"{field}[1]", above=0)
        if bound in ("(0, 1]", "[0, 1]", "(0, 1)"):
            hi = min(hi, 1.0 - (1e-9 if bound == "(0, 1)" else 0.0))
        if not lo < hi:
            raise SpecError(field, f"needs 0 < low < high, got ({lo:g}, {hi:g}) around {value:g}")
        if not lo <= value <= hi:
            raise SpecError(field, f"({lo:g}, {hi:g}) must contain the start {value:g}")
        low.append(lo)
        high.append(hi)
    return np.asarray(low), np.asarray(high)


def _busiest_link(links, capacity) -> int:
    """The link with the most flows per unit of capacity (the likely bottleneck)."""
    valid = links >= 0
    counts = np.bincount(links[valid], minlength=capacity.shape[0])
    return int(np.argmax(counts / np.maximum(capacity, 1e-300)))


__all__ = ["OBJECTIVES", "CCTuning", "TuningProblem", "metrics", "tune_cc"]
