"""Review findings: production paths, reported solver names, deprecated aliases, lazy API.

- ``fabricflow cc`` takes its max-min reference from the engine (the textbook filling
  is a test oracle only);
- the collective benchmark reports the max-min backends its phases ran;
- ``hasattr(ff, "x.y")`` is False and dotted names are never cached on the package.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_args import STEP
from reference_solvers import progressive_filling

import fabricflow as ff
from fabricflow.cli import main

# ---------------------------------------------------------------- cc uses no test oracle


def test_cc_max_min_reference_comes_from_the_engine(capsys):
    from fabricflow.dynamics.scenarios import build_scenario

    # Two bottleneck levels, so that the reference is not one shared rate.
    scenario = build_scenario("multi_bottleneck", 3, bandwidth=5e9)  # 40Gbps, cc's default
    expected = progressive_filling(scenario.routes.links, scenario.fabric.capacity)
    assert np.unique(expected).size > 1
    code = main(
        ["cc", "--scenario", "multi_bottleneck", "--flows", "3", "--duration", "1ms", "--json"]
    )
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    np.testing.assert_allclose(report["max_min_rate_Bps"], expected, rtol=1e-12)


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


# --------------------------------------------------------- lazy package attributes


@pytest.mark.parametrize("name", ["x.y", "solve.maxmin", "fabric.spec", ".x", "..", "nosuch"])
def test_package_getattr_refuses_dotted_and_unknown_names(name):
    assert not hasattr(ff, name)
    with pytest.raises(AttributeError, match="no attribute"):
        getattr(ff, name)
    assert not [key for key in vars(ff) if "." in key]


def test_package_getattr_still_loads_direct_submodules():
    import fabricflow.traffic

    assert ff.traffic is fabricflow.traffic and hasattr(ff.traffic, "htsim")
    assert hasattr(ff, "solve") and hasattr(ff.solve, "maxmin")


# ------------------------------------------------- step --plot: checked as it is written


def _step(tmp_path, plot: str) -> list[str]:
    return [*STEP, "--plot", str(tmp_path / plot), "--json"]


@pytest.mark.parametrize("plot", ["out", "out.png", "new/folder/out.PNG"])
def test_step_plot_writes_png_with_or_without_extension(tmp_path, capsys, plot):
    # save_figure writes PNG when the name has no extension; the early check must agree,
    # and a missing folder is created, as --out creates its folder.
    assert main(_step(tmp_path, plot)) == 0
    assert json.loads(capsys.readouterr().out)["plot"] == str(tmp_path / plot)
    assert (tmp_path / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_step_plot_format_refused_before_the_model_runs(tmp_path, capsys, monkeypatch):
    from fabricflow.workload import step

    def no_model(*args, **kwargs):
        raise AssertionError("the step model ran before --plot was checked")

    monkeypatch.setattr(step, "step_time", no_model)
    assert main(_step(tmp_path, "out.xyz")) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["error"] == "SpecError"
    assert all(word in data["message"] for word in ("--plot", "'xyz'", "png")), data["message"]
    assert sorted(tmp_path.rglob("*")) == []


@pytest.mark.parametrize(
    ("plot", "words"),
    [("a_folder", ("--plot", "is a folder")), ("a_file/out.png", ("--plot", "not a folder"))],
)
def test_step_plot_that_cannot_be_written_keeps_the_result(tmp_path, capsys, plot, words):
    # the destination is checked before the model runs (a warning says so at once); the
    # result is printed all the same, then the error, exit 1
    (tmp_path / "a_folder").mkdir()
    (tmp_path / "a_file").write_text("")
    before = sorted(tmp_path.rglob("*"))
    assert main(_step(tmp_path, plot)) == 1
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["error"] == "OutputError" and data["step_time_s"] > 0 and "plot" not in data
    assert all(word in data["message"] for word in words), data["message"]
    assert "warning: --plot" in captured.err
    assert sorted(tmp_path.rglob("*")) == before  # nothing created, nothing left behind


def test_no_module_outside_study_imports_matplotlib():
    import ast
    from pathlib import Path

    root = Path(ff.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        if {"study", "plots"} & set(path.relative_to(root).parts):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            if any(name.split(".")[0] == "matplotlib" for name in names):
                offenders.append(str(path.relative_to(root)))
    assert offenders == []


# ------------------------------------------------- strided groups: make_groups, one name


@pytest.mark.parametrize(
    ("num_gpus", "group_size", "num_groups"), [(64, 8, None), (64, 8, 3), (70, 8, None)]
)
def test_alltoall_groups_runs_in_make_groups_strided_without_warning(
    num_gpus, group_size, num_groups
):
    import warnings

    from fabricflow.collective import make_groups
    from fabricflow.traffic.patterns import alltoall_flows, alltoall_groups

    stride = num_gpus // group_size
    groups = make_groups(stride * group_size, group_size, layout="strided")[:num_groups]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the live path warns of nothing
        src, dst = alltoall_groups(num_gpus, group_size, num_groups)
    expected_src, expected_dst = alltoall_flows(groups)
    assert np.array_equal(src, expected_src) and np.array_equal(dst, expected_dst)


def test_strided_groups_is_gone_make_groups_is_the_one_name():
    import fabricflow.traffic.patterns as patterns
    from fabricflow.collective import make_groups

    # strided_groups was a second name of make_groups(layout="strided") before 0.1.0
    with pytest.raises(ImportError, match="strided_groups"):
        from fabricflow.traffic.patterns import strided_groups  # noqa: F401
    assert not hasattr(patterns, "strided_groups")
    assert make_groups(64, 8, layout="strided")[:3].shape == (3, 8)
