"""A sweep store damaged between runs, on a full disk, on a read-only disk.

The rule checked: a rerun never reuses a point without all its metrics (a deleted chunk is
computed again); other damage is refused with an error that names the store, the damaged
part and the remedies, and ``--repair`` rebuilds it keeping every intact point; a full disk
stops the run cleanly with the points stored so far whole and counted; a read-only store is
refused before any point runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import pytest
from fault_helpers import run_main

from fabricflow.sweeps import store_layout

XS = list(range(6))
SPEC = {"task": "sweep_tasks:quad", "grid": {"x": XS}, "fixed": {"y": 1.0}}


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 2 points, so that damage to one chunk leaves the others' points intact."""
    monkeypatch.setattr(store_layout, "CHUNK_POINTS", 2)


def sweep(capsys, tmp_path, store, *flags):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(SPEC))
    return run_main(capsys, ["sweep", str(spec), "--out", str(store), "--workers", "0", *flags])


def values(store) -> list[float]:
    import xarray as xr

    with xr.open_zarr(store) as ds:
        assert (ds.status.values == 1).all()
        return ds.value.values.tolist()


EXPECTED = [float(x * x + 1) for x in XS]

# name -> (what is done to the store, the words of the error; None: no error, the points
# whose metrics are gone are computed again at once)
DAMAGE = {
    "a deleted metric chunk": (lambda s: (s / "value" / "c" / "0").unlink(), None),
    "a garbage metric chunk": (
        lambda s: (s / "value" / "c" / "0").write_bytes(b"garbage"),
        ["variable 'value'", "chunk c/0 cannot be decoded", "2 points lost data"],
    ),
    "a deleted metric variable": (
        lambda s: shutil.rmtree(s / "value"),
        ["variable 'value'", "missing", "6 points lost data"],
    ),
    "an emptied value/zarr.json": (
        lambda s: (s / "value" / "zarr.json").write_text(""),
        ["variable 'value'", "its zarr.json cannot be read"],
    ),
    "a garbage status chunk": (
        lambda s: (s / "status" / "c" / "1").write_bytes(b"\x00garbage"),
        ["variable 'status'", "chunk c/1 cannot be decoded"],
    ),
    "a garbage coordinate": (
        lambda s: (s / "x" / "c" / "0").write_bytes(b"garbage"),
        ["variable 'x'", "cannot be decoded"],
    ),
}


@pytest.mark.parametrize("case", DAMAGE)
def test_a_damaged_store_is_named_and_repaired_keeping_intact_points(
    tmp_path, capsys, small_chunks, case
):
    store = tmp_path / "s.zarr"
    code, first, _ = sweep(capsys, tmp_path, store)
    assert code == 0 and first["computed"] == 6
    damage, words = DAMAGE[case]
    damage(store)
    code, report, _ = sweep(capsys, tmp_path, store)
    if words is None:  # computed again at once: never "reused" without its metrics
        assert code == 0, report
        assert (report["reused"], report["computed"], report["missing_metrics"]) == (4, 2, 2)
    else:
        assert code == 1 and report["error"] == "OutputError"
        message = report["message"]
        assert message.startswith(f"store '{store}' is damaged: ")
        for word in [*words, "--repair", "--overwrite"]:
            assert word in message, message
        code, report, _ = sweep(capsys, tmp_path, store, "--repair")
        assert code == 0, report
        assert report["repaired"]
        assert report["reused"] + report["computed"] == 6
        if case != "a deleted metric variable":  # only the damaged chunk's points again
            assert report["reused"] >= 4
    assert values(store) == EXPECTED
    code, again, _ = sweep(capsys, tmp_path, store)
    assert code == 0 and (again["reused"], again["computed"]) == (6, 0)


def test_an_emptied_store_zarr_json_is_refused_then_repaired_with_every_point(tmp_path, capsys):
    store = tmp_path / "s.zarr"
    assert sweep(capsys, tmp_path, store)[0] == 0
    (store / "zarr.json").write_text("")
    code, report, _ = sweep(capsys, tmp_path, store)
    assert code == 1 and "its zarr.json is damaged" in report["message"]
    assert "--repair" in report["message"]
    code, report, _ = sweep(capsys, tmp_path, store, "--repair")
    assert code == 0 and (report["reused"], report["computed"]) == (6, 0)
    assert values(store) == EXPECTED


def test_a_store_of_the_development_format_1_is_refused_naming_it(tmp_path, capsys):
    """Format 1 (one point per chunk) was never released: no reader is kept for it."""
    store = tmp_path / "s.zarr"
    assert sweep(capsys, tmp_path, store)[0] == 0
    meta = json.loads((store / "zarr.json").read_text())
    assert meta["attributes"]["fabricflow_sweep"] == store_layout.FORMAT == 2
    meta["attributes"]["fabricflow_sweep"] = 1
    (store / "zarr.json").write_text(json.dumps(meta))
    code, report, _ = sweep(capsys, tmp_path, store)
    assert code == 1 and report["error"] == "OutputError"
    assert "has format 1" in report["message"] and "reads format 2" in report["message"]
    assert "--overwrite" in report["message"]
    code, report, _ = sweep(capsys, tmp_path, store, "--overwrite")
    assert code == 0 and report["computed"] == 6
    assert values(store) == EXPECTED


def test_a_write_left_half_done_by_kill_9_is_ignored(tmp_path, capsys, small_chunks):
    store = tmp_path / "s.zarr"
    assert sweep(capsys, tmp_path, store)[0] == 0
    (store / "value" / "c" / "0.1f2e3d.partial").write_bytes(b"half a chunk")  # zarr's temp
    code, report, _ = sweep(capsys, tmp_path, store)
    assert code == 0 and report["reused"] == 6, report


def remount(path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(path)], check=True)


def test_a_grid_whose_store_cannot_fit_is_refused_up_front(tmpfs, capsys, tmp_path):
    disk = tmpfs("size=64k")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"task": "sweep_tasks:quad", "grid": {"x": list(range(40000))}}))
    code, report, _ = run_main(capsys, ["sweep", str(spec), "--out", str(disk / "s.zarr")])
    assert code == 1 and report["error"] == "OutputError"
    assert "a grid of 40,000 points with 2 metrics needs up to 703.1 KiB" in report["message"]
    assert not (disk / "s.zarr").exists()


def test_a_full_disk_stops_cleanly_with_the_points_stored_so_far(tmpfs, capsys, tmp_path):
    from fabricflow.sweeps import make_spec
    from fabricflow.sweeps.store import SweepStore

    disk = tmpfs("size=4m")
    grid = {"x": list(range(40000))}
    store = disk / "s.zarr"
    SweepStore.open(
        store, make_spec("sweep_tasks:quad", grid, fixed={"scale": 0.7}), ("value", "total")
    ).close()
    info = os.statvfs(disk)
    (disk / "filler").write_bytes(b"\0" * (info.f_bavail * info.f_frsize - 100 * 2**10))
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"task": "sweep_tasks:quad", "grid": grid, "fixed": {"scale": 0.7}}))
    argv = ["sweep", str(spec), "--out", str(store), "--workers", "0"]
    code, report, _ = run_main(capsys, argv)
    assert code == 1 and report["error"] == "OutputError"
    message = report["message"]
    assert "the disk is full" in message and "the run stopped" in message
    stored = report["done"]
    assert f"{stored:,} of 40,000 points are stored" in message
    assert report["points"] == 40000 and report["pending"] == 40000 - stored
    (disk / "filler").unlink()  # free space: the rerun keeps every stored point
    code, report, _ = run_main(capsys, argv)
    assert code == 0 and report["reused"] == stored
    import xarray as xr

    with xr.open_zarr(store) as ds:
        np.testing.assert_allclose(ds.value.values, 0.7 * np.arange(40000.0) ** 2)


def test_a_read_only_store_is_refused_before_any_point_runs(tmpfs, capsys, tmp_path):
    disk = tmpfs("size=4m")
    store = disk / "s.zarr"
    assert sweep(capsys, tmp_path, store)[0] == 0
    (store / "value" / "c" / "0").unlink()  # a point to compute again
    remount(disk, "ro")
    code, report, _ = sweep(capsys, tmp_path, store)
    assert code == 1 and report["error"] == "OutputError"
    assert "the file system is read-only" in report["message"]
    assert "computed" not in report
    remount(disk, "rw")
    assert sweep(capsys, tmp_path, store)[0] == 0
    remount(disk, "ro")  # a store with every point done reads on a read-only disk
    code, report, _ = sweep(capsys, tmp_path, store)
    assert code == 0 and report["reused"] == 6, report
