"""Parameter sets of the fluid solvers: frozen dataclass pytrees with units and bounds.

A parameter class (congestion-control law, PFC buffer) subclasses :class:`Parameters`
and declares, per field, its kind of quantity and its allowed range in ``FIELDS``::

    @register
    @dataclasses.dataclass(frozen=True)
    class MyParams(Parameters):
        FIELDS: ClassVar = {"gain": ("number", "(0, 1]"), "timer": ("time", "> 0")}
        PREFIX: ClassVar = "params"
        NAME: ClassVar = "my law"
        gain: float = 0.5
        timer: float = 55e-6

Every field is SI (seconds, bytes, bytes/s) or a plain number. ``replace`` accepts unit
strings (``'40Mbps'``, ``'4us'``, ``'200KB'``, fractions ``'1/256'``) and validates;
``validate`` names the offending field (``params.gain``) and its allowed range. The
fields are the pytree's leaves, so :func:`stack_params` of a list of sets gives one set of
``[batch]`` arrays that ``vmap`` runs with one compilation.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import jax
import numpy as np

from fabricflow.assignments import key_values
from fabricflow.errors import SpecError
from fabricflow.units import parse_bandwidth, parse_size, parse_time

KINDS = ("time", "size", "rate", "number")
_UNIT_WORD = {"time": " s", "size": " bytes", "rate": " bytes/s", "number": ""}


@dataclasses.dataclass(frozen=True)
class Parameters:
    """Base of the solvers' parameter sets (see the module docs).

    Class attributes of a subclass: ``FIELDS`` maps each field to ``(kind, bound)`` with
    ``kind`` one of :data:`KINDS` and ``bound`` one of ``"any"``, ``"> 0"``, ``">= 0"``,
    ``"(0, 1]"``, ``"[0, 1]"``, ``"(0, 1)"``; ``PREFIX`` is the field path of errors
    (``params``, ``pfc``); ``NAME`` the name in messages.
    """

    FIELDS: ClassVar[dict[str, tuple[str, str]]] = {}
    PREFIX: ClassVar[str] = "params"
    NAME: ClassVar[str] = "solver"
    PRESETS: ClassVar[dict] = {}

    @classmethod
    def preset(cls, name: str | None = None, **overrides):
        """A named preset (default: the first of ``PRESETS``) with fields overridden."""
        name = next(iter(cls.PRESETS), None) if name is None else name
        if name not in cls.PRESETS:
            raise SpecError(
                cls.PREFIX,
                f"unknown {cls.NAME} preset {name!r}; choose one of {list(cls.PRESETS)}",
            )
        base = cls.PRESETS[name]
        return base.replace(**overrides) if overrides else base

    def replace(self, **overrides):
        """A copy with fields overridden (numbers, unit strings or arrays), validated."""
        parsed = {key: self.parse_field(key, value) for key, value in overrides.items()}
        params = dataclasses.replace(self, **parsed)
        params.validate()
        return params

    @classmethod
    def parse_field(cls, key: str, value):
        """``value`` of field ``key`` as a float (or float array), from a unit string."""
        if key not in cls.FIELDS:
            raise SpecError(
                cls.PREFIX,
                f"unknown {cls.NAME} parameter {key!r}; allowed: {sorted(cls.FIELDS)}",
            )
        kind = cls.FIELDS[key][0]
        field = f"{cls.PREFIX}.{key}"
        return _scalar_or_array(value, lambda v: _parse_one(kind, v, field))

    def validate(self) -> None:
        """Raise :class:`SpecError` naming the first field outside its allowed range."""
        values = self.values()
        for name, value in values.items():
            if not np.all(np.isfinite(value)):
                raise SpecError(f"{self.PREFIX}.{name}", f"must be finite, got {_show(value)}")
        for name, (kind, bound) in self.FIELDS.items():
            if not _within(values[name], bound):
                raise SpecError(f"{self.PREFIX}.{name}", _bound_message(bound, kind, values[name]))
        self.check_relations(values)

    def check_relations(self, values: dict[str, np.ndarray]) -> None:
        """Checks between fields (subclasses: raise :class:`SpecError`); none by default."""

    def values(self) -> dict[str, np.ndarray]:
        """Every field as a float64 array (scalar or ``[batch]``)."""
        return {
            f.name: np.asarray(getattr(self, f.name), dtype=np.float64)
            for f in dataclasses.fields(self)
        }

    def as_dict(self) -> dict:
        """Fields as plain floats (lists for a batch), JSON-able."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def batch_size(self) -> int:
        """Length of the batch axis (0 when every field is a scalar)."""
        shapes = {np.shape(getattr(self, f.name)) for f in dataclasses.fields(self)}
        if shapes <= {()}:
            return 0
        lengths = {shape[0] for shape in shapes if shape}
        if len(lengths) != 1 or any(len(shape) > 1 for shape in shapes):
            raise SpecError(
                self.PREFIX, f"batched parameters need 1-d fields of one length, got {shapes}"
            )
        return lengths.pop()

    def item(self, index: int):
        """Entry ``index`` of a batch as a scalar parameter set."""
        return type(self)(
            **{
                f.name: float(np.asarray(getattr(self, f.name))[index])
                if np.ndim(getattr(self, f.name))
                else getattr(self, f.name)
                for f in dataclasses.fields(self)
            }
        )

    def broadcast(self, batch: int):
        """The same set with numpy float64 leaves, each broadcast to ``[batch]`` if batch."""
        values = {}
        for name, value in self.values().items():
            values[name] = np.broadcast_to(value, (batch,)).copy() if batch else value
        return type(self)(**values)


def register(cls):
    """Class decorator: make a :class:`Parameters` dataclass a JAX pytree (fields = leaves)."""
    names = [f.name for f in dataclasses.fields(cls)]
    jax.tree_util.register_dataclass(cls, data_fields=names, meta_fields=[])
    return cls


def stack_params(params: list):
    """A batch of parameter sets (all of one class) as one set with ``[batch]`` fields.

    Pass the result as ``params=`` (or ``pfc_params=``) of the simulators to ``vmap`` over
    the batch with one compilation.
    """
    if not params:
        raise SpecError("params", "need at least one parameter set to stack")
    kind = type(params[0])
    if not isinstance(params[0], Parameters) or any(type(p) is not kind for p in params):
        raise SpecError(
            "params", "stack a list of parameter sets of one kind (e.g. DCQCNParams or PFCParams)"
        )
    for item in params:
        item.validate()
    fields = {
        f.name: np.asarray([float(getattr(p, f.name)) for p in params])
        for f in dataclasses.fields(kind)
    }
    return kind(**fields)


def parse_number(value, field: str) -> float:
    """A finite float from a number or a string (``'0.5'``, a fraction ``'1/256'``)."""
    if isinstance(value, bool):
        raise SpecError(field, f"expected a number, got {value!r}")
    try:
        if isinstance(value, str) and "/" in value:
            num, den = value.split("/", 1)
            number = float(num) / float(den)
        else:
            number = float(value)
    except (TypeError, ValueError, ZeroDivisionError):
        raise SpecError(
            field, f"expected a number (or a fraction like '1/256'), got {value!r}"
        ) from None
    if not math.isfinite(number):
        raise SpecError(field, f"must be finite, got {value!r}")
    return number


def parse_overrides(pairs: list[str] | None, prefix: str = "pfc.") -> tuple[dict, dict]:
    """Split ``KEY=VALUE`` strings into law and PFC overrides (``pfc.xoff=200KB``).

    Raises :class:`SpecError` on ``--set`` for a pair without ``=`` or a key given twice
    with different values (:func:`fabricflow.assignments.key_values`).
    """
    law: dict[str, str] = {}
    pfc: dict[str, str] = {}
    for key, value in key_values(pairs, "--set").items():
        target, name = (pfc, key[len(prefix) :]) if key.startswith(prefix) else (law, key)
        target[name] = value.strip()
    return law, pfc


def _parse_one(kind: str, value, field: str) -> float:
    if kind == "time":
        return parse_time(value, field, allow_zero=True)
    if kind == "size":
        return parse_size(value, field)
    if kind == "rate":
        return parse_bandwidth(value, field, allow_zero=True)
    return parse_number(value, field)


def _scalar_or_array(value, parse_one):
    if isinstance(value, (list, tuple, np.ndarray)):
        return np.asarray(
            [parse_one(v) for v in np.asarray(value, dtype=object).ravel()], dtype=np.float64
        ).reshape(np.shape(value))
    return parse_one(value)


def _within(value: np.ndarray, bound: str) -> bool:
    checks = {
        "any": lambda v: True,
        "> 0": lambda v: v > 0,
        ">= 0": lambda v: v >= 0,
        "(0, 1]": lambda v: (v > 0) & (v <= 1),
        "[0, 1]": lambda v: (v >= 0) & (v <= 1),
        "(0, 1)": lambda v: (v > 0) & (v < 1),
    }
    return bool(np.all(checks[bound](value)))


def _bound_message(bound: str, kind: str, value) -> str:
    unit = _UNIT_WORD[kind]
    if bound.startswith(("(", "[")):
        return f"must lie in {bound}, got {_show(value)}"
    return f"must be {bound}{unit}, got {_show(value)}"


def _show(value) -> str:
    array = np.asarray(value)
    return f"{float(array):g}" if array.ndim == 0 else str(array.tolist())


def _plain(value):
    array = np.asarray(value)
    return float(array) if array.ndim == 0 else array.tolist()


__all__ = [
    "KINDS",
    "Parameters",
    "parse_number",
    "parse_overrides",
    "register",
    "stack_params",
]
