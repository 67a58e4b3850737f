"""Study: NVIDIA's DeepSeek-V3 on GB200 NVL72 optimization waterfall, step by step, vs the model.

    python studies/deepseek_v3_waterfall.py OUT [--fast] [--thumbnail PNG]

Writes into OUT:
  deepseek_v3_waterfall.nc             the dataset (dims step, part): published and
                                       predicted TFLOP/s per GPU, error, breakdown
  deepseek_v3_waterfall_steps.png      published (bars) and predicted (dots) after each step
and prints the error of every step and how many changes have the right sign as one JSON
object. The steps and their knobs are fabricflow.study.deepseek_waterfall (nothing is fitted
to the published values). Full run: 13 step evaluations on 256 GPUs, about 10 s on 2 cores;
--fast: the baseline, DeepEP and HybridEP (the tests).
"""

from __future__ import annotations

import time

from fabricflow.atomic import ensure_folder
from fabricflow.study.deepseek_waterfall import (
    FAST,
    plot_waterfall,
    summary,
    waterfall_dataset,
    waterfall_table,
)
from fabricflow.study.outputs import parse_study_args, write_plotted_study


def main(argv: list[str] | None = None) -> int:
    args = parse_study_args(__doc__, argv, thumbnail_help="also write a small PNG here")
    ensure_folder(args.out)
    start = time.perf_counter()
    rows = waterfall_table(FAST if args.fast else None)
    data = waterfall_dataset(rows)
    data.attrs["seconds"] = time.perf_counter() - start
    write_plotted_study(
        args, "deepseek_v3_waterfall", data, {"steps": plot_waterfall}, summary(rows)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
