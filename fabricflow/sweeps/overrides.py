"""Dotted overrides of a fabric spec (``fabric.topology.tiers.1.oversubscription``) and a
per-process cache of the fabrics they build.

A key ``fabric.<a>.<b>...`` walks the spec mapping of the ``fabric`` argument (a preset
name, a YAML path or an imported ``slurm:PATH`` / ``netlist:PATH`` file, read by
:func:`fabricflow.fabric.spec.fabric_spec`; an import's options are ``fabric.<option>``
keys, ``fabric.gpus_per_node``, ``fabric.companion``, ...): mapping keys by
name, list items by number (from 0). The last part may name a key the spec leaves out
(``planes`` of a preset that takes the default): :func:`build_fabric` refuses names it does
not know, so a typo still fails, with the allowed keys.
"""

from __future__ import annotations

import copy
import functools
import json

from fabricflow.errors import SpecError
from fabricflow.fabric.spec import IMPORT_OPTIONS, build_fabric, fabric_spec, is_import
from fabricflow.sweeps.grid_spec import FABRIC_PREFIX

# Fabrics built in this process (the cache's misses): the bench reports it.
BUILDS = {"count": 0}
CACHE_SIZE = 8  # a 100k-GPU fabric takes ~100 MB; points are ordered by fabric anyway


def split_path(key: str) -> list[str | int]:
    """``"fabric.topology.tiers.1.x"`` -> ``["topology", "tiers", 1, "x"]``."""
    parts: list[str | int] = []
    for part in key[len(FABRIC_PREFIX) :].split("."):
        parts.append(int(part) if part.isdigit() else part)
    return parts


def apply_override(spec: dict, key: str, value) -> None:
    """Set the dotted ``key`` (``fabric.`` prefix included) to ``value`` in ``spec``, in place.

    Raises:
        SpecError: (field = ``key``) a part that does not resolve, naming the path walked
            so far and the keys or indices available there.
    """
    path = split_path(key)
    node = spec
    walked = "fabric"
    for depth, part in enumerate(path):
        last = depth == len(path) - 1
        if isinstance(node, dict):
            if isinstance(part, int):
                raise SpecError(key, f"{walked} is a mapping, not a list; its keys: {sorted(node)}")
            if last:
                node[part] = copy.deepcopy(value)
                return
            if part not in node:
                raise SpecError(key, f"{walked} has no key {part!r}; its keys: {sorted(node)}")
            node = node[part]
        elif isinstance(node, list):
            if not isinstance(part, int) or not 0 <= part < len(node):
                raise SpecError(
                    key,
                    f"{walked} is a list of {len(node)}; use an index 0..{len(node) - 1}, got {part!r}",
                )
            if last:
                node[part] = copy.deepcopy(value)
                return
            node = node[part]
        else:
            raise SpecError(key, f"{walked} is the value {node!r}, which has no part {part!r}")
        walked = f"{walked}.{part}"


def resolved_spec(fabric, overrides: dict) -> dict:
    """The fabric spec mapping of ``fabric`` (a preset, a YAML path, or an imported file
    ``slurm:PATH`` / ``netlist:PATH``) with dotted ``overrides`` set (in key order, so that
    a whole sub-mapping set first can be refined by a deeper key). For an imported file,
    ``fabric.<option>`` keys naming one of its import options (``fabric.gpus_per_node``,
    ``fabric.companion``, ...: :data:`fabricflow.fabric.spec.IMPORT_OPTIONS`) are passed to
    the import; the others apply to the spec it gives."""
    if not isinstance(fabric, str):
        raise SpecError(
            "fabric",
            f"expected a preset name, a YAML path, slurm:PATH or netlist:PATH to apply "
            f"fabric.* keys to, got {fabric!r}",
        )
    options = {}
    if is_import(fabric):
        names = {FABRIC_PREFIX + key: key for key in IMPORT_OPTIONS}
        options = {names[key]: value for key, value in overrides.items() if key in names}
        overrides = {key: value for key, value in overrides.items() if key not in names}
    spec = copy.deepcopy(fabric_spec(fabric, **options))
    for key in sorted(overrides, key=lambda k: (k.count("."), k)):
        apply_override(spec, key, overrides[key])
    return spec


def fabric_for(fabric, overrides: dict):
    """The :class:`~fabricflow.fabric.fabric.Fabric` of preset/path ``fabric`` with dotted
    ``overrides``; cached per process, keyed by the resolved spec (two spellings of the
    same spec share an entry)."""
    if not overrides and not isinstance(fabric, str):
        return fabric  # a Fabric object given to an in-process sweep
    return _build(json.dumps(resolved_spec(fabric, overrides), sort_keys=True))


@functools.lru_cache(maxsize=CACHE_SIZE)
def _build(spec_json: str):
    BUILDS["count"] += 1
    return build_fabric(json.loads(spec_json))


def check_paths(fabrics: list, keys_values: dict[str, list]) -> None:
    """Resolve every ``fabric.*`` key against every base fabric before any point runs, so
    that a path that does not resolve is bad input (exit 2), not a failure of every point."""
    options = {FABRIC_PREFIX + key for key in IMPORT_OPTIONS}
    for fabric in fabrics:
        # an import reads its options together (a companion gives what a flag leaves
        # out): each value is checked beside the first value of the other options
        base = {
            key: values[0]
            for key, values in keys_values.items()
            if is_import(fabric) and key in options and values
        }
        for key, values in keys_values.items():
            for value in values:
                resolved_spec(fabric, {**base, key: value})
