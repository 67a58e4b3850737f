"""Bill of materials of a fabric: switches, NICs, scale-up switches, cables and optics.

Counted from the built arrays (so every generator is covered), one *cable set* per link
kind (``nic``: GPU-leaf cables; a Clos tier's name: the cables from that tier up; ``local``
/ ``global`` of a dragonfly; ``ici`` of a torus):

* **Ports.** A link is ``fabric.link_cables`` parallel cables (bundles such as
  ``uplink_bundle`` and bundled NIC ports count cable by cable) of the kind's port speed
  ``s_k``: a Clos knows its NIC and uplink port speeds; other generators take
  ``<kind>_bandwidth`` from their topology section (dragonfly ``local_bandwidth``...),
  else the slowest cable of the kind (a link's bandwidth over its cables).
* **Switches.** A switch tier gets the smallest switch of the transport's family
  (InfiniBand, Ethernet for RoCEv2, Slingshot) whose cages hold the tier's ports: a cage
  of bandwidth ``B`` holds ``B / s`` ports of speed ``s`` (QM9700: 32 twin-port OSFP cages
  of 2 x 400G; SN5600: 64 cages of 800G or 2 x 400G breakout). A Clos tier is sized by its
  declared radix (a partly used top tier still buys whole switches).
* **Reach and media.** Each cable set has a reach: ``rack`` (<= 3 m), ``row`` (<= 50 m),
  ``hall`` (<= 500 m) or ``campus`` (<= 2 km). Defaults: GPU cables ``rack`` under ToR
  attachment (the leaf is in the rack) and ``row`` under rail attachment (a rail leaf
  serves a row of racks); the first tier's uplinks ``row``; higher tiers ``hall``;
  dragonfly local ``rack``, global ``hall``; torus ICI ``rack``; graph links ``row``.
  ``cost.reach`` overrides any kind. Each reach maps to a medium (``cost.media``, default
  rack: passive copper DAC, row: multimode SR optics, hall: single-mode DR, campus:
  single-mode FR).
* **Cables and optics.** Copper and AOC: one assembly per cage of the end with fewer
  cages (a twin-port 800G cage to two 400G NICs is one splitter, a breakout), named by
  the wider end (``dac-800G``). Optics: one transceiver per used cage at each end, named
  by medium and cage bandwidth (``multimode-800G`` for a twin-port 2 x SR4), plus one fibre
  patch cable per logical link. NIC ends have one cage per port. Where both ends take the
  same module it is one line (its detail gives each end's count); else one line per end,
  naming the end (``gpu``, ``leaf``, ...).
* **NICs.** Every GPU gets the cards of one NIC model (fewest cards, then least
  bandwidth, among those of the family whose port speed reaches the GPU's ports).
* **Scale-up.** A scale-up domain of one node is an HGX baseboard (its NVSwitches are in
  the server); a larger one gets ``ceil(domain * links_per_gpu / ports)`` NVLink switch
  trays (NVL72: 72 x 18 / 144 = 9).

Example (``dgx-h100-superpod``, 1,024 GPUs, 2 tiers of QM9700 at 1:1, bundles of 2)::

    >>> bom = bill_of_materials(load_fabric("dgx-h100-superpod"))
    >>> bom.count(part="qm9700"), bom.count(part="cx7"), bom.count(part="multimode-800G")
    (48, 1024, 1536)
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.fabric.cost_table import (
    FAMILY_OF_PROTOCOL,
    CostTable,
    NicModel,
    SwitchModel,
    cost_table,
)
from fabricflow.fabric.fabric import LINK_KINDS_DEFAULT, NODE_KINDS_DEFAULT
from fabricflow.units import format_bandwidth, parse_bandwidth

CATEGORIES = ("switch", "nic", "scale_up", "transceiver", "cable")


@dataclasses.dataclass(frozen=True)
class BomItem:
    """``count`` units of ``part`` (a key of the cost table's ``section``) serving ``tier``."""

    category: str  # one of CATEGORIES
    section: str  # switches | nics | scale_up | transceivers | cables
    part: str
    tier: str  # switch tier, link kind of a cable set, "nic" or "scale-up"
    count: int
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class CableSet:
    """The cables of one link kind: ``links`` logical links of ``port_Bps`` each."""

    kind: str
    links: int
    port_Bps: float
    reach: str
    media: str
    cages: tuple[int, int]  # used cages at the lower and the upper end, all switches
    cage_Bps: tuple[float, float]  # cage bandwidth at each end
    ends: tuple[str, str] = ("lower", "upper")  # node kind at each end (gpu, leaf, ...)


@dataclasses.dataclass(frozen=True)
class BillOfMaterials:
    """What a fabric is built of. ``items`` in the order switches, NICs, scale-up, cable
    sets (bottom first); ``cable_sets`` describe each link kind."""

    fabric: str
    gpus: int
    items: tuple[BomItem, ...]
    cable_sets: tuple[CableSet, ...]

    def count(self, *, part=None, category=None, tier=None) -> int:
        """Units matching every given filter (summed over items)."""
        return sum(
            item.count
            for item in self.items
            if (part is None or item.part == part)
            and (category is None or item.category == category)
            and (tier is None or item.tier == tier)
        )

    def to_dict(self) -> dict:
        return {
            "fabric": self.fabric,
            "gpus": self.gpus,
            "items": [dataclasses.asdict(item) for item in self.items],
            "cable_sets": [
                {**dataclasses.asdict(s), "port_speed": format_bandwidth(s.port_Bps)}
                for s in self.cable_sets
            ],
        }


def bill_of_materials(fabric, cost: dict | CostTable | None = None) -> BillOfMaterials:
    """The bill of materials of ``fabric`` with the part catalogue of ``cost`` (a table,
    an override mapping, or None for the fabric's own table).

    Raises:
        SpecError: a fabric with failed links (cost it as built), a tier no switch of the
            family holds, a NIC speed no card reaches, a medium the reach cannot use.
    """
    table = cost if isinstance(cost, CostTable) else cost_table(fabric, cost)
    _check_names(fabric, table)
    if not fabric.link_up.all():
        raise SpecError(
            "fabric",
            "has failed links; a bill of materials counts the fabric as built: "
            "cost it before .without()",
        )
    family = FAMILY_OF_PROTOCOL.get(fabric.transport.protocol)
    tier = fabric.node_tier.astype(np.int64)
    scale_out = (tier[fabric.link_src] >= 0) & (tier[fabric.link_dst] >= 0)
    speeds = _port_speeds(fabric)
    # physical cables per link (bundles counted apart), scale-out links only
    ports = np.where(scale_out, fabric.link_cables, 0).astype(np.int64)
    switches, model_of = _switch_items(fabric, table, family, ports, speeds)
    nics, nic_port_Bps = _nic_items(fabric, table, family, ports, speeds)
    cage_of_node = np.zeros(fabric.num_nodes)  # 0: a GPU end (one cage per port)
    for kind, model in model_of.items():
        cage_of_node[fabric.node_kind == kind] = model.cage_Bps
    cable_items, cable_sets = [], []
    for kind_id, kind in enumerate(fabric.link_kinds):
        mask = scale_out & (fabric.link_kind_id == kind_id)
        if not mask.any():
            continue
        cable_set = _cable_set(fabric, table, kind, mask, ports, speeds[kind], cage_of_node)
        cable_sets.append(cable_set)
        cable_items += _cable_items(cable_set)
    return BillOfMaterials(
        fabric=fabric.name,
        gpus=fabric.num_gpus,
        items=tuple(switches + nics + _scale_up_items(fabric, table) + cable_items),
        cable_sets=tuple(cable_sets),
    )


def _port_speeds(fabric) -> dict[str, float]:
    """Port speed (bytes/s) of every link kind (see the module docstring)."""
    st = fabric.structure
    speeds: dict[str, float] = {}
    if hasattr(st, "tiers") and getattr(st, "nic_port_Bps", 0.0) > 0:
        speeds["nic"] = st.nic_port_Bps
        speeds.update({t.name: t.uplink_bandwidth_Bps for t in st.tiers if t.up_ports})
    topology = (fabric.meta.get("spec") or {}).get("topology") or {}
    for kind_id, kind in enumerate(fabric.link_kinds):
        if kind in speeds:
            continue
        given = topology.get(f"{kind}_bandwidth")
        if isinstance(given, str | int | float) and not isinstance(given, bool):
            speeds[kind] = parse_bandwidth(given, f"topology.{kind}_bandwidth")
            continue
        mask = fabric.link_kind_id == kind_id  # a bundle of n cables is n ports
        caps = fabric.capacity[mask] / np.maximum(fabric.link_cables[mask], 1)
        speeds[kind] = float(caps.min()) if caps.size else 1.0
    return speeds


def _ports_at(fabric, nodes_mask, ports, speeds) -> dict[str, np.ndarray]:
    """kind -> int64 [N] ports of that kind's speed at every node (links leaving it)."""
    out = {}
    for kind_id, kind in enumerate(fabric.link_kinds):
        mask = (fabric.link_kind_id == kind_id) & nodes_mask[fabric.link_src] & (ports > 0)
        if mask.any():
            out[kind] = np.bincount(
                fabric.link_src[mask], weights=ports[mask], minlength=fabric.num_nodes
            ).astype(np.int64)
    return out


def cages_needed(ports_by_speed: dict[float, int], cage_Bps: float) -> int:
    """Cages of ``cage_Bps`` that hold ``{speed: ports}`` (a cage holds ports of one speed)."""
    return sum(
        math.ceil(count * speed / cage_Bps - 1e-9) for speed, count in ports_by_speed.items()
    )


def _check_names(fabric, table: CostTable) -> None:
    """Refuse a tier in ``cost.switch_models`` or a link kind in ``cost.reach`` that is
    neither this fabric's nor a standard name (a typo would otherwise pin nothing). A
    standard name the fabric lacks (``core`` on a two-tier fabric) is accepted, so that one
    cost file serves fabrics of several depths."""
    for section, pinned, names in (
        ("switch_models", table.switch_models, (*fabric.node_kinds, *NODE_KINDS_DEFAULT)),
        ("reach", table.reach, (*fabric.link_kinds, *LINK_KINDS_DEFAULT)),
    ):
        known = [n for n in dict.fromkeys(names) if n != "gpu"]
        for name in pinned:
            if name not in known:
                what = "switch tier" if section == "switch_models" else "link kind"
                raise SpecError(
                    f"cost.{section}.{name}",
                    f"unknown {what} {name!r}; known: {known} ({fabric.name}'s first)",
                    value=name,
                    allowed=known,
                )


def _switch_items(fabric, table: CostTable, family, ports, speeds):
    """Switch items per tier and the model of every switch kind (``kind -> model``)."""
    tier = fabric.node_tier
    is_switch = tier >= 1
    if not is_switch.any():
        return [], {}
    if family is None:
        raise SpecError(
            "transport.protocol",
            f"{fabric.transport.protocol!r} fabrics have no switch family in the cost table; "
            f"use a transport of {sorted(FAMILY_OF_PROTOCOL)}",
        )
    by_kind = _ports_at(fabric, is_switch, ports, speeds)
    declared = _declared_ports(fabric, speeds)
    items, model_of = [], {}
    kinds = fabric.node_kind
    for level in sorted(set(tier[is_switch].tolist())):
        nodes = np.flatnonzero(tier == level)
        name = str(kinds[nodes[0]])
        need = declared.get(name) or _max_ports(by_kind, nodes, speeds)
        model = _pick_switch(table, family, name, need)
        model_of[name] = model
        shape = ", ".join(f"{n} x {format_bandwidth(s)}" for s, n in sorted(need.items()))
        items.append(
            BomItem(
                "switch",
                "switches",
                model.name,
                name,
                int(nodes.size),
                f"{model.generation}, {model.cages} cages of "
                f"{format_bandwidth(model.cage_Bps)}; ports: {shape}",
            )
        )
    return items, model_of


def _declared_ports(fabric, speeds) -> dict[str, dict[float, int]]:
    """Clos tiers: the ports their radix declares, by speed (buying whole switches)."""
    st = fabric.structure
    tiers = getattr(st, "tiers", ())
    out = {}
    for i, t in enumerate(tiers):
        down_speed = speeds["nic"] if i == 0 else tiers[i - 1].uplink_bandwidth_Bps
        need = {down_speed: int(t.down_ports)}
        if t.up_ports:
            need[t.uplink_bandwidth_Bps] = need.get(t.uplink_bandwidth_Bps, 0) + int(t.up_ports)
        out[t.name] = need
    return out


def _max_ports(by_kind, nodes, speeds) -> dict[float, int]:
    """Most ports of each speed any of ``nodes`` uses (links in both directions)."""
    need: dict[float, int] = {}
    for kind, per_node in by_kind.items():
        count = int(per_node[nodes].max())
        if count:
            need[speeds[kind]] = need.get(speeds[kind], 0) + count
    return need


def _pick_switch(table: CostTable, family: str, tier: str, need: dict) -> SwitchModel:
    if tier in table.switch_models:
        model = table.switch(table.switch_models[tier], f"tier {tier!r}")
        if max(need) > model.cage_Bps or cages_needed(need, model.cage_Bps) > model.cages:
            raise SpecError(
                f"cost.switch_models.{tier}",
                f"{model.name} ({model.cages} cages of {format_bandwidth(model.cage_Bps)}) "
                f"cannot hold tier {tier!r}'s ports ({_shape(need)})",
            )
        return model
    fits = [
        m
        for m in table.switches.values()
        if m.family == family
        and max(need) <= m.cage_Bps
        and cages_needed(need, m.cage_Bps) <= m.cages
    ]
    if not fits:
        raise SpecError(
            "cost.switches",
            f"no {family} switch holds tier {tier!r}'s ports ({_shape(need)}); add one under "
            "cost.switches or pin one with cost.switch_models",
        )
    return min(fits, key=lambda m: m.capacity_Bps)


def _shape(need: dict) -> str:
    return ", ".join(f"{n} x {format_bandwidth(s)}" for s, n in sorted(need.items()))


def _nic_items(fabric, table: CostTable, family, ports, speeds):
    """NIC cards of every GPU (none for fabrics without NIC links)."""
    if "nic" not in fabric.link_kinds:
        return [], 0.0
    gpu_mask = np.zeros(fabric.num_nodes, bool)
    gpu_mask[fabric.gpu_node] = True
    per_gpu = _ports_at(fabric, gpu_mask, ports, speeds).get("nic")
    if per_gpu is None:
        return [], 0.0
    counts = per_gpu[fabric.gpu_node]
    port_Bps = speeds["nic"]
    nic = _pick_nic(table, family, int(counts.max()), port_Bps)
    cards = int(np.ceil(counts / nic.ports).sum())
    detail = f"{nic.generation}, {nic.ports} x {format_bandwidth(nic.port_Bps)} per card"
    return [BomItem("nic", "nics", nic.name, "nic", cards, detail)], port_Bps


def _pick_nic(table: CostTable, family, ports_per_gpu: int, port_Bps: float) -> NicModel:
    if table.nic_model is not None:
        nic = table.nics[table.nic_model]
        if nic.port_Bps < port_Bps * (1 - 1e-9):
            raise SpecError(
                "cost.nic_model",
                f"{nic.name} ports run at {format_bandwidth(nic.port_Bps)}, below the "
                f"fabric's {format_bandwidth(port_Bps)}",
            )
        return nic
    fits = [
        n
        for n in table.nics.values()
        if (family is None or family in n.families) and n.port_Bps >= port_Bps * (1 - 1e-9)
    ]
    if not fits:
        raise SpecError(
            "cost.nics",
            f"no {family} NIC has {format_bandwidth(port_Bps)} ports; add one under cost.nics",
        )
    return min(fits, key=lambda n: (math.ceil(ports_per_gpu / n.ports), n.ports * n.port_Bps))


def _default_reach(fabric, kind: str) -> str:
    st = fabric.structure
    tiers = getattr(st, "tier_names", ())
    if kind == "nic":
        return "rack" if getattr(st, "attachment", "tor") == "tor" else "row"
    if kind in tiers:
        return "row" if tiers.index(kind) == 0 else "hall"
    return {"local": "rack", "global": "hall", "ici": "rack"}.get(kind, "row")


def _cable_set(fabric, table, kind, mask, ports, port_Bps, cage_of_node) -> CableSet:
    """The cables of one link kind: logical links, reach, medium and cages at each end
    (``cage_of_node``: cage bandwidth of every switch, 0 at GPUs)."""
    reach = table.reach.get(kind) or _default_reach(fabric, kind)
    media = table.media.get(reach)
    if media is None:
        raise SpecError(
            f"cost.media.{reach}", f"no medium for reach {reach!r} (cable set {kind!r})"
        )
    # a cable is a pair of directed links; count each once, from its lower-tier end
    tier = fabric.node_tier.astype(np.int64)
    src, dst = fabric.link_src[mask], fabric.link_dst[mask]
    lower = (tier[src] < tier[dst]) | ((tier[src] == tier[dst]) & (src < dst))
    count = ports[mask][lower]
    ends, cage_bw, names = [], [], []
    for side in (src[lower], dst[lower]):
        per_node = np.bincount(side, weights=count, minlength=fabric.num_nodes)
        used = np.flatnonzero(per_node > 0)
        bw = np.where(cage_of_node[used] > 0, cage_of_node[used], port_Bps)
        ends.append(int(np.ceil(per_node[used] * port_Bps / bw - 1e-9).sum()))
        cage_bw.append(float(bw.max()) if bw.size else port_Bps)
        kinds = np.bincount(fabric.node_kind_id[side].astype(np.int64))
        name = fabric.node_kinds[int(kinds.argmax())] if kinds.size else ""
        names.append("NIC" if name == "gpu" else name)  # a GPU's cable ends in its NIC
    return CableSet(
        kind,
        int(count.sum()),
        port_Bps,
        reach,
        media,
        (ends[0], ends[1]),
        (cage_bw[0], cage_bw[1]),
        (names[0] or "lower", names[1] or "upper"),
    )


def _cable_items(s: CableSet) -> list[BomItem]:
    bw = _bandwidth_name
    where = f"{s.reach} reach, {s.links:,} links of {format_bandwidth(s.port_Bps)}"
    if s.media in ("dac", "acc", "aoc"):
        assemblies = min(s.cages)
        wide = max(s.cage_Bps)
        form = "breakout" if s.cage_Bps[0] != s.cage_Bps[1] or wide > s.port_Bps else "straight"
        return [
            BomItem(
                "cable", "cables", f"{s.media}-{bw(wide)}", s.kind, assemblies, f"{form}, {where}"
            )
        ]
    fibre = "fiber-multimode" if s.media == "multimode" else "fiber-singlemode"
    # one transceiver per used cage at each end of the cables; where both ends take the
    # same module it is one line of both ends' modules (two identical lines read as a
    # line printed twice), else one line per end, each naming its end
    names = [f"{s.media}-{bw(cage_Bps)}" for cage_Bps in s.cage_Bps]
    at = [f"{cages:,} at the {end} end" for cages, end in zip(s.cages, s.ends, strict=True)]
    if names[0] == names[1]:
        detail = f"both ends of each cable ({at[0]}, {at[1]}), {where}"
        items = [BomItem("transceiver", "transceivers", names[0], s.kind, sum(s.cages), detail)]
    else:
        items = [
            BomItem("transceiver", "transceivers", name, s.kind, cages, f"{end} end, {where}")
            for name, cages, end in zip(names, s.cages, s.ends, strict=True)
        ]
    items.append(BomItem("cable", "cables", fibre, s.kind, s.links, where))
    return items


def _bandwidth_name(Bps: float) -> str:
    """400G, 800G, 1.6T: the module name of a bandwidth in bytes/s."""
    gbps = Bps * 8 / 1e9
    if gbps >= 1000:
        return f"{gbps / 1000:g}T"
    return f"{gbps:g}G"


def _scale_up_items(fabric, table: CostTable) -> list[BomItem]:
    size = int(fabric.meta.get("scale_up_domain_size", 1))
    if size <= 1 or "nvlink" not in fabric.link_kinds:
        return []
    domains = fabric.num_gpus // size
    if size <= fabric.gpus_per_node:
        return [
            BomItem(
                "scale_up",
                "scale_up",
                "in-server",
                "scale-up",
                domains,
                f"the scale-up switching inside a {size}-GPU server (HGX NVSwitch baseboard or equivalent)",
            )
        ]
    entry = table.parts["scale_up"].get("nvlink-switch-tray") or {}
    tray_ports = entry.get("ports")
    links_per_gpu = entry.get("links_per_gpu")
    if (
        not isinstance(tray_ports, int)
        or not isinstance(links_per_gpu, int)
        or tray_ports <= 0
        or links_per_gpu <= 0
    ):
        raise SpecError(
            "cost.scale_up.nvlink-switch-tray",
            "needs ports and links_per_gpu (positive integers) to size "
            f"{size}-GPU scale-up domains",
        )
    trays = math.ceil(size * links_per_gpu / tray_ports)
    return [
        BomItem(
            "scale_up",
            "scale_up",
            "nvlink-switch-tray",
            "scale-up",
            domains * trays,
            f"{trays} trays per {size}-GPU domain ({links_per_gpu} links per GPU, "
            f"{tray_ports} ports per tray)",
        )
    ]
