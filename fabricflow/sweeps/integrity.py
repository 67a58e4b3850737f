"""The check a sweep store passes before a run reuses its points, and its repair.

:func:`inspect_store` reads every variable of an existing store once, chunk by chunk
only where a chunk cannot be decoded, and finds

* **damage**: a variable whose ``zarr.json`` is missing, unreadable or does not match the
  SPEC, a chunk the codec cannot decode, a coordinate that holds other values. A run refuses
  such a store with an error that names the store, each damaged part and the remedies;
  :func:`repair_store` rebuilds the damaged parts (metadata from the SPEC, undecodable
  chunks removed) and keeps everything that is intact;
* **missing metrics**: points marked done whose metric chunk is gone (a deleted file).
  Their values are lost, so they are computed again: a done point is never reused without
  all its metrics.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fabricflow.atomic import write_text
from fabricflow.errors import OutputError
from fabricflow.sweeps.grid_spec import SweepSpec
from fabricflow.sweeps.store_layout import (
    DONE,
    FAILED,
    chunk_shape,
    coordinate,
    create_coordinate,
    expected_metadata,
)

# zarr.json keys that must match the SPEC (the rest, codecs' defaults, may vary by version)
_CHECKED_KEYS = ("shape", "data_type", "chunk_grid", "dimension_names", "node_type")


@dataclass
class Damage:
    """One damaged part of a store.

    Attributes:
        variable: the variable (a metric, ``status``, ``error`` or a coordinate).
        kind: ``"metadata"`` (its ``zarr.json`` missing, unreadable or not this SPEC's),
            ``"chunks"`` (chunks that cannot be decoded) or ``"coordinate"`` (other values).
        detail: what is wrong, for the message.
        chunks: the undecodable chunks' grid positions (kind ``"chunks"``).
        points: done points that lose data through it.
    """

    variable: str
    kind: str
    detail: str
    chunks: list = field(default_factory=list)
    points: int = 0

    def describe(self) -> str:
        return f"variable {self.variable!r}: {self.detail}"


@dataclass
class Inspection:
    """What :func:`inspect_store` found (``status`` is None when it is unreadable)."""

    status: np.ndarray | None
    missing: np.ndarray  # bool, grid shape: done points without all their metrics
    missing_parts: list[str]  # "'value' chunk c/0/1", for the run's report
    damage: list[Damage]


def _chunk_key(block: tuple[int, ...]) -> str:
    return "c/" + "/".join(str(i) for i in block)


def _present_chunks(folder: Path) -> set[tuple[int, ...]]:
    """Grid positions of the chunk files of the array in ``folder`` (zarr's ``c/i/j``)."""
    base = folder / "c"
    found = set()
    for root, _dirs, files in os.walk(base):
        parts = Path(root).relative_to(base).parts
        for name in files:
            if name.isdigit() and all(p.isdigit() for p in parts):
                found.add((*map(int, parts), int(name)))
    return found


def _points_of_blocks(mask: np.ndarray, chunks: tuple[int, ...], shape) -> np.ndarray:
    """A chunk-grid boolean ``mask`` spread over the points (grid shape)."""
    return mask[np.ix_(*(np.arange(n) // c for n, c in zip(shape, chunks)))]


def _region(block, array) -> tuple[slice, ...]:
    return tuple(
        slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(block, array.chunks, array.shape)
    )


def read_array(array, folder: Path) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """All values of the zarr ``array`` stored in ``folder`` and the chunks that cannot be
    decoded (their values: the fill value).

    Chunks that were never written are the fill value without a read: a store of 10^7
    points of which a few thousand are done reads those few chunks, not 2,442 per variable.
    """
    present = _present_chunks(folder)
    total = int(np.prod(array.cdata_shape))
    if len(present) * 4 >= total:
        try:
            return np.asarray(array[...]), []
        except Exception:  # noqa: BLE001  (zarr's codecs raise many types: find the chunk)
            pass
    values = np.full(array.shape, array.fill_value, dtype=array.dtype)
    bad = []
    for block in sorted(present):
        if len(block) != len(array.cdata_shape) or any(
            b >= n for b, n in zip(block, array.cdata_shape)
        ):
            continue  # not a chunk of this shape: ignored, as zarr ignores it
        try:
            values[_region(block, array)] = array.get_block_selection(block)
        except Exception:  # noqa: BLE001
            bad.append(block)
    return values, bad


def _open(path: Path, name: str, expected: str):
    """The array ``name`` opened read-only, or a :class:`Damage` saying why not."""
    import zarr

    folder = path / name
    if not folder.is_dir():
        return Damage(name, "metadata", "missing (its folder was deleted)")
    try:
        text = (folder / "zarr.json").read_text()
        document = json.loads(text)
        if not isinstance(document, dict):
            raise ValueError(f"a {type(document).__name__}, not a JSON object")
    except (OSError, ValueError) as error:
        return Damage(name, "metadata", f"its zarr.json cannot be read ({_reason(error)})")
    want = json.loads(expected)
    differs = [key for key in _CHECKED_KEYS if document.get(key) != want.get(key)]
    if differs:
        return Damage(name, "metadata", f"its zarr.json does not match the SPEC ({differs[0]})")
    try:
        return zarr.open_array(folder, mode="r")
    except Exception as error:  # noqa: BLE001  (zarr's metadata parser raises many types)
        return Damage(name, "metadata", f"its zarr.json cannot be read ({_reason(error)})")


def _reason(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text}"[:200]


def inspect_store(path: Path, spec: SweepSpec, metrics: tuple[str, ...]) -> Inspection:
    """Check every variable of the store at ``path`` against ``spec`` (see the module
    docstring). Reads each variable once: a few chunk files per 4,096 points."""
    expected = expected_metadata(spec, metrics)
    shape = spec.shape
    chunks = chunk_shape(shape)
    damage: list[Damage] = []
    for key, values in spec.grid:
        array = _open(path, key, expected[key])
        if isinstance(array, Damage):
            damage.append(Damage(key, "coordinate", array.detail))
            continue
        stored, bad = read_array(array, path / key)
        want = coordinate(values)
        if bad:
            damage.append(Damage(key, "coordinate", _chunks_detail(bad)))
        elif stored.shape != want.shape or stored.tolist() != want.tolist():
            damage.append(Damage(key, "coordinate", "holds other values than the SPEC's grid"))
    status = None
    array = _open(path, "status", expected["status"])
    if isinstance(array, Damage):
        damage.append(array)
    else:
        status, bad = read_array(array, path / "status")
        status = status.astype(np.int8)
        if bad:
            unknown = _points_of_blocks(_mask(bad, array.cdata_shape), chunks, shape)
            damage.append(Damage("status", "chunks", _chunks_detail(bad), bad, int(unknown.sum())))
    done = np.zeros(shape, bool) if status is None else status == DONE
    failed = np.zeros(shape, bool) if status is None else status == FAILED
    missing = np.zeros(shape, bool)
    missing_parts: list[str] = []
    for name in (*metrics, "error"):
        array = _open(path, name, expected[name])
        if isinstance(array, Damage):
            array.points = int((done if name != "error" else failed).sum())
            damage.append(array)
            continue
        _values, bad = read_array(array, path / name)
        if bad:
            lost = _points_of_blocks(_mask(bad, array.cdata_shape), chunks, shape)
            kept = done if name != "error" else failed
            damage.append(
                Damage(name, "chunks", _chunks_detail(bad), bad, int((lost & kept).sum()))
            )
        if name == "error" or status is None:
            continue
        present = _mask(_present_chunks(path / name), array.cdata_shape)
        gone = ~_points_of_blocks(present, chunks, shape) & done
        if gone.any():
            missing |= gone
            blocks = sorted(
                set(zip(*(np.nonzero(gone)[d] // chunks[d] for d in range(len(shape)))))
            )
            missing_parts += [f"{name!r} {_chunk_key(tuple(map(int, b)))}" for b in blocks[:5]]
    return Inspection(status, missing, missing_parts, damage)


def _mask(blocks, cdata_shape) -> np.ndarray:
    mask = np.zeros(cdata_shape, bool)
    for block in blocks:
        if len(block) == len(cdata_shape) and all(0 <= b < n for b, n in zip(block, cdata_shape)):
            mask[block] = True
    return mask


def _chunks_detail(bad: list) -> str:
    shown = ", ".join(_chunk_key(b) for b in bad[:3]) + (
        f" and {len(bad) - 3} more" if len(bad) > 3 else ""
    )
    return f"chunk{'s' if len(bad) > 1 else ''} {shown} cannot be decoded"


def damage_error(path: Path, inspection: Inspection) -> OutputError:
    """The error a run raises for a damaged store: the store, each part, the remedies."""
    parts = "; ".join(part.describe() for part in inspection.damage)
    points = sum(part.points for part in inspection.damage)
    lost = f" {points:,} point{'s' if points != 1 else ''} lost data." if points else ""
    return OutputError(
        f"store {str(path)!r} is damaged: {parts}.{lost} Rerun with --repair (repair=True) "
        "to rebuild the damaged parts and compute those points again, keeping every intact "
        "point, or with --overwrite (overwrite=True) to start the store again"
    )


def repair_store(
    path: Path, spec: SweepSpec, metrics: tuple[str, ...], found: Inspection
) -> list[str]:
    """Rebuild the damaged parts of ``found`` in place; return what was done, one line each.

    A variable's metadata is written again from the SPEC (its chunks are kept and read
    again), an undecodable chunk is removed (its points are computed again), a coordinate
    is written again with the SPEC's values. Nothing else is touched.
    """
    import zarr

    expected = expected_metadata(spec, metrics)
    done: list[str] = []
    for part in found.damage:
        folder = path / part.variable
        if part.kind == "coordinate":
            group = zarr.open_group(path, mode="r+", zarr_format=3)
            create_coordinate(group, part.variable, dict(spec.grid)[part.variable])
            done.append(f"coordinate {part.variable!r} written again from the SPEC")
        elif part.kind == "metadata":
            folder.mkdir(exist_ok=True)
            write_text(folder / "zarr.json", expected[part.variable])
            done.append(f"{part.variable!r} metadata written again from the SPEC")
        else:
            for block in part.chunks:
                (folder / _chunk_key(block)).unlink(missing_ok=True)
            done.append(f"{part.variable!r}: {len(part.chunks)} undecodable chunk(s) removed")
    return done
