"""Study: the step model against published end-to-end training runs (A100 era and modern).

    python studies/step_validation.py OUT [--fast] [--thumbnail PNG]

Writes into OUT:
  step_validation.nc            the dataset (dims run, part): measured, predicted, error,
                                refused, breakdown
  step_validation_errors.png    predicted vs published step time, and the error of each run
  step_validation_residuals.json  one record per run: class, stack, measured, predicted,
                                log ratio, refusal (what prediction intervals are built from)
and prints the MAPE, signed mean error and refusals by era, system, dense/MoE, GPU
generation, precision and class (generation, dense/MoE, precision) as one JSON object.
The runs and the prediction are fabricflow.study.step_validation (nothing is fitted to
them). Full run: 151 step evaluations, about 1 min of CPU; --fast: 6 runs (the tests).
"""

from __future__ import annotations

import json
import pathlib
import time

from fabricflow.atomic import ensure_folder, write_text
from fabricflow.files import to_jsonable
from fabricflow.study.outputs import parse_study_args, write_plotted_study
from fabricflow.study.step_validation import (
    PUBLISHED_RUNS,
    residuals,
    summary,
    validation_dataset,
    validation_table,
)
from fabricflow.study.step_validation_plots import plot_validation

FAST = (
    "sc21 1.7b",
    "sc21 18.4b",
    "korthikanti 22b full",
    "llama3-70b h100 fp8",
    "llama3-8b b200 fp8",
    "qwen3-30b gb200 fp8",
)


def main(argv: list[str] | None = None) -> int:
    args = parse_study_args(__doc__, argv, thumbnail_help="also write a small PNG here")
    ensure_folder(args.out)
    runs = [r for r in PUBLISHED_RUNS if r.name in FAST] if args.fast else list(PUBLISHED_RUNS)
    start = time.perf_counter()
    rows = validation_table(runs)
    data = validation_dataset(rows)
    data.attrs["seconds"] = time.perf_counter() - start
    write_plotted_study(args, "step_validation", data, {"errors": plot_validation}, summary(rows))
    records = json.dumps(to_jsonable(residuals(rows), infinity_as_text=False), indent=1)
    write_text(pathlib.Path(args.out) / "step_validation_residuals.json", records)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
