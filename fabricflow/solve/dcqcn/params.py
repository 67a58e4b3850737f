"""DCQCN and PFC parameters: presets, overrides, validation, stable step range.

All fields are SI (seconds, bytes, bytes/s); the fluid model counts packets of
``packet_bytes`` for the marking exponents, as the paper's code does (1 KB packets),
and the kernel converts at its edge. Both dataclasses are JAX pytrees whose leaves are
the numeric fields, so a batch of parameter sets (:func:`stack_params`) can be ``vmap``-ed
through the simulator and compiles once.

Presets (docs/references.md §2):

* ``paper`` -- SIGCOMM'15 / CoNEXT'16 defaults: CNP interval tau = 50 us, alpha timer
  tau' = 55 us, rate-increase timer T = 55 us, byte counter B = 10 MB, F = 5,
  g = 1/256, R_AI = 40 Mb/s, Kmin = 5 KB, Kmax = 200 KB, Pmax = 1 %.
* ``connectx`` -- NVIDIA ConnectX NIC firmware defaults: T = 300 us, B = 32767 B,
  R_AI = 5 Mb/s, R_HAI = 50 Mb/s, g = 1/204.8 (DCE_TCP_G = 1019/1024), alpha update period 1 us,
  rate-reduce monitor period / min time between CNPs 4 us (tau), min rate 1 Mb/s. The
  switch ECN settings (Kmin, Kmax, Pmax) are switch configuration, not NIC firmware;
  they keep the paper's values. Hyper increase R_HAI = 50 Mb/s (see ``rate_hai``).

Hyper increase is not in the paper's fluid model (there every increase event adds R_AI).
We add it as a first-order term: an increase event is a hyper-increase one when the
*other* counter has also passed F stages without a mark, probability ``(1-p)^(F T R')``
for byte-counter events and ``(1-p)^(F B)`` for timer events; such events add
``R_HAI`` instead of ``R_AI``. With ``rate_hai == rate_ai`` (the ``paper`` preset) the
equations are exactly the paper's.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

from ...errors import SpecError
from ...units import parse_bandwidth, parse_size, parse_time


@dataclasses.dataclass(frozen=True)
class DCQCNParams:
    """DCQCN reaction-point and congestion-point parameters (SI units).

    Attributes:
        tau: CNP interval / rate-reduce period, s (the paper's tau).
        tau_prime: alpha update period, s (tau').
        timer: rate-increase timer T, s.
        byte_counter: byte counter B, bytes.
        fast_recovery: fast-recovery steps F (a count, kept as float for vmap).
        g: alpha gain, dimensionless in (0, 1].
        rate_ai: additive increase step R_AI, bytes/s.
        rate_hai: hyper increase step R_HAI, bytes/s (``== rate_ai``: no hyper stage, as
            in the paper's model).
        kmin, kmax: RED marking thresholds on the egress queue, bytes.
        pmax: marking probability at ``kmax``, in (0, 1].
        min_rate: lowest sending rate, bytes/s.
        initial_alpha: alpha at flow start.
        initial_rate_fraction: starting rate as a fraction of the flow's line rate
            (DCQCN starts at line rate: 1.0).
        packet_bytes: packet size used to count packets in the marking exponents, bytes.
    """

    tau: float = 50e-6
    tau_prime: float = 55e-6
    timer: float = 55e-6
    byte_counter: float = 10e6
    fast_recovery: float = 5.0
    g: float = 1.0 / 256.0
    rate_ai: float = 40e6 / 8
    rate_hai: float = 40e6 / 8
    kmin: float = 5e3
    kmax: float = 200e3
    pmax: float = 0.01
    min_rate: float = 0.0
    initial_alpha: float = 1.0
    initial_rate_fraction: float = 1.0
    packet_bytes: float = 1000.0

    @classmethod
    def preset(cls, name: str = "paper", **overrides) -> DCQCNParams:
        """A preset (``paper`` or ``connectx``) with fields overridden (numbers or unit strings)."""
        if name not in PRESETS:
            raise SpecError(
                "params", f"unknown DCQCN preset {name!r}; choose one of {sorted(PRESETS)}"
            )
        return PRESETS[name].replace(**overrides)

    def replace(self, **overrides) -> DCQCNParams:
        """A copy with fields overridden; values may be unit strings (``'40Mbps'``, ``'4us'``)."""
        parsed = {key: _parse_field(key, value) for key, value in overrides.items()}
        params = dataclasses.replace(self, **parsed)
        params.validate()
        return params

    def validate(self) -> None:
        """Raise :class:`SpecError` naming the field for a value outside its allowed range."""
        values = {
            f.name: np.asarray(getattr(self, f.name), dtype=np.float64)
            for f in dataclasses.fields(self)
        }
        for name, value in values.items():
            if not np.all(np.isfinite(value)):
                raise SpecError(f"params.{name}", f"must be finite, got {value}")
        positive = (
            "tau",
            "tau_prime",
            "timer",
            "byte_counter",
            "rate_ai",
            "rate_hai",
            "packet_bytes",
            "kmax",
        )
        for name in positive:
            if np.any(values[name] <= 0):
                raise SpecError(f"params.{name}", f"must be > 0, got {values[name]}")
        for name in ("g", "pmax"):
            if np.any((values[name] <= 0) | (values[name] > 1)):
                raise SpecError(f"params.{name}", f"must lie in (0, 1], got {values[name]}")
        if np.any((values["initial_alpha"] < 0) | (values["initial_alpha"] > 1)):
            raise SpecError(
                "params.initial_alpha", f"must lie in [0, 1], got {values['initial_alpha']}"
            )
        if np.any((values["initial_rate_fraction"] <= 0) | (values["initial_rate_fraction"] > 1)):
            raise SpecError(
                "params.initial_rate_fraction",
                f"must lie in (0, 1], got {values['initial_rate_fraction']}",
            )
        if np.any(values["fast_recovery"] < 0):
            raise SpecError(
                "params.fast_recovery", f"must be >= 0 steps, got {values['fast_recovery']}"
            )
        if np.any(values["kmin"] < 0):
            raise SpecError("params.kmin", f"must be >= 0 bytes, got {values['kmin']}")
        if np.any(values["kmin"] >= values["kmax"]):
            raise SpecError(
                "params.kmin",
                f"the RED ramp needs kmin < kmax, got kmin="
                f"{values['kmin']} bytes, kmax={values['kmax']} bytes (lower kmin "
                "or raise kmax)",
            )
        if np.any(values["min_rate"] < 0):
            raise SpecError("params.min_rate", f"must be >= 0 bytes/s, got {values['min_rate']}")

    def max_stable_dt(self) -> float:
        """Largest step (s) for which the explicit Euler update is stable, with margin 2.

        The stiffest terms of the fluid model relax at rates up to ``1/tau`` (target rate
        toward current rate, ``a <= 1``), ``1/(2 T)`` (fast recovery, ``R'd <= 1/T``) and
        ``g / tau'`` (alpha). Euler needs ``dt < 2/rate``; we allow half of the smallest
        such bound, ``min(tau, 2 T, 2 tau'/g) / 2``. Paper preset: 25 us; ConnectX: 2 us.
        Accuracy of the queue dynamics asks for less: 1 us (the default) resolves a queue
        filling at 40 Gb/s in 5 KB steps.
        """
        bounds = [
            np.min(self.tau),
            2 * np.min(self.timer),
            2 * np.min(np.asarray(self.tau_prime) / np.asarray(self.g)),
        ]
        return float(min(bounds)) / 2.0

    def as_dict(self) -> dict:
        return {f.name: _to_plain(getattr(self, f.name)) for f in dataclasses.fields(self)}


@dataclasses.dataclass(frozen=True)
class PFCParams:
    """PFC ingress-buffer parameters (one lossless priority), SI units.

    Attributes:
        xoff: static XOFF threshold per ingress queue, bytes: pause the upstream link once
            the ingress queue holds more than this.
        hysteresis: XON = XOFF - hysteresis, bytes (resume once below).
        dynamic_alpha: with the dynamic-threshold option, XOFF = dynamic_alpha x (free
            shared buffer of the switch); ignored for static thresholds.
        shared_buffer: shared buffer per switch for the dynamic threshold, bytes.
    """

    xoff: float = 100e3
    hysteresis: float = 10e3
    dynamic_alpha: float = 1.0 / 8.0
    shared_buffer: float = 12e6

    def replace(self, **overrides) -> PFCParams:
        parsed = {key: _parse_pfc_field(key, value) for key, value in overrides.items()}
        params = dataclasses.replace(self, **parsed)
        params.validate()
        return params

    def validate(self) -> None:
        for f in dataclasses.fields(self):
            value = np.asarray(getattr(self, f.name), dtype=np.float64)
            if not np.all(np.isfinite(value)) or np.any(value < 0):
                raise SpecError(f"pfc.{f.name}", f"must be finite and >= 0, got {value}")
        # xoff first: with xoff = 0 the hysteresis check below would blame hysteresis.
        if np.any(np.asarray(self.xoff) <= 0):
            raise SpecError(
                "pfc.xoff",
                f"must be > 0 bytes (the ingress queue length that "
                f"pauses the upstream link), got {self.xoff}",
            )
        if np.any(np.asarray(self.hysteresis) > np.asarray(self.xoff)):
            raise SpecError(
                "pfc.hysteresis",
                f"must lie in [0, xoff] bytes (XON = xoff - "
                f"hysteresis would be negative), got hysteresis={self.hysteresis}, "
                f"xoff={self.xoff}",
            )
        for name in ("dynamic_alpha", "shared_buffer"):  # dynamic XOFF = alpha x free buffer
            if np.any(np.asarray(getattr(self, name)) <= 0):
                raise SpecError(f"pfc.{name}", f"must be > 0, got {getattr(self, name)}")

    def as_dict(self) -> dict:
        return {f.name: _to_plain(getattr(self, f.name)) for f in dataclasses.fields(self)}


_TIME_FIELDS = {"tau", "tau_prime", "timer"}
_SIZE_FIELDS = {"byte_counter", "kmin", "kmax", "packet_bytes"}
_RATE_FIELDS = {"rate_ai", "rate_hai", "min_rate"}
_PLAIN_FIELDS = {"fast_recovery", "g", "pmax", "initial_alpha", "initial_rate_fraction"}


def _parse_field(key: str, value):
    field = f"params.{key}"
    if key in _TIME_FIELDS:
        return _parse_scalar_or_array(value, lambda v: parse_time(v, field, allow_zero=False))
    if key in _SIZE_FIELDS:
        return _parse_scalar_or_array(value, lambda v: parse_size(v, field))
    if key in _RATE_FIELDS:
        return _parse_scalar_or_array(value, lambda v: parse_bandwidth(v, field, allow_zero=True))
    if key in _PLAIN_FIELDS:
        return _parse_scalar_or_array(value, lambda v: _parse_number(v, field))
    allowed = sorted(_TIME_FIELDS | _SIZE_FIELDS | _RATE_FIELDS | _PLAIN_FIELDS)
    raise SpecError("params", f"unknown DCQCN parameter {key!r}; allowed: {allowed}")


def _parse_pfc_field(key: str, value):
    field = f"pfc.{key}"
    if key in ("xoff", "hysteresis", "shared_buffer"):
        return _parse_scalar_or_array(value, lambda v: parse_size(v, field))
    if key == "dynamic_alpha":
        return _parse_scalar_or_array(value, lambda v: _parse_number(v, field))
    allowed = ["dynamic_alpha", "hysteresis", "shared_buffer", "xoff"]
    raise SpecError("pfc", f"unknown PFC parameter {key!r}; allowed: {allowed}")


def _parse_number(value, field: str) -> float:
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


def _parse_scalar_or_array(value, parse_one):
    if isinstance(value, (list, tuple, np.ndarray)):
        return np.asarray(
            [parse_one(v) for v in np.asarray(value, dtype=object).ravel()], dtype=np.float64
        ).reshape(np.shape(value))
    return parse_one(value)


def _to_plain(value):
    array = np.asarray(value)
    return float(array) if array.ndim == 0 else array.tolist()


PRESETS: dict[str, DCQCNParams] = {
    "paper": DCQCNParams(),
    "connectx": DCQCNParams(
        tau=4e-6,
        tau_prime=1e-6,
        timer=300e-6,
        byte_counter=32767.0,
        fast_recovery=5.0,
        g=1.0 / 204.8,
        rate_ai=5e6 / 8,
        rate_hai=50e6 / 8,
        min_rate=1e6 / 8,
        initial_alpha=1.0,
    ),
}


def stack_params(params: list):
    """A batch of parameter sets as one dataclass with ``[batch]`` array fields.

    Works for :class:`DCQCNParams` and :class:`PFCParams` lists (all items of one type).
    Pass the result to :func:`fabricflow.solve.dcqcn.simulate.simulate_dcqcn` (``params=`` or
    ``pfc_params=``) to ``vmap`` over the batch with one compilation.
    """
    if not params:
        raise SpecError("params", "need at least one parameter set to stack")
    kind = type(params[0])
    if kind not in (DCQCNParams, PFCParams) or any(type(p) is not kind for p in params):
        raise SpecError("params", "stack a list of DCQCNParams or a list of PFCParams")
    for item in params:
        item.validate()
    fields = {
        f.name: np.asarray([float(getattr(p, f.name)) for p in params])
        for f in dataclasses.fields(kind)
    }
    return kind(**fields)


def parse_overrides(pairs: list[str] | None) -> tuple[dict, dict]:
    """Split ``KEY=VALUE`` strings into DCQCN and PFC overrides (``pfc.xoff=200KB``)."""
    dcqcn: dict[str, str] = {}
    pfc: dict[str, str] = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise SpecError("--set", f"expected KEY=VALUE, got {pair!r}")
        key, value = (part.strip() for part in pair.split("=", 1))
        target, name = (pfc, key[4:]) if key.startswith("pfc.") else (dcqcn, key)
        if name in target:  # as step's --gpu-set: last-one-wins would hide a typo
            raise SpecError(f"--set {key}", "given twice; set each field once")
        target[name] = value
    return dcqcn, pfc


_DCQCN_FIELDS = [f.name for f in dataclasses.fields(DCQCNParams)]
_PFC_FIELDS = [f.name for f in dataclasses.fields(PFCParams)]
jax.tree_util.register_dataclass(DCQCNParams, data_fields=_DCQCN_FIELDS, meta_fields=[])
jax.tree_util.register_dataclass(PFCParams, data_fields=_PFC_FIELDS, meta_fields=[])
