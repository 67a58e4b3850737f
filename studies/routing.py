"""ECMP vs pinned vs spray vs optimized routing on oversubscribed leaves.

    python studies/routing.py OUT [--gpus N] [--fast]

On a 256-GPU 2-tier ToR Clos (8-GPU servers, 400 Gb/s NICs) with 1:1, 2:1 and 4:1 leaves,
an all-to-all (1 MiB per flow, 61k flows) and a bisection permutation (64 MiB per flow)
are routed by ECMP, by per-flow pinning and by a fractional split from
``fabricflow.optimize_routing`` (k = 8), and by spraying; each is timed by makespan,
max-min completion and throughput, with per-tier link utilization. The default run took
533 s on a loaded 2-core machine (mostly compiling one solver per route shape);
``--fast``: 32 GPUs, 1:1 and 4:1, permutation only. Writes ``OUT/routing.nc`` (dims
oversubscription, pattern, routing, tier), ``OUT/routing.png`` (completion relative to
the best routing), ``OUT/routing_tiers.png`` and ``OUT/routing.json``. The computation
is :func:`fabricflow.study.routing_study.routing_study`.
"""

from __future__ import annotations

import json
import time

from fabricflow.jax_cache import enable_persistent_cache
from fabricflow.study.outputs import parse_study_args


def run(out, *, fast: bool = False, gpus: int = 256) -> dict:
    from fabricflow.study.outputs import save_study
    from fabricflow.study.routing_study import routing_study
    from fabricflow.study.routing_study_plots import plot_completion, plot_tiers

    started = time.perf_counter()
    if fast:
        ds = routing_study(gpus=32, leaf_up=(16, 4), patterns=("permutation",))
    else:
        ds = routing_study(gpus=gpus)
    ds.attrs["seconds"] = time.perf_counter() - started
    slowdown = ds.completion_s / ds.completion_s.sel(routing="optimized")
    numbers = {
        "seconds": ds.attrs["seconds"],
        "completion_vs_optimized": {
            f"{pattern} {over:g}:1": {
                str(r): float(slowdown.sel(pattern=pattern, oversubscription=over, routing=r))
                for r in ds.routing.values
            }
            for pattern in ds.pattern.values
            for over in ds.oversubscription.values
        },
    }
    figures = {"routing": plot_completion(ds), "routing_tiers": plot_tiers(ds)}
    return save_study(out, "routing", ds, figures, numbers)


def main(argv: list[str] | None = None) -> int:
    args = parse_study_args(
        __doc__,
        argv,
        fast_help="small fabric and grid (tests)",
        gpus_default=256,
        gpus_help="fabric size, a multiple of 16 (default 256)",
    )
    enable_persistent_cache()  # reruns load the compiled solvers instead of compiling
    print(json.dumps(run(args.out, fast=args.fast, gpus=args.gpus)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
