"""The zarr store of a sweep: one dimension per grid key, one variable per metric.

Layout (zarr format 3, readable by ``xarray.open_zarr``)::

    STORE/zarr.json            group attributes: fabricflow_sweep (format), spec (canonical
                               JSON), spec_sha256, fabricflow_version, created (UTC ISO)
    STORE/<grid key>/          coordinate: the grid values (numbers, bools or text; other
                               values as their JSON text)
    STORE/<metric>/            float64, NaN until the point is done (or when it failed)
    STORE/status/              int8: 0 pending, 1 done, 2 failed
    STORE/error/               text: the failed point's error, "" otherwise
    STORE/.fabricflow-creating there only while the store is being created

Grid variables are chunked in blocks of up to 4,096 points (:mod:`.store_layout`). One run
writes a store at a time: it holds an exclusive ``flock`` on the store folder from
:meth:`SweepStore.open` to :meth:`SweepStore.close`, and a second run is refused at once.
Results are buffered and written in batches (:meth:`SweepStore.flush`): each chunk is
written to a temporary file and renamed into place by zarr, so a killed writer leaves the
old chunk or the new one, and a batch writes every metric and the error before the status,
so ``status == 1`` means the point's metrics are there. Opening an existing store checks
it first (:mod:`.integrity`).
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from fabricflow.atomic import describe_os_error, unwritable_reason
from fabricflow.errors import OutputError, SpecError
from fabricflow.sweeps.grid_spec import SweepSpec, spec_differences
from fabricflow.sweeps.integrity import damage_error, inspect_store, read_array, repair_store
from fabricflow.sweeps.store_layout import DONE, FAILED, FORMAT, PENDING, coordinate, create_arrays

CREATING = ".fabricflow-creating"  # present while a store is being created
MAX_FLUSH_S = 2.0  # results wait at most this long in memory (lost to a kill -9)
FLUSH_OVERHEAD = 10  # wait at least this many times the last write's duration
MAX_BUFFER = 65536  # points held in memory before a write
__all__ = ["DONE", "FAILED", "PENDING", "ZARR_NOTICES", "SweepStore", "ignore_zarr_notices"]


def _lock(path: Path) -> int:
    """An exclusive ``flock`` on the store folder ``path`` (created); the descriptor, which
    releases it when closed (or when the process ends, however it ends).

    Raises:
        SpecError: (``store``) another process holds it: a run is writing the store.
    """
    path.mkdir(parents=True, exist_ok=True)
    handle = os.open(path, os.O_RDONLY)  # not inherited by worker processes
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(handle)
        raise SpecError(
            "store",
            f"{str(path)!r} is being written by another sweep run; wait for it to finish "
            "(or stop it), or write to another store",
        ) from None
    except BaseException:
        os.close(handle)
        raise
    return handle


class SweepStore:
    """An open sweep store, locked for this run; create or open it with :meth:`open`.

    Attributes:
        path: the store folder.
        missing: done points found without all their metrics when opened; they are
            pending again (computed again by this run).
        missing_parts: which chunks were gone (first few), for the report.
        repaired: what :meth:`open` repaired (``repair=True``), one line each.
    """

    def __init__(self, path: Path, spec: SweepSpec, metrics: tuple[str, ...], lock: int):
        self.path = path
        self.spec = spec
        self.metrics = metrics
        self.missing = 0
        self.missing_parts: list[str] = []
        self.repaired: list[str] = []
        self._lock = lock
        self._arrays: dict = {}
        self._status = np.zeros(spec.shape, np.int8)
        self._buffer: dict[tuple[int, ...], tuple[dict | None, str | None]] = {}
        self._last_flush = time.monotonic()
        self._flush_seconds = 0.0

    # ------------------------------------------------------------------------- opening

    @classmethod
    def open(
        cls,
        path,
        spec: SweepSpec,
        metrics: tuple[str, ...],
        *,
        overwrite: bool = False,
        repair: bool = False,
    ) -> SweepStore:
        """Create the store at ``path``, or open and check the one there of the same SPEC.

        The store stays locked until :meth:`close`. An existing store is checked before
        any point is reused (:func:`.integrity.inspect_store`): done points without all
        their metrics become pending; damage is refused unless ``repair``.

        Raises:
            SpecError: (field ``store``) the store holds another SPEC (what differs is
                listed) and ``overwrite`` is false, or another run is writing it.
            OutputError: ``path`` is a file, or a folder that is not a sweep store (never
                deleted, even with ``overwrite``), is damaged (the parts and the remedies
                are named), or cannot be written (a read-only disk).
        """
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise OutputError(f"store {str(path)!r} exists and is not a folder")
        try:
            lock = _lock(path)
        except OSError as error:
            raise _os_error(path, error) from None
        store = cls(path, spec, metrics, lock)
        try:
            store._prepare(overwrite, repair)
        except OSError as error:
            store.close()
            if isinstance(error, OutputError):
                raise
            raise _os_error(path, error) from None
        except BaseException:
            store.close()
            raise
        return store

    def _prepare(self, overwrite: bool, repair: bool) -> None:
        path, spec = self.path, self.spec
        existing = _read_attrs(path, spec, self.metrics, repair)
        entries = os.listdir(path)
        if existing == {} or (existing is None and (path / CREATING).exists()):
            _clear(path)  # our creation of this store was interrupted: start it again
            existing, entries = None, []
        if existing is None and entries:
            raise OutputError(
                f"store {str(path)!r} is a folder that is not a fabricflow sweep store "
                f"(it holds {sorted(entries)[:5]}); give a new or empty folder"
            )
        if existing is not None:
            old = json.loads(existing["spec"])
            if old != spec.canonical() and not overwrite:
                lines = spec_differences(old, spec.canonical())
                raise SpecError(
                    "store",
                    f"{str(path)!r} holds a sweep of another SPEC ("
                    + "; ".join(lines or ["different content"])
                    + "); pass --overwrite (overwrite=True) to replace it, or write to "
                    "another store",
                )
            if overwrite:
                _clear(path)
                existing = None
        if existing is None:
            _check_writable(path)
            _create(path, spec, self.metrics)
            return
        store_format = existing.get("fabricflow_sweep")
        if store_format != FORMAT:
            raise OutputError(
                f"store {str(path)!r} has format {store_format!r}, which this fabricflow "
                f"({_version()}) does not read (it reads format {FORMAT}); use the version "
                f"that wrote it ({existing.get('fabricflow_version')}), or --overwrite"
            )
        self._check(repair)
        version = existing.get("fabricflow_version")
        if version != _version():
            warnings.warn(
                f"store {str(path)!r} was started by fabricflow {version}; this is "
                f"{_version()}: its points mix both versions",
                stacklevel=4,
            )

    def _check(self, repair: bool) -> None:
        """Check the store (and repair it when asked); mark missing points pending."""
        import zarr

        found = inspect_store(self.path, self.spec, self.metrics)
        for _ in range(2):  # metadata written again may reveal chunks it cannot decode
            if not found.damage:
                break
            if not repair:
                raise damage_error(self.path, found)
            _check_writable(self.path)
            self.repaired += repair_store(self.path, self.spec, self.metrics, found)
            found = inspect_store(self.path, self.spec, self.metrics)
        if found.damage:
            raise damage_error(self.path, found)
        assert found.status is not None
        self._status = found.status
        self.missing = int(found.missing.sum())
        self.missing_parts = found.missing_parts
        if self.repaired:
            with _quiet():
                zarr.consolidate_metadata(str(self.path), zarr_format=3)
        if (self._status != DONE).any() or self.missing:
            _check_writable(self.path)  # something to write: refuse a read-only store now
        if self.missing:  # their metrics are gone: pending again, in the store too
            index = np.nonzero(found.missing)
            self._array("status").vindex[index] = np.full(index[0].size, PENDING, np.int8)
            self._status[found.missing] = PENDING

    # ------------------------------------------------------------------------- writing

    def _array(self, name: str):
        if name not in self._arrays:
            import zarr

            try:
                array = zarr.open_array(self.path / name, mode="r+")
            except (OSError, ValueError, KeyError) as error:  # deleted during the run
                raise OutputError(
                    f"store {str(self.path)!r}: variable {name!r} cannot be opened "
                    f"({type(error).__name__}: {error}); rerun with --repair"
                ) from None
            # a chunk of NaN metrics is written too: a missing chunk then always means
            # lost data, which the next run's check recomputes
            self._arrays[name] = array.with_config({"write_empty_chunks": name in self.metrics})
        return self._arrays[name]

    def status(self) -> np.ndarray:
        """int8 array of the grid's shape: 0 pending, 1 done, 2 failed (as stored)."""
        return self._status.copy()

    def counts(self) -> dict[str, int]:
        """Points ``done``, ``failed`` and ``pending`` in the store (written results only)."""
        done = int((self._status == DONE).sum())
        failed = int((self._status == FAILED).sum())
        return {"done": done, "failed": failed, "pending": self._status.size - done - failed}

    def record(self, index: tuple[int, ...], metrics: dict | None, error: str | None) -> None:
        """Hold one point's result (its metrics, or its error) for the next :meth:`flush`."""
        self._buffer[tuple(index)] = (metrics, error)

    @property
    def buffered(self) -> int:
        """Points recorded and not written yet."""
        return len(self._buffer)

    def due(self) -> bool:
        """Whether to :meth:`flush` now: results wait at most :data:`MAX_FLUSH_S`, and at
        least :data:`FLUSH_OVERHEAD` times the last write (writing costs at most ~10%)."""
        if not self._buffer:
            return False
        waited = time.monotonic() - self._last_flush
        wait = min(MAX_FLUSH_S, FLUSH_OVERHEAD * self._flush_seconds)
        return waited >= wait or len(self._buffer) >= MAX_BUFFER

    def flush(self) -> int:
        """Write the recorded points: every metric and the error, then the status.

        Returns the number of points written. On failure (a full disk) the points of this
        batch stay pending in the store (their status is written last).

        Raises:
            OutputError: naming the store and the reason (``the disk is full``).
        """
        if not self._buffer:
            return 0
        start = time.monotonic()
        items = list(self._buffer.items())
        index = tuple(np.asarray([point for point, _ in items], np.int64).T)
        status = np.asarray([DONE if error is None else FAILED for _, (_, error) in items], np.int8)
        try:
            for name in self.metrics:
                values = [np.nan if metrics is None else metrics[name] for _, (metrics, _) in items]
                self._array(name).vindex[index] = np.asarray(values, np.float64)
            errors = np.asarray(["" if error is None else error for _, (_, error) in items], object)
            self._array("error").vindex[index] = errors
            self._array("status").vindex[index] = status
        except OutputError:
            raise
        except OSError as error:
            raise _os_error(self.path, error) from None
        self._status[index] = status
        self._buffer.clear()
        self._last_flush = time.monotonic()
        self._flush_seconds = self._last_flush - start
        return len(items)

    def close(self) -> None:
        """Release the store's lock (unwritten results are dropped: :meth:`flush` first)."""
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1

    # ------------------------------------------------------------------------- reading

    def load(self, *, lazy: bool = False):
        """The store as an :class:`xarray.Dataset`: in memory (text variables as ``str``),
        or read on demand with Dask (``lazy``, for stores larger than memory)."""
        import xarray as xr

        with _quiet():
            if lazy:
                ds = xr.open_zarr(self.path, consolidated=False, zarr_format=3)
                return ds[[*self.metrics, "status", "error"]]
            with xr.open_zarr(self.path, consolidated=False, chunks=None, zarr_format=3) as ds:
                ds = ds.load()
        for name in list(ds.variables):
            if ds[name].dtype.kind in ("T", "O"):  # numpy StringDType -> plain str
                text = np.array(ds[name].values.tolist(), dtype=str)
                if name in ds.coords:
                    ds = ds.assign_coords({name: (ds[name].dims, text)})
                else:
                    ds[name] = (ds[name].dims, text, ds[name].attrs)
        return ds[[*self.metrics, "status", "error"]]  # zarr lists arrays in no set order


def stored_counts(path) -> dict[str, int]:
    """``points``, ``done``, ``failed`` and ``pending`` of the store at ``path``, read from
    its status now (no lock: what another run has written so far).

    Raises:
        OutputError: there is no readable status (no store, or a damaged one).
    """
    import zarr

    folder = Path(path) / "status"
    try:
        status, bad = read_array(zarr.open_array(folder, mode="r"), folder)
    except Exception as error:  # noqa: BLE001  (zarr raises many types for a bad array)
        raise OutputError(f"store {str(path)!r}: no readable status ({error})") from None
    if bad:
        raise OutputError(f"store {str(path)!r}: status chunks that cannot be decoded")
    done = int((status == DONE).sum())
    failed = int((status == FAILED).sum())
    return {
        "points": int(status.size),
        "done": done,
        "failed": failed,
        "pending": status.size - done - failed,
    }


def _os_error(path: Path, error: OSError) -> OutputError:
    return OutputError(f"store {str(path)!r}: {describe_os_error(error)}")


def _check_writable(path: Path) -> None:
    """Refuse, before any point runs, a store folder that cannot take files."""
    reason = unwritable_reason(path)
    if reason is None:
        try:
            handle, probe = tempfile.mkstemp(prefix=".fabricflow-probe.", dir=path)
        except OSError as error:
            reason = describe_os_error(error)
        else:
            os.close(handle)
            os.unlink(probe)
    if reason is not None:
        raise OutputError(
            f"store {str(path)!r} cannot be written: {reason}; a sweep writes its store as "
            "it runs: give a writable folder (xarray.open_zarr reads a read-only one)"
        )


ZARR_NOTICES = (
    # the creation marker inside the store is no zarr node; zarr says so when it lists
    # the group during creation, harmlessly
    ".*not recognized as a component",
    # zarr 3 notes that consolidated metadata is not in the v3 spec yet; xarray reads it
    ".*Consolidated metadata is currently not",
)
"""Messages of the warnings zarr gives while a store is created, none of them a problem
(regular expressions for :func:`warnings.filterwarnings`)."""


def ignore_zarr_notices() -> None:
    """Ignore :data:`ZARR_NOTICES` for the rest of the process. A program that can be
    interrupted while a store is created calls this (the CLI does): zarr consolidates on
    its own I/O thread, which can warn after an interrupted creation has left
    :func:`_quiet`'s scope."""
    for message in ZARR_NOTICES:
        warnings.filterwarnings("ignore", message=message)


@contextlib.contextmanager
def _quiet():
    """:data:`ZARR_NOTICES` ignored while zarr lists or consolidates a store."""
    with warnings.catch_warnings():
        ignore_zarr_notices()
        yield


def _version() -> str:
    """fabricflow's version: the package is loaded whenever this module is (no import of
    the top-level package from inside it)."""
    return str(sys.modules[__name__.split(".")[0]].__version__)


def _attributes(spec: SweepSpec) -> dict:
    return {
        "fabricflow_sweep": FORMAT,
        "spec": spec.canonical_json(),
        "spec_sha256": spec.digest(),
        "description": spec.description,
        "fabricflow_version": _version(),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def _read_attrs(path: Path, spec: SweepSpec, metrics, repair: bool) -> dict | None:
    """The group attributes of a sweep store at ``path``; None when there is no zarr group;
    ``{}`` for a store whose creation was interrupted (our marker file is still there).

    A ``zarr.json`` that is not JSON is damage: refused, or with ``repair`` written again
    from ``spec`` when the store's status and coordinates are those of ``spec``.
    """
    meta = path / "zarr.json"
    if not meta.exists():
        return None
    try:
        attrs = json.loads(meta.read_text()).get("attributes", {})
    except (ValueError, AttributeError) as error:  # not JSON, or not a JSON object
        if repair and _looks_like(path, spec):
            _write_group(path, spec)
            return _read_attrs(path, spec, metrics, repair=False)
        raise OutputError(
            f"store {str(path)!r}: its zarr.json is damaged ({type(error).__name__}: {error}); "
            "it is neither opened nor deleted: if the folder holds this SPEC's sweep, rerun "
            "with --repair (repair=True) to write it again; else remove the folder or give "
            "another one"
        ) from None
    if "fabricflow_sweep" not in attrs and (path / CREATING).exists():
        return {}
    if "fabricflow_sweep" not in attrs or "spec" not in attrs:
        raise OutputError(
            f"store {str(path)!r} is a zarr store but not a fabricflow sweep store; "
            "give a new or empty folder"
        )
    return attrs


def _looks_like(path: Path, spec: SweepSpec) -> bool:
    """Whether the folder has the variables of ``spec``'s store with its grid values."""
    import zarr

    try:
        if list(zarr.open_array(path / "status", mode="r").shape) != list(spec.shape):
            return False
        for key, values in spec.grid:
            stored = zarr.open_array(path / key, mode="r")[...]
            if np.asarray(stored).tolist() != coordinate(values).tolist():
                return False
    except Exception:  # noqa: BLE001  (anything unreadable: not recognisably ours)
        return False
    return True


def _write_group(path: Path, spec: SweepSpec) -> None:
    import zarr

    meta = path / "zarr.json"
    meta.unlink(missing_ok=True)
    with _quiet():
        group = zarr.open_group(path, mode="a", zarr_format=3)
        group.attrs.update(_attributes(spec))
        zarr.consolidate_metadata(str(path), zarr_format=3)


def _clear(path: Path) -> None:
    """Remove a sweep store's content (the folder stays: we hold its lock)."""
    for entry in os.listdir(path):
        target = path / entry
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink()


def _create(path: Path, spec: SweepSpec, metrics: tuple[str, ...]) -> None:
    """Write the group, the coordinates and the empty variables (chunks come on write).

    The group's ``zarr.json`` (the mark of a finished store) goes last, so that a store
    whose creation was interrupted has no attributes and is created again, not opened.
    """
    import zarr

    (path / CREATING).touch()
    with _quiet():
        staging = zarr.open_group(path, mode="a", zarr_format=3)
        create_arrays(staging, spec, metrics)
        staging.attrs.update(_attributes(spec))
        # Array metadata never changes after creation (points only write chunks), so the
        # consolidated copy stays true and xarray.open_zarr(STORE) opens without a warning.
        zarr.consolidate_metadata(str(path), zarr_format=3)
    (path / CREATING).unlink()
