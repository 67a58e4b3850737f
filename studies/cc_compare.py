"""Congestion control compared: DCQCN, HPCC, TIMELY, Swift and a predictive controller.

    python studies/cc_compare.py OUT [--fast]

Every rate law runs on the same three scenarios at 40 Gb/s with PFC on (a 16-to-1 incast
with a victim flow, an all-to-all of 16 hosts on an oversubscribed leaf-spine, a ring of 4
switches), side by side in one simulation per law (10 ms at 1 us). Then the predictive
controller meets DCQCN and HPCC on a 64-to-1 incast and an all-to-all of 8,190 flows, and
``ff.tune_cc`` tunes DCQCN (K_min, K_max, P_max, R_AI) and HPCC (eta) on the incast for
throughput against queueing delay. Writes ``OUT/cc_compare.nc`` (dims cc, scenario),
``OUT/cc_head_to_head.nc``, one figure per metric family (``OUT/cc_queues.png``,
``cc_throughput.png``, ``cc_fairness.png``, ``cc_pfc.png``, ``cc_convergence.png``) and
``OUT/cc_compare.json`` with the key numbers. ``--fast``: two laws, small scenarios, 2 ms,
no head-to-head or tuning (under a minute, for the tests). The computation is
:mod:`fabricflow.study.cc_compare`.
"""

from __future__ import annotations

import json
import time

from fabricflow.jax_cache import enable_persistent_cache
from fabricflow.study.outputs import parse_study_args


def _table(ds) -> dict:
    """``{law: {scenario: {metric: value}}}`` of a comparison dataset."""
    return {
        str(cc): {
            str(sc): {name: float(ds[name].sel(cc=cc, scenario=sc)) for name in ds.data_vars}
            for sc in ds.scenario.values
        }
        for cc in ds.cc.values
    }


def _tunings(fast: bool) -> dict:
    from fabricflow.dynamics.scenarios import incast
    from fabricflow.dynamics.tuning import tune_cc

    scenario = incast(16, bandwidth=40e9 / 8)
    out = {}
    for cc, names in (("dcqcn", ("kmin", "kmax", "pmax", "rate_ai")), ("hpcc", ("eta",))):
        tuned = tune_cc(
            scenario,
            cc,
            parameters=names,
            steps=3 if fast else 12,
            learning_rate=0.1,
            duration=0.01,
            dt=5e-6 if cc == "dcqcn" else 1e-6,
            pfc="static",
        )
        out[cc] = tuned.summary()
    return out


def run(out, *, fast: bool = False) -> dict:
    from fabricflow.study.cc_compare import compare, head_to_head
    from fabricflow.study.cc_compare_plots import plot_all
    from fabricflow.study.outputs import save_dataset, save_study

    started = time.perf_counter()
    if fast:
        ds = compare(
            laws=("dcqcn", "predictive"),
            senders=4,
            hosts=4,
            switches=3,
            duration=0.002,
            records=100,
        )
    else:
        ds = compare()
    ds.attrs["seconds"] = time.perf_counter() - started
    numbers = {"seconds": ds.attrs["seconds"], "compare": _table(ds)}
    if not fast:
        began = time.perf_counter()
        duel = head_to_head()
        duel.attrs["seconds"] = time.perf_counter() - began
        save_dataset(out, "cc_head_to_head", duel)
        numbers["head_to_head"] = _table(duel)
        numbers["tuning"] = _tunings(fast)
    return save_study(out, "cc_compare", ds, plot_all(ds), numbers)


def main(argv: list[str] | None = None) -> int:
    args = parse_study_args(__doc__, argv, fast_help="two laws, small scenarios (tests)")
    enable_persistent_cache()  # reruns load the compiled solvers instead of compiling
    print(json.dumps(run(args.out, fast=args.fast)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
