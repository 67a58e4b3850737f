"""Fabric specs: YAML files / dicts -> :class:`Fabric`, presets, overrides.

Top-level keys of a spec (``topology.type`` picks the generator; each generator
documents its own ``topology`` keys)::

    name: my-fabric            # required
    description: ...           # one line, shown by `fabricflow presets`
    sources: [...]             # where the numbers come from
    assumptions: [...]         # what we assumed where sources are silent
    gpus: 4096                 # total GPUs (accelerators)
    gpus_per_node: 8           # GPUs per server (default 8)
    scale_up:                  # optional NVLink-style domain (see scale_up.py)
      domain_size: 8
      bandwidth_bidirectional: 900GB/s
      latency: 0.5us
      nvls: true               # in-switch reduction (NVLS/SHARP-style) available
    in_network_reduction: false  # scale-out switches reduce (SHARP); default false
    cost: {...}                # optional price/power overrides (see cost_table.py)
    transport:                 # optional scale-out transport (see transport.py)
      protocol: infiniband     # infiniband | rocev2 | slingshot | ici (default rocev2)
      adaptive_routing: true   # per-packet adaptive routing (default: the protocol's)
    topology:
      type: clos | torus | dragonfly | graph
      ...
"""

from __future__ import annotations

import copy
import os
import warnings
from importlib import resources
from pathlib import Path

from fabricflow import schema as sr
from fabricflow.errors import SpecError, UnitWarning
from fabricflow.fabric.common_spec import CommonSpec
from fabricflow.fabric.fabric import Fabric
from fabricflow.fabric.generators import GENERATORS
from fabricflow.fabric.netlist import netlist_spec_from_file
from fabricflow.fabric.scale_up import SCALE_UP_KEYS, ScaleUpSpec
from fabricflow.fabric.slurm import SLURM_OPTIONS, slurm_spec_from_file
from fabricflow.fabric.transport import parse_transport
from fabricflow.files import is_file, read_structured
from fabricflow.memory_budget import out_of_memory

TOP_KEYS = (
    "name",
    "description",
    "sources",
    "assumptions",
    "gpus",
    "gpus_per_node",
    "scale_up",
    "in_network_reduction",
    "transport",
    "topology",
    "cost",
)


def build_fabric(spec: dict) -> Fabric:
    """Build a fabric from a spec mapping (the parsed YAML).

    Raises:
        SpecError: naming the field.
        MemoryBudgetError: the fabric is too large for this process (estimated before
            allocating; a ``MemoryError`` while building is reported the same way).
    """
    try:
        return _build_fabric(spec)
    except MemoryError as error:
        name = spec.get("name") if isinstance(spec, dict) else None
        raise out_of_memory(error, f"building fabric {name!r}") from error


def _build_fabric(spec: dict) -> Fabric:
    top = sr.Section(spec, "", TOP_KEYS)
    topology_raw = top.raw("topology")
    if not isinstance(topology_raw, dict) or "type" not in topology_raw:
        raise SpecError("topology.type", f"is required; one of {sorted(GENERATORS)}")
    kind = topology_raw["type"]
    if not isinstance(kind, str) or kind not in GENERATORS:
        raise SpecError(
            "topology.type",
            f"unknown type {kind!r}; one of {sorted(GENERATORS)}",
            value=kind,
            allowed=GENERATORS,
        )
    builder, keys = GENERATORS[kind]
    topology = sr.Section(topology_raw, "topology", keys)
    scale_up_section = top.section("scale_up", SCALE_UP_KEYS, None)
    common = CommonSpec(
        name=top.get("name", sr.text),
        num_gpus=top.get("gpus", sr.positive_int),
        gpus_per_node=top.get("gpus_per_node", sr.positive_int, 8),
        scale_up=ScaleUpSpec.parse(scale_up_section) if scale_up_section else None,
        in_network_reduction=top.get("in_network_reduction", sr.boolean, False),
        transport=parse_transport(top.raw("transport", None)),
        meta={
            "description": top.get("description", sr.text, ""),
            "sources": top.get("sources", sr.text_list, []),
            "assumptions": top.get("assumptions", sr.text_list, []),
            "spec": copy.deepcopy(spec),
        },
    )
    if common.num_gpus % common.gpus_per_node:
        raise SpecError(
            "gpus",
            f"{common.num_gpus} GPUs is not a multiple of gpus_per_node ({common.gpus_per_node})",
        )
    return builder(topology, common)


# ---------------------------------------------------------------------------- presets


def _preset_dir():
    return resources.files("fabricflow") / "topologies"


def list_presets() -> list[dict]:
    """Presets shipped with fabricflow: ``[{"name", "description", "gpus"}]``, sorted by name."""
    presets = []
    for entry in sorted(_preset_dir().iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            spec = read_structured(entry, what="fabric")
            presets.append(
                {
                    "name": entry.name[:-5],
                    "description": spec.get("description", ""),
                    "gpus": spec.get("gpus"),
                }
            )
    return presets


def read_spec(name_or_path: str | Path) -> dict:
    """The spec mapping of a preset name or a YAML file path.

    Files are read by :func:`fabricflow.files.read_structured` (size, encoding, nesting,
    alias, duplicate-key and integer-range checks).
    """
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise SpecError(
            "fabric", f"expected a preset name or a path to a YAML spec, got {name_or_path!r}"
        )
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or is_file(path, "fabric") or path.exists():
        if not is_file(path, "fabric"):
            raise SpecError("fabric", f"not a spec file: {path} (file not found or a directory)")
    else:
        path = _preset_dir() / f"{name_or_path}.yaml"
        if not is_file(path, "fabric"):
            names = [p["name"] for p in list_presets()]
            raise SpecError(
                "fabric",
                f"unknown preset {str(name_or_path)!r}; presets: {names} "
                "(or give a path to a .yaml spec)",
                value=name_or_path,
                allowed=names,
            )
    spec = read_structured(path, what="fabric", syntax="yaml")
    if not isinstance(spec, dict):
        raise SpecError("fabric", f"{name_or_path} must hold a mapping at top level")
    return spec


def spec_yaml_text(fabric: Fabric) -> str:
    """A YAML spec of ``fabric`` (a preset, a YAML spec, an imported file, a design): the
    spec it was built from, every override applied, which :func:`load_fabric` reads back
    to an equal fabric (an imported file as its ``graph`` spec, so the YAML stands alone).

    Raises:
        SpecError: ``export``: a fabric not built from a spec, or with failed cables
            (a spec describes the fabric as built).
    """
    spec = fabric.meta.get("spec")
    if not isinstance(spec, dict):
        raise SpecError("export", f"{fabric.name!r} was not built from a spec: no YAML to write")
    if fabric.meta.get("failed_cables") or fabric.meta.get("failed_links"):
        raise SpecError(
            "export", f"{fabric.name!r} has failed cables: a spec describes a fabric as built"
        )
    return spec_text(
        spec, f"fabric spec of {fabric.name} (written by fabricflow fabric --export yaml)"
    )


def spec_text(spec: dict, comment: str) -> str:
    """A fabric spec mapping as YAML text under a ``# comment`` line (what
    :func:`load_fabric` reads)."""
    import yaml  # only here: the exports are the writers of YAML specs

    header = f"# {comment}\n"
    body = yaml.safe_dump(
        spec, sort_keys=False, default_flow_style=None, width=100, allow_unicode=True
    )
    return header + body


IMPORT_PREFIXES = ("slurm:", "netlist:")
"""Fabric names that read another tool's file: ``slurm:PATH`` and ``netlist:PATH``."""
IMPORT_OPTIONS = (*SLURM_OPTIONS, "companion")
"""The keywords of an imported fabric (:func:`fabric_spec`)."""


def is_import(name_or_path) -> bool:
    """Whether ``name_or_path`` names an imported file (``slurm:PATH``, ``netlist:PATH``)."""
    return isinstance(name_or_path, str) and name_or_path.startswith(IMPORT_PREFIXES)


def fabric_spec(name_or_path: str | Path, **options) -> dict:
    """The spec mapping of any fabric name: a preset, a YAML spec's path, or an imported
    file (``slurm:PATH``, ``netlist:PATH``) with its :data:`IMPORT_OPTIONS` (the keywords
    of :func:`fabricflow.fabric.slurm.slurm_fabric_spec` and ``companion``, a YAML/JSON
    file of them; None values are left out). The one reader behind :func:`load_fabric`,
    every command's ``--fabric`` and a sweep's ``fabric``.

    Raises:
        SpecError: a bad file or option (named); import options for a preset or YAML spec.
        MemoryBudgetError: an import too large for this process (before it is made).
    """
    given = {key: value for key, value in options.items() if value is not None}
    if not is_import(name_or_path):
        if given:
            key = next(iter(given))
            raise SpecError(
                key,
                f"applies to imported fabrics ({' or '.join(p + 'PATH' for p in IMPORT_PREFIXES)}) "
                f"only, not to {str(name_or_path)!r}",
            )
        return read_spec(name_or_path)
    prefix, _, path = str(name_or_path).partition(":")
    if not path:
        raise SpecError("fabric", f"{name_or_path!r} names no file: give {prefix}:PATH")
    reader = slurm_spec_from_file if prefix == "slurm" else netlist_spec_from_file
    return reader(path, given)


def load_fabric(name_or_path: str | Path, **overrides) -> Fabric:
    """Build a preset (by name) or a YAML spec (by path), with top-level overrides.

    Overrides replace top-level keys; mapping values merge recursively, so
    ``load_fabric("clos-100k", gpus=8192, topology={"planes": 2})`` changes just those.

    ``"slurm:PATH"`` reads a Slurm ``topology.conf`` (tree or block form; docs/slurm.md)
    and ``"netlist:PATH"`` a per-host ``host,tor,agg,core`` CSV (docs/netlist.md); they
    take the keywords of :data:`IMPORT_OPTIONS`: ``gpus_per_node`` and ``nic_bandwidth``
    (required), ``oversubscription``, ``switch_bandwidth``, ``latency``, ``scale_up`` and
    ``transport`` (as in a spec), and ``companion`` (a YAML file with those keys).

    Raises:
        SpecError: a bad file or field (named).
        MemoryBudgetError: the fabric is too large for this process.
    """
    try:
        options = {}
        if is_import(name_or_path):
            options = {k: overrides.pop(k) for k in IMPORT_OPTIONS if k in overrides}
        spec = _merge(fabric_spec(name_or_path, **options), overrides)
        if not is_import(name_or_path) or overrides:
            return build_fabric(spec)
        # An import's spec holds numbers it derived from the options, which were checked
        # (and warned about under their own names) as they were read: building must not
        # warn again about each generated link as if the user had written a plain number.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnitWarning)
            return build_fabric(spec)
    except MemoryError as error:
        raise out_of_memory(error, f"loading fabric {str(name_or_path)!r}") from error


def load_fat_tree(k: int) -> Fabric:
    """The three-tier k-ary fat-tree of the ``fat-tree-k16`` preset at any even ``k``:
    ``k**3 / 4`` hosts, 400 Gb/s and 1 us per link (Al-Fares et al.; the fabric packet
    simulators validate flow completion times on)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 2 or k % 2:
        raise SpecError("k", f"must be an even integer >= 2, got {k!r}")
    half = k // 2
    return load_fabric(
        "fat-tree-k16",
        gpus=k**3 // 4,
        topology={
            "tiers": [
                {"name": "leaf", "down_ports": half, "up_ports": half, "latency": "1us"},
                {"name": "spine", "down_ports": half, "up_ports": half, "latency": "1us"},
                {"name": "core", "down_ports": k},
            ]
        },
    )


def _merge(base: dict, overrides: dict) -> dict:
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged
