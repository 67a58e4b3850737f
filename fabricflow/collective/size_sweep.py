"""nccl-tests-style size sweeps and table rows."""

from __future__ import annotations

import numpy as np

from fabricflow.collective.timing import CollectiveResult, prepare_collective
from fabricflow.errors import SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.units import format_size

# nccl-tests reports ``count`` in elements of the data type (float32 by default).
ELEMENT_BYTES = 4


def nccl_sizes(min_size: float, max_size: float, step_factor: float = 2.0) -> np.ndarray:
    """Sizes ``min, min*f, min*f^2, ... <= max`` (bytes), as nccl-tests ``-b -e -f`` gives.

    Sizes are whole bytes: each is rounded to the nearest byte and repeats are dropped
    (``-b 1 -f 1.5`` gives 1, 2, 3, 5, 8, ...).
    """
    if not (np.isfinite(min_size) and np.isfinite(max_size)) or min_size <= 0:
        raise SpecError("minbytes", f"must be a positive finite size, got {min_size}")
    for field, value in (("minbytes", min_size), ("maxbytes", max_size)):
        if value != np.floor(value):
            raise SpecError(field, f"must be a whole number of bytes, got {value:g}")
    if max_size < min_size:
        raise SpecError(
            "maxbytes",
            f"must be >= minbytes ({format_size(min_size)}), got {format_size(max_size)}",
        )
    if not step_factor > 1.0:
        raise SpecError("stepfactor", f"must be > 1, got {step_factor}")
    count = int(np.floor(np.log(max_size / min_size) / np.log(step_factor) + 1e-9)) + 1
    if count > 4096:
        raise SpecError(
            "stepfactor", f"{count} sizes between minbytes and maxbytes; use a larger step factor"
        )
    return np.unique(np.minimum(np.round(min_size * step_factor ** np.arange(count)), max_size))


def collective_sweep(fabric: Fabric, op: str, groups, sizes, **options) -> list[CollectiveResult]:
    """:func:`~fabricflow.collective.collective_time` for many sizes, routing and solving
    once (options as there)."""
    return prepare_collective(fabric, op, groups, **options).evaluate(sizes)


def table_rows(results: list[CollectiveResult]) -> list[dict]:
    """One nccl-tests row per result: bytes, count, time, algbw, busbw, algorithm, protocol."""
    rows = []
    for result in results:
        rows.append(
            {
                "bytes": int(round(result.size)),
                "count": int(result.size // ELEMENT_BYTES),
                "time_s": result.time_s,
                "time_us": result.time_s * 1e6,
                "algbw_GBps": result.algbw_Bps / 1e9,
                "busbw_GBps": result.busbw_Bps / 1e9,
                "algorithm": result.algorithm,
                "protocol": result.protocol,
                "slowest_group": result.slowest_group,
                "bottleneck": ",".join(sorted(set(result.bottleneck_kinds))),
            }
        )
    return rows
