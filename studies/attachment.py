"""Study: rail-optimized vs ToR attachment at equal switch count, with PXN on and off.

    python studies/attachment.py OUT [--fast] [--gpus 512]

Writes into OUT:
  attachment.nc            the dataset (busbw over sizes; step times of a dense and an MoE job)
  attachment_busbw.png     all-reduce and all-to-all busbw vs size, leaves 1:1 and 4:1
  attachment_step.png      step time per job, attachment and PXN
and prints the key numbers as one JSON object. The computation is
fabricflow.study.attachment (real collective and step-time models on a 2-tier Clos).
Full run: 512 GPUs, 6 sizes, 16 step evaluations, ~15 s on 2 cores; --fast: 256
GPUs, 2 sizes, smaller models (the tests run it).
"""

from __future__ import annotations

from fabricflow.atomic import ensure_folder
from fabricflow.study.attachment import attachment_study, key_numbers
from fabricflow.study.attachment_plots import plot_busbw, plot_step
from fabricflow.study.outputs import parse_study_args, write_plotted_study


def main(argv: list[str] | None = None) -> int:
    args = parse_study_args(
        __doc__,
        argv,
        gpus_help="fabric size (multiple of 128)",
        thumbnail_help="also write a small busbw PNG here",
    )
    ensure_folder(args.out)
    if args.fast:
        data = attachment_study(gpus=args.gpus or 256, sizes=(2.0**20, 2.0**28), fast=True)
    else:
        data = attachment_study(gpus=args.gpus or 512)
    # the first figure is also the thumbnail
    plots = {"busbw": plot_busbw, "step": plot_step}
    write_plotted_study(args, "attachment", data, plots, key_numbers(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
