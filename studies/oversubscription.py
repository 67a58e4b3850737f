"""Study: spine-tier oversubscription (1:1 to 7:1) vs step time and MFU, dense and MoE.

    python studies/oversubscription.py OUT [--fast] [--gpus 2048]

Writes into OUT:
  oversubscription.nc                 the dataset (dims oversubscription, model, order, part)
  oversubscription_step_time.png      step time vs ratio, per job and rank order
  oversubscription_breakdown.png      where the time goes (data-parallel outermost)
and prints the key numbers as one JSON object. The computation is
fabricflow.study.oversubscription (real step-time evaluations on a clos-100k slice).
Full run: 20 step evaluations on 2,048 GPUs, ~35 s on 2 cores; --fast: 8 smaller
evaluations on 512 GPUs in pods of 256 (the tests run it).
"""

from __future__ import annotations

from fabricflow.atomic import ensure_folder
from fabricflow.study.outputs import parse_study_args, write_plotted_study
from fabricflow.study.oversubscription import key_numbers, oversubscription_study
from fabricflow.study.oversubscription_plots import plot_breakdown, plot_step_time


def main(argv: list[str] | None = None) -> int:
    args = parse_study_args(
        __doc__,
        argv,
        gpus_help="job size (multiple of 512)",
        thumbnail_help="also write a small PNG of the step-time figure here",
    )
    ensure_folder(args.out)
    if args.fast:
        data = oversubscription_study(
            ratios=(1.0, 7.0), gpus=args.gpus or 512, pod_gpus=256, fast=True
        )
    else:
        data = oversubscription_study(gpus=args.gpus or 2048)
    # the first figure is also the thumbnail
    # the first figure is also the thumbnail
    plots = {"step_time": plot_step_time, "breakdown": plot_breakdown}
    write_plotted_study(args, "oversubscription", data, plots, key_numbers(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
