"""Kernel-time model: GEMM efficiency from shapes, attention and memory-bound kernels.

GEMM ``[M, K] x [K, N]`` (``batch`` independent copies), run as output tiles of
``TILE x TILE`` spread over the GPU's compute units:

    time = max(flops / (peak * efficiency), bytes / achievable_bandwidth) + LAUNCH_S
    efficiency = TYPICAL_SHAPE_FRACTION         (a typical aligned shape against the best
                                                 shape of a brute-force search, §14)
               * gpu.gemm_fraction(precision)   (measured best-shape matmul throughput over
                                                 the peak, per GPU and precision, §14)
               * gpu.sustained_clock_fraction   (the step's clock over the measurement's; 1)
               * tile_fill                      (M, N padded to TILE: tile quantization)
               * wave_fill                      (under one wave: tiles / units; a partial last
                                                 wave is balanced by stream-K decomposition)
               * K / (K_pad + K_OVERHEAD)       (K padded to K_TILE; per-tile prologue and
                                                 epilogue, in K-depth)

The presets' ``gemm_efficiency`` is the measured maximum achievable matmul FLOP/s over the
peak divided by the K factor of the shape where it was measured (docs/references.md §14),
so that this formula gives the measured figure back at that shape. The roofline ``max``
makes thin GEMMs memory-bound.

Fused attention (Flash / cuDNN) runs at ``attention_efficiency`` (forward) or
``attention_backward`` of the bf16 peak at long sequences, times a ramp in the key length
a query block sees, ``1 / (1 + (L0 / L)^p)``, fitted to the cuDNN fused-attention curves of
the FlashAttention-3 paper on H100 (head dim 128, non-causal, 512 to 16k keys;
docs/references.md §14): ``L0, p`` = 248, 2.19 forward and 389, 1.32 backward.

Memory-bound kernels (norms, activations, casts, residual adds, softmax, optimizer) take
``bytes / (hbm_bandwidth * memory_efficiency(bytes))``: the GPU's measured large-copy
fraction of HBM bandwidth, reduced for small kernels by Calculon's steps (1, 0.83, 0.67,
0.33 of it from 100 MB / 10 MB / 1 MB / 0).

All functions accept numpy arrays (vectorized over ops and over the rows of a layout
table: ``precision`` may be one name or an array of names) and return seconds.
"""

from __future__ import annotations

import numpy as np

from fabricflow.workload.gpu import GpuSpec

TILE = 128
K_TILE = 64
# Throughput of a typical well-aligned GEMM shape relative to the best shape a brute-force
# search finds: the maximum achievable matmul FLOP/s benchmark's own guidance puts a
# search over one dimension at 80-90% of its maximum (docs/references.md §14); the midpoint.
TYPICAL_SHAPE_FRACTION = 0.85
K_OVERHEAD = 128
LAUNCH_S = 2e-6
BYTES_PER_ELEMENT = {"bf16": 2.0, "fp8": 1.0}
# Ramp of fused attention efficiency in the key length L: 1 / (1 + (L0 / L)^p).
ATTENTION_RAMP = {"forward": (248.0, 2.19), "backward": (389.0, 1.32)}


def memory_efficiency(num_bytes, gpu: GpuSpec | None = None) -> np.ndarray:
    """Achievable fraction of HBM bandwidth for a kernel moving ``num_bytes``: the GPU's
    large-copy fraction (0.9 without a GPU) times Calculon's size steps."""
    num_bytes = np.asarray(num_bytes, dtype=np.float64)
    top = 0.9 if gpu is None else gpu.memory_efficiency
    steps = np.select(
        [num_bytes >= 100e6, num_bytes >= 10e6, num_bytes >= 1e6],
        [1.0, 0.75 / 0.9, 0.6 / 0.9],
        default=0.3 / 0.9,
    )
    return top * steps


def memory_time(gpu: GpuSpec, num_bytes) -> np.ndarray:
    """Seconds for memory-bound kernels moving ``num_bytes`` each (0 bytes -> 0 s)."""
    num_bytes = np.asarray(num_bytes, dtype=np.float64)
    time = num_bytes / (gpu.hbm_bandwidth * memory_efficiency(num_bytes, gpu))
    return np.where(num_bytes > 0, time + LAUNCH_S, 0.0)


def _eight_bit(precision) -> np.ndarray:
    """bool: GEMM operands in fp8 (``fp8``, or ``mxfp8``: fp8 with MXFP8 block scales)."""
    precision = np.asarray(precision)
    return (precision == "fp8") | (precision == "mxfp8")


def peak_flops(gpu: GpuSpec, precision) -> np.ndarray:
    """Dense peak FLOP/s of ``precision`` (a name or an array of names: ``bf16``, ``fp8``,
    ``mxfp8``) on ``gpu``."""
    eight = _eight_bit(precision)
    if np.any(eight):
        gpu.peak("fp8")  # a chip without fp8 tensor cores: a clear error
    return np.where(eight, gpu.peak_fp8 or 0.0, gpu.peak_bf16)


def operand_bytes(precision) -> np.ndarray:
    """Bytes per GEMM operand element of ``precision`` (a name or an array of names)."""
    return np.where(_eight_bit(precision), BYTES_PER_ELEMENT["fp8"], 2.0)


def gemm_efficiency(
    gpu: GpuSpec, m, n, k, batch=1, precision="bf16", concurrent=np.inf
) -> np.ndarray:
    """Fraction of peak reached by the compute part of a GEMM of shape (M, N, K);
    ``concurrent``: how many of the ``batch`` GEMMs run at once (their tiles share the
    SMs; all of them for a batched kernel)."""
    m, n, k, batch = (np.maximum(np.asarray(x, dtype=np.float64), 1.0) for x in (m, n, k, batch))
    tiles_m, tiles_n = np.ceil(m / TILE), np.ceil(n / TILE)
    tile_fill = (m * n) / (tiles_m * tiles_n * TILE * TILE)
    tiles = tiles_m * tiles_n * np.minimum(batch, concurrent)
    wave_fill = np.minimum(1.0, tiles / float(gpu.compute_units))
    k_fill = k / (np.ceil(k / K_TILE) * K_TILE + K_OVERHEAD)
    precision = np.asarray(precision)
    base = np.where(
        precision == "mxfp8",
        gpu.gemm_fraction("mxfp8"),
        np.where(precision == "fp8", gpu.gemm_fraction("fp8"), gpu.gemm_fraction("bf16")),
    )
    clock = gpu.sustained_clock_fraction
    return TYPICAL_SHAPE_FRACTION * base * clock * tile_fill * wave_fill * k_fill


def gemm_time(
    gpu: GpuSpec,
    m,
    n,
    k,
    batch=1,
    *,
    precision="bf16",
    accumulate_fp32=False,
    concurrent=np.inf,
) -> np.ndarray:
    """Seconds for ``batch`` GEMMs ``[M, K] x [K, N]`` (operands in ``precision``, bf16 out;
    ``accumulate_fp32``: the output is read and written in fp32, as a weight-gradient GEMM
    accumulating into the fp32 main gradient; ``concurrent`` of them at a time, e.g. the
    streams of a grouped GEMM); every argument broadcasts."""
    m, n, k, batch = (np.asarray(x, dtype=np.float64) for x in (m, n, k, batch))
    flops = 2.0 * m * n * k * batch
    width = operand_bytes(precision)
    out = np.where(accumulate_fp32, 8.0, 2.0)
    num_bytes = batch * (width * (m * k + k * n) + out * m * n)
    efficiency = gemm_efficiency(gpu, m, n, k, batch, precision, concurrent)
    compute = flops / (peak_flops(gpu, precision) * efficiency)
    memory = num_bytes / (gpu.hbm_bandwidth * memory_efficiency(num_bytes, gpu))
    return np.where(flops > 0, np.maximum(compute, memory) + LAUNCH_S, 0.0)


def attention_ramp(key_length, direction: str) -> np.ndarray:
    """Fraction of the long-sequence attention efficiency reached when a query block sees
    ``key_length`` keys (``direction``: ``forward`` or ``backward``)."""
    length = np.maximum(np.asarray(key_length, dtype=np.float64), 1.0)
    scale, power = ATTENTION_RAMP[direction]
    return 1.0 / (1.0 + (scale / length) ** power)


def attention_time(gpu: GpuSpec, flops, key_length=np.inf, direction: str = "forward"):
    """Seconds for fused (Flash / cuDNN) attention doing ``flops`` (bf16) with query blocks
    that see ``key_length`` keys on average."""
    flops = np.asarray(flops, dtype=np.float64)
    fraction = gpu.attention_efficiency if direction == "forward" else gpu.attention_backward
    fraction = fraction * gpu.sustained_clock_fraction
    rate = gpu.peak_bf16 * fraction * attention_ramp(key_length, direction)
    return np.where(flops > 0, flops / rate + LAUNCH_S, 0.0)
