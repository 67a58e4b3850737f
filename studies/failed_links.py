"""Sensitivity to the fraction of failed links: throughput, AllReduce and step time.

    python studies/failed_links.py OUT [--gpus N] [--fast]

On a 1,024-GPU 3-tier Clos (ToR attachment, 2:1 leaves, 400 Gb/s NICs), 0, 0.5, 1, 2, 5
and 10 % of the leaf-spine or of the spine-core cables fail (4 seeds, nested failure
sets); routing reconverges around them. Measured per point: max-min throughput of a
bisection permutation and ring AllReduce busbw (ECMP and spray), and a Mixtral-8x7B
step (TP 2 x EP 8, scattered servers, ECMP). ``--gpus 256`` took 412 s on a loaded
2-core machine (much of it compiling solvers for the spray routes' shape); the default
1,024-GPU run was not timed here. ``--fast``: 256 GPUs, 3 fractions, 2 seeds, ECMP, Llama-3 8B, well under a minute.
Writes ``OUT/failed_links.nc`` (dims link_kind, fraction, seed, routing),
``OUT/failed_links.png`` and ``OUT/failed_links.json``, and prints the key numbers. The
computation is :func:`fabricflow.study.failed_links.failed_links_study`.
"""

from __future__ import annotations

import json
import time

from fabricflow.jax_cache import enable_persistent_cache
from fabricflow.study.outputs import parse_study_args


def run(out, *, fast: bool = False, gpus: int = 1024) -> dict:
    from fabricflow.study.failed_links import failed_links_study, three_tier_clos
    from fabricflow.study.failed_links_plots import plot_failed_links
    from fabricflow.study.outputs import save_study
    from fabricflow.workload.layout import Layout

    started = time.perf_counter()
    if fast:
        ds = failed_links_study(
            three_tier_clos(256),
            fractions=(0.0, 0.05, 0.2),
            seeds=(0, 1),
            routings=("ecmp",),
            model="llama3-8b",
            layout=Layout(tp=8, dp=32, micro_batch=1, global_batch=64, seq_len=8192),
        )
    else:
        ds = failed_links_study(three_tier_clos(gpus))
    ds.attrs["seconds"] = time.perf_counter() - started
    healthy = ds.isel(fraction=0, seed=0, link_kind=0)
    worst = ds.isel(fraction=-1)
    numbers = {"seconds": ds.attrs["seconds"], "fabric": ds.attrs["fabric"]}
    for name in ("permutation_throughput_Bps", "allreduce_busbw_Bps", "step_time_s"):
        relative = worst[name] / healthy[name]
        numbers[f"{name}_at_{float(ds.fraction[-1]):g}_vs_healthy"] = {
            str(kind): {
                "median": relative.sel(link_kind=kind).median("seed").values.tolist(),
                "min": relative.sel(link_kind=kind).min("seed").values.tolist(),
                "max": relative.sel(link_kind=kind).max("seed").values.tolist(),
            }
            for kind in ds.link_kind.values
        }
    figures = {"failed_links": plot_failed_links(ds)}
    return save_study(out, "failed_links", ds, figures, numbers)


def main(argv: list[str] | None = None) -> int:
    args = parse_study_args(
        __doc__,
        argv,
        fast_help="small fabric and grid (tests)",
        gpus_default=1024,
        gpus_help="fabric size, a multiple of 256 (default 1024)",
    )
    enable_persistent_cache()  # reruns load the compiled solvers instead of compiling
    print(json.dumps(run(args.out, fast=args.fast, gpus=args.gpus)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
