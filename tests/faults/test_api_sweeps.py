"""Bad inputs to the sweep engine (``sweep``, ``make_spec``): refused before a point runs."""

from __future__ import annotations

import pytest

import fabricflow as ff
from fabricflow.errors import SpecError

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


@pytest.mark.parametrize("task", ["maxmin", "cc"])
def test_sweep_unknown_argument_of_maxmin_and_cc_is_refused_before_running(task, tmp_path):
    # Other tasks refused a typo up front (exit 2); maxmin and cc ran every point and
    # failed each one (exit 1) with the same message.
    with pytest.raises(SpecError, match=f"task '{task}' takes no argument"):
        ff.sweep(task, {"x": [1]}, store=tmp_path / "s", workers=0)
    assert not (tmp_path / "s").exists()


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
