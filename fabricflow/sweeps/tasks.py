"""Sweep tasks: what one grid point computes.

A task is a :class:`SweepTask`: ``run(**kwargs) -> {metric: float}`` where ``kwargs`` are
the SPEC's ``fixed`` arguments and the point's grid values, with ``fabric`` (and every
``fabric.<path>`` key) already resolved into a :class:`~fabricflow.fabric.fabric.Fabric`.
Built in: ``step`` (:func:`fabricflow.step_time`), ``collective``
(:func:`fabricflow.collective_time`), ``optimize`` (:func:`fabricflow.optimize_layout`),
``maxmin`` and ``cc`` (:mod:`fabricflow.sweeps.solver_tasks`, imported when asked for), and
``module:function``: any importable function returning a mapping of floats. Such a
function may carry attributes ``metrics`` (default metric names), ``batch_keys`` and
``run_batch`` to opt into batching (see :class:`SweepTask`).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass

from fabricflow.collective import make_groups
from fabricflow.collective.timing import collective_time
from fabricflow.errors import SpecError
from fabricflow.layout_search.optimize import optimize_layout
from fabricflow.sweeps.grid_spec import FABRIC_PREFIX
from fabricflow.sweeps.overrides import fabric_for
from fabricflow.units import parse_size
from fabricflow.workload.calibration import as_calibration
from fabricflow.workload.layout import Layout
from fabricflow.workload.step import step_time

BUILTIN = ("step", "collective", "optimize", "maxmin", "cc")


@dataclass(frozen=True)
class SweepTask:
    """What a sweep computes at each point.

    Attributes:
        name: the SPEC's ``task``.
        run: ``run(**kwargs) -> {metric: float}``; ``kwargs`` = fixed | point with
            ``fabric`` resolved (dotted ``fabric.*`` overrides applied, cached per process).
        metrics: default metric names (a SPEC's ``metrics:`` may pick a subset).
        batch_keys: grid keys that change only array values (capacities, demands, ...):
            points differing only in them form one group, run by ``run_batch``.
        run_batch: ``run_batch(common, varying) -> [metrics dict]``, one per entry of
            ``varying``; ``common`` = the kwargs the group shares (fabric resolved), each
            ``varying`` entry = that point's ``batch_keys`` values.
        arguments: the argument names ``run`` takes (None: any).
        required: arguments every point must have (fixed or grid).
    """

    name: str
    run: Callable[..., dict[str, float]]
    metrics: tuple[str, ...]
    batch_keys: frozenset[str] = frozenset()
    run_batch: Callable[..., list[dict[str, float]]] | None = None
    arguments: frozenset[str] | None = None
    required: frozenset[str] = frozenset()


# ----------------------------------------------------------------------------- step

STEP_PARTS = ("compute", "bubble", "tp", "cp", "ep", "pp", "dp", "optimizer", "offload")
STEP_METRICS = (
    "step_time_s",
    "mfu",
    "tokens_per_s",
    "tflops_per_gpu",
    "memory_gib_per_gpu",
    *(f"{part}_s" for part in STEP_PARTS),
)
_STEP_CALL = (
    "order",
    "placement",
    "check_memory",
    "collectives",
    "coupling",
    "routing",
    "calibration",
)


def _layout_fields() -> frozenset[str]:
    return frozenset(field.name for field in dataclasses.fields(Layout))


def run_step(*, fabric, model, gpu, gpus, fail=None, **kwargs) -> dict[str, float]:
    """One :func:`~fabricflow.workload.step.step_time`: ``gpus`` and the :class:`Layout`
    fields (``tp``, ``pp``, ``micro_batch``, ``global_batch``, ``seq_len``, ...;
    ``dp`` defaults to ``gpus / (tp cp pp)``), ``order``, ``placement``, ``routing``,
    ``collectives``, ``seed`` (the point's seed, every draw of it: the collectives' ECMP
    hash, ``routing_seed``; the cables ``fail`` takes down; the ``scattered`` placement,
    ``placement_seed``), ``calibration`` (a calibration file), and
    ``fail: "KIND:FRACTION"`` (cables failed first)."""
    call = {key: kwargs.pop(key) for key in _STEP_CALL if key in kwargs}
    seed = kwargs.pop("seed", 0)
    gpus = _integer(gpus, "gpus")
    if "dp" not in kwargs:
        model_parallel = kwargs.get("tp", 1) * kwargs.get("cp", 1) * kwargs.get("pp", 1)
        if gpus % model_parallel:
            raise SpecError(
                "gpus", f"{gpus} GPUs are not divisible by tp x cp x pp = {model_parallel}"
            )
        kwargs["dp"] = gpus // model_parallel
    if isinstance(kwargs.get("pp_split"), list):
        kwargs["pp_split"] = tuple(kwargs["pp_split"])
    layout = Layout(**kwargs).validate(num_gpus=gpus)
    fabric = _failed(fabric, fail, seed)
    result = step_time(model, gpu, layout, fabric, placement_seed=seed, routing_seed=seed, **call)
    out = {
        "step_time_s": result.step_time_s,
        "mfu": result.mfu,
        "tokens_per_s": result.tokens_per_s,
        "tflops_per_gpu": result.tflops_per_gpu,
        "memory_gib_per_gpu": result.memory_gib_per_gpu,
    }
    for part in STEP_PARTS:
        out[f"{part}_s"] = result.breakdown[part]
    return out


# ----------------------------------------------------------------------------- collective

COLLECTIVE_METRICS = ("time_s", "algbw_GBps", "busbw_GBps", "num_flows")


def run_collective(
    *,
    fabric,
    op,
    size,
    gpus,
    group_size=None,
    layout="contiguous",
    fail=None,
    seed=0,
    **kwargs,
) -> dict[str, float]:
    """One :func:`~fabricflow.collective.timing.collective_time` by all groups of the first
    ``gpus`` GPUs at once: ``group_size`` ranks per group (default all), ``layout``
    ``contiguous`` or ``strided`` (:func:`~fabricflow.collective.groups.make_groups`),
    ``size`` in bytes (a number or text with a unit, ``"64MiB"``), ``algorithm``, ``protocol``,
    ``routing``, ``channels``, ``seed``, ``fail``, ``calibration`` (a calibration file:
    its network constants)."""
    calibration = as_calibration(kwargs.pop("calibration", None))
    if calibration is not None:
        kwargs["cost"] = calibration.cost_model()

    gpus = _integer(gpus, "gpus")
    group_size = gpus if group_size is None else _integer(group_size, "group_size")
    size = parse_size(size, "size", allow_zero=False) if isinstance(size, str) else size
    groups = make_groups(gpus, group_size, layout=layout)
    result = collective_time(_failed(fabric, fail, seed), op, groups, size, seed=seed, **kwargs)
    return {
        "time_s": result.time_s,
        "algbw_GBps": result.algbw_Bps / 1e9,
        "busbw_GBps": result.busbw_Bps / 1e9,
        "num_flows": float(result.num_flows),
    }


# ----------------------------------------------------------------------------- optimize

OPTIMIZE_KNOBS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "zero")
OPTIMIZE_METRICS = (
    "step_time_s",
    "mfu",
    "tokens_per_gpu_s",
    "memory_gib_per_gpu",
    *(f"best_{knob}" for knob in OPTIMIZE_KNOBS),
    "candidates_evaluated",
)


def run_optimize(*, fabric, model, gpu, gpus, global_batch, seq_len, fail=None, **kwargs):
    """One :func:`~fabricflow.layout_search.optimize.optimize_layout`; metrics: the best layout's
    step time, MFU, tokens per GPU-second, memory, and its knobs as ``best_<knob>``."""
    seed = kwargs.pop("seed", 0)
    fabric = _failed(fabric, fail, seed)
    search = optimize_layout(
        model,
        gpu,
        fabric,
        placement_seed=seed,
        gpus=_integer(gpus, "gpus"),
        global_batch=global_batch,
        seq_len=seq_len,
        **kwargs,
    )
    layout = search.best_kwargs["layout"]
    out = {
        "step_time_s": search.best.step_time_s,
        "mfu": search.best.mfu,
        "tokens_per_gpu_s": search.best.tokens_per_s / search.gpus,
        "memory_gib_per_gpu": search.best.memory_gib_per_gpu,
        "candidates_evaluated": float(search.counts.get("evaluated", math.nan)),
    }
    for knob in OPTIMIZE_KNOBS:
        out[f"best_{knob}"] = float(getattr(layout, knob))
    return out


# ----------------------------------------------------------------------------- registry


def get_task(name: str) -> SweepTask:
    """The task named by a SPEC's ``task``.

    Raises:
        SpecError: an unknown name (the allowed ones listed) or a ``module:function``
            that cannot be imported or is not callable.
    """
    if name == "step":
        return SweepTask(
            "step",
            run_step,
            STEP_METRICS,
            arguments=frozenset({"fabric", "model", "gpu", "gpus", "fail", "seed", *_STEP_CALL})
            | _layout_fields(),
            required=frozenset({"fabric", "model", "gpu", "gpus"}),
        )
    if name == "collective":
        return SweepTask(
            "collective",
            run_collective,
            COLLECTIVE_METRICS,
            arguments=frozenset(
                {
                    "fabric",
                    "op",
                    "size",
                    "gpus",
                    "group_size",
                    "layout",
                    "fail",
                    "seed",
                    "algorithm",
                    "protocol",
                    "routing",
                    "channels",
                    "rail_aware",
                    "calibration",
                }
            ),
            required=frozenset({"fabric", "op", "size", "gpus"}),
        )
    if name == "optimize":
        return SweepTask(
            "optimize",
            run_optimize,
            OPTIMIZE_METRICS,
            arguments=frozenset(
                {
                    "fabric",
                    "model",
                    "gpu",
                    "gpus",
                    "global_batch",
                    "seq_len",
                    "fail",
                    "precision",
                    "fixed",
                    "space",
                    "objective",
                    "top_k",
                    "budget_s",
                    "seed",
                    "collectives",
                    "calibration",
                }
            ),
            required=frozenset({"fabric", "model", "gpu", "gpus", "global_batch", "seq_len"}),
        )
    if name in ("maxmin", "cc"):
        # lazy: xarray (and JAX in a cc point) load only in sweeps of the solver tasks
        from fabricflow.sweeps import solver_tasks

        prefix = name.upper()
        return SweepTask(
            name,
            getattr(solver_tasks, f"{name}_point"),
            tuple(getattr(solver_tasks, f"{prefix}_METRICS")),
            frozenset(getattr(solver_tasks, f"{prefix}_BATCH_KEYS")),
            getattr(solver_tasks, f"{name}_batch"),
            # checked before any point runs: a typo is bad input (exit 2), not a failed point
            arguments=getattr(solver_tasks, f"_{prefix}_ARGS"),
        )
    if ":" in name:
        return _function_task(name)
    raise SpecError("task", f"unknown task {name!r}; use one of {list(BUILTIN)} or module:function")


def _function_task(name: str) -> SweepTask:
    """The task of a user's ``module:function`` (``function`` may be dotted: a method of
    a class); its optional attributes ``metrics``, ``batch_keys`` and ``run_batch`` make
    the task's, its signature the arguments it takes.

    Raises:
        SpecError: a module that cannot be imported, a missing name, or one not callable.
    """
    module_name, _, function_name = name.partition(":")
    module = _import(module_name, name)
    function = module
    for part in function_name.split("."):
        function = getattr(function, part, None)
        if function is None:
            raise SpecError("task", f"{module_name!r} has no {function_name!r}")
    if not callable(function):
        raise SpecError("task", f"{name!r} is not a function")
    return SweepTask(
        name,
        function,
        tuple(getattr(function, "metrics", ())),
        frozenset(getattr(function, "batch_keys", ())),
        getattr(function, "run_batch", None),
        arguments=_arguments(function),
    )


def _import(module_name: str, task: str):
    try:
        return importlib.import_module(module_name)
    except ImportError as error:
        raise SpecError("task", f"{task!r}: cannot import {module_name!r}: {error}") from None


def _arguments(function) -> frozenset[str] | None:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return frozenset(
        p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    )


def check_arguments(task: SweepTask, keys) -> None:
    """Refuse arguments ``task`` does not take and missing required ones (names listed)."""
    names = {"fabric" if key.startswith(FABRIC_PREFIX) else key for key in keys}
    if task.arguments is not None:
        unknown = sorted(names - task.arguments)
        if unknown:
            raise SpecError(
                "grid" if unknown[0] not in keys else unknown[0],
                f"task {task.name!r} takes no argument(s) {unknown}; it takes {sorted(task.arguments)}",
            )
    missing = sorted(task.required - set(keys))
    if missing:
        raise SpecError("fixed", f"task {task.name!r} needs {missing} (in fixed or grid)")
    if any(key.startswith(FABRIC_PREFIX) for key in keys) and "fabric" not in keys:
        raise SpecError(
            "fabric",
            "fabric.* keys need a base fabric: give fabric (a preset, a YAML path, slurm:PATH "
            "or netlist:PATH)",
        )


def resolve(kwargs: dict) -> dict:
    """``kwargs`` with ``fabric`` and the ``fabric.*`` keys replaced by the built fabric."""
    overrides = {key: value for key, value in kwargs.items() if key.startswith(FABRIC_PREFIX)}
    out = {key: value for key, value in kwargs.items() if not key.startswith(FABRIC_PREFIX)}
    if "fabric" in out:
        out["fabric"] = fabric_for(out["fabric"], overrides)
    return out


def as_metrics(values, metrics: tuple[str, ...]) -> dict[str, float]:
    """The selected ``metrics`` of a task's result as floats; a missing or non-numeric one
    is an error of the point (never a silent NaN)."""
    if not isinstance(values, dict):
        raise TypeError(f"the task returned {type(values).__name__}, expected a dict of floats")
    out = {}
    for name in metrics:
        if name not in values:
            raise KeyError(f"the task returned no metric {name!r} (it gave {sorted(values)})")
        value = values[name]
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            and not hasattr(value, "__float__")
        ):
            raise TypeError(f"metric {name!r} is {value!r}, not a number")
        out[name] = float(value)
    return out


def _integer(value, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(field, f"must be an integer >= 1, got {value!r}")
    return value


def _failed(fabric, fail, seed):
    """``fabric`` with ``fail: "KIND:FRACTION"`` of its cables of that kind failed."""
    if fail is None or fail == "" or fail == "none":
        return fabric
    kind, sep, fraction = str(fail).partition(":")
    try:
        value = float(fraction)
    except ValueError:
        value = None
    if not sep or value is None:
        raise SpecError("fail", f"expected KIND:FRACTION such as leaf:0.05 (or none), got {fail!r}")
    return fabric.without(link_kind=kind, fraction=value, seed=seed)
