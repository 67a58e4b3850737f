"""The sweep SPEC: which task, which fixed arguments, which grid, which metrics.

A SPEC is a mapping (YAML file or Python arguments)::

    task: step                 # step | collective | optimize | maxmin | cc | module:function
    fixed: {fabric: fat-tree-k16, model: llama3-8b, gpu: h100-sxm, gpus: 64, ...}
    grid:                      # one dimension per key, in this order
      fabric.topology.tiers.0.oversubscription: [1, 3]
      pp: [1, 2]
    metrics: [step_time_s, mfu]   # optional: a subset of the task's metrics

:class:`SweepSpec` keeps the grid order (it is the order of the dataset's dimensions) and
has a canonical JSON form whose hash identifies a store's content: a store written by one
SPEC refuses another.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fabricflow import schema
from fabricflow.errors import SpecError
from fabricflow.files import read_structured

SPEC_KEYS = ("task", "fixed", "grid", "metrics", "description")
FABRIC_PREFIX = "fabric."


@dataclass(frozen=True)
class SweepSpec:
    """A parsed, validated SPEC (values are plain JSON data).

    Attributes:
        task: task name (``step``, ...) or ``module:function``.
        fixed: argument -> value shared by every point.
        grid: ``(key, values)`` pairs in dimension order; every ``values`` non-empty,
            without duplicates.
        metrics: metric names to record, or None for the task's defaults.
        description: free text, not part of the identity.
    """

    task: str
    fixed: dict
    grid: tuple[tuple[str, tuple], ...]
    metrics: tuple[str, ...] | None = None
    description: str = ""

    @property
    def dims(self) -> tuple[str, ...]:
        return tuple(key for key, _ in self.grid)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(values) for _, values in self.grid)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def canonical(self) -> dict:
        """JSON-able identity: the grid stays a list of pairs (its order is the layout)."""
        return {
            "task": self.task,
            "fixed": self.fixed,
            "grid": [[key, list(values)] for key, values in self.grid],
            "metrics": None if self.metrics is None else list(self.metrics),
        }

    def canonical_json(self) -> str:
        return json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))

    def digest(self) -> str:
        """SHA-256 of :meth:`canonical_json` (hex)."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    def point(self, index: tuple[int, ...]) -> dict:
        """The grid values of the point at ``index`` (one index per dimension)."""
        return {key: values[i] for (key, values), i in zip(self.grid, index)}


def read_sweep_spec(source: str | Path | Mapping) -> SweepSpec:
    """Parse a SPEC from a YAML/JSON file path or a mapping; errors name the field."""
    if isinstance(source, Mapping):
        data: Any = dict(source)
        where = "spec"
    else:
        data = read_structured(source, what="sweep spec")
        where = str(source)
    if not isinstance(data, Mapping):
        raise SpecError("spec", f"{where}: expected a mapping with task and grid, got {data!r}")
    schema.Section(data, "spec", SPEC_KEYS)  # unknown keys, with the closest
    if "task" not in data:
        raise SpecError(
            "task", "missing; give step, collective, optimize, maxmin, cc or module:function"
        )
    if "grid" not in data:
        raise SpecError("grid", "missing; give a mapping of key -> list of values")
    description = data.get("description") or ""
    if not isinstance(description, str):
        raise SpecError("description", f"expected text, got {description!r}")
    return make_spec(
        data["task"],
        data["grid"],
        fixed=data.get("fixed"),
        metrics=data.get("metrics"),
        description=description,
    )


def make_spec(task, grid, *, fixed=None, metrics=None, description: str = "") -> SweepSpec:
    """A :class:`SweepSpec` from Python values (what :func:`fabricflow.sweeps` takes)."""
    task = _task_name(task)
    if not isinstance(grid, Mapping) or not grid:
        raise SpecError(
            "grid", f"expected a non-empty mapping of key -> list of values, got {grid!r}"
        )
    pairs = []
    for key, values in grid.items():
        field = f"grid.{key}"
        _check_key(key, field)
        if isinstance(values, range) or (
            isinstance(values, np.ndarray) and values.ndim == 1
        ):  # np.linspace(...) or range(...): the values they hold, as plain numbers
            values = list(values.tolist() if isinstance(values, np.ndarray) else values)
        if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)):
            raise SpecError(field, f"expected a non-empty list of values, got {values!r}")
        if not values:
            raise SpecError(field, "expected a non-empty list of values, got []")
        values = tuple(_plain(value, field) for value in values)
        _check_distinct(values, field)
        pairs.append((key, values))
    fixed = {} if fixed is None else fixed
    if not isinstance(fixed, Mapping):
        raise SpecError("fixed", f"expected a mapping of argument -> value, got {fixed!r}")
    fixed_plain = {}
    for key, value in fixed.items():
        _check_key(key, f"fixed.{key}")
        fixed_plain[key] = _plain(value, f"fixed.{key}")
    both = sorted(set(fixed_plain) & {key for key, _ in pairs})
    if both:
        raise SpecError("grid", f"{both} given in both fixed and grid; give each key once")
    if metrics is not None:
        if isinstance(metrics, str) or not isinstance(metrics, (list, tuple)) or not metrics:
            raise SpecError(
                "metrics", f"expected a non-empty list of metric names, got {metrics!r}"
            )
        if not all(isinstance(name, str) and name for name in metrics):
            raise SpecError("metrics", f"expected metric names (text), got {metrics!r}")
        if len(set(metrics)) != len(metrics):
            raise SpecError("metrics", f"each metric once, got {list(metrics)}")
        reserved = sorted(set(metrics) & {"status", "error"} | set(metrics) & {k for k, _ in pairs})
        if reserved:
            raise SpecError("metrics", f"{reserved} name a store variable or dimension already")
        metrics = tuple(metrics)
    return SweepSpec(task, fixed_plain, tuple(pairs), metrics, description)


def _identity(value):
    """``value`` as the task sees it: Python's equal numbers are one point (``1``, ``1.0``
    and ``true``), recursively."""
    if isinstance(value, bool) or (isinstance(value, float) and value.is_integer()):
        return int(value)
    if isinstance(value, list):
        return [_identity(v) for v in value]
    if isinstance(value, dict):
        return {k: _identity(v) for k, v in value.items()}
    return value


def _check_distinct(values: tuple, field: str) -> None:
    """Refuse a grid dimension that names one point twice (``1`` and ``1.0``, or a
    repeated value): it would compute the same point twice under two labels."""
    seen: dict[object, object] = {}
    for value in values:
        if isinstance(value, (bool, int, float)):
            label: object = ("number", _identity(value))  # hashable: no JSON text needed
        elif isinstance(value, str) or value is None:
            label = ("text", value)
        else:
            label = json.dumps(_identity(value), sort_keys=True)
        if label in seen:
            first = seen[label]
            written = json.dumps(first, sort_keys=True) == json.dumps(value, sort_keys=True)
            same = "repeated" if written else "equal values"
            raise SpecError(
                field,
                f"values must be distinct; {json.dumps(first)} and {json.dumps(value)} are "
                f"{same} (one point computed twice): give each value once",
            )
        seen[label] = value


def _task_name(task) -> str:
    if callable(task) and not isinstance(task, str):
        module = getattr(task, "__module__", None)
        qualname = getattr(task, "__qualname__", "")
        if not module or "<" in qualname or module == "__main__":
            raise SpecError(
                "task",
                f"a function given as the task must be importable by the workers (defined at "
                f"the top level of a module other than __main__), got {task!r}",
            )
        return f"{module}:{qualname}"
    if not isinstance(task, str) or not task.strip():
        raise SpecError(
            "task",
            f"expected step, collective, optimize, maxmin, cc or module:function, got {task!r}",
        )
    return task.strip()


def _check_key(key, field: str) -> None:
    if not isinstance(key, str) or not key or key != key.strip():
        raise SpecError(field, f"expected an argument name or fabric.<path>, got {key!r}")
    if key in ("status", "error"):
        raise SpecError(field, f"{key!r} is a variable of the store; rename the argument")
    if key.startswith(FABRIC_PREFIX) and any(part == "" for part in key.split(".")):
        raise SpecError(field, f"empty part in the dotted path {key!r}")


def _plain(value, field: str):
    """``value`` as JSON data (finite numbers, text, bools, None, lists, mappings)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SpecError(field, f"must be a finite number, got {value!r}")
        return float(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v, f"{field}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{field}.{i}") for i, v in enumerate(value)]
    try:  # numpy scalars
        import numpy as np

        if isinstance(value, np.generic):
            return _plain(value.item(), field)
    except ImportError:  # pragma: no cover
        pass
    raise SpecError(field, f"expected a number, text, bool, list or mapping, got {value!r}")


def spec_differences(old: dict, new: dict) -> list[str]:
    """What differs between two canonical SPECs, one line per field."""
    lines = []
    if old.get("task") != new.get("task"):
        lines.append(f"task {old.get('task')!r} -> {new.get('task')!r}")
    old_fixed, new_fixed = old.get("fixed") or {}, new.get("fixed") or {}
    for key in sorted(set(old_fixed) | set(new_fixed)):
        if old_fixed.get(key, "<unset>") != new_fixed.get(key, "<unset>"):
            lines.append(
                f"fixed.{key} {old_fixed.get(key, '<unset>')!r} -> {new_fixed.get(key, '<unset>')!r}"
            )
    old_grid = [tuple(pair[:1]) + (pair[1],) for pair in old.get("grid") or []]
    new_grid = [tuple(pair[:1]) + (pair[1],) for pair in new.get("grid") or []]
    if [k for k, _ in old_grid] != [k for k, _ in new_grid]:
        lines.append(f"grid keys {[k for k, _ in old_grid]} -> {[k for k, _ in new_grid]}")
    else:
        for (key, old_values), (_, new_values) in zip(old_grid, new_grid):
            if old_values != new_values:
                lines.append(f"grid.{key} {old_values} -> {new_values}")
    if old.get("metrics") != new.get("metrics"):
        lines.append(f"metrics {old.get('metrics')} -> {new.get('metrics')}")
    return lines
