"""Study: scale-up domain size (NVL8 / NVL72 / NVL576) vs MoE step time and all-to-all share.

    python studies/scaleup_domain.py OUT [--fast]

Writes into OUT:
  scaleup_domain.nc              the dataset (dims domain_size, placement, ep, part)
  scaleup_domain_step_time.png   step time and exposed all-to-all share vs EP size
  scaleup_domain_breakdown.png   where the time goes per domain size (contiguous placement)
and prints the key numbers as one JSON object. The computation is
fabricflow.study.scaleup_domain (DeepSeek-V3 on 1,024 GB200 of a 1,152-GPU slice of the
NVL72 SuperPOD's network, real step-time evaluations). Full run: 20 distinct step
evaluations, ~2.5 min on 2 cores; --fast: EP 8 and 64 only, a 512-GPU job (the tests
run it).
"""

from __future__ import annotations

from fabricflow.atomic import ensure_folder
from fabricflow.study.outputs import parse_study_args, write_plotted_study
from fabricflow.study.scaleup_domain import key_numbers, scaleup_domain_study
from fabricflow.study.scaleup_domain_plots import plot_breakdown, plot_step_time


def main(argv: list[str] | None = None) -> int:
    args = parse_study_args(__doc__, argv, thumbnail_help="also write a small PNG here")
    ensure_folder(args.out)
    if args.fast:
        data = scaleup_domain_study(ep_sizes=(8, 64), job_gpus=512)
    else:
        data = scaleup_domain_study()
    # the first figure is also the thumbnail
    # the first figure is also the thumbnail
    plots = {"step_time": plot_step_time, "breakdown": plot_breakdown}
    write_plotted_study(args, "scaleup_domain", data, plots, key_numbers(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
