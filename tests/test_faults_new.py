"""Regression tests for bad input to the cluster, sweep and report features: each case
was a traceback, a silently dropped value or a wrong number before its fix."""

from __future__ import annotations

import pytest

import fabricflow as ff
from fabricflow.errors import SpecError

_ROW = "id,model,gpu,gpus,tp,arrival,steps\n"


def test_trace_csv_row_with_surplus_cells_is_refused(tmp_path):
    # csv.DictReader files surplus cells under None; they used to be dropped silently.
    path = tmp_path / "t.csv"
    path.write_text(_ROW + "a,llama3-8b,h100-sxm,16,8,0s,10,999\n")
    with pytest.raises(SpecError, match=r"jobs\[0\].*8 cells but the header has 7"):
        ff.load_trace(path)


def test_trace_yaml_duplicate_key_is_refused(tmp_path):
    # A repeated `gpus:` used to silently win (the job ran on 32 GPUs, not 16).
    path = tmp_path / "t.yaml"
    path.write_text(
        "jobs:\n  - id: a\n    model: llama3-8b\n    gpu: h100-sxm\n    gpus: 16\n"
        "    gpus: 32\n    layout: {tp: 8}\n    steps: 5\n"
    )
    with pytest.raises(SpecError, match="duplicate key 'gpus'"):
        ff.load_trace(path)


def test_trace_not_utf8_or_a_directory_is_a_spec_error(tmp_path):
    latin = tmp_path / "t.csv"
    latin.write_bytes(_ROW.encode() + b"a\xe9,llama3-8b,h100-sxm,16,8,0s,10\n")
    with pytest.raises(SpecError, match="not UTF-8"):
        ff.load_trace(latin)
    folder = tmp_path / "dir.yaml"
    folder.mkdir()
    with pytest.raises(SpecError, match="trace"):
        ff.load_trace(folder)


def test_trace_csv_still_reads(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(_ROW + "a,llama3-8b,h100-sxm,16,8,0s,10\n")
    (job,) = ff.load_trace(path)
    assert (job.id, job.gpus, job.steps, job.layout.tp, job.layout.dp) == ("a", 16, 10, 8, 2)


_COLLECTIVE = {"fabric": "fat-tree-k16", "op": "all_reduce", "gpus": 16}


def test_sweep_store_none_and_truthy_overwrite_are_spec_errors(tmp_path):
    # store=None was a TypeError from pathlib; overwrite="no" (truthy) would have
    # replaced the store.
    with pytest.raises(SpecError, match="store: expected a folder path"):
        ff.sweep("collective", {"size": [1 << 20]}, fixed=_COLLECTIVE, store=None, workers=0)
    with pytest.raises(SpecError, match="overwrite"):
        ff.sweep(
            "collective",
            {"size": [1 << 20]},
            fixed=_COLLECTIVE,
            store=tmp_path / "s",
            workers=0,
            overwrite="no",
        )
    assert not (tmp_path / "s").exists()


def test_sweep_grid_takes_numpy_arrays_and_ranges(tmp_path):
    # A 1-D array or a range was refused as "expected a non-empty list of values".
    np = pytest.importorskip("numpy")
    from fabricflow.sweeps.grid_spec import make_spec

    spec = make_spec("collective", {"size": np.array([1 << 20, 1 << 21])}, fixed=_COLLECTIVE)
    assert spec.grid == (("size", (1 << 20, 1 << 21)),)
    assert all(type(v) is int for v in spec.grid[0][1])  # plain ints, not numpy
    spec = make_spec("collective", {"size": range(1, 3)}, fixed=_COLLECTIVE)
    assert spec.grid == (("size", (1, 2)),)
    with pytest.raises(SpecError, match="grid.size: must be a finite number"):
        make_spec("collective", {"size": np.array([1.0, np.nan])}, fixed=_COLLECTIVE)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"size_exponent": float("nan")}, "size_exponent"),  # was numpy's ValueError
        ({"size_exponent": -1.0}, "size_exponent"),
        ({"seed": -1}, "seed"),  # was numpy's ValueError
        ({"seed": 1.5}, "seed"),  # was numpy's TypeError
        ({"mean_interarrival_s": float("inf")}, "mean_interarrival_s"),  # NaN arrivals
        ({"high_priority_fraction": "half"}, "high_priority_fraction"),  # was a TypeError
    ],
)
def test_synthetic_trace_bad_arguments_name_the_field(kwargs, field):
    with pytest.raises(SpecError, match=f"^{field}: "):
        ff.synthetic_trace(3, **kwargs)


def test_simulate_cluster_refuses_truthy_strings_clamps_and_negative_seeds():
    # interference="no" ran the interference model; timeline_points=0 was clamped to 2;
    # seed=-1 reached numpy's SeedSequence only when failures were on.
    fabric = ff.load_fabric("dgx-h100-superpod")
    trace = ff.synthetic_trace(2, seed=1, fabric=fabric)
    for kwargs, field in [
        ({"interference": "no"}, "interference"),
        ({"timeline_points": 0}, "timeline_points"),
        ({"seed": -1, "failures": {"gpu": "1h"}}, "seed"),
    ]:
        with pytest.raises(SpecError, match=f"^{field}: "):
            ff.simulate_cluster(fabric, trace, **kwargs)
    run = ff.simulate_cluster(fabric, trace, interference=False, timeline_points=2)
    assert run.timeline.sizes["time"] <= 2


def test_bench_commands_in_the_docs_parse_and_name_real_sections():
    # docs/cluster.md said `fabricflow bench --section cluster`, which bench does not take.
    import re
    import shlex
    from pathlib import Path

    from fabricflow.bench import SECTIONS
    from fabricflow.cli import build_parser

    root = Path(__file__).resolve().parent.parent
    known = set(SECTIONS)
    parser = build_parser("bench")
    found = 0
    for page in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for command in re.findall(r"`(?:[A-Z_]+=\S+ )?fabricflow (bench[^`]*)`", page.read_text()):
            words = [w for w in shlex.split(command) if not w.startswith("[")]
            if any(not re.fullmatch(r"[\w-]+", w) for w in words):
                continue  # a usage line with placeholders, not a command
            found += 1
            args = parser.parse_args(words)  # SystemExit on an unknown flag
            assert set(args.sections) <= known, (page.name, command)
    assert found >= 5


def test_ragged_links_say_how_to_pad():
    # [[0], [0, 1]] (paths of different lengths) said only "must be a rectangular array".
    with pytest.raises(SpecError, match="pad shorter paths with -1"):
        ff.max_min_rates([[0], [0, 1], [1]], [10.0, 10.0], shard="flows")


@pytest.mark.parametrize("task", ["maxmin", "cc"])
def test_sweep_unknown_argument_of_maxmin_and_cc_is_refused_before_running(task, tmp_path):
    # Other tasks refused a typo up front (exit 2); maxmin and cc ran every point and
    # failed each one (exit 1) with the same message.
    with pytest.raises(SpecError, match=f"task '{task}' takes no argument"):
        ff.sweep(task, {"x": [1]}, store=tmp_path / "s", workers=0)
    assert not (tmp_path / "s").exists()


def test_report_default_fail_kind_on_a_torus_is_its_ici_cables():
    # `fabricflow report --fabric tpu-v4-pod ...` with default flags exited 2: "no
    # switch-to-switch cables to fail", though the torus reroutes around a failed ICI cable.
    from fabricflow.report.build import default_fail_kind

    assert default_fail_kind(ff.load_fabric("tpu-v4-pod")) == "ici"
    assert default_fail_kind(ff.load_fabric("fat-tree-k16")) == "leaf"


def test_trace_csv_layout_columns_with_optimize_are_refused_not_dropped(tmp_path):
    # layout=optimize with a tp column: the tp was silently dropped and optimize chose.
    path = tmp_path / "t.csv"
    path.write_text(
        "id,model,gpu,gpus,layout,tp,arrival,steps\na,llama3-8b,h100-sxm,16,optimize,8,0s,10\n"
    )
    with pytest.raises(SpecError, match=r"layout\.tp: with optimize"):
        ff.load_trace(path, fabric=ff.load_fabric("fat-tree-k16"))


def test_trace_csv_sequence_parallel_yes_is_refused_not_false(tmp_path):
    # Only "1"/"true" meant True; "yes" or "on" silently meant False.
    path = tmp_path / "t.csv"
    path.write_text(
        "id,model,gpu,gpus,tp,sequence_parallel,arrival,steps\n"
        "a,llama3-8b,h100-sxm,16,8,yes,0s,10\nb,llama3-8b,h100-sxm,16,8,True,0s,10\n"
    )
    with pytest.raises(SpecError, match=r"jobs\[0\].*sequence_parallel: expected true"):
        ff.load_trace(path)
    path.write_text(path.read_text().replace(",yes,", ",0,"))
    assert [job.layout.sequence_parallel for job in ff.load_trace(path)] == [False, True]


def test_trace_layout_error_names_the_field_once():
    # Layout's own errors came out as "jobs[0] (id 'a').layout.layout.sequence_parallel".
    row = {"id": "a", "model": "llama3-8b", "gpu": "h100-sxm", "gpus": 16, "steps": 5}
    with pytest.raises(SpecError) as caught:
        ff.load_trace([{**row, "layout": {"tp": 8, "sequence_parallel": 2}}])
    assert caught.value.field == "jobs[0] (id 'a').layout.sequence_parallel"


def test_damaged_sweep_store_is_an_output_error_and_overwrite_repairs_it(tmp_path):
    # A status chunk the codec cannot read, a deleted variable or a zarr.json that is not
    # JSON were raw RuntimeError / FileNotFoundError / JSONDecodeError tracebacks.
    import shutil

    from fabricflow.errors import OutputError

    store = tmp_path / "s"
    args = ("collective", {"size": [1 << 20, 1 << 21]})
    ff.sweep(*args, fixed=_COLLECTIVE, store=store, workers=0)
    (store / "status" / "c" / "0").write_bytes(b"garbage")
    with pytest.raises(OutputError, match="is damaged: variable 'status'.*--repair.*--overwrite"):
        ff.sweep(*args, fixed=_COLLECTIVE, store=store, workers=0)
    shutil.rmtree(store / "time_s")
    ds = ff.sweep(*args, fixed=_COLLECTIVE, store=store, workers=0, overwrite=True)
    assert (ds.status.values == 1).all() and (ds.time_s.values > 0).all()
    (store / "zarr.json").write_text("{garbage")
    with pytest.raises(OutputError, match=r"^store '[^']*': its zarr.json is damaged"):
        ff.sweep(*args, fixed=_COLLECTIVE, store=store, workers=0)
    assert (store / "time_s").exists()  # never deleted: it may not be ours


def test_slowdown_cdf_of_a_run_where_no_job_ran_warns_nothing(tmp_path):
    # `fabricflow cluster --horizon` before the first start printed matplotlib's
    # "No artists with labels found to put in legend" warning on stderr.
    import types
    import warnings

    from fabricflow.plots.cluster import plot_slowdown_cdf

    run = types.SimpleNamespace(jobs=[{"slowdown": None}])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plot_slowdown_cdf({"topology": run}, tmp_path / "cdf.png")
    assert (tmp_path / "cdf.png").stat().st_size > 0


def test_one_bad_point_of_a_batch_fails_alone(tmp_path):
    # A batched maxmin group with one capacity_scale of -1 failed every point of the group
    # with "got -1", the valid scales included.
    fixed = {"fabric": "fat-tree-k16", "traffic": "permutation"}
    ds = ff.sweep(
        "maxmin", {"capacity_scale": [-1, 0.5, 1]}, fixed=fixed, store=tmp_path / "s", workers=0
    )
    assert ds.status.values.tolist() == [2, 1, 1]
    assert "got -1" in str(ds.error.values[0])
    half, full = ds.total_throughput_Bps.values[1:]
    assert full > 0 and half == pytest.approx(full / 2, rel=1e-5)


def test_build_report_takes_a_fabric_name_like_model_and_gpu():
    # build_report("fat-tree-k16", "llama3-8b", ...) was an AttributeError ('str' object
    # has no attribute 'num_gpus') although model and gpu take preset names.
    from fabricflow.report.build import build_report

    with pytest.raises(SpecError, match="^gpus: 4,096 GPUs do not fit 'fat-tree-k16'"):
        build_report("fat-tree-k16", "llama3-8b", "h100-sxm", 4096, budget_s=0)
    with pytest.raises(SpecError, match="^fabric: expected a Fabric"):
        build_report(1024, "llama3-8b", "h100-sxm", 16, budget_s=0)
