"""ff.sweep: SPEC checks, the store, resume, failures, batching, local processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.errors import OutputError, SpecError
from fabricflow.fabric.spec import read_spec
from fabricflow.sweeps import read_sweep_spec, run_sweep

TESTS = Path(__file__).parent
ROOT = TESTS.parent
ENV = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{TESTS}", "FABRICFLOW_NO_JAX_CACHE": "1"}

QUAD = "sweep_tasks:quad"
SMALL_STEP = {
    "fabric": "fat-tree-k16",
    "model": "llama3-8b",
    "gpu": "h100-sxm",
    "gpus": 64,
    "tp": 8,
    "micro_batch": 1,
    "global_batch": 64,
    "seq_len": 8192,
}


def expected_quad(xs, ys, scale=1.0):
    x, y = np.meshgrid(np.asarray(xs, float), np.asarray(ys, float), indexing="ij")
    return scale * x * x + y


# ----------------------------------------------------------------------------- SPEC errors


@pytest.mark.parametrize(
    ("task", "grid", "fixed", "field", "words"),
    [
        (
            "stepp",
            {"pp": [1]},
            SMALL_STEP,
            "task",
            ["'stepp'", "step", "collective", "module:function"],
        ),
        ("step", {"pp": []}, SMALL_STEP, "grid.pp", ["non-empty list"]),
        ("step", {"pp": 2}, SMALL_STEP, "grid.pp", ["non-empty list"]),
        ("step", {"pp": [1, 1]}, SMALL_STEP, "grid.pp", ["distinct"]),
        ("step", {"ppp": [1, 2]}, SMALL_STEP, "ppp", ["ppp", "takes no argument"]),
        ("step", {"tp": [1]}, SMALL_STEP, "grid", ["both fixed and grid"]),
        (
            "step",
            {"fabric.topology.tierz.0.up_ports": [4]},
            SMALL_STEP,
            "fabric.topology.tierz.0.up_ports",
            ["fabric.topology has no key 'tierz'", "tiers"],
        ),
        (
            "step",
            {"fabric.topology.tiers.7.up_ports": [4]},
            SMALL_STEP,
            "fabric.topology.tiers.7.up_ports",
            ["fabric.topology.tiers is a list of 3", "0..2"],
        ),
        ("step", {"pp": [1.5, float("nan")]}, SMALL_STEP, "grid.pp", ["finite"]),
        ("sweep_tasks:nope", {"x": [1]}, {}, "task", ["has no 'nope'"]),
        ("no_such_module:f", {"x": [1]}, {}, "task", ["cannot import"]),
        (QUAD, {"x": [1], "z": [2]}, {}, "z", ["takes no argument", "'z'"]),
    ],
)
def test_bad_spec_is_refused_naming_the_field(tmp_path, task, grid, fixed, field, words):
    with pytest.raises(SpecError) as info:
        ff.sweep(task, grid, fixed=fixed, store=tmp_path / "s.zarr", workers=0)
    assert info.value.field == field
    for word in words:
        assert word in str(info.value)
    assert not (tmp_path / "s.zarr").exists()  # refused before the store is made


def test_unknown_metric_and_spec_keys(tmp_path):
    with pytest.raises(SpecError, match="no metric.*'speed'"):
        ff.sweep(
            "step",
            {"pp": [1]},
            fixed=SMALL_STEP,
            metrics=["speed"],
            store=tmp_path / "a",
            workers=0,
        )
    (tmp_path / "spec.yaml").write_text("task: step\ngrid: {pp: [1]}\nfixd: {}\n")
    with pytest.raises(SpecError, match=r"unknown key\(s\) \['fixd'\]"):
        read_sweep_spec(tmp_path / "spec.yaml")


# ----------------------------------------------------------------------------- store & resume


def test_values_store_and_resume(tmp_path):
    store = tmp_path / "s.zarr"
    log = tmp_path / "calls.log"
    grid = {"x": [1, 2, 3], "y": [0.0, 0.5]}
    ds = ff.sweep(QUAD, grid, fixed={"scale": 2.0, "log": str(log)}, store=store, workers=0)
    assert ds["value"].dims == ("x", "y")
    assert list(ds["x"].values) == [1, 2, 3] and ds["x"].dtype == np.int64
    np.testing.assert_allclose(ds["value"].values, expected_quad([1, 2, 3], [0, 0.5], 2.0))
    assert (ds["status"].values == 1).all() and (ds["error"].values == "").all()
    spec = json.loads(ds.attrs["spec"])
    assert spec["task"] == QUAD and spec["fixed"]["scale"] == 2.0
    assert ds.attrs["fabricflow_version"] == ff.__version__ and len(ds.attrs["spec_sha256"]) == 64
    assert json.loads(ds.attrs["last_run"])["computed"] == 6
    # the store reads back with plain xarray
    import xarray as xr

    with xr.open_zarr(store, consolidated=False) as read:
        np.testing.assert_allclose(read["value"].values, ds["value"].values)
    # rerun: nothing computed
    again = ff.sweep(QUAD, grid, fixed={"scale": 2.0, "log": str(log)}, store=store, workers=0)
    assert json.loads(again.attrs["last_run"])["reused"] == 6
    assert len(log.read_text().splitlines()) == 6
    # a changed SPEC is refused, naming what differs; --overwrite replaces the store
    with pytest.raises(SpecError, match=r"fixed\.scale 2\.0 -> 3\.0.*overwrite") as info:
        ff.sweep(QUAD, grid, fixed={"scale": 3.0, "log": str(log)}, store=store, workers=0)
    assert info.value.field == "store"
    with pytest.raises(SpecError, match=r"grid\.x \[1, 2, 3\] -> \[1, 2\]"):
        ff.sweep(
            QUAD, {"x": [1, 2], "y": [0.0, 0.5]}, fixed={"scale": 2.0, "log": str(log)}, store=store
        )
    ds3 = ff.sweep(
        QUAD, grid, fixed={"scale": 3.0, "log": str(log)}, store=store, workers=0, overwrite=True
    )
    np.testing.assert_allclose(ds3["value"].values, expected_quad([1, 2, 3], [0, 0.5], 3.0))


def test_store_refuses_a_foreign_folder(tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    with pytest.raises(OutputError, match="not a fabricflow sweep store"):
        ff.sweep(QUAD, {"x": [1]}, store=tmp_path, workers=0, overwrite=True)
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_failed_points_are_recorded_and_retried(tmp_path):
    marker = tmp_path / "broken"
    marker.write_text("")
    store = tmp_path / "s.zarr"
    ds = ff.sweep(
        "sweep_tasks:flaky", {"x": [1, 2, 3]}, fixed={"marker": str(marker)}, store=store, workers=0
    )
    assert list(ds["status"].values) == [1, 2, 1]
    assert np.isnan(ds["double"].values[1]) and ds["double"].values[2] == 6.0
    assert "ValueError: x = 2 fails" in str(ds["error"].values[1])
    run = json.loads(ds.attrs["last_run"])
    assert (run["computed"], run["failed"]) == (2, 1)
    marker.unlink()
    ds = ff.sweep(
        "sweep_tasks:flaky", {"x": [1, 2, 3]}, fixed={"marker": str(marker)}, store=store, workers=0
    )
    run = json.loads(ds.attrs["last_run"])
    assert (run["computed"], run["reused"], run["failed"]) == (1, 2, 0)
    assert list(ds["double"].values) == [2.0, 4.0, 6.0] and str(ds["error"].values[1]) == ""


def test_a_metric_that_is_not_a_number_fails_the_point(tmp_path):
    ds = ff.sweep(
        "sweep_tasks:not_a_number", {"x": [1]}, metrics=["value"], store=tmp_path / "s", workers=0
    )
    assert ds["status"].values[0] == 2 and "not a number" in str(ds["error"].values[0])


def test_batching_groups_points_that_differ_in_batch_keys(tmp_path):
    log = tmp_path / "calls.log"
    grid = {"x": [1.0, 2.0, 3.0], "c": [0.5, 1.0, 2.0, 4.0]}
    ds = ff.sweep(
        "sweep_tasks:affine", grid, fixed={"log": str(log)}, store=tmp_path / "s", workers=0
    )
    calls = log.read_text().splitlines()
    assert sorted(calls) == ["batch 1.0 4", "batch 2.0 4", "batch 3.0 4"]  # one call per x
    c, x = np.meshgrid(grid["c"], grid["x"])
    np.testing.assert_allclose(ds["value"].values, c * x + 1.0)
    assert json.loads(ds.attrs["last_run"])["batches"] == 3


def test_local_processes_equal_inline(tmp_path):
    grid = {"x": [1, 2, 3, 4], "y": [0.0, 1.0]}
    inline = ff.sweep(QUAD, grid, store=tmp_path / "a", workers=0)
    pooled = ff.sweep(QUAD, grid, store=tmp_path / "b", workers=2)
    run = json.loads(pooled.attrs["last_run"])
    assert run["backend"] == "processes" and run["workers"] == 2
    np.testing.assert_array_equal(inline["value"].values, pooled["value"].values)
    np.testing.assert_array_equal(inline["total"].values, pooled["total"].values)


def test_step_sweep_with_dotted_fabric_override_equals_step_time(tmp_path):
    from fabricflow.workload.layout import Layout

    ds = ff.sweep(
        "step",
        {"fabric.topology.tiers.0.up_ports": [8, 2], "pp": [1, 2]},
        fixed=SMALL_STEP,
        metrics=["step_time_s", "mfu", "dp_s"],
        store=tmp_path / "s",
        workers=0,
    )
    assert (ds["status"].values == 1).all()
    spec = read_spec("fat-tree-k16")
    spec["topology"]["tiers"][0]["up_ports"] = 2
    fabric = ff.build_fabric(spec)
    layout = Layout(tp=8, pp=2, dp=4, micro_batch=1, global_batch=64, seq_len=8192)
    direct = ff.step_time("llama3-8b", "h100-sxm", layout, fabric)
    point = ds.sel({"fabric.topology.tiers.0.up_ports": 2, "pp": 2})
    assert float(point["step_time_s"]) == pytest.approx(direct.step_time_s, rel=1e-12)
    # a 4:1 oversubscribed leaf never speeds up the data-parallel traffic
    assert (
        ds["dp_s"].sel({"fabric.topology.tiers.0.up_ports": 2})
        >= ds["dp_s"].sel({"fabric.topology.tiers.0.up_ports": 8}) * (1 - 1e-9)
    ).all()


def test_progress_bar_only_when_asked(tmp_path, capsys):
    ff.sweep(QUAD, {"x": [1, 2]}, store=tmp_path / "a", workers=0, progress=True)
    assert "2/2" in capsys.readouterr().err
    ff.sweep(QUAD, {"x": [1, 2]}, store=tmp_path / "b", workers=0)  # stderr is not a TTY
    assert capsys.readouterr().err == ""


# ----------------------------------------------------------------------------- CLI


def cli(*args, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "fabricflow.cli", "sweep", *map(str, args)],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=ROOT,
        timeout=120,
        **kwargs,
    )


def start_sweep(spec: Path, store: Path, workers: int, **popen) -> subprocess.Popen:
    """``fabricflow sweep SPEC --out STORE --workers N --json`` as a child process, for the
    tests that kill or interrupt it; ``popen``: its output pipes."""
    return subprocess.Popen(
        [sys.executable, "-m", "fabricflow.cli", "sweep", str(spec), "--out", str(store)]
        + ["--workers", str(workers), "--json"],
        env=ENV,
        cwd=ROOT,
        **popen,
    )


def write_spec(path: Path, spec: dict) -> Path:
    path.write_text(json.dumps(spec))
    return path


def test_cli_json_and_exit_codes(tmp_path):
    marker = tmp_path / "broken"
    marker.write_text("")
    spec = write_spec(
        tmp_path / "spec.json",
        {"task": "sweep_tasks:flaky", "fixed": {"marker": str(marker)}, "grid": {"x": [1, 2, 3]}},
    )
    first = cli(spec, "--out", tmp_path / "s.zarr", "--workers", "0", "--json")
    assert first.returncode == 1, first.stderr
    report = json.loads(first.stdout)
    assert {"points", "computed", "reused", "failed", "seconds", "store"} <= set(report)
    assert (report["points"], report["computed"], report["failed"]) == (3, 2, 1)
    assert first.stderr == ""  # no progress bar when not on a terminal
    marker.unlink()
    second = cli(spec, "--out", tmp_path / "s.zarr", "--workers", "0", "--json")
    assert second.returncode == 0
    assert json.loads(second.stdout)["computed"] == 1
    changed = write_spec(
        tmp_path / "spec.json",
        {"task": "sweep_tasks:flaky", "fixed": {"marker": "x"}, "grid": {"x": [1, 2, 3]}},
    )
    refused = cli(changed, "--out", tmp_path / "s.zarr", "--json")
    assert refused.returncode == 2 and "fixed.marker" in refused.stdout + refused.stderr


def wait_done(store: Path, count: int, timeout: float = 60.0) -> None:
    import zarr

    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            done = int((zarr.open_array(store / "status", mode="r")[...] == 1).sum())
        except Exception:  # noqa: BLE001  (not created yet)
            done = 0
        if done >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"{store}: fewer than {count} points done after {timeout} s")


def test_kill_9_at_half_then_resume_computes_only_the_rest(tmp_path):
    from fabricflow.sweeps.store import MAX_FLUSH_S

    log = tmp_path / "calls.log"
    delay = 0.1
    xs, ys = list(range(10)), [0.0, 1.0, 2.0]
    spec = write_spec(
        tmp_path / "spec.json",
        {"task": QUAD, "fixed": {"log": str(log), "delay": delay}, "grid": {"x": xs, "y": ys}},
    )
    store = tmp_path / "s.zarr"
    process = start_sweep(spec, store, 0, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_done(store, 15)
        process.kill()  # SIGKILL: no cleanup at all
    finally:
        process.wait(30)
    assert process.returncode == -9
    first = len(log.read_text().splitlines())
    assert 15 <= first < 30
    rerun = cli(spec, "--out", store, "--workers", "0", "--json")
    assert rerun.returncode == 0, rerun.stderr
    report = json.loads(rerun.stdout)
    assert report["reused"] >= 15 and report["reused"] + report["computed"] == 30
    assert report["computed"] == len(log.read_text().splitlines()) - first  # only the rest
    # results wait in memory at most MAX_FLUSH_S: the kill lost at most that much work
    assert first - report["reused"] <= MAX_FLUSH_S / delay + 1
    ds = run_sweep(spec, store, workers=0).dataset
    np.testing.assert_allclose(ds["value"].values, expected_quad(xs, ys))


def test_ctrl_c_exits_130_and_keeps_finished_points(tmp_path):
    spec = write_spec(
        tmp_path / "spec.json",
        {"task": QUAD, "fixed": {"delay": 0.1}, "grid": {"x": list(range(30))}},
    )
    store = tmp_path / "s.zarr"
    process = start_sweep(spec, store, 2, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_done(store, 4)
    process.send_signal(2)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert len(out.strip().splitlines()) == 1 and json.loads(out)["error"] == "Interrupted"
    ds = run_sweep(spec, store, workers=0).dataset
    assert ds.attrs["spec_sha256"]
    np.testing.assert_allclose(ds["value"].values, np.arange(30.0) ** 2)


def test_a_second_run_on_a_store_being_written_is_refused_at_once(tmp_path):
    log = tmp_path / "calls.log"
    spec = write_spec(
        tmp_path / "spec.json",
        {
            "task": QUAD,
            "fixed": {"log": str(log), "delay": 0.05},
            "grid": {"x": list(range(12)), "y": [0.0, 1.0]},
        },
    )
    store = tmp_path / "s.zarr"
    first = start_sweep(spec, store, 0, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_done(store, 1)
        second = cli(spec, "--out", store, "--workers", "0", "--json")
        assert second.returncode == 2, second.stderr
        message = json.loads(second.stdout)["message"]
        assert "being written by another sweep run" in message and str(store) in message
    finally:
        assert first.wait(120) == 0, first.stderr.read()
    assert len(log.read_text().splitlines()) == 24  # the refused run computed nothing
    ds = run_sweep(spec, store, workers=0).dataset
    assert (ds["status"].values == 1).all()
    np.testing.assert_allclose(ds["value"].values, expected_quad(range(12), [0.0, 1.0]))
    np.testing.assert_allclose(ds["total"].values, np.add.outer(np.arange(12.0), [0.0, 1.0]))


# ----------------------------------------------------------------------------- other tasks


def test_collective_and_optimize_tasks_equal_their_functions(tmp_path):
    from fabricflow.collective import make_groups

    fixed = {
        "fabric": "fat-tree-k16",
        "op": "all_reduce",
        "gpus": 256,
        "group_size": 16,
        "layout": "strided",
    }
    ds = ff.sweep(
        "collective",
        {"size": ["64MiB", "1GiB"], "routing": ["ecmp", "spray"]},
        fixed=fixed,
        store=tmp_path / "c",
        workers=0,
    )
    direct = ff.collective_time(
        ff.load_fabric("fat-tree-k16"),
        "all_reduce",
        make_groups(256, 16, layout="strided"),
        2**30,
        routing="spray",
    )
    assert float(ds["busbw_GBps"].sel(size="1GiB", routing="spray")) == pytest.approx(
        direct.busbw_Bps / 1e9, rel=1e-12
    )
    assert ds["size"].dtype.kind == "U"  # text coordinates stay text
    ds = ff.sweep(
        "optimize",
        {"fabric.topology.tiers.0.up_ports": [8, 2]},
        fixed={
            "fabric": "fat-tree-k16",
            "model": "llama3-8b",
            "gpu": "h100-sxm",
            "gpus": 64,
            "global_batch": 64,
            "seq_len": 4096,
            "space": {"tp": [4, 8], "pp": [1, 2], "micro_batch": [1]},
        },
        store=tmp_path / "o",
        workers=0,
    )
    assert (ds["status"].values == 1).all()
    assert set(ds["best_tp"].values) <= {4.0, 8.0} and set(ds["best_pp"].values) <= {1.0, 2.0}
    # the best layout on the oversubscribed fabric is no faster than on the full one
    assert ds["step_time_s"].values[1] >= ds["step_time_s"].values[0] * (1 - 1e-9)


def test_units_keep_a_fabric_together_and_bound_batches(monkeypatch):
    from fabricflow.sweeps import get_task, make_spec, work_units

    spec = make_spec(
        QUAD,
        {"x": [1, 2], "fabric.gpus": [64, 128, 256], "y": [0.0, 1.0, 2.0]},
        fixed={"fabric": "fat-tree-k16"},
    )
    task = get_task(QUAD)
    pending = np.zeros(spec.shape, np.int8)
    units = list(
        work_units.iter_units(spec, task, ("value",), pending, work_units.chunk_size(18, 2))
    )
    assert sum(len(unit.points) for unit in units) == 18
    for unit in units:  # every unit is one fabric
        assert len({point["fabric.gpus"] for _, point in unit.points}) == 1
    assert max(len(unit.points) for unit in units) == 3  # ceil(18 / (4 x 2))
    done = pending.copy()
    done[0, 0, :] = 1  # done points are left out
    assert sum(len(u.points) for u in work_units.iter_units(spec, task, ("value",), done, 3)) == 15
    monkeypatch.setattr(work_units, "MAX_BATCH", 2)
    batch_spec = make_spec("sweep_tasks:affine", {"x": [1.0, 2.0], "c": [1.0, 2.0, 3.0]})
    units = list(
        work_units.iter_units(
            batch_spec, get_task("sweep_tasks:affine"), ("value",), np.zeros((2, 3), np.int8), 1
        )
    )
    assert [len(unit.points) for unit in units] == [2, 1, 2, 1] and all(u.batch for u in units)
    assert {unit.common["x"] for unit in units} == {1.0, 2.0}


# ----------------------------------------------------------------------------- overrides


def test_dotted_paths_resolve_against_every_base_fabric():
    from fabricflow.sweeps import make_spec
    from fabricflow.sweeps.overrides import resolved_spec
    from fabricflow.sweeps.run import prepare

    spec = resolved_spec(
        "fat-tree-k16",
        {"fabric.topology.tiers.1.up_ports": 4, "fabric.topology.planes": 2, "fabric.gpus": 512},
    )
    assert spec["topology"]["tiers"][1]["up_ports"] == 4 and spec["gpus"] == 512
    assert spec["topology"]["planes"] == 2  # a key the preset leaves at its default
    assert read_spec("fat-tree-k16")["topology"]["tiers"][1]["up_ports"] == 8
    # one of two base fabrics lacks the path: bad input before any point runs
    bad = make_spec(
        "step",
        {
            "fabric": ["fat-tree-k16", "dgx-h100-superpod"],
            "fabric.topology.tiers.2.down_ports": [16],
        },
        fixed={k: v for k, v in SMALL_STEP.items() if k != "fabric"},
    )
    with pytest.raises(SpecError, match="fabric.topology.tiers is a list of"):
        prepare(bad)


@pytest.mark.parametrize("value", [3, 2.5, "400Gbps", True, None, [1, 2], {"a": 1}])
def test_override_sets_exactly_one_value(value):
    from fabricflow.sweeps.overrides import apply_override

    base = {"a": {"b": [{"c": 1, "d": 2}, {"c": 3}]}, "e": 4}
    import copy

    changed = copy.deepcopy(base)
    apply_override(changed, "fabric.a.b.1.c", value)
    assert changed["a"]["b"][1]["c"] == value
    changed["a"]["b"][1]["c"] = 3
    assert changed == base


def test_canonical_spec_ignores_mapping_order_but_not_grid_order():
    from fabricflow.sweeps import make_spec

    one = make_spec(QUAD, {"x": [1, 2], "y": [0.0]}, fixed={"scale": 2.0, "log": None})
    two = make_spec(QUAD, {"x": [1, 2], "y": [0.0]}, fixed={"log": None, "scale": 2.0})
    three = make_spec(QUAD, {"y": [0.0], "x": [1, 2]}, fixed={"scale": 2.0, "log": None})
    assert one.digest() == two.digest() != three.digest()
    assert make_spec(QUAD, {"x": [2, 1]}).digest() != make_spec(QUAD, {"x": [1, 2]}).digest()


def test_a_fabric_that_does_not_build_fails_only_its_points(tmp_path):
    # fat-tree-k16 gives its tiers as ports: an oversubscription key is refused, not ignored
    ds = ff.sweep(
        "step",
        {"fabric.topology.tiers.0.oversubscription": [1, 3], "pp": [1]},
        fixed=SMALL_STEP,
        metrics=["step_time_s"],
        store=tmp_path / "s",
        workers=0,
    )
    assert (ds["status"].values == 2).all() and np.isnan(ds["step_time_s"].values).all()
    assert "oversubscription: goes with radix" in str(ds["error"].values[0, 0])


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_workers_leave_when_their_parent_is_killed(tmp_path):
    spec = write_spec(
        tmp_path / "spec.json",
        {"task": QUAD, "fixed": {"delay": 0.5}, "grid": {"x": list(range(40))}},
    )
    store = tmp_path / "s.zarr"
    process = start_sweep(spec, store, 2, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_done(store, 1)
    children = _children(process.pid)
    assert len(children) >= 2  # the two workers (and multiprocessing's resource tracker)
    process.kill()  # the parent only: its workers are orphaned
    process.wait(30)
    deadline = time.monotonic() + 20
    while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in children)


@pytest.mark.parametrize("task", ["step", "optimize"])
def test_the_sequence_length_has_one_name_in_a_sweep(tmp_path, task):
    """``seq_len``, the Layout field, as in ``step_time`` and ``optimize_layout``; the
    former second spelling ``seq`` is refused naming the one to use."""
    fixed = {"fabric": "fat-tree-k16", "model": "llama3-8b", "gpu": "h100-sxm", "gpus": 64}
    fixed |= {"global_batch": 64, "seq": 8192}
    with pytest.raises(SpecError) as error:
        ff.sweep(task, {"tp": [8]}, fixed=fixed, store=tmp_path / "s.zarr", workers=0)
    assert error.value.field == "seq" and "'seq_len'" in str(error.value)
