"""Accelerator specs: dense peak FLOP/s, HBM size and bandwidth, GEMM efficiency, host link.

Presets live in ``presets/gpus.json`` (sources in its ``_sources`` entry). Every field can
be overridden: ``load_gpu("h100-sxm", hbm="96GB", gemm_efficiency=0.75)``.

HBM in the presets is the capacity the device reports (``nvidia-smi``, ``rocm-smi``), e.g.
``81559MiB`` (79.6 GiB) for an "80GB" H100, not the marketing figure read as SI bytes
(80 GB = 74.5 GiB), which would refuse layouts that run in production; see
docs/memory-offload.md. A size given by the user is read as written: ``hbm="80GB"`` is
80e9 bytes, ``hbm="80GiB"`` is 80 x 2**30.

``host_link`` / ``host_link_bandwidth``: the link from the GPU to host (or pooled) memory
that offloaded weights, activations and optimizer state cross (PCIe, NVLink-C2C, CXL),
bytes/s per direction.
"""

from __future__ import annotations

import dataclasses
import math
from importlib import resources

from fabricflow.errors import SpecError
from fabricflow.files import read_structured
from fabricflow.units import parse_bandwidth, parse_size, parse_time

# Kinds of GPU-to-host-memory link (the label only; the bandwidth is host_link_bandwidth).
HOST_LINKS = ("pcie3", "pcie4", "pcie5", "pcie6", "nvlink-c2c", "cxl", "ualink")

# Host seconds per eager PyTorch op on an x86 DGX host (Intel Xeon): a ``torch.nn.Linear``
# forward takes 13.48 us of CPU time on a DGX H100 (Xeon Platinum 8480C;
# docs/references.md §17). Grace-based systems set their own (gpus.json). What a
# framework's module call costs in such ops is the software stack's
# (``Stack.host_module_ops``).
HOST_OP_S = 13.5e-6

_FLOPS_UNITS = {
    "FLOPS": 1.0,
    "KFLOPS": 1e3,
    "MFLOPS": 1e6,
    "GFLOPS": 1e9,
    "TFLOPS": 1e12,
    "PFLOPS": 1e15,
}


@dataclasses.dataclass(frozen=True)
class GpuSpec:
    """One accelerator (SI units).

    Attributes:
        name: preset name.
        peak_bf16: dense bf16 FLOP/s.
        peak_fp8: dense fp8 FLOP/s, or None where the chip has no fp8 tensor cores.
        hbm: HBM capacity, bytes.
        hbm_bandwidth: HBM bandwidth, bytes/s.
        compute_units: SMs / CUs / MXUs that GEMM tiles are spread over (wave quantization).
        gemm_efficiency: fraction of the bf16 peak a large, well-shaped GEMM reaches (the
            measured maximum achievable matmul FLOP/s over the peak; docs/references.md §14).
        attention_efficiency: fraction of the bf16 peak the fused attention kernel's forward
            pass reaches at long sequences (head dimension 128).
        gemm_efficiency_fp8: the same as ``gemm_efficiency`` for fp8 GEMMs, of the fp8 peak
            (None: as ``gemm_efficiency``).
        gemm_efficiency_mxfp8: the same for MXFP8 GEMMs (1 x 32 block scales applied in
            the tensor cores; Blackwell), of the fp8 peak (None: as ``gemm_efficiency_fp8``).
        attention_backward_efficiency: fraction of the bf16 peak the fused attention
            kernel's backward pass reaches at long sequences (None: 0.85 x the forward's).
        memory_efficiency: fraction of ``hbm_bandwidth`` a large streaming kernel reaches
            (measured copy bandwidth over the datasheet figure).
        host_link: kind of link to host or pooled memory (one of ``HOST_LINKS``), or None
            where the preset does not know it.
        host_link_bandwidth: bytes/s per direction over ``host_link`` (full duplex), or
            None (then offloading is refused until it is given).
        sustained_clock_fraction: the tensor-core clock a training step sustains under the
            power cap, as a fraction of the clock at which the GEMM and attention
            efficiencies above were measured; it scales every GEMM and attention kernel's
            rate. 1 in every preset: those efficiencies come from sustained loops (100
            back-to-back iterations) that already run at the capped clock, and no published
            in-training clock trace gives a further factor (docs/references.md §19).
        host_op_s: host (CPU) seconds the system's CPU spends to issue one eager PyTorch op
            (dispatch and kernel launch), for the host model of
            :mod:`fabricflow.workload.host`.
    """

    name: str
    peak_bf16: float
    peak_fp8: float | None
    hbm: float
    hbm_bandwidth: float
    compute_units: int
    gemm_efficiency: float
    attention_efficiency: float
    host_link: str | None = None
    host_link_bandwidth: float | None = None
    gemm_efficiency_fp8: float | None = None
    gemm_efficiency_mxfp8: float | None = None
    attention_backward_efficiency: float | None = None
    memory_efficiency: float = 0.9
    sustained_clock_fraction: float = 1.0
    host_op_s: float = HOST_OP_S

    def __post_init__(self) -> None:
        for field in ("peak_bf16", "hbm", "hbm_bandwidth"):
            value = getattr(self, field)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise SpecError(f"gpu.{field}", f"must be a finite number > 0, got {value!r}")
        for field in (
            "gemm_efficiency",
            "attention_efficiency",
            "gemm_efficiency_fp8",
            "gemm_efficiency_mxfp8",
            "attention_backward_efficiency",
            "memory_efficiency",
            "sustained_clock_fraction",
        ):
            value = getattr(self, field)
            if value is None and field in (
                "gemm_efficiency_fp8",
                "gemm_efficiency_mxfp8",
                "attention_backward_efficiency",
            ):
                continue
            if not (isinstance(value, (int, float)) and 0.0 < value <= 1.0):
                raise SpecError(f"gpu.{field}", f"must lie in (0, 1], got {value!r}")
        for field in ("host_op_s",):
            value = getattr(self, field)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise SpecError(f"gpu.{field}", f"must be a finite time >= 0 s, got {value!r}")
        if int(self.compute_units) <= 0:
            raise SpecError(
                "gpu.compute_units", f"must be a positive integer, got {self.compute_units}"
            )
        if self.host_link is not None and self.host_link not in HOST_LINKS:
            raise SpecError(
                "gpu.host_link", f"unknown {self.host_link!r}; one of {list(HOST_LINKS)}"
            )
        bandwidth = self.host_link_bandwidth
        if bandwidth is not None and not (
            isinstance(bandwidth, (int, float))
            and not isinstance(bandwidth, bool)
            and math.isfinite(bandwidth)
            and bandwidth > 0
        ):
            raise SpecError(
                "gpu.host_link_bandwidth", f"must be a finite number > 0 B/s, got {bandwidth!r}"
            )

    def gemm_fraction(self, precision: str) -> float:
        """Fraction of ``peak(precision)`` a large, well-shaped GEMM reaches (``mxfp8``:
        an fp8 GEMM with MXFP8 block scales, of the fp8 peak)."""
        if precision == "mxfp8":
            if self.gemm_efficiency_mxfp8 is not None:
                return self.gemm_efficiency_mxfp8
            precision = "fp8"
        if precision == "fp8" and self.gemm_efficiency_fp8 is not None:
            return self.gemm_efficiency_fp8
        return self.gemm_efficiency

    @property
    def attention_backward(self) -> float:
        """Fraction of the bf16 peak of the fused attention backward at long sequences."""
        if self.attention_backward_efficiency is not None:
            return self.attention_backward_efficiency
        return 0.85 * self.attention_efficiency

    def check_precision(self, precision: str, fp8_recipe: str = "tensorwise") -> None:
        """Raise :class:`SpecError` when the GEMMs of ``precision`` (with ``fp8_recipe``
        under fp8) cannot run on this chip: fp8 needs fp8 tensor cores, MXFP8 needs the
        block-scaled tensor cores of Blackwell (a GPU without a measured MXFP8 GEMM
        efficiency has none; Hopper and earlier scale whole tensors or blocks in
        software: ``tensorwise``, ``delayed``, ``blockwise``)."""
        self.peak(precision)
        if precision == "fp8" and fp8_recipe == "mxfp8" and self.gemm_efficiency_mxfp8 is None:
            raise SpecError(
                "fp8_recipe",
                f"{self.name} has no MXFP8 (block-scaled) tensor cores: MXFP8 needs a "
                "Blackwell GPU; use tensorwise, delayed or blockwise",
            )

    def peak(self, precision: str) -> float:
        """Dense peak FLOP/s of the GEMM tensor cores for ``bf16`` or ``fp8``."""
        if precision == "bf16":
            return self.peak_bf16
        if precision == "fp8":
            if self.peak_fp8 is None:
                raise SpecError("precision", f"{self.name} has no fp8 tensor cores; use bf16")
            return self.peak_fp8
        raise SpecError("precision", f"unknown precision {precision!r}; one of ['bf16', 'fp8']")


def parse_flops(value, field: str) -> float:
    """FLOP/s from ``'989TFLOPS'``, ``'989 TFLOP/s'`` or a number (FLOP/s)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        text = value.replace(" ", "").replace("FLOP/s", "FLOPS").replace("flops", "FLOPS")
        for unit in sorted(_FLOPS_UNITS, key=len, reverse=True):
            if text.endswith(unit):
                try:
                    number = float(text[: -len(unit)]) * _FLOPS_UNITS[unit]
                except ValueError:
                    raise SpecError(
                        field, f"cannot read {value!r} as FLOP/s (e.g. '989TFLOPS')"
                    ) from None
                break
        else:
            raise SpecError(field, f"cannot read {value!r} as FLOP/s (e.g. '989TFLOPS')")
    else:
        raise SpecError(field, f"expected FLOP/s such as '989TFLOPS', got {value!r}")
    if not math.isfinite(number):
        # 1e999 (or a huge number times the unit) overflows to inf: not a rate, too large
        raise SpecError(
            field, f"must be a finite number of FLOP/s (e.g. '989TFLOPS'), got {value!r}"
        )
    if number <= 0:
        raise SpecError(field, f"must be > 0 FLOP/s, got {value!r}")
    return number


def _presets() -> dict:
    presets = read_structured(
        str(resources.files("fabricflow.workload") / "presets" / "gpus.json"),
        what="gpu",
        syntax="json",
    )
    return {k: v for k, v in presets.items() if not k.startswith("_")}


def list_gpus() -> list[str]:
    """Names of the GPU presets."""
    return sorted(_presets())


def load_gpu(spec, **overrides) -> GpuSpec:
    """A :class:`GpuSpec` from a preset name (``h100-sxm``, ...) or a dict, with overrides.

    Quantities accept units: ``peak_bf16='989TFLOPS'``, ``hbm='80GB'`` (SI: 80e9 bytes;
    the presets give what the device reports, e.g. ``'81559MiB'``),
    ``hbm_bandwidth='3.35TB/s'``, ``host_link_bandwidth='64GB/s'`` (per direction).
    """
    if isinstance(spec, GpuSpec):
        raw = dataclasses.asdict(spec)
    elif isinstance(spec, dict):
        raw = dict(spec)
    elif isinstance(spec, str):
        presets = _presets()
        if spec not in presets:
            raise SpecError(
                "gpu",
                f"unknown GPU {spec!r}; one of {sorted(presets)}",
                value=spec,
                allowed=presets,
            )
        raw = {"name": spec, **presets[spec]}
    else:
        raise SpecError("gpu", f"expected a preset name or a dict, got {type(spec).__name__}")
    raw.update(overrides)
    unknown = set(raw) - {f.name for f in dataclasses.fields(GpuSpec)}
    if unknown:
        raise SpecError(
            "gpu",
            f"unknown field(s) {sorted(unknown)}; known "
            f"{[f.name for f in dataclasses.fields(GpuSpec)]}",
        )
    required = ("peak_bf16", "hbm", "hbm_bandwidth", "compute_units", "gemm_efficiency")
    missing = [field for field in required + ("attention_efficiency",) if field not in raw]
    if missing:
        raise SpecError(f"gpu.{missing[0]}", f"missing; a GPU spec needs {list(missing)}")
    return GpuSpec(
        name=str(raw.get("name", "custom")),
        peak_bf16=_plain_floor(
            parse_flops(raw["peak_bf16"], "gpu.peak_bf16"), raw["peak_bf16"], "gpu.peak_bf16"
        ),
        peak_fp8=None
        if raw.get("peak_fp8") is None
        else _plain_floor(
            parse_flops(raw["peak_fp8"], "gpu.peak_fp8"), raw["peak_fp8"], "gpu.peak_fp8"
        ),
        hbm=_plain_floor(
            parse_size(raw["hbm"], "gpu.hbm", allow_zero=False), raw["hbm"], "gpu.hbm"
        ),
        hbm_bandwidth=parse_bandwidth(raw["hbm_bandwidth"], "gpu.hbm_bandwidth", part=True),
        compute_units=_whole(raw["compute_units"], "gpu.compute_units"),
        gemm_efficiency=_fraction(raw["gemm_efficiency"], "gpu.gemm_efficiency"),
        attention_efficiency=_fraction(raw["attention_efficiency"], "gpu.attention_efficiency"),
        host_link=_host_link(raw.get("host_link")),
        host_link_bandwidth=None
        if raw.get("host_link_bandwidth") is None
        else parse_bandwidth(raw["host_link_bandwidth"], "gpu.host_link_bandwidth", part=True),
        gemm_efficiency_fp8=None
        if raw.get("gemm_efficiency_fp8") is None
        else _fraction(raw["gemm_efficiency_fp8"], "gpu.gemm_efficiency_fp8"),
        gemm_efficiency_mxfp8=None
        if raw.get("gemm_efficiency_mxfp8") is None
        else _fraction(raw["gemm_efficiency_mxfp8"], "gpu.gemm_efficiency_mxfp8"),
        attention_backward_efficiency=None
        if raw.get("attention_backward_efficiency") is None
        else _fraction(raw["attention_backward_efficiency"], "gpu.attention_backward_efficiency"),
        memory_efficiency=_fraction(raw.get("memory_efficiency", 0.9), "gpu.memory_efficiency"),
        sustained_clock_fraction=_fraction(
            raw.get("sustained_clock_fraction", 1.0), "gpu.sustained_clock_fraction"
        ),
        host_op_s=parse_time(raw.get("host_op_s", HOST_OP_S), "gpu.host_op_s"),
    )


# A plain number (no unit) below these is no accelerator: a unit left out ('hbm=80' is 80
# bytes, 'peak_bf16=989' 989 FLOP/s). The smallest parts in use are far above both (a
# 16 GB V100, an 8 TFLOP/s-class inference card).
_PLAIN_FLOORS = {
    "gpu.hbm": (2.0**30, "bytes", "'80GB' or '80GiB'"),
    "gpu.peak_bf16": (1e12, "FLOP/s", "'989TFLOPS'"),
    "gpu.peak_fp8": (1e12, "FLOP/s", "'1979TFLOPS'"),
}


def _plain_floor(number: float, value, field: str) -> float:
    """``number`` (SI), refused where ``value`` was written without a unit and reads as
    less than any accelerator has (:data:`_PLAIN_FLOORS`); SpecError naming ``field``."""
    floor, unit, example = _PLAIN_FLOORS[field]
    try:
        float(value)  # a number, or text that is one: no unit given
        plain = not isinstance(value, bool)
    except (TypeError, ValueError):
        plain = False
    if plain and number < floor:
        raise SpecError(
            field,
            f"the plain number {value!r} reads as {number:g} {unit} (plain numbers are SI), "
            f"far below any accelerator; write the unit, e.g. {example}",
        )
    return number


def _host_link(value) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in HOST_LINKS:
        raise SpecError("gpu.host_link", f"unknown {value!r}; one of {list(HOST_LINKS)}")
    return value


def _whole(value, field: str) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value != int(value)
        or value <= 0
    ):
        raise SpecError(field, f"must be a positive integer, got {value!r}")
    return int(value)


def _fraction(value, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(field, f"must be a number in (0, 1], got {value!r}")
    return float(value)
