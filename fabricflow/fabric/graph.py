"""Generic graph fabrics: any topology written out node by node and cable by cable.

Meant for small or irregular fabrics (a lab cluster, a proposed design, a topology
exported from another tool). Routing uses the generic shortest-path ECMP router
(:mod:`fabricflow.routing.generic`), so the size limit documented there applies.

Spec (``topology`` section, ``type: graph``)::

    gpu_transit: false          # GPUs forward traffic for others (direct-connect designs)
    defaults:                   # optional; fill keys a cable leaves out
      bandwidth: 400Gbps
      latency: 0.5us
      kind: nic
    nodes:                      # switches (every non-GPU node)
      - {name: leaf0, kind: leaf, tier: 1, group: 0}
      - {name: spine0, kind: spine, tier: 2}
    gpus:                       # one entry per GPU, in GPU-index order: a name or a mapping
      - {name: gpu0, group: 0}
      - gpu1
    links:                      # one entry per cable; both directions are created
      - {a: gpu0, b: leaf0, bandwidth: 400Gbps, latency: 0.6us, kind: nic}
      - {a: leaf0, b: spine0, count: 2}   # 2 parallel cables -> one link of 2 x bandwidth

Node ids: the GPUs first (GPU ``g`` is node ``g``), then the scale-up switches if the
spec has ``scale_up``, then ``nodes`` in spec order. Link ids: for each link kind in order
of first appearance, the ``a -> b`` links of its cables in spec order, then their
``b -> a`` links.
"""

from __future__ import annotations

import numpy as np

from fabricflow import schema as sr
from fabricflow.errors import SpecError
from fabricflow.fabric.assemble import Assembler
from fabricflow.fabric.common_spec import CommonSpec, finish_fabric
from fabricflow.fabric.fabric import Fabric
from fabricflow.fabric.scale_up import add_scale_up

GRAPH_KEYS = ("type", "gpu_transit", "defaults", "nodes", "gpus", "links")
NODE_KEYS = ("name", "kind", "tier", "group")
GPU_KEYS = ("name", "group")
LINK_KEYS = ("a", "b", "bandwidth", "latency", "kind", "count")
DEFAULT_KEYS = ("bandwidth", "latency", "kind")


def _integer(value, field: str, low: int, high: int = 2**31 - 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SpecError(field, f"must be an integer in {low}..{high}, got {value!r}")
    return value


def _parse_nodes(topology: sr.Section) -> list[tuple[str, str, int, int]]:
    nodes: list[tuple[str, str, int, int]] = []
    if not topology.has("nodes"):
        return nodes
    for item in topology.sections("nodes", NODE_KEYS):
        kind = item.get("kind", sr.text, "switch")
        if kind == "gpu":
            raise SpecError(item.field("kind"), "GPUs are listed under topology.gpus, not nodes")
        tier = item.get("tier", lambda v, f: _integer(v, f, -1, 127), 1)
        if tier == 0:
            raise SpecError(
                item.field("tier"),
                "tier 0 is for GPUs; switches use tier >= 1 "
                "(1 = leaf/ToR) or -1 (scale-up switch such as an NVSwitch)",
            )
        group = item.get("group", lambda v, f: _integer(v, f, -1), -1)
        nodes.append((item.get("name", sr.text), kind, tier, group))
    return nodes


def _parse_gpus(topology: sr.Section, num_gpus: int) -> list[tuple[str, int]]:
    raw = topology.raw("gpus")
    if not isinstance(raw, list) or not raw:
        raise SpecError(
            topology.field("gpus"),
            "expected a non-empty list of GPU names or {name, group} mappings, in GPU-index order",
        )
    gpus = []
    for i, item in enumerate(raw):
        field = f"{topology.field('gpus')}[{i}]"
        if isinstance(item, str):
            gpus.append((sr.text(item, field), -1))
            continue
        entry = sr.Section(item, field, GPU_KEYS)
        gpus.append(
            (entry.get("name", sr.text), entry.get("group", lambda v, f: _integer(v, f, -1), -1))
        )
    if len(gpus) != num_gpus:
        raise SpecError(
            topology.field("gpus"),
            f"lists {len(gpus)} GPUs but the top-level gpus is {num_gpus}; they must agree",
        )
    return gpus


def build_graph(topology: sr.Section, common: CommonSpec) -> Fabric:
    """Build a fabric from an explicit node and cable list (see the module docstring)."""
    transit = topology.get("gpu_transit", sr.boolean, False)
    defaults = topology.section("defaults", DEFAULT_KEYS, None)
    gpus = _parse_gpus(topology, common.num_gpus)
    nodes = _parse_nodes(topology)

    asm = Assembler()
    gpu_node = asm.add_nodes(len(gpus), "gpu", tier=0, group=[g for _, g in gpus]) + np.arange(
        len(gpus)
    )
    if common.scale_up is not None:
        add_scale_up(asm, gpu_node, common.scale_up)
    index: dict[str, int] = {}
    for i, (name, _) in enumerate(gpus):
        if name in index:
            raise SpecError(f"{topology.field('gpus')}[{i}].name", f"duplicate name {name!r}")
        index[name] = int(gpu_node[i])
    first = asm.num_nodes
    for i, (name, _, _, _) in enumerate(nodes):
        if name in index:
            raise SpecError(
                f"{topology.field('nodes')}[{i}].name",
                f"duplicate name {name!r} (GPU and node names share one namespace)",
            )
        index[name] = first + i
    # Consecutive nodes of one kind and tier go in as one block (ids follow spec order).
    start = 0
    while start < len(nodes):
        stop = start
        while stop < len(nodes) and nodes[stop][1:3] == nodes[start][1:3]:
            stop += 1
        asm.add_nodes(
            stop - start, nodes[start][1], nodes[start][2], group=[n[3] for n in nodes[start:stop]]
        )
        start = stop

    cables = _parse_links(topology, defaults, index)
    kinds = list(dict.fromkeys(kind for *_, kind, _count in cables))
    a, b, capacity, latency, kind_of, count = (np.asarray(col) for col in zip(*cables, strict=True))
    for kind in kinds:
        mask = kind_of == kind
        asm.add_cables(a[mask], b[mask], capacity[mask], latency[mask], kind, count[mask])

    domains = (
        np.arange(len(gpus)) // common.scale_up.domain_size
        if common.scale_up is not None
        else np.arange(len(gpus)) // common.gpus_per_node
    )
    return finish_fabric(asm, common, gpu_node, domains, None, meta={"gpu_transit": transit})


def _parse_links(
    topology: sr.Section, defaults: sr.Section | None, index: dict[str, int]
) -> list[tuple[int, int, float, float, str, int]]:
    def default(key: str, parse, fallback):
        return defaults.get(key, parse, fallback) if defaults is not None else fallback

    default_bw = default("bandwidth", sr.bandwidth, None)
    default_latency = default("latency", sr.time, 0.0)
    default_kind = default("kind", sr.text, "link")
    names = sorted(index)
    cables = []
    seen: dict[tuple[int, int, str], int] = {}
    for i, item in enumerate(topology.sections("links", LINK_KEYS)):
        ends = []
        for end in ("a", "b"):
            name = item.get(end, sr.text)
            if name not in index:
                shown = names[:8] + (["..."] if len(names) > 8 else [])
                raise SpecError(
                    item.field(end),
                    f"unknown node {name!r}; nodes and GPUs are {shown}",
                    value=name,
                    allowed=names,
                )
            ends.append(index[name])
        if ends[0] == ends[1]:
            raise SpecError(
                item.field("b"), f"a cable cannot join node {item.raw('a')!r} to itself"
            )
        if not item.has("bandwidth") and default_bw is None:
            raise SpecError(
                item.field("bandwidth"),
                "is required (per direction, e.g. 400Gbps), or set topology.defaults.bandwidth",
            )
        bandwidth = item.get("bandwidth", sr.bandwidth, default_bw)
        count = item.get("count", sr.positive_int, 1)
        kind = item.get("kind", sr.text, default_kind)
        pair = (min(ends), max(ends), kind)
        if pair in seen:
            raise SpecError(
                item.field("b"),
                f"duplicates the cable of links[{seen[pair]}] (same "
                f"ends and kind {kind!r}); use count for parallel cables",
            )
        seen[pair] = i
        cables.append(
            (
                ends[0],
                ends[1],
                count * bandwidth,
                item.get("latency", sr.time, default_latency),
                kind,
                count,
            )
        )
    return cables
