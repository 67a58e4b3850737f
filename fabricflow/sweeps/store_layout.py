"""What a sweep store holds, as zarr metadata: the arrays a SPEC needs and their chunks.

Both the creation of a store and its repair build the arrays from here, so that a repaired
variable has exactly the metadata a new store would have. The store format,
:data:`FORMAT` (recorded in the store; a store of another format is refused): chunks of
up to :data:`CHUNK_POINTS` points (the trailing grid dimensions first). One process writes
a store at a time (it holds the store's lock for the whole run), so a chunk is rewritten
whole, never by two writers at once.
"""

from __future__ import annotations

import json

import numpy as np

from fabricflow.sweeps.grid_spec import SweepSpec

FORMAT = 2  # 1 (one point per chunk) was a development format, never released
CHUNK_POINTS = 4096  # points per chunk: few files, a chunk rewrite of ~32 KB per metric
PENDING, DONE, FAILED = 0, 1, 2
VARIABLES = ("status", "error")  # beside the metrics and the coordinates


def chunk_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Chunk shape of the grid variables: trailing dimensions first, up to
    :data:`CHUNK_POINTS` points."""
    chunks = []
    room = CHUNK_POINTS
    for size in reversed(shape):
        take = max(1, min(size, room))
        chunks.append(take)
        room = max(1, room // take)
    return tuple(reversed(chunks))


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


def create_coordinate(group, key: str, values: tuple) -> None:
    """The coordinate array ``key`` of one grid dimension, with its values (replaced)."""
    coords = coordinate(values)
    dtype = str if coords.dtype == object else coords.dtype
    array = group.create_array(
        key, shape=(len(values),), dtype=dtype, dimension_names=[key], overwrite=True
    )
    array[:] = coords


def create_arrays(group, spec: SweepSpec, metrics: tuple[str, ...]) -> None:
    """Create in the zarr ``group`` the coordinates (with their values) and the empty grid
    variables (chunks come on write); an array already there is replaced."""
    for key, values in spec.grid:
        create_coordinate(group, key, values)
    common = {
        "shape": spec.shape,
        "chunks": chunk_shape(spec.shape),
        "dimension_names": list(spec.dims),
        "overwrite": True,
    }
    for name in metrics:
        group.create_array(name, dtype="float64", fill_value=np.nan, **common)
    group.create_array(
        "status",
        dtype="int8",
        fill_value=PENDING,
        attributes={"flag_values": [0, 1, 2], "flag_meanings": "pending done failed"},
        **common,
    )
    group.create_array("error", dtype=str, fill_value="", **common)


def expected_metadata(spec: SweepSpec, metrics: tuple[str, ...]) -> dict:
    """``{variable: the text of its zarr.json}`` of a new store of ``spec`` (built in a
    temporary folder: small, no chunks but the coordinates')."""
    import tempfile
    from pathlib import Path

    import zarr

    with tempfile.TemporaryDirectory(prefix="fabricflow-sweep-layout-") as folder:
        group = zarr.open_group(folder, mode="w", zarr_format=3)
        create_arrays(group, spec, metrics)
        return {path.parent.name: path.read_text() for path in Path(folder).glob("*/zarr.json")}
