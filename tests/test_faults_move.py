"""Hardening of the collective, workload and study code: moved modules, figures written
whole or not at all, one implementation per concept, and the large-collective path."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from fabricflow.collective import make_groups
from fabricflow.dynamics import scenarios

# sha256 (first 16 hex digits) of every array of each scenario's fabric and routes, as
# the loop-per-path builder made them before the scenarios were built with Assembler.
SCENARIO_FINGERPRINTS = {
    ("dumbbell", 1): "ad9318dfd3f97e53",
    ("dumbbell", 3): "0470d8b4b7ee7966",
    ("incast", 2): "0db4c6f0beca74df",
    ("incast", 8): "abdc00809d8124d1",
    ("alltoall", 2): "9f8dbc8ed351c904",
    ("alltoall", 8): "76c7f7d3dc71389f",
    ("alltoall", 5): "22c3779cb541554e",
    ("ring", 3): "bf4d4febf63cc088",
    ("ring", 6): "c1d8988215f2065b",
    ("multi_bottleneck", 0): "a0f11d3ad4ea3b93",
    ("parking_lot", 2): "93f5cf3616f53dfa",
    ("parking_lot", 5): "ca09fedc39287db5",
}


def _fingerprint(scenario) -> str:
    fabric, routes = scenario.fabric, scenario.routes
    digest = hashlib.sha256()
    for name in (
        "link_src",
        "link_dst",
        "capacity",
        "latency",
        "link_kind_id",
        "node_kind_id",
        "node_tier",
        "node_group",
        "gpu_node",
        "gpu_domain",
    ):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(np.asarray(getattr(fabric, name), np.float64)).tobytes())
    for name in ("links", "src", "dst"):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(np.asarray(getattr(routes, name), np.float64)).tobytes())
    digest.update(
        repr(
            (
                fabric.name,
                tuple(fabric.link_kinds),
                tuple(fabric.node_kinds),
                fabric.gpus_per_node,
                fabric.meta,
                routes.coef,
                routes.num_links,
                routes.policy,
                scenario.name,
                scenario.bottleneck,
                scenario.roles,
            )
        ).encode()
    )
    return digest.hexdigest()[:16]


@pytest.mark.parametrize(("name", "size"), sorted(SCENARIO_FINGERPRINTS))
def test_scenarios_built_with_assembler_equal_the_old_builder(name, size):
    scenario = scenarios.build_scenario(name, size)
    assert _fingerprint(scenario) == SCENARIO_FINGERPRINTS[name, size]


def test_scenario_path_over_a_missing_cable_is_refused():
    builder = scenarios._Builder(1e9, 1e-6)
    hosts = builder.nodes(2, 0)
    switch = builder.nodes(1, 1)[0]
    builder.cables(hosts, switch)
    assert builder.links([[hosts[0], switch, hosts[1]]]).tolist() == [[0, 3]]
    with pytest.raises(ValueError, match="not a cable"):
        builder.links([[hosts[0], hosts[1]]])


# ---------------------------------------------------------------------------- figures


def _modules_after_import(statement: str) -> set[str]:
    import subprocess
    import sys

    code = f"{statement}\nimport sys\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return set(out.stdout.split())


def test_model_packages_do_not_import_matplotlib():
    loaded = _modules_after_import(
        "import fabricflow.workload, fabricflow.collective, fabricflow.traffic.patterns\n"
        "import fabricflow.workload.step, fabricflow.collective.timing"
    )
    assert "matplotlib" not in loaded


def test_plot_modules_leave_the_matplotlib_backend_alone():
    loaded = _modules_after_import(
        "import matplotlib\nmatplotlib.use('svg')\n"
        "import fabricflow.plots.fabric, fabricflow.plots.rates\n"
        "import fabricflow.plots.congestion, fabricflow.plots.step\n"
        "from fabricflow.plots.figures import new_figure, save_figure\n"
        "assert matplotlib.get_backend() == 'svg', matplotlib.get_backend()"
    )
    assert "matplotlib.pyplot" not in loaded


def _figure():
    from fabricflow.plots.figures import new_figure

    fig = new_figure(figsize=(2, 2))
    fig.subplots().plot([0, 1], [0, 1])
    return fig


def test_save_figure_writes_the_format_of_the_extension(tmp_path):
    from fabricflow.plots.figures import save_figure

    assert save_figure(_figure(), tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"
    assert save_figure(_figure(), tmp_path / "a.svg").read_text().lstrip().startswith("<?xml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "a.svg"]


def test_save_figure_refuses_an_unknown_format_before_writing(tmp_path):
    from fabricflow.errors import SpecError
    from fabricflow.plots.figures import save_figure

    with pytest.raises(SpecError, match="png"):
        save_figure(_figure(), tmp_path / "a.docx")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(
    not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() == 0,
    reason="root writes into read-only folders",
)
def test_save_figure_into_a_read_only_folder_raises_output_error(tmp_path):
    from fabricflow.errors import OutputError
    from fabricflow.plots.figures import save_figure

    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(OutputError, match="permission denied"):
            save_figure(_figure(), folder / "a.png")
        assert list(folder.iterdir()) == []
    finally:
        folder.chmod(0o755)


def test_save_figure_under_a_file_raises_output_error(tmp_path):
    from fabricflow.errors import OutputError
    from fabricflow.plots.figures import save_figure

    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="file"):
        save_figure(_figure(), tmp_path / "file" / "a.png")


def test_save_figure_on_a_full_disk_leaves_no_file(tmp_path, monkeypatch):
    import errno

    from matplotlib.figure import Figure

    from fabricflow.errors import OutputError
    from fabricflow.plots.figures import save_figure

    def half_written(self, target, **options):
        with open(target, "wb") as handle:
            handle.write(b"\x89PNG truncated")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", half_written)
    with pytest.raises(OutputError, match="disk is full"):
        save_figure(_figure(), tmp_path / "a.png")
    assert list(tmp_path.iterdir()) == []


def test_step_plot_goes_through_save_figure(tmp_path, monkeypatch):
    from fabricflow.plots import step

    saved = []
    monkeypatch.setattr(step, "save_figure", lambda fig, path: saved.append(path))
    result = type(
        "R",
        (),
        {
            "breakdown": dict.fromkeys(step.BREAKDOWN_KEYS, 1.0),
            "step_time_s": 8.0,
            "mfu": 0.4,
        },
    )()
    step.plot_breakdown([("a", result)], tmp_path / "b.png")
    assert saved == [tmp_path / "b.png"]


# ---------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("num_gpus", "group_size", "num_groups"),
    [(64, 8, None), (64, 8, 3), (70, 8, None), (9, 2, 4), (16, 16, 1)],
)
def test_alltoall_groups_are_make_groups_strided(num_gpus, group_size, num_groups):
    from fabricflow.collective import make_groups
    from fabricflow.traffic.patterns import alltoall_flows, alltoall_groups

    src, dst = alltoall_groups(num_gpus, group_size, num_groups)
    stride = num_gpus // group_size
    # The definition: member j of group i is GPU i + j * stride.
    expected = np.arange(num_groups or stride)[:, None] + stride * np.arange(group_size)
    expected_src, expected_dst = alltoall_flows(expected)
    assert src.dtype == np.int64 and np.array_equal(src, expected_src)
    assert np.array_equal(dst, expected_dst)
    if num_gpus % group_size == 0:
        full = make_groups(num_gpus, group_size, layout="strided")
        full_src, full_dst = alltoall_flows(full[: expected.shape[0]])
        assert np.array_equal(src, full_src) and np.array_equal(dst, full_dst)


def test_strided_groups_bad_sizes_name_the_field():
    from fabricflow.errors import SpecError
    from fabricflow.traffic.patterns import alltoall_groups

    with pytest.raises(SpecError) as error:
        alltoall_groups(64, 8, 9)
    assert error.value.field == "num_groups"
    with pytest.raises(SpecError) as error:
        alltoall_groups(4, 8)
    assert error.value.field == "group_size"


@pytest.fixture(scope="module")
def a100():
    from fabricflow.fabric.spec import load_fabric

    return load_fabric("dgx-a100-superpod")


def _small_step(fabric, collectives):
    from fabricflow.workload import Layout, step_time

    layout = Layout(tp=2, dp=8, micro_batch=4, global_batch=64, seq_len=2048, recompute="full")
    return step_time("megatron-1.7b", "a100-80gb", layout, fabric, collectives=collectives)


def test_step_backend_fabric_is_the_default_and_old_names_are_refused(a100):
    import warnings

    from fabricflow.errors import SpecError

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fabric = _small_step(a100, "fabric")
    assert fabric.details["collective_backend"] == "fabric"
    # "auto" and "collective-model" were names of "fabric" before 0.1.0: no longer accepted.
    for old in ("auto", "collective-model"):
        with pytest.raises(SpecError) as error:
            _small_step(a100, old)
        assert error.value.field == "collectives"
        assert repr(old) in str(error.value)
        assert "'fabric'" in str(error.value)
        assert "deprecated" not in str(error.value)
    assert _small_step(a100, "alpha-beta").details["collective_backend"] == "alpha-beta"


def test_unknown_step_backend_names_the_field_and_choices(a100):
    from fabricflow.errors import SpecError

    with pytest.raises(SpecError) as error:
        _small_step(a100, "nccl")
    assert error.value.field == "collectives"
    assert "'fabric'" in str(error.value) and "'alpha-beta'" in str(error.value)


def test_collective_seconds_backends(a100):
    from fabricflow.collective.comm import collective_seconds
    from fabricflow.errors import SpecError

    groups = np.arange(16).reshape(2, 8)
    fabric = collective_seconds(a100, "all_reduce", groups, 2**26)
    named = collective_seconds(a100, "all_reduce", groups, 2**26, backend="fabric")
    assert np.array_equal(fabric, named) and fabric.shape == (2,)
    with pytest.raises(SpecError) as error:  # a name of "fabric" before 0.1.0
        collective_seconds(a100, "all_reduce", groups, 2**26, backend="auto")
    assert error.value.field == "backend"
    with pytest.raises(SpecError) as error:
        collective_seconds(a100, "all_reduce", groups, 2**26, backend="collective")
    assert error.value.field == "backend"


@pytest.mark.parametrize("value", ["fabric", "alpha-beta", "auto", "collective-model"])
def test_step_cli_accepts_the_backend_names_and_refuses_the_old_ones(capsys, value):
    import json

    from fabricflow.cli import main

    args = [
        "step",
        "--fabric",
        "dgx-a100-superpod",
        "--gpu",
        "a100-80gb",
        "--model",
        "megatron-1.7b",
        "--gpus",
        "16",
        "--tp",
        "2",
        "--micro-batch",
        "4",
        "--global-batch",
        "64",
        "--seq",
        "2048",
        "--recompute",
        "full",
        "--json",
        "--collectives",
        value,
    ]
    if value in ("auto", "collective-model"):  # names of "fabric" before 0.1.0
        assert main(args) == 2
        error = json.loads(capsys.readouterr().out)
        assert error["error"] == "UsageError"
        assert f"invalid choice: '{value}'" in error["message"] and "'fabric'" in error["message"]
        return
    assert main(args) == 0
    expected = "alpha-beta" if value == "alpha-beta" else "fabric"
    assert json.loads(capsys.readouterr().out)["collective_backend"] == expected


# ---------------------------------------------------------------------------- long runs


def test_wide_collective_flows_solve_as_before():
    """Wide merged ring transfers (hundreds of links per row) on a 3-tier fabric give the
    textbook loop's rates (to float64 rounding), through the engine's default choice."""
    from reference_solvers import progressive_filling

    from fabricflow.collective import DEFAULT_COST
    from fabricflow.collective.algorithms import ALGORITHMS, Context
    from fabricflow.collective.flow_rates import effective_capacity, solve_phase
    from fabricflow.fabric.spec import load_fabric

    fabric = load_fabric("clos-100k", gpus=8192)  # two pods: rings cross the core
    groups = make_groups(8192, 8, layout="strided")
    grid = groups[:, :, None]
    ctx = Context("all_reduce", groups, groups, grid, 2)
    (phase,) = ALGORITHMS["ring"].build(ctx)
    capacity = effective_capacity(fabric, DEFAULT_COST)
    default = solve_phase(fabric, phase, capacity)
    assert default.links.shape[1] > 32  # wider than the jitted kernel compiles quickly
    textbook = solve_phase(fabric, phase, capacity, solver=progressive_filling)
    np.testing.assert_allclose(default.rate, textbook.rate, rtol=1e-12, atol=0)
