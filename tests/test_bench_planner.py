"""The ``planner`` bench section: the step model on both max-min backends agrees."""

from __future__ import annotations

import argparse

import pytest
from reference_solvers import progressive_filling


@pytest.mark.slow
def test_planner_section_quick():
    from fabricflow.bench import planner

    result = planner.run(argparse.Namespace(quick=True, gpu=False))
    assert result["backends_agree"]
    assert result["numpy"]["cold_cpu_s"] > 0 and result["jax"]["warm_cpu_s"] >= 0
    assert result["batch_layouts"]["fastest"] in ("jax_block", "jax_vmap", "numpy")


# ------------------------------------------------- collective solvers: named as they run


def test_the_collective_bench_reports_the_backend_each_phase_ran(small_rail_fabric):
    from fabricflow.bench.collective import solvers_used
    from fabricflow.collective import make_groups, prepare_collective

    groups = make_groups(small_rail_fabric.num_gpus, 16, layout="strided")
    prepared = prepare_collective(small_rail_fabric, "all_reduce", groups)
    ran = {sp.solver for s in prepared.solved for sp in s.phases}
    assert ran <= {"numpy", "jax"} and solvers_used(prepared) == sorted(ran)
    custom = prepare_collective(
        small_rail_fabric,
        "all_reduce",
        groups,
        solver=lambda links, capacity, coef: progressive_filling(links, capacity, coef=coef),
    )
    assert solvers_used(custom) == ["custom"]


def test_collective_bench_imports_no_jax_to_report_its_solver():
    import fabricflow.bench.collective as bench

    assert not hasattr(bench, "_jitted_solver_available")
    assert not hasattr(bench, "jitted_solver_available")
