"""Multi-tier Clos / fat-tree generator (1 to 4 tiers), rail-optimized, rail-only or ToR
attachment, several planes, bundled uplinks, per-tier oversubscription.

The fabric of one plane is an *extended generalized fat tree* XGFT(h; m_1..m_h;
w_1..w_h) (Ohring et al., 1995), which covers k-ary fat-trees, oversubscribed leaf-spine
designs and partially populated top tiers with one construction:

* level 0 are the GPUs' NIC ports ("host slots"), level i >= 1 are tier-i switches;
* a level-i switch has ``m_i`` children and ``w_{i+1}`` parents (``w_1 = 1``);
* a level-i node is labelled by its block ``B`` (which level-i subtree it is in) and
  its choice index ``c`` (the mixed-radix number of the up-choices ``b_2..b_i`` taken to
  reach it); its parent through choice ``b`` is ``(B // m_{i+1}, c * w_{i+1} + b)``.

``attachment: rail-only`` (Wang et al., "How to build low-cost networks for large language
models", 2023/2024) builds one such tree per rail: rail ``r`` (GPU ``r`` of every node) has its
own leaves and upper tiers, and no switch joins two rails, so traffic between rails must
first cross the scale-up domain (NVLink) to the GPU of its node on the destination's rail
(the router does this, as NCCL's PXN does by choice on a rail-optimized Clos). Host slots
are then numbered rail-major (``slot = rail * G / gpus_per_node + node``) and the top tier
has ``gpus_per_node`` blocks, one per rail. A rail-only fabric needs a scale-up domain that
holds whole nodes.

This numbering makes every switch and link id an arithmetic function of a host slot and
the up-choices, which is what lets routing be vectorized with no per-flow Python
(:mod:`fabricflow.routing.clos`). Parallel cables between one switch pair (``uplink_bundle``)
are modeled as one link of the summed capacity; ECMP over the members of a bundle is
assumed balanced.

Spec (``topology`` section, ``type: clos``)::

    attachment: rail          # rail: GPU r of each node on rail leaf r; tor: whole nodes per
                              # leaf; rail-only: rail r's GPUs reach only rail r's switches
    planes: 1                 # independent copies of the Clos; port p of each GPU on plane p
    nic_ports_per_gpu: 1      # multiple of planes; ports of one GPU in one plane are bundled
    nic_bandwidth: 400Gbps    # per port
    nic_latency: 0.6us        # GPU <-> leaf cable incl. switch traversal
    tiers:                    # bottom (leaf) to top
      - {name: leaf, radix: 64, oversubscription: 1, uplink_bandwidth: 400Gbps,
         uplink_bundle: 1, latency: 0.6us}
      - {name: spine, radix: 64}
    # or per tier: down_ports / up_ports instead of radix + oversubscription
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import operator

import numpy as np

from fabricflow import schema as sr
from fabricflow.errors import SpecError
from fabricflow.fabric.assemble import Assembler, check_build_size
from fabricflow.fabric.common_spec import CommonSpec, finish_fabric
from fabricflow.fabric.fabric import Fabric
from fabricflow.fabric.scale_up import ScaleUpLinks, add_scale_up
from fabricflow.fabric.summary import max_flow_between

TIER_NAMES = ("leaf", "spine", "core", "super")
# Link kinds the builders give to non-tier cables: a tier of that name would merge its
# uplinks with them in links_per_kind and in --fail KIND:F.
RESERVED_TIER_NAMES = ("nic", "nvlink")
TIER_KEYS = (
    "name",
    "radix",
    "oversubscription",
    "down_ports",
    "up_ports",
    "uplink_bandwidth",
    "uplink_bundle",
    "latency",
)
CLOS_KEYS = (
    "type",
    "attachment",
    "planes",
    "nic_ports_per_gpu",
    "nic_bandwidth",
    "nic_latency",
    "tiers",
)
MAX_TIERS = 4
ATTACHMENTS = ("rail", "tor", "rail-only")


@dataclasses.dataclass(frozen=True)
class TierSpec:
    name: str
    down_ports: int
    up_ports: int  # 0 for the top tier
    uplink_bandwidth_Bps: float  # per port, towards the tier above
    uplink_bundle: int
    latency_s: float  # cable to the tier above


@dataclasses.dataclass(frozen=True, eq=False)
class ClosStructure:
    """Arithmetic description of a built Clos, used by the vectorized router.

    Index conventions (level i = 1..h, arrays indexed by level, entry 0 unused where noted):
        m[i]: children per level-i switch (m[1] = host slots per leaf).
        w[i]: parents per level-(i-1) node (w[1] = 1).
        H[i]: host slots per level-i block = m[1] * ... * m[i]   (H[0] = 1).
        W[i]: choice count of level-i nodes = w[2] * ... * w[i]   (W[1] = 1).
        N[i]: level-i switches per plane = (G / H[i]) * W[i] for G host slots (one top
            block, H[h] = G, except rail-only fabrics: one top block per rail).
        switch_offset[p, i]: node id of the first level-i switch of plane p.
        up_offset[p, i], down_offset[p, i]: first link id of the level-i -> i+1 uplinks
            (id = off + node_i * w[i+1] + b) and of the level-(i+1) -> i downlinks
            (id = off + node_{i+1} * m[i+1] + child digit), i = 0..h-1 (i = 0: NIC cables,
            where node_0 = host slot and w[1] = m... = 1 link per slot).
        slot_of_gpu: int64 [G] host slot of every GPU (same in every plane).
        rails: top-level blocks per plane that no switch joins: ``gpus_per_node`` for
            ``attachment: rail-only`` (one tree per rail), else 1.
        tiers: the tiers as parsed (ports, bundles, port speeds), bottom first.
        nic_port_Bps, nic_ports_per_plane: speed of one GPU NIC port (bytes/s, one
            direction) and the ports of one GPU in one plane (bundled into one link).
    """

    levels: int
    planes: int
    m: np.ndarray
    w: np.ndarray
    H: np.ndarray
    W: np.ndarray
    N: np.ndarray
    switch_offset: np.ndarray
    up_offset: np.ndarray
    down_offset: np.ndarray
    slot_of_gpu: np.ndarray
    scale_up: ScaleUpLinks | None
    tier_names: tuple[str, ...]
    attachment: str
    rails: int = 1
    tiers: tuple[TierSpec, ...] = ()
    nic_port_Bps: float = 0.0
    nic_ports_per_plane: int = 1

    @property
    def slots(self) -> int:
        """Host slots per plane (= GPUs)."""
        return int(self.slot_of_gpu.shape[0])

    def bisection_Bps(self, fabric) -> float:
        """Scale-out bisection, one direction, between the two halves of the host slots.

        For an intact fabric whose top tier joins an even number of blocks, the halves
        are whole top-tier blocks and every byte crossing must climb each level inside
        its own half, so the cut is half of the thinnest level's total uplink capacity
        (NIC cables included, all planes). Otherwise (failed links, which may be
        uneven, or an odd/single top block count) it is an exact max-flow between the
        same halves. On a rail-only fabric the halves are the first and second half of
        each rail's slots (whole nodes), the cut of every rail's tree.
        """
        aligned = self.m[self.levels] % 2 == 0 or self.levels == 1
        if fabric.link_up.all() and aligned:
            totals = []
            for level in range(self.levels):
                count = (self.N[level] if level else self.slots) * self.w[level + 1]
                ids = (self.up_offset[:, level][:, None] + np.arange(count)[None, :]).ravel()
                totals.append(fabric.capacity[ids].sum())
            return float(min(totals) / 2)
        per_rail = self.slots // self.rails
        half = self.slot_of_gpu % per_rail < per_rail // 2
        return max_flow_between(fabric, half, ~half)


def parse_tiers(section: sr.Section, nic_bandwidth: float) -> list[TierSpec]:
    tiers_sections = section.sections("tiers", TIER_KEYS)
    if len(tiers_sections) > MAX_TIERS:
        raise SpecError(
            section.field("tiers"), f"at most {MAX_TIERS} tiers, got {len(tiers_sections)}"
        )
    tiers: list[TierSpec] = []
    for level, tier in enumerate(tiers_sections, start=1):
        top = level == len(tiers_sections)
        name = tier.get("name", sr.text, TIER_NAMES[level - 1])
        if name in RESERVED_TIER_NAMES:
            raise SpecError(
                tier.field("name"),
                f"{name!r} is the link kind of GPU cables; reserved names: "
                f"{list(RESERVED_TIER_NAMES)}; pick another tier name",
            )
        if name in (t.name for t in tiers):
            raise SpecError(
                tier.field("name"),
                f"tier name {name!r} is already used by another tier; tier names must differ",
            )
        if tier.has("radix") == (tier.has("down_ports") or tier.has("up_ports")):
            raise SpecError(
                tier.field("radix"),
                "give either radix (with optional "
                "oversubscription) or down_ports/up_ports, not both or neither",
            )
        if tier.has("oversubscription") and not tier.has("radix"):
            # with explicit ports the ratio is down_ports / up_ports; ignoring the key would
            # make a sweep of it return the same fabric at every value
            raise SpecError(
                tier.field("oversubscription"),
                "goes with radix; this tier gives down_ports/up_ports, whose ratio is its "
                "oversubscription: change up_ports (or give radix instead)",
            )
        uplink_keys = ("up_ports", "oversubscription", "uplink_bundle", "uplink_bandwidth")
        if top and any(tier.has(key) for key in uplink_keys):
            raise SpecError(
                tier.field(next(key for key in uplink_keys if tier.has(key))),
                "the top tier has no uplinks; "
                "remove up_ports/oversubscription/uplink_bundle/uplink_bandwidth",
            )
        if tier.has("radix"):
            radix = tier.get("radix", sr.positive_int)
            ratio = 1.0 if top else tier.get("oversubscription", sr.ratio_at_least_one, 1.0)
            if top:
                down, up = radix, 0
            else:
                down = radix * ratio / (1.0 + ratio)
                if abs(down - round(down)) > 1e-9 or round(down) in (0, radix):
                    raise SpecError(
                        tier.field("oversubscription"),
                        f"radix {radix} cannot be split into down:up ports at {ratio:g}:1; "
                        "use a ratio that divides the ports, or give down_ports/up_ports",
                    )
                down = int(round(down))
                up = radix - down
        else:
            down = tier.get("down_ports", sr.positive_int)
            up = 0 if top else tier.get("up_ports", sr.positive_int)
        bundle = 1 if top else tier.get("uplink_bundle", sr.positive_int, 1)
        if up % bundle:
            raise SpecError(
                tier.field("uplink_bundle"),
                f"{up} up ports cannot be split into bundles of {bundle}",
            )
        tiers.append(
            TierSpec(
                name=name,
                down_ports=down,
                up_ports=up,
                uplink_bandwidth_Bps=0.0
                if top
                else tier.get("uplink_bandwidth", sr.bandwidth, nic_bandwidth),
                uplink_bundle=bundle,
                latency_s=tier.get("latency", sr.time, 0.6e-6),
            )
        )
    return tiers


def build_clos(topology: sr.Section, common: CommonSpec) -> Fabric:
    """Build a Clos fabric from the ``topology`` section and the common spec."""
    attachment = topology.get("attachment", sr.choice(*ATTACHMENTS), "rail")
    planes = topology.get("planes", sr.positive_int, 1)
    ports = topology.get("nic_ports_per_gpu", sr.positive_int, planes)
    if ports % planes:
        raise SpecError(
            topology.field("nic_ports_per_gpu"),
            f"must be a multiple of planes ({planes}), got {ports}",
        )
    ports_per_plane = ports // planes
    nic_bandwidth = topology.get("nic_bandwidth", sr.bandwidth)
    nic_latency = topology.get("nic_latency", sr.time, 0.6e-6)
    tiers = parse_tiers(topology, nic_bandwidth)
    num_gpus, per_node = common.num_gpus, common.gpus_per_node

    levels = len(tiers)
    m, w = _tree_arities(topology, tiers, ports_per_plane)
    rails = _fit_top_tier(topology, common, attachment, m)
    H, W, N = _block_counts(m, w, num_gpus, planes, common)
    slot_of_gpu = _host_slots(num_gpus, per_node, int(m[1]), attachment)

    asm = Assembler()
    gpu_node = asm.add_nodes(num_gpus, "gpu", tier=0) + np.arange(num_gpus)
    scale_up = add_scale_up(asm, gpu_node, common.scale_up) if common.scale_up else None
    switch_offset = _add_switches(asm, tiers, planes, H, W, N)
    up_offset, down_offset = _add_plane_links(
        asm,
        tiers,
        gpu_node,
        slot_of_gpu,
        switch_offset,
        m,
        w,
        W,
        N,
        nic=(ports_per_plane, nic_bandwidth, nic_latency),
    )

    structure = ClosStructure(
        levels=levels,
        planes=planes,
        m=m,
        w=w,
        H=H,
        W=W,
        N=N,
        switch_offset=switch_offset,
        up_offset=up_offset,
        down_offset=down_offset,
        slot_of_gpu=slot_of_gpu,
        scale_up=scale_up,
        tier_names=tuple(t.name for t in tiers),
        attachment=attachment,
        rails=rails,
        tiers=tuple(tiers),
        nic_port_Bps=nic_bandwidth,
        nic_ports_per_plane=ports_per_plane,
    )
    domains = (
        np.arange(num_gpus) // common.scale_up.domain_size
        if common.scale_up
        else np.arange(num_gpus) // per_node
    )
    return finish_fabric(
        asm,
        common,
        gpu_node,
        domains,
        structure,
        group_of_gpu=slot_of_gpu // H[max(levels - 1, 1)],
        # ports of each tier's switches (radix, or down_ports + up_ports): summaries
        # compare them with the ports the built fabric uses
        meta={"switch_ports": {t.name: t.down_ports + t.up_ports for t in tiers}},
    )


def _tree_arities(
    topology: sr.Section, tiers: list[TierSpec], ports_per_plane: int
) -> tuple[np.ndarray, np.ndarray]:
    """The XGFT arities of one plane, int64 ``[levels + 1]``: ``m[i]`` children of a
    level-``i`` switch (host slots under a leaf for ``i = 1``; ``m[levels]`` is the top
    tier's radix until :func:`_fit_top_tier` sets the blocks it joins) and ``w[i]``
    parents of a level-``(i - 1)`` node (bundles of uplinks; ``w[0] = w[1] = 1``).
    Raises :class:`SpecError` for ports that do not divide into ports per GPU or
    bundles."""
    levels = len(tiers)
    m = np.zeros(levels + 1, np.int64)
    w = np.ones(levels + 1, np.int64)
    if tiers[0].down_ports % ports_per_plane:
        raise SpecError(
            topology.field("tiers[0].down_ports"),
            f"{tiers[0].down_ports} leaf down ports cannot take {ports_per_plane} "
            "ports per GPU per plane",
        )
    m[1] = tiers[0].down_ports // ports_per_plane
    for level in range(2, levels + 1):
        below = tiers[level - 2]
        w[level] = below.up_ports // below.uplink_bundle
        if tiers[level - 1].down_ports % below.uplink_bundle:
            raise SpecError(
                topology.field(f"tiers[{level - 1}].down_ports"),
                f"{tiers[level - 1].down_ports} down ports cannot take bundles of "
                f"{below.uplink_bundle} from tier {below.name!r}",
            )
        m[level] = tiers[level - 1].down_ports // below.uplink_bundle
    return m, w


def _fit_top_tier(topology: sr.Section, common, attachment: str, m: np.ndarray) -> int:
    """Set ``m[levels]`` (in place) to the number of blocks the top tier joins for the
    spec's GPU count and return the number of rails (trees; 1 unless rail-only). Raises
    :class:`SpecError` when the GPUs do not fill whole top-tier blocks (naming GPU counts
    that do) or the top tier's radix is too small."""
    levels = len(m) - 1
    num_gpus, per_node = common.num_gpus, common.gpus_per_node
    if levels == 1 and attachment == "rail" and per_node > 1:
        raise SpecError(
            topology.field("attachment"),
            "a 1-tier Clos is one switch per plane; "
            "use attachment: tor or rail-only (or add a tier so rails can meet)",
        )
    rails = _rail_only_rails(topology, common) if attachment == "rail-only" else 1

    # Host slots per level-(h-1) block fix how many blocks the top tier joins.
    # Sizes in Python ints (no int64 wrap-around) until the memory check has passed.
    H_below_top = math.prod(int(x) for x in m[1:levels])
    unit = per_node * int(m[1]) if attachment == "rail" else int(m[1])
    step = math.lcm(unit, H_below_top) * rails
    if num_gpus % step:
        # the multiples of step either side of num_gpus (one only when it is below step)
        near = sorted({max(step, num_gpus // step * step), (num_gpus // step + 1) * step})
        groups = {"rail": "rail groups and ", "rail-only": "rails of whole "}.get(attachment, "")
        raise SpecError(
            "gpus",
            f"{num_gpus} GPUs do not fill whole {groups}top-tier blocks of "
            f"this Clos; use a multiple of {step} (e.g. {' or '.join(map(str, near))})",
        )
    per_tree = num_gpus // rails  # host slots under one top-level tree
    top_children = per_tree // H_below_top
    if top_children > m[levels] and levels > 1:
        capacity = int(m[levels]) * H_below_top * rails
        raise SpecError(
            topology.field(f"tiers[{levels - 1}].radix"),
            f"radix too small for {num_gpus} GPUs: the top tier joins at most "
            f"{int(m[levels])} blocks of {H_below_top} GPUs"
            + (f" per rail ({rails} rails)" if rails > 1 else "")
            + f" = {capacity} GPUs; add a tier, raise the radix or lower the GPU count",
        )
    if levels == 1 and per_tree > m[1]:
        raise SpecError(
            topology.field("tiers[0].radix"),
            f"radix too small: one switch takes {int(m[1])} GPUs, asked for {per_tree}"
            + (" per rail" if rails > 1 else ""),
        )
    m[levels] = top_children
    return rails


def _block_counts(
    m: np.ndarray, w: np.ndarray, num_gpus: int, planes: int, common
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per level, int64 ``[levels + 1]``: host slots under a level-``i`` block ``H``,
    switches per block ``W`` and switches per plane ``N`` (``N[0] = 0``). Refuses, before
    anything is allocated, a fabric whose nodes and links would not fit in memory."""
    levels = len(m) - 1
    m_int, w_int = [int(x) for x in m], [int(x) for x in w]
    H_int = list(itertools.accumulate([1, *m_int[1:]], operator.mul))
    W_int = [1, *itertools.accumulate(w_int[1:], operator.mul)]
    N_int = [0] + [num_gpus // H_int[level] * W_int[level] for level in range(1, levels + 1)]
    scale_up_links = 2 * num_gpus if common.scale_up else 0
    check_build_size(
        num_nodes=num_gpus + planes * sum(N_int[1:]) + (num_gpus if common.scale_up else 0),
        num_links=scale_up_links
        + 2
        * planes
        * (num_gpus + sum(N_int[level] * w_int[level + 1] for level in range(1, levels))),
        what=f"this {levels}-tier Clos",
    )
    return (
        np.asarray(H_int, np.int64),
        np.asarray(W_int, np.int64),
        np.asarray(N_int, np.int64),
    )


def _add_switches(
    asm: Assembler,
    tiers: list[TierSpec],
    planes: int,
    H: np.ndarray,
    W: np.ndarray,
    N: np.ndarray,
) -> np.ndarray:
    """Add every plane's switches, level by level; returns the node id of the first
    switch of each (plane, level), int64 ``[planes, levels + 1]`` (column 0 unused). A
    switch's group is its level-``(levels - 1)`` subtree (-1 on the top tier)."""
    levels = len(tiers)
    switch_offset = np.zeros((planes, levels + 1), np.int64)
    for plane in range(planes):
        for level in range(1, levels + 1):
            block = np.arange(N[level]) // W[level]
            group = block // (H[levels - 1] // H[level]) if level < levels else -1
            switch_offset[plane, level] = asm.add_nodes(
                int(N[level]), tiers[level - 1].name, tier=level, group=group
            )
    return switch_offset


def _add_plane_links(
    asm: Assembler,
    tiers: list[TierSpec],
    gpu_node: np.ndarray,
    slot_of_gpu: np.ndarray,
    switch_offset: np.ndarray,
    m: np.ndarray,
    w: np.ndarray,
    W: np.ndarray,
    N: np.ndarray,
    *,
    nic: tuple[int, float, float],
) -> tuple[np.ndarray, np.ndarray]:
    """Add every plane's links: the NIC cables from each GPU's node (``gpu_node``, by
    GPU) to the leaf of its host slot (``slot_of_gpu``; ``nic``: ports per plane,
    bandwidth per port in B/s, latency in s), then between consecutive levels. Returns
    the first link id of each (plane, level)'s uplinks and downlinks, int64
    ``[planes, levels]``."""
    ports_per_plane, nic_bandwidth, nic_latency = nic
    planes, levels = switch_offset.shape[0], len(tiers)
    num_gpus = len(gpu_node)
    gpu_of_slot = np.empty(num_gpus, np.int64)
    gpu_of_slot[slot_of_gpu] = np.arange(num_gpus)
    up_offset = np.zeros((planes, levels), np.int64)
    down_offset = np.zeros((planes, levels), np.int64)
    for plane in range(planes):
        leaf = switch_offset[plane, 1] + np.arange(num_gpus) // m[1]
        up_offset[plane, 0], down_offset[plane, 0] = asm.add_cables(
            gpu_node[gpu_of_slot],
            leaf,
            ports_per_plane * nic_bandwidth,
            nic_latency,
            "nic",
            ports_per_plane,
        )
        for level in range(1, levels):
            tier = tiers[level - 1]
            child = np.repeat(np.arange(N[level]), w[level + 1])
            choice = np.tile(np.arange(w[level + 1]), N[level])
            parent = (
                (child // W[level] // m[level + 1]) * W[level + 1]
                + (child % W[level]) * w[level + 1]
                + choice
            )
            # Uplinks are numbered child-major (child * w + b); downlinks parent-major
            # (parent * m + digit). Both are added as cables in the uplink order, so build the
            # downlink block separately to keep its arithmetic numbering.
            up_offset[plane, level] = asm.add_links(
                switch_offset[plane, level] + child,
                switch_offset[plane, level + 1] + parent,
                tier.uplink_bundle * tier.uplink_bandwidth_Bps,
                tier.latency_s,
                tier.name,
                tier.uplink_bundle,
            )
            parent_d = np.repeat(np.arange(N[level + 1]), m[level + 1])
            digit = np.tile(np.arange(m[level + 1]), N[level + 1])
            block_up = parent_d // W[level + 1]
            choice_up = parent_d % W[level + 1]
            child_d = (block_up * m[level + 1] + digit) * W[level] + choice_up // w[level + 1]
            down_offset[plane, level] = asm.add_links(
                switch_offset[plane, level + 1] + parent_d,
                switch_offset[plane, level] + child_d,
                tier.uplink_bundle * tier.uplink_bandwidth_Bps,
                tier.latency_s,
                tier.name,
                tier.uplink_bundle,
            )
    return up_offset, down_offset


def _rail_only_rails(topology: sr.Section, common) -> int:
    """The rail count of a rail-only fabric (``gpus_per_node``), after checking that
    cross-rail traffic has a way: a scale-up domain of whole nodes."""
    per_node = common.gpus_per_node
    if per_node == 1:
        raise SpecError(
            topology.field("attachment"),
            "rail-only needs several GPUs per node (one rail each); with gpus_per_node 1 "
            "use attachment: tor",
        )
    if common.scale_up is None or common.scale_up.domain_size % per_node:
        raise SpecError(
            topology.field("attachment"),
            "rail-only sends traffic between rails over the scale-up domain: give scale_up "
            f"with a domain_size that is a multiple of gpus_per_node ({per_node}), "
            "or use attachment: rail",
        )
    return per_node


def _host_slots(num_gpus: int, per_node: int, hosts_per_leaf: int, attachment: str) -> np.ndarray:
    """Host slot of every GPU. ToR: GPUs in index order fill leaves. Rail: GPU r of the
    ``hosts_per_leaf`` nodes of a rail group sits on that group's leaf r. Rail-only: rail
    r's slots are ``r * nodes .. (r + 1) * nodes - 1`` in node order."""
    gpu = np.arange(num_gpus, dtype=np.int64)
    if attachment == "tor" or per_node == 1:
        return gpu
    node, rail = gpu // per_node, gpu % per_node
    if attachment == "rail-only":
        return rail * (num_gpus // per_node) + node
    group, node_in_group = node // hosts_per_leaf, node % hosts_per_leaf
    leaf = group * per_node + rail
    return leaf * hosts_per_leaf + node_in_group
