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

Every variable is chunked 1 along every dimension, so each point is its own chunk file in
every variable: writers of different points never touch the same file, and zarr's local
store writes each chunk to a temporary file and renames it into place, so a killed writer
leaves either the old chunk or the new one. Creating the store, checking its SPEC and
replacing it (``overwrite``) hold an exclusive ``flock`` on the store folder. A point's
metrics and error are written before its status: ``status == 1`` means its metrics are
there.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import shutil
import warnings
from pathlib import Path

import numpy as np

from ...errors import OutputError, SpecError
from .spec import SweepSpec, spec_differences

FORMAT = 1
CREATING = ".fabricflow-creating"  # present while a store is being created
PENDING, DONE, FAILED = 0, 1, 2


@contextlib.contextmanager
def locked(path: Path):
    """Exclusive fcntl (``flock``) lock on the store folder ``path`` (created), released
    on exit. The folder itself is locked, not a file in it: the store stays a plain zarr
    hierarchy that xarray and zarr list without warnings about unknown entries."""
    path.mkdir(parents=True, exist_ok=True)
    handle = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # closing releases the lock


def coordinate(values: tuple) -> np.ndarray:
    """The coordinate array of one grid dimension (numbers stay numbers)."""
    if all(isinstance(v, bool) for v in values):
        return np.asarray(values, dtype=bool)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return np.asarray(values, dtype=np.int64)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return np.asarray(values, dtype=np.float64)
    labels = [v if isinstance(v, str) else json.dumps(v, sort_keys=True) for v in values]
    return np.asarray(labels, dtype=object)


class SweepStore:
    """An open sweep store (see the module docstring); create or open it with :meth:`open`."""

    def __init__(self, path: Path, spec: SweepSpec, metrics: tuple[str, ...]):
        self.path = path
        self.spec = spec
        self.metrics = metrics
        self._arrays: dict = {}

    @classmethod
    def open(
        cls, path, spec: SweepSpec, metrics: tuple[str, ...], *, overwrite: bool = False
    ) -> SweepStore:
        """Create the store at ``path``, or open the one there written by the same SPEC.

        Raises:
            SpecError: (field ``store``) the store holds another SPEC (what differs is
                listed) and ``overwrite`` is false.
            OutputError: ``path`` is a file, or a folder that is not a sweep store (never
                deleted, even with ``overwrite``), or cannot be written.
        """
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise OutputError(f"store {str(path)!r} exists and is not a folder")
        try:
            with locked(path):
                existing = _read_attrs(path)
                entries = os.listdir(path)
                if existing == {} or (existing is None and (path / CREATING).exists()):
                    # our creation of this store was interrupted: start it again
                    _clear(path)
                    existing, entries = None, []
                if existing is None and entries:
                    raise OutputError(
                        f"store {str(path)!r} is a folder that is not a fabricflow sweep store "
                        f"(it holds {sorted(entries)[:5]}); give a new or empty folder"
                    )
                if existing is not None:
                    old = json.loads(existing["spec"])
                    if old != spec.canonical():
                        if not overwrite:
                            lines = spec_differences(old, spec.canonical())
                            raise SpecError(
                                "store",
                                f"{str(path)!r} holds a sweep of another SPEC ("
                                + "; ".join(lines or ["different content"])
                                + "); pass --overwrite (overwrite=True) to replace it, or "
                                "write to another store",
                            )
                        _clear(path)
                        existing = None
                    elif overwrite:
                        _clear(path)
                        existing = None
                if existing is None:
                    _create(path, spec, metrics)
                else:
                    version = existing.get("fabricflow_version")
                    if version != _version():
                        warnings.warn(
                            f"store {str(path)!r} was started by fabricflow {version}; this is "
                            f"{_version()}: its points mix both versions",
                            stacklevel=3,
                        )
        except OutputError:  # an OSError too: already says which store, don't wrap it again
            raise
        except OSError as error:
            from ...atomic import describe_os_error

            raise OutputError(f"store {str(path)!r}: {describe_os_error(error)}") from None
        return cls(path, spec, metrics)

    def _array(self, name: str):
        if name not in self._arrays:
            import zarr

            try:
                self._arrays[name] = zarr.open_array(self.path / name, mode="r+")
            except (OSError, ValueError, KeyError) as error:  # deleted or edited by hand
                raise self._damaged(f"variable {name!r}", error) from None
        return self._arrays[name]

    def _damaged(self, what: str, error: Exception) -> OutputError:
        return OutputError(
            f"store {str(self.path)!r} is damaged ({what}: {type(error).__name__}: {error}); "
            "pass --overwrite (overwrite=True) to start it again, or write to another store"
        )

    def status(self) -> np.ndarray:
        """int8 array of the grid's shape: 0 pending, 1 done, 2 failed (read now)."""
        array = self._array("status")
        try:
            return np.asarray(array[...], dtype=np.int8)
        except (OSError, ValueError, RuntimeError) as error:  # a chunk the codec can't read
            raise self._damaged("variable 'status'", error) from None

    def write(self, index: tuple[int, ...], metrics: dict[str, float] | None, error: str | None):
        """Record one point: its metrics (or NaN and the error), then its status."""
        for name in self.metrics:
            value = np.nan if metrics is None else metrics[name]
            self._array(name)[index] = value
        self._array("error")[index] = "" if error is None else error
        self._array("status")[index] = DONE if error is None else FAILED

    def load(self):
        """The store as an in-memory :class:`xarray.Dataset` (text variables as ``str``)."""
        import xarray as xr

        with _quiet():
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


@contextlib.contextmanager
def _quiet():
    """The creation marker inside the store is no zarr node; zarr says so when it lists
    the group during creation, harmlessly."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not recognized as a component")
        # zarr 3 notes that consolidated metadata is not in the v3 spec yet; xarray reads it
        warnings.filterwarnings("ignore", message=".*Consolidated metadata is currently not")
        yield


def _version() -> str:
    """fabricflow's version: the package is loaded whenever this module is (no import of
    the top-level package from inside it)."""
    import sys

    return str(sys.modules[__name__.split(".")[0]].__version__)


def _read_attrs(path: Path) -> dict | None:
    """The group attributes of a sweep store at ``path``; None when there is no zarr group;
    ``{}`` for a store whose creation was interrupted (our marker file is still there)."""
    meta = path / "zarr.json"
    if not meta.exists():
        return None
    try:
        attrs = json.loads(meta.read_text()).get("attributes", {})
    except (ValueError, AttributeError) as error:  # not JSON, or not a JSON object
        raise OutputError(
            f"store {str(path)!r}: its zarr.json is damaged ({type(error).__name__}: {error}); "
            "it is neither opened nor deleted: remove the folder or give another one"
        ) from None
    if "fabricflow_sweep" not in attrs and (path / CREATING).exists():
        return {}
    if "fabricflow_sweep" not in attrs or "spec" not in attrs:
        raise OutputError(
            f"store {str(path)!r} is a zarr store but not a fabricflow sweep store; "
            "give a new or empty folder"
        )
    return attrs


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
        _create_arrays(path, spec, metrics)
        # Array metadata never changes after creation (points only write chunks), so the
        # consolidated copy stays true and xarray.open_zarr(STORE) opens without a warning.
        zarr.consolidate_metadata(str(path), zarr_format=3)
    (path / CREATING).unlink()


def _create_arrays(path: Path, spec: SweepSpec, metrics: tuple[str, ...]) -> None:
    import zarr

    dims = list(spec.dims)
    shape = spec.shape
    chunks = (1,) * len(shape)
    staging = zarr.open_group(path, mode="a", zarr_format=3)
    for key, values in spec.grid:
        coords = coordinate(values)
        dtype = str if coords.dtype == object else coords.dtype
        array = staging.create_array(
            key, shape=(len(values),), dtype=dtype, dimension_names=[key], overwrite=True
        )
        array[:] = coords
    for name in metrics:
        staging.create_array(
            name,
            shape=shape,
            chunks=chunks,
            dtype="float64",
            fill_value=np.nan,
            dimension_names=dims,
            overwrite=True,
        )
    staging.create_array(
        "status",
        shape=shape,
        chunks=chunks,
        dtype="int8",
        fill_value=PENDING,
        dimension_names=dims,
        attributes={"flag_values": [0, 1, 2], "flag_meanings": "pending done failed"},
        overwrite=True,
    )
    staging.create_array(
        "error",
        shape=shape,
        chunks=chunks,
        dtype=str,
        fill_value="",
        dimension_names=dims,
        overwrite=True,
    )
    staging.attrs.update(
        {
            "fabricflow_sweep": FORMAT,
            "spec": spec.canonical_json(),
            "spec_sha256": spec.digest(),
            "description": spec.description,
            "fabricflow_version": _version(),
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        }
    )
