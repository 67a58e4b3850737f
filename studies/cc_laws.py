"""Each congestion-control law against its paper's fluid or analytic result.

    python studies/cc_laws.py OUT [--fast]

HPCC and the predictive controller on a 2-to-1 and a 16-to-1 incast at 40 Gb/s (queue and
utilization against their fixed points), TIMELY and patched TIMELY on 10 Gb/s dumbbells
started at 7:3, 8:2 and 5:5 Gb/s (CoNEXT'16: the rates TIMELY holds depend on the start;
patched TIMELY converges), Swift's delay against its target on the incasts. Writes
``OUT/cc_law_hpcc.png``, ``cc_law_timely.png``, ``cc_law_swift.png``,
``cc_law_predictive.png`` and ``OUT/cc_laws.json`` (measured against analytic values).
``--fast``: shorter runs. The runs are :mod:`fabricflow.study.cc_laws`.
"""

from __future__ import annotations

import json
import pathlib

from fabricflow.jax_cache import enable_persistent_cache
from fabricflow.study.outputs import parse_study_args


def _late_queue(result, part, share=0.5):
    late = result.time >= share * result.duration
    return float(result.queue[late, part.bottleneck].mean())


def run(out, *, fast: bool = False) -> dict:
    from fabricflow.atomic import ensure_folder, write_text
    from fabricflow.files import to_jsonable
    from fabricflow.plots.figures import save_figure
    from fabricflow.study import cc_laws
    from fabricflow.study.cc_laws_plots import plot_hpcc, plot_predictive, plot_swift, plot_timely

    folder = pathlib.Path(ensure_folder(out))
    scale = 0.5 if fast else 1.0
    numbers: dict = {}
    for name, runner, plot in (
        ("hpcc", cc_laws.hpcc_incasts, plot_hpcc),
        ("swift", cc_laws.swift_incasts, plot_swift),
        ("predictive", cc_laws.predictive_incasts, plot_predictive),
    ):
        result, scenario, expected = runner(duration=scale * (0.01 if name == "swift" else 0.004))
        numbers[name] = [
            {
                "flows": len(part.roles["incast"]),
                "queue_bytes": _late_queue(result, part),
                "analytic": rest,
            }
            for part, rest in zip(scenario.parts, expected, strict=True)
        ]
        save_figure(plot(result, scenario, expected), folder / f"cc_law_{name}.png")
    result, scenario, expected = cc_laws.timely_starts(duration=scale * 0.2)
    ratios = {}
    for entry, label in ((0, "timely"), (1, "patched")):
        rate = result.batch_item(entry).mean_rate()
        ratios[label] = [float(rate[p.flows][0] / rate[p.flows][1]) for p in scenario.parts]
    numbers["timely"] = {
        "starts": cc_laws.STARTS,
        "late_rate_ratio": ratios,
        "patched_analytic": expected[0],
    }
    save_figure(plot_timely(result, scenario, cc_laws.STARTS), folder / "cc_law_timely.png")
    plain = to_jsonable(numbers, infinity_as_text=False)
    write_text(folder / "cc_laws.json", json.dumps(plain, indent=1))
    return plain


def main(argv: list[str] | None = None) -> int:
    args = parse_study_args(__doc__, argv, fast_help="shorter runs")
    enable_persistent_cache()
    print(json.dumps(run(args.out, fast=args.fast)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
