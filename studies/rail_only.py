"""Study: rail-only vs rail-optimized Clos vs 1:7 oversubscribed, cost, power and step time.

    python studies/rail_only.py OUT [--fast] [--gpus 16384]

Writes into OUT:
  rail_only.nc            network capex and power per GPU at 8k, 16k and 32k GPUs; step
                          time of a Llama-3-405B job and a Mixtral-8x22B job per fabric
  rail_only_cost.png      the three panels
and prints the savings against the rail-optimized Clos as one JSON object. The computation
is fabricflow.study.rail_only (bill of materials, the shipped price table, the layout
optimizer on the rail-optimized fabric, the step model on all three). Full run: about 40
CPU seconds (6 minutes wall on a loaded 2-core machine); --fast: 1,024 to 4,096 GPUs,
small models.
"""

from __future__ import annotations

from fabricflow.atomic import ensure_folder
from fabricflow.study.outputs import parse_study_args, write_plotted_study
from fabricflow.study.rail_only import key_numbers, plot_rail_only, rail_only_study


def main(argv: list[str] | None = None) -> int:
    args = parse_study_args(
        __doc__,
        argv,
        gpus_help="GPUs of the step-time jobs",
        thumbnail_help="also a small PNG here",
    )
    ensure_folder(args.out)
    if args.fast:
        jobs = {
            "dense": ("llama3-8b", 256, 4096, {"tp": 8}),
            "moe": ("mixtral-8x7b", 256, 4096, {"tp": 8}),
        }
        data = rail_only_study((1024, 4096), args.gpus or 1024, jobs=jobs, layout_budget_s=5)
    else:
        data = rail_only_study(step_gpus=args.gpus or 16384)
    write_plotted_study(args, "rail_only", data, {"cost": plot_rail_only}, key_numbers(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
