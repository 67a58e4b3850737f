"""Slurm topology files -> fabrics, and fabrics -> Slurm topology files.

Slurm's ``topology.conf`` describes the network to its scheduler, in one of two forms:

* **tree** (``TopologyPlugin=topology/tree``): one line per switch,
  ``SwitchName=NAME Nodes=HOSTLIST`` for a leaf switch and ``SwitchName=NAME
  Switches=HOSTLIST`` for a switch above other switches (``LinkSpeed=`` is accepted and
  ignored: Slurm's own units are relative). A switch may list both.
* **block** (``topology/block``): ``BlockName=NAME Nodes=HOSTLIST`` lines (the nodes of a
  block share a fast local network) and optionally ``BlockSizes=N,M,...``.

A file of one form becomes a graph fabric (:mod:`.graph`): every node holds
``gpus_per_node`` GPUs with one ``nic_bandwidth`` NIC each; a node listed under several
leaf switches (a rail-optimized design) puts its GPU ``i`` on the ``i mod n``-th of its
``n`` switches, in file order, and a node under ``k G`` switches (``k`` planes, as in
dual-plane designs) gives each GPU ``k`` links of ``nic_bandwidth / k``, on switches
``i, i + G, ...``. Switch tiers are the height in the tree (leaf switches 1).
Each switch's uplink to each of its ``p`` parents carries ``1/p`` of what enters the
switch from below (non-blocking), unless the companion options say otherwise
(``oversubscription``: down over up capacity at every switch; ``switch_bandwidth``: one
fixed bandwidth per switch-to-switch cable), written as whole cables no faster than the
NIC. Block files get one switch per block and one switch joining the blocks (``top``, or
the first of ``top0, top1, ...`` no block is named). The options ``scale_up`` and
``transport`` are a fabric spec's sections of those names: a companion file gives an
imported cluster its NVLink-style domains and its InfiniBand or RoCE transport.

Errors name the file and line: a bad hostlist, a switch or block defined twice, a switch
referenced before its definition, a line with neither ``Nodes`` nor ``Switches``, an
unknown key, a control character, switches that form separate trees (the tops named).
Switch kinds are their names less trailing digits (``leaf12`` -> ``leaf``). Sizes are
estimated from the hostlists' counts before any name is made (:func:`check_import_size`).

:func:`slurm_tree_text` and :func:`slurm_block_text` write any fabric whose switches
form tiers (no GPU-to-GPU links, switch links only between tiers) in the two forms; the
export of an imported file gives the same file back, host names that hostlists cannot
hold bare (``gpu,a``, ``rack[1]``) in double quotes.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import warnings

import numpy as np

from fabricflow import schema as sr
from fabricflow.errors import SpecError, UnitWarning
from fabricflow.fabric.hostlist import (
    MAX_HOSTS,
    HostlistError,
    compress_hostlist,
    count_hostlist,
    expand_hostlist,
)
from fabricflow.fabric.scale_up import SCALE_UP_KEYS, ScaleUpSpec
from fabricflow.fabric.transport import parse_transport
from fabricflow.files import read_structured
from fabricflow.memory_budget import check_memory
from fabricflow.units import format_bandwidth, parse_bandwidth, parse_time

__all__ = [
    "SLURM_OPTIONS",
    "SlurmTopology",
    "import_options",
    "read_slurm_topology",
    "slurm_block_text",
    "slurm_fabric_spec",
    "slurm_spec_from_file",
    "slurm_tree_text",
]

# Limits of an import, checked before anything is made (check_import_size). An imported
# file becomes a graph fabric, routed by the generic router, which refuses all but a few
# destinations on graphs of millions of nodes: twice clos-1m's million GPUs is beyond any
# cluster an operator's file describes. The byte estimates must fit the memory budget.
MAX_IMPORT_GPUS = 2**21
BYTES_PER_NAME = 200  # peak bytes per name listed (expanded, kept, indexed): 160 measured
BYTES_PER_GPU = 1500  # peak bytes per GPU of the spec and its fabric: 1,170 measured

_KEYS = {"switchname", "switches", "nodes", "linkspeed", "blockname", "blocksizes"}
_PAIR = re.compile(r'(\w+)=((?:"(?:[^"]|"")*"|[^\s"])+)')  # a value may hold quoted names


@dataclasses.dataclass(frozen=True)
class SlurmTopology:
    """A parsed topology file.

    Attributes:
        kind: ``"tree"`` or ``"block"``.
        switches: name -> ``(child switches, nodes)`` in file order (blocks: no children).
        block_sizes: the ``BlockSizes`` values (block files), else ``()``.
        source: the file's path.
        kinds: switch name -> kind where the file says it (netlists), else from the name.
        origin: ``"slurm"`` or ``"netlist"`` (the fabric's name prefix).
    """

    kind: str
    switches: dict
    block_sizes: tuple = ()
    source: str = ""
    kinds: dict = dataclasses.field(default_factory=dict)
    origin: str = "slurm"

    @property
    def nodes(self) -> list[str]:
        """Every node once, in order of first appearance."""
        seen: dict[str, None] = {}
        for _, nodes in self.switches.values():
            seen.update(dict.fromkeys(nodes))
        return list(seen)


def read_slurm_topology(path: str | os.PathLike, *, gpus_per_node: int = 1) -> SlurmTopology:
    """Parse a tree or block ``topology.conf`` (module docs).

    ``gpus_per_node``: the GPUs each node will get; the file's node names are counted
    before any hostlist is expanded, and a file whose names, or whose nodes at that many
    GPUs, would not fit the memory budget is refused then (:func:`check_import_size`).

    Raises:
        SpecError: ``slurm``, naming the file and line of the first problem.
        MemoryBudgetError: the names or GPUs would not fit (sizes and budget named).
    """
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise SpecError("slurm", f"cannot read {name!r}: {error}") from error
    parsed = _parse_lines(name, lines, gpus_per_node)
    switches: dict[str, tuple[list[str], list[str]]] = {}
    where: dict[str, int] = {}
    kinds: set[str] = set()
    sizes: tuple = ()
    for number, pairs in parsed:

        def fail(message: str, number=number) -> SpecError:
            return SpecError("slurm", f"{sr.at_line(name, number)}: {message}")

        if "blocksizes" in pairs:
            if len(pairs) > 1:
                raise fail("BlockSizes= stands on a line of its own")
            if sizes:
                raise fail("BlockSizes given twice")
            sizes = _block_sizes(pairs["blocksizes"], fail)
            continue
        speed = pairs.get("linkspeed", "0")
        if not (speed.isascii() and speed.isdigit()):
            raise fail(f"LinkSpeed must be a whole number (Slurm's relative units), got {speed!r}")
        if "switchname" in pairs:
            kinds.add("tree")
            key = _one_name(pairs["switchname"], "SwitchName", fail)
        elif "blockname" in pairs:
            kinds.add("block")
            key = _one_name(pairs["blockname"], "BlockName", fail)
            if "switches" in pairs:
                raise fail("a block lists Nodes only, not Switches")
        else:
            raise fail("expected SwitchName=... or BlockName=... (or BlockSizes=...)")
        if len(kinds) > 1:
            raise fail("SwitchName and BlockName lines in one file: pick the tree or block form")
        if key in switches:
            raise fail(f"{key!r} is defined twice (first on line {where[key]})")
        if "nodes" not in pairs and "switches" not in pairs:
            raise fail(f"{key!r} has neither Nodes= nor Switches=")
        children = _hosts(pairs.get("switches", ""), fail)
        for child in children:
            if child == key:
                raise fail(f"switch {key!r} lists itself")
            if child not in switches:
                raise fail(f"switch {child!r} is referenced before its definition")
        switches[key] = (children, _hosts(pairs.get("nodes", ""), fail))
        where[key] = number
    if not switches:
        raise SpecError("slurm", f"{name}: no SwitchName= or BlockName= line")
    topology = SlurmTopology(kinds.pop(), switches, sizes, name)
    if not topology.nodes:
        raise SpecError("slurm", f"{name}: no switch or block lists any Nodes=")
    if topology.kind == "tree":
        _check_connected(topology, where)
    return topology


def _parse_lines(name: str, lines: list[str], gpus_per_node: int = 1) -> list[tuple[int, dict]]:
    """``(line number, {key: value})`` of every line that is not blank or a comment, the
    hostlists' names counted (not expanded) and the total checked against the limits."""
    parsed = []
    listed = 0  # names in all hostlists, duplicates counted
    largest = 0  # names of the largest Nodes= (distinct nodes are at least as many)
    for number, raw in enumerate(lines, start=1):

        def fail(message: str, number=number) -> SpecError:
            return SpecError("slurm", f"{sr.at_line(name, number)}: {message}")

        bad = next((c for c in raw if not c.isprintable() and c != "\t"), None)
        if bad is not None:
            raise fail(
                f"the control character {bad!r} at column {raw.index(bad) + 1}: names and "
                "keys are printable text"
            )
        line = _strip_comment(raw).strip()
        if not line:
            continue
        pairs = _pairs(line, fail)
        for key in ("nodes", "switches"):
            if key in pairs:
                try:
                    count = count_hostlist(pairs[key])
                except HostlistError as error:
                    raise fail(f"bad hostlist: {error}") from None
                listed += count
                if key == "nodes":
                    largest = max(largest, count)
        parsed.append((number, pairs))
    if listed > MAX_HOSTS:
        raise SpecError(
            "slurm",
            f"{name}: its hostlists name {listed:,} nodes and switches, more than the limit "
            f"of {MAX_HOSTS:,}",
        )
    check_import_size(name, names=listed, nodes=largest, gpus_per_node=gpus_per_node, at_least=True)
    return parsed


def check_import_size(
    source: str, *, names: int, nodes: int, gpus_per_node: int, at_least: bool = False
) -> None:
    """Refuse, before it is made, an import whose names (``names`` host and switch names
    listed) or fabric (``nodes`` x ``gpus_per_node`` GPUs; ``at_least``: ``nodes`` is a
    lower bound, counted before the names are known) is over the limits: at most
    :data:`MAX_IMPORT_GPUS` GPUs, and the estimate
    (:data:`BYTES_PER_NAME`, :data:`BYTES_PER_GPU`) must fit the memory budget
    (:func:`fabricflow.memory_budget.check_memory`).

    Raises:
        SpecError: ``gpus_per_node`` (the GPU count over :data:`MAX_IMPORT_GPUS`).
        MemoryBudgetError: the estimate over the budget (both named).
    """
    gpus = nodes * gpus_per_node
    count = f"{'at least ' if at_least else ''}{nodes:,} nodes x {gpus_per_node:,} GPUs per node"
    if gpus > MAX_IMPORT_GPUS:
        raise SpecError(
            "gpus_per_node",
            f"{source}: {count} = {gpus:,} GPUs, over the limit of {MAX_IMPORT_GPUS:,} for an "
            "imported fabric (a graph, routed by the generic router): describe a fabric that "
            "large as a clos spec",
        )
    check_memory(
        names * BYTES_PER_NAME + gpus * BYTES_PER_GPU,
        f"importing {source} ({names:,} names listed, {count} = {gpus:,} GPUs)",
        hint="give fewer GPUs per node, or a file of fewer nodes",
    )


def _strip_comment(raw: str) -> str:
    """``raw`` before its first ``#`` outside double quotes."""
    quoted = False
    for index, char in enumerate(raw):
        if char == '"':
            quoted = not quoted
        elif char == "#" and not quoted:
            return raw[:index]
    return raw


def _pairs(line: str, fail) -> dict[str, str]:
    pairs: dict[str, str] = {}
    rest = _PAIR.sub("", line).strip()
    if rest:
        raise fail(f"expected KEY=VALUE fields, got {rest!r}")
    for key, value in _PAIR.findall(line):
        lower = key.lower()
        if lower not in _KEYS:
            raise fail(
                f"unknown key {key!r}; known: SwitchName, Switches, Nodes, LinkSpeed, "
                "BlockName, BlockSizes"
            )
        if lower in pairs:
            raise fail(f"{key} given twice")
        pairs[lower] = value
    return pairs


def _one_name(value: str, key: str, fail) -> str:
    """The one switch or block name of ``key=value`` (quoted names unquoted)."""
    names = _hosts(value, fail)
    if len(names) != 1:
        raise fail(f"{key}={value} names {len(names):,} switches; one line names one")
    return names[0]


def _hosts(expression: str, fail) -> list[str]:
    if not expression:
        return []
    try:
        return expand_hostlist(expression)
    except HostlistError as error:
        raise fail(f"bad hostlist: {error}") from None


def _check_connected(topology: SlurmTopology, where: dict[str, int]) -> None:
    """Refuse a tree whose switches and nodes fall apart into separate parts (two roots
    with nothing in common): GPUs of one part could not reach the other's."""
    index = {name: i for i, name in enumerate(topology.switches)}
    parent = list(range(len(index)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_leaf: dict[str, str] = {}  # node -> the first switch listing it
    for name, (children, nodes) in topology.switches.items():
        me = index[name]
        for other in [index[c] for c in children] + [
            index[first_leaf.setdefault(n, name)] for n in nodes
        ]:
            parent[root(other)] = root(me)
    parts: dict[int, list[str]] = {}
    for name in topology.switches:
        parts.setdefault(root(index[name]), []).append(name)
    if len(parts) > 1:
        tops = [names[-1] for names in parts.values()]
        shown = ", ".join(f"{t!r} (line {where[t]})" for t in tops[:3])
        raise SpecError(
            "slurm",
            f"{topology.source}: the switches form {len(parts)} separate trees (tops "
            f"{shown}{', ...' if len(tops) > 3 else ''}): nodes of one cannot reach "
            "another's; add the switch that joins them (SwitchName=... Switches=...)",
        )


def _block_sizes(text: str, fail) -> tuple:
    try:
        sizes = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise fail(f"BlockSizes must be integers, got {text!r}") from None
    if any(x <= 0 for x in sizes):
        raise fail(f"BlockSizes must be > 0, got {text!r}")
    return sizes


def slurm_fabric_spec(
    topology: SlurmTopology,
    *,
    gpus_per_node: int,
    nic_bandwidth,
    oversubscription: float = 1.0,
    switch_bandwidth=None,
    latency="1us",
    scale_up: dict | None = None,
    transport=None,
) -> dict:
    """The graph-fabric spec of ``topology`` (module docs). ``nic_bandwidth`` and
    ``switch_bandwidth``: bandwidths (``"400Gbps"`` or bytes/s); ``scale_up`` and
    ``transport``: the sections of a fabric spec of those names (the GPUs of a scale-up
    domain talk over it, not the network; the transport sets the load balancing and the
    switch family of the bill of materials).

    Raises:
        SpecError: a bad ``gpus_per_node``, bandwidth or ``oversubscription``; a tree
            without a single root where switches are unconnected.
    """
    _gpus_per_node(gpus_per_node)
    nic = parse_bandwidth(nic_bandwidth, "nic_bandwidth", part=True)
    fixed = (
        None
        if switch_bandwidth is None
        else parse_bandwidth(switch_bandwidth, "switch_bandwidth", part=True)
    )
    oversubscription = _oversubscription(oversubscription)
    check_import_size(
        topology.source, names=0, nodes=len(topology.nodes), gpus_per_node=gpus_per_node
    )
    switches = dict(topology.switches)
    if topology.kind == "block":
        top = next(
            t for t in ("top", *(f"top{i}" for i in range(len(switches) + 1))) if t not in switches
        )
        switches[top] = (list(topology.switches), [])
    tier, parents = _tiers(switches)
    leaves_of: dict[str, list[str]] = {}
    for switch, (_, nodes) in switches.items():
        for node in nodes:
            leaves_of.setdefault(node, []).append(switch)
    gpus: list[str] = []
    links: list[dict] = []
    for node in topology.nodes:
        leaves = leaves_of[node]
        planes = len(leaves) // gpus_per_node if len(leaves) % gpus_per_node == 0 else 1
        for i in range(gpus_per_node):
            gpu = f"{node}/gpu{i}"
            gpus.append(gpu)
            for plane in range(max(planes, 1)):  # k G leaves: k planes of nic / k each
                leaf = leaves[(i + plane * gpus_per_node) % len(leaves)]
                links.append({"a": gpu, "b": leaf, "bandwidth": float(nic / max(planes, 1))})
    down = {s: 0.0 for s in switches}
    for link in links:
        down[str(link["b"])] += float(link["bandwidth"])
    empty = [s for s in switches if down[s] == 0 and not switches[s][0]]
    if empty:
        raise SpecError(
            "gpus_per_node",
            f"{topology.source}: switch {empty[0]!r} gets no GPU: its nodes are under more "
            f"switches than they have GPUs ({gpus_per_node}) and not a multiple of it",
        )
    for switch in sorted(switches, key=lambda s: tier[s]):  # bottom-up
        above = parents.get(switch, [])
        for parent in above:
            bandwidth = fixed if fixed is not None else down[switch] / oversubscription / len(above)
            links.append(
                {
                    "a": switch,
                    "b": parent,
                    "kind": topology.kinds.get(switch) or _kind(switch),
                    **_bundle(bandwidth, nic),
                }
            )
            down[parent] += bandwidth
    nodes = [
        {"name": s, "kind": topology.kinds.get(s) or _kind(s), "tier": tier[s]} for s in switches
    ]
    site = {"scale_up": scale_up, "transport": transport}
    return {
        "name": f"{topology.origin}-{os.path.splitext(os.path.basename(topology.source))[0] or 'topology'}",
        "gpus": len(gpus),
        "gpus_per_node": gpus_per_node,
        "description": f"{'Slurm' if topology.origin == 'slurm' else 'netlist'} {topology.kind} "
        f"topology {topology.source}: "
        f"{len(topology.nodes):,} nodes, {len(topology.switches):,} "
        f"{'switches' if topology.kind == 'tree' else 'blocks'}, NIC {format_bandwidth(nic)}",
        **{key: value for key, value in site.items() if value is not None},
        "topology": {
            "type": "graph",
            "defaults": {"latency": latency, "kind": "nic"},
            "nodes": nodes,
            "gpus": gpus,
            "links": links,
        },
    }


def _bundle(bandwidth: float, nic: float) -> dict:
    """A switch-to-switch link of ``bandwidth`` as whole cables no faster than the NIC
    (so that ports and cables count as built): ``ceil(bandwidth / nic)`` cables of
    ``bandwidth / count`` each (the NIC's speed where it divides evenly); a link slower
    than one NIC is one cable of its bandwidth."""
    count = max(1, math.ceil(bandwidth / nic - 1e-9))
    if count == 1:
        return {"bandwidth": float(bandwidth)}
    return {"bandwidth": float(bandwidth / count), "count": count}


def _kind(name: str) -> str:
    """A switch's kind from its name: the name less its trailing digits (``leaf12`` ->
    ``leaf``), so that an exported file reads back under the same names."""
    kind = name.rstrip("0123456789")
    return kind if kind and kind != "gpu" else "switch"


def _tiers(switches: dict) -> tuple[dict, dict]:
    """Tier of each switch (leaves 1, else 1 + the highest child) and its parents."""
    tier: dict[str, int] = {}
    parents: dict[str, list[str]] = {}
    for name, (children, _) in switches.items():  # children are defined first
        tier[name] = 1 + max((tier[c] for c in children), default=0)
        for child in children:
            parents.setdefault(child, []).append(name)
    return tier, parents


# ----------------------------------------------------------------------------- export


def _host_structure(fabric):
    """``(host names [H], switch names {node id: name}, leaves of each host, children
    of each switch)`` of a tiered fabric, or SpecError where it has no tree form."""
    tier = np.asarray(fabric.node_tier)
    src, dst = np.asarray(fabric.link_src), np.asarray(fabric.link_dst)
    up = np.asarray(fabric.capacity) > 0
    if np.any(up & (tier[src] == 0) & (tier[dst] == 0)):
        raise SpecError(
            "export", f"{fabric.name!r} links GPUs directly (a torus or mesh): no Slurm tree"
        )
    net = (tier[src] >= 1) & (tier[dst] >= 1) & up
    if np.any(net & (tier[src] == tier[dst])):
        raise SpecError(
            "export",
            f"{fabric.name!r} has links between switches of one tier (a dragonfly or ring): "
            "no Slurm tree",
        )
    kinds = fabric.node_kinds
    names = {}
    counters: dict[str, int] = {}
    for node in np.flatnonzero(tier >= 1):
        kind = kinds[int(fabric.node_kind_id[node])]
        names[int(node)] = f"{kind}{counters.get(kind, 0)}"
        counters[kind] = counters.get(kind, 0) + 1
    per_node = int(fabric.gpus_per_node)
    num_hosts = fabric.num_gpus // per_node
    hosts = _host_names(fabric, num_hosts, per_node)
    gpu_host = {int(n): g // per_node for g, n in enumerate(np.asarray(fabric.gpu_node))}
    # a GPU reaches its leaf directly or through its scale-up switch (tier -1)
    attach = up & (tier[dst] >= 1) & (tier[src] <= 0)
    leaves: list[list[str]] = [[] for _ in range(num_hosts)]
    scale_up_host: dict[int, int] = {}
    for a, b in zip(
        src[up & (tier[src] == 0) & (tier[dst] < 0)],
        dst[up & (tier[src] == 0) & (tier[dst] < 0)],
        strict=True,
    ):
        scale_up_host.setdefault(int(b), gpu_host[int(a)])
    for a, b in zip(src[attach], dst[attach], strict=True):
        host = gpu_host.get(int(a), scale_up_host.get(int(a)))
        if host is not None and names[int(b)] not in leaves[host]:
            leaves[host].append(names[int(b)])
    children: dict[str, list[str]] = {names[n]: [] for n in names}
    lower = net & (tier[src] < tier[dst])
    for a, b in zip(src[lower], dst[lower], strict=True):
        if names[int(a)] not in children[names[int(b)]]:
            children[names[int(b)]].append(names[int(a)])
    lonely = [hosts[h] for h in range(num_hosts) if not leaves[h]]
    if lonely:
        raise SpecError("export", f"{fabric.name!r}: host {lonely[0]} reaches no switch")
    order = sorted(names, key=lambda n: (tier[n], n))
    return hosts, [names[n] for n in order], leaves, children


def _host_names(fabric, num_hosts: int, per_node: int) -> list[str]:
    """The node names of a fabric read from a Slurm file (its GPUs are ``NODE/gpuI``),
    else ``node0 ...`` zero-padded to one width."""
    gpus = (fabric.meta.get("spec") or {}).get("topology", {}).get("gpus")
    if isinstance(gpus, list) and len(gpus) == num_hosts * per_node:
        names = [str(g).rpartition("/gpu")[0] for g in gpus[::per_node]]
        if all(names) and len(set(names)) == num_hosts:
            return names
    width = len(str(max(num_hosts - 1, 1)))
    return [f"node{h:0{width}d}" for h in range(num_hosts)]


def slurm_tree_text(fabric) -> str:
    """``topology.conf`` (tree form) of ``fabric``: a line per switch, leaves first (hosts
    ``nodeNNN``: GPUs ``[h G, (h + 1) G)`` with ``G = gpus_per_node``; switches named by
    kind and index).

    Raises:
        SpecError: ``export``: the fabric links GPUs directly or switches within a tier.
    """
    hosts, order, leaves, children = _host_structure(fabric)
    under: dict[str, list[str]] = {name: [] for name in order}
    for host, switches in zip(hosts, leaves, strict=True):
        for switch in switches:
            under[switch].append(host)
    lines = [f"# Slurm topology/tree for {fabric.name} (written by fabricflow)"]
    for name in order:
        fields = [f"SwitchName={compress_hostlist([name])}"]  # quoted where it must be
        if children[name]:
            fields.append(f"Switches={compress_hostlist(children[name])}")
        if under[name]:
            fields.append(f"Nodes={compress_hostlist(under[name])}")
        if len(fields) > 1:
            lines.append(" ".join(fields))
    return "\n".join(lines) + "\n"


def slurm_block_text(fabric) -> str:
    """``topology.conf`` (block form) of ``fabric``: one block per set of hosts that
    share the same leaf switches (a rack, or a scalable unit of a rail-optimized
    fabric), in host order, and ``BlockSizes`` of the smallest block.

    Raises:
        SpecError: ``export``: as :func:`slurm_tree_text`.
    """
    hosts, _, leaves, _ = _host_structure(fabric)
    blocks: dict[tuple, list[str]] = {}
    for host, switches in zip(hosts, leaves, strict=True):
        blocks.setdefault(tuple(sorted(switches)), []).append(host)
    lines = [f"# Slurm topology/block for {fabric.name} (written by fabricflow)"]
    for index, members in enumerate(blocks.values()):
        lines.append(f"BlockName=block{index} Nodes={compress_hostlist(members)}")
    lines.append(f"BlockSizes={min(len(m) for m in blocks.values())}")
    return "\n".join(lines) + "\n"


SLURM_OPTIONS = (
    "gpus_per_node",
    "nic_bandwidth",
    "oversubscription",
    "switch_bandwidth",
    "latency",
    "scale_up",
    "transport",
)
"""The keywords of :func:`slurm_fabric_spec`: what an imported file does not say (the
keys of a companion file)."""


def slurm_spec_from_file(path: str, options: dict) -> dict:
    """The spec of ``load_fabric("slurm:PATH", ...)``: ``options`` holds the keywords of
    :func:`slurm_fabric_spec` and optionally ``companion`` (a YAML/JSON file with the
    same keys; keywords given win). ``gpus_per_node`` and ``nic_bandwidth`` are required.

    Raises:
        SpecError: a missing or bad option (named), or a bad file.
        MemoryBudgetError: the file's names or GPUs would not fit (before expanding).
    """
    values = import_options(options, "Slurm topology")
    topology = read_slurm_topology(path, gpus_per_node=values["gpus_per_node"])
    return checked_import_spec(topology, values)


def checked_import_spec(topology: SlurmTopology, values: dict) -> dict:
    """:func:`slurm_fabric_spec` of ``values`` that :func:`import_options` returned: they
    were checked, and warned about, as they were read, so they are not warned about twice."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnitWarning)
        return slurm_fabric_spec(topology, **values)


def import_options(options: dict, what: str) -> dict:
    """The keywords of :func:`slurm_fabric_spec` for an imported file (``what`` names its
    kind in messages): ``options`` with its ``companion`` file's keys beneath them (keywords
    given win, None ones are left out); ``gpus_per_node`` and ``nic_bandwidth`` required.
    Every value is checked here, a companion's named with its file.

    Raises:
        SpecError: a companion that is not a mapping of :data:`SLURM_OPTIONS` or names an
            unknown key, a bad value, or a required option missing (each named).
    """
    options = dict(options)
    companion = options.pop("companion", None)
    unknown = sorted(set(options) - set(SLURM_OPTIONS))
    if unknown:
        raise SpecError(
            unknown[0],
            f"not an option of a {what}; options: {[*SLURM_OPTIONS, 'companion']}",
            value=unknown[0],
            allowed=(*SLURM_OPTIONS, "companion"),
        )
    values: dict = {}
    if companion is not None:
        if not isinstance(companion, (str, os.PathLike)) or not os.fspath(companion):
            raise SpecError(
                "companion", f"must be the path of a YAML or JSON file, got {companion!r}"
            )
        data = read_structured(companion, what=f"{what} companion")
        if not isinstance(data, dict):
            raise SpecError(
                "companion", f"{companion} must hold a mapping of {list(SLURM_OPTIONS)}"
            )
        unknown = sorted(set(map(str, data)) - set(SLURM_OPTIONS))
        if unknown:
            raise SpecError(
                "companion",
                f"{companion}: unknown key {unknown[0]!r}; known: {list(SLURM_OPTIONS)}",
                value=unknown[0],
                allowed=SLURM_OPTIONS,
            )
        _check_options(data, f"{companion}: ")
        values.update(data)
    given = {k: v for k, v in options.items() if v is not None}
    _check_options(given, "")
    values.update(given)
    for key in ("gpus_per_node", "nic_bandwidth"):
        if key not in values:
            raise SpecError(
                key,
                f"a {what} does not give its {key.replace('_', ' ')}: give {key}= (CLI "
                f"--{key.replace('_', '-')}) or put it in a companion file",
            )
    gpus_per_node, scale_up = values["gpus_per_node"], values.get("scale_up")
    if scale_up is not None:
        size = scale_up["domain_size"]
        if size % gpus_per_node and gpus_per_node % size:
            raise SpecError(
                "scale_up.domain_size",
                f"a scale-up domain of {size} GPUs neither fills whole nodes of "
                f"{gpus_per_node} GPUs nor divides one",
            )
    return values


def _check_options(values: dict, where: str) -> None:
    """Check the option values of ``values`` (``where``: the companion file, or ``""``)
    as :func:`slurm_fabric_spec` and a fabric spec would, naming ``where``."""
    try:
        if "gpus_per_node" in values:
            _gpus_per_node(values["gpus_per_node"])
        for key in ("nic_bandwidth", "switch_bandwidth"):
            if values.get(key) is not None:
                parse_bandwidth(values[key], key, part=True)
        if "oversubscription" in values:
            _oversubscription(values["oversubscription"])
        if "latency" in values:
            parse_time(values["latency"], "latency", part=True)
        if values.get("scale_up") is not None:
            ScaleUpSpec.parse(sr.Section(values["scale_up"], "scale_up", SCALE_UP_KEYS))
        if values.get("transport") is not None:
            parse_transport(values["transport"])
    except SpecError as error:
        if not where:
            raise
        raise SpecError(error.field, f"{where}{str(error).split(': ', 1)[-1]}") from None


def _gpus_per_node(value) -> int:
    return sr.integer(value, "gpus_per_node", minimum=1)


def _oversubscription(value) -> float:
    return sr.ratio_at_least_one(value, "oversubscription")  # 3, 3.0 or "3:1", as specs
