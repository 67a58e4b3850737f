"""Kernel-time model: GEMM efficiency from shapes, memory-bound kernels from bytes.

GEMM ``[M, K] x [K, N]`` (``batch`` independent copies), run as output tiles of
``TILE x TILE`` spread over the GPU's compute units:

    time = max(flops / (peak * efficiency), bytes / (hbm_bandwidth * memory_efficiency))
           + LAUNCH_S
    efficiency = gemm_efficiency            (best large shape, per GPU, docs/references.md §5)
               * tile_fill                  (M, N padded to TILE: tile quantization)
               * wave_fill                  (tiles / (ceil(tiles / units) * units))
               * K / (K_pad + K_OVERHEAD)   (K padded to K_TILE; per-tile prologue/epilogue)

The roofline ``max`` makes thin GEMMs (small K, e.g. attention scores with 64-128 wide
heads) memory-bound, as they are. ``K_OVERHEAD`` = 128 is the per-tile fixed cost
(pipeline fill and epilogue store of a 128 x 128 tile), expressed in K-depth; it gives
the known loss of row-parallel GEMMs with a small inner dimension at high TP.

Memory-bound kernels (norms, activations, dropout, residual adds, softmax, optimizer)
take ``bytes / (hbm_bandwidth * memory_efficiency(bytes))`` with Calculon's step
function (0.9 / 0.75 / 0.6 / 0.3 of HBM bandwidth from 100 MB / 10 MB / 1 MB / 0).

All functions accept numpy arrays (vectorized over ops and over the rows of a layout
table: ``precision`` may be one name or an array of names) and return seconds.
"""

from __future__ import annotations

import numpy as np

from .gpu import GpuSpec

TILE = 128
K_TILE = 64
K_OVERHEAD = 128
LAUNCH_S = 2e-6
BYTES_PER_ELEMENT = {"bf16": 2.0, "fp8": 1.0}


def memory_efficiency(num_bytes) -> np.ndarray:
    """Achievable fraction of HBM bandwidth for a kernel moving ``num_bytes`` (Calculon)."""
    num_bytes = np.asarray(num_bytes, dtype=np.float64)
    return np.select(
        [num_bytes >= 100e6, num_bytes >= 10e6, num_bytes >= 1e6], [0.9, 0.75, 0.6], default=0.3
    )


def memory_time(gpu: GpuSpec, num_bytes) -> np.ndarray:
    """Seconds for memory-bound kernels moving ``num_bytes`` each (0 bytes -> 0 s)."""
    num_bytes = np.asarray(num_bytes, dtype=np.float64)
    time = num_bytes / (gpu.hbm_bandwidth * memory_efficiency(num_bytes))
    return np.where(num_bytes > 0, time + LAUNCH_S, 0.0)


def gemm_efficiency(gpu: GpuSpec, m, n, k, batch=1) -> np.ndarray:
    """Fraction of peak reached by the compute part of a GEMM of shape (M, N, K)."""
    m, n, k, batch = (np.maximum(np.asarray(x, dtype=np.float64), 1.0) for x in (m, n, k, batch))
    tiles_m, tiles_n = np.ceil(m / TILE), np.ceil(n / TILE)
    tile_fill = (m * n) / (tiles_m * tiles_n * TILE * TILE)
    tiles = tiles_m * tiles_n * batch
    units = float(gpu.compute_units)
    wave_fill = tiles / (np.ceil(tiles / units) * units)
    k_fill = k / (np.ceil(k / K_TILE) * K_TILE + K_OVERHEAD)
    return gpu.gemm_efficiency * tile_fill * wave_fill * k_fill


def peak_flops(gpu: GpuSpec, precision) -> np.ndarray:
    """Dense peak FLOP/s of ``precision`` (a name or an array of names) on ``gpu``."""
    precision = np.asarray(precision)
    if np.any(precision == "fp8"):
        gpu.peak("fp8")  # a chip without fp8 tensor cores: a clear error
    return np.where(precision == "fp8", gpu.peak_fp8 or 0.0, gpu.peak_bf16)


def operand_bytes(precision) -> np.ndarray:
    """Bytes per GEMM operand element of ``precision`` (a name or an array of names)."""
    return np.where(np.asarray(precision) == "fp8", BYTES_PER_ELEMENT["fp8"], 2.0)


def gemm_time(gpu: GpuSpec, m, n, k, batch=1, *, precision="bf16") -> np.ndarray:
    """Seconds for ``batch`` GEMMs ``[M, K] x [K, N]`` (operands in ``precision``, bf16 out);
    every argument broadcasts (arrays over the rows of a layout table)."""
    m, n, k, batch = (np.asarray(x, dtype=np.float64) for x in (m, n, k, batch))
    flops = 2.0 * m * n * k * batch
    width = operand_bytes(precision)
    num_bytes = batch * (width * (m * k + k * n) + 2.0 * m * n)
    compute = flops / (peak_flops(gpu, precision) * gemm_efficiency(gpu, m, n, k, batch))
    memory = num_bytes / (gpu.hbm_bandwidth * memory_efficiency(num_bytes))
    return np.where(flops > 0, np.maximum(compute, memory) + LAUNCH_S, 0.0)


def attention_time(gpu: GpuSpec, flops) -> np.ndarray:
    """Seconds for fused (Flash) attention doing ``flops`` (bf16, as FA kernels run)."""
    flops = np.asarray(flops, dtype=np.float64)
    return np.where(flops > 0, flops / (gpu.peak_bf16 * gpu.attention_efficiency) + LAUNCH_S, 0.0)
