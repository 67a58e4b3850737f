"""DCQCN parameter map: K_min / K_max / R_AI vs bottleneck queue and throughput (incast, PFC on).

    python studies/dcqcn_map.py OUT [--fast]

An 8-to-1 incast with a victim flow at 100 Gb/s runs under DCQCN with static PFC for
every (K_min, K_max, R_AI) of a 4 x 4 x 3 grid, as one vmapped simulation (20 ms each;
88 s measured on a loaded 2-core machine;
``--fast``: 2 x 2 x 2, 5 ms, a few seconds). Writes
``OUT/dcqcn_map.nc`` (dims kmin_bytes, kmax_bytes, rate_ai_Bps), ``OUT/dcqcn_map.png``
(heat maps of queue p99, utilization and victim rate), ``OUT/dcqcn_tradeoff.png`` and
``OUT/dcqcn_map.json``, and prints the key numbers. The computation is
:func:`fabricflow.study.dcqcn_map.dcqcn_map`.
"""

from __future__ import annotations

import json
import time

import numpy as np

from fabricflow.jax_cache import enable_persistent_cache
from fabricflow.study.outputs import parse_study_args


def run(out, *, fast: bool = False) -> dict:
    from fabricflow.study.dcqcn_map import dcqcn_map
    from fabricflow.study.dcqcn_map_plots import plot_map, plot_tradeoff
    from fabricflow.study.outputs import save_study

    started = time.perf_counter()
    if fast:
        ds = dcqcn_map(
            kmin=(5e3, 50e3), kmax=(200e3, 800e3), rate_ai=(5e6 / 8, 160e6 / 8), duration=0.005
        )
    else:
        ds = dcqcn_map()
    ds.attrs["seconds"] = time.perf_counter() - started
    flat = ds.stack(point=ds.dims).dropna("point", subset=["utilization"])
    full = flat.where(flat.utilization >= 0.99, drop=True)
    best = (
        full.isel(point=int(np.argmin(full.queue_p99_bytes.values)))
        if full.sizes["point"]
        else None
    )
    numbers = {
        "seconds": ds.attrs["seconds"],
        "points": int(flat.sizes["point"]),
        "utilization_range": [float(flat.utilization.min()), float(flat.utilization.max())],
        "queue_p99_KB_range": [
            float(flat.queue_p99_bytes.min() / 1e3),
            float(flat.queue_p99_bytes.max() / 1e3),
        ],
        "victim_share_range": [
            float(flat.victim_throughput_Bps.min() / ds.attrs["bandwidth_Bps"]),
            float(flat.victim_throughput_Bps.max() / ds.attrs["bandwidth_Bps"]),
        ],
        "pause_fraction_max": float(flat.pause_fraction.max()),
        "lowest_queue_at_99pct_utilization": None
        if best is None
        else {
            "kmin_KB": float(best.kmin_bytes) / 1e3,
            "kmax_KB": float(best.kmax_bytes) / 1e3,
            "rate_ai_Mbps": float(best.rate_ai_Bps) * 8 / 1e6,
            "queue_p99_KB": float(best.queue_p99_bytes) / 1e3,
            "utilization": float(best.utilization),
        },
    }
    figures = {"dcqcn_map": plot_map(ds), "dcqcn_tradeoff": plot_tradeoff(ds)}
    return save_study(out, "dcqcn_map", ds, figures, numbers)


def main(argv: list[str] | None = None) -> int:
    args = parse_study_args(__doc__, argv, fast_help="small grid, short runs (tests)")
    enable_persistent_cache()  # reruns load the compiled solvers instead of compiling
    print(json.dumps(run(args.out, fast=args.fast)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
