"""Dragonfly generator (Kim et al., ISCA'08; Cray/HPE Slingshot as in Frontier).

``groups`` groups of ``switches_per_group`` switches (tier 1, kind ``switch``). Inside a
group every switch pair has a ``local`` cable (all-to-all); every pair of groups has
``global_links_per_group_pair`` ``global`` cables. Each switch has ``gpus_per_switch``
GPU NIC ports (``nic`` cables). GPUs are numbered group-major: GPU ``g`` hangs off
switch ``g // gpus_per_switch`` (global switch index), which is in group
``g // (switches_per_group * gpus_per_switch)``.

Global link arrangement (round-robin): group ``A`` lists its global cables remote-group
major, ``(B, c)`` for the other groups ``B`` in increasing order and copies
``c = 0..k-1``; the ``q``-th cable in that list sits on switch ``q mod switches_per_group``
of ``A``. With ``r_A(B) = B - (B > A)`` the rank of ``B`` among ``A``'s remote groups, copy
``c`` of the cable ``A <-> B`` joins switch ``(r_A(B) k + c) mod a`` of ``A`` to switch
``(r_B(A) k + c) mod a`` of ``B``. The ``k`` copies between two groups thus land on ``k``
different switches when ``k <= a``, and every switch carries ``ceil`` or ``floor`` of
``(groups - 1) k / a`` global cables.

Spec (``topology`` section, ``type: dragonfly``)::

    groups: 74
    switches_per_group: 32
    gpus_per_switch: 16          # or nodes_per_switch (x the top-level gpus_per_node)
    nic_bandwidth: 200Gbps       # per GPU NIC port, per direction
    nic_latency: 0.5us
    local_bandwidth: 200Gbps     # per local cable, per direction
    local_links_per_switch_pair: 1   # parallel local cables, modeled as one link
    local_latency: 0.35us
    global_bandwidth: 200Gbps    # per global cable, per direction
    global_links_per_group_pair: 4
    global_latency: 0.5us

Parallel cables (``local_links_per_switch_pair > 1``, or more global copies than switches
per group) between one switch pair are bundled into one link of the summed capacity, as
the Clos generator does for uplink bundles.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fabricflow import schema as sr
from fabricflow.errors import SpecError
from fabricflow.fabric.assemble import Assembler, check_build_size
from fabricflow.fabric.common_spec import CommonSpec, finish_fabric
from fabricflow.fabric.fabric import Fabric
from fabricflow.fabric.scale_up import ScaleUpLinks, add_scale_up

DRAGONFLY_KEYS = (
    "type",
    "groups",
    "switches_per_group",
    "gpus_per_switch",
    "nodes_per_switch",
    "nic_bandwidth",
    "nic_latency",
    "local_bandwidth",
    "local_links_per_switch_pair",
    "local_latency",
    "global_bandwidth",
    "global_links_per_group_pair",
    "global_latency",
)


@dataclasses.dataclass(frozen=True, eq=False)
class DragonflyStructure:
    """Arithmetic description of a built dragonfly, used by the minimal/Valiant router.

    Attributes:
        groups, switches_per_group (``a``), gpus_per_switch (``p``): the shape.
        copies: global cables per group pair (``k``); ``bundle`` of them share one link
            when ``k > a`` (``links_per_pair = min(k, a)`` distinct global links).
        switch_offset: node id of switch 0 (switch ``s`` = global index ``G a + i``).
        nic_up_offset, nic_down_offset: link id of GPU ``g``'s NIC up/down link is the
            offset + ``g``.
        local_offset: link ``i -> j`` in group ``G`` has id
            ``local_offset + (G a + i)(a - 1) + j - (j > i)``.
        global_offset: link ``A -> B`` copy ``c`` has id
            ``global_offset + (A (groups - 1) + r_A(B)) links_per_pair + c``.
        scale_up: NVLink-style links if the spec has ``scale_up``, else None.
    """

    groups: int
    switches_per_group: int
    gpus_per_switch: int
    copies: int
    links_per_pair: int
    switch_offset: int
    nic_up_offset: int
    nic_down_offset: int
    local_offset: int
    global_offset: int
    scale_up: ScaleUpLinks | None

    # -- arithmetic of link ids (all vectorized over numpy int64 arrays) ------------
    def switch_of_gpu(self, gpu):
        return gpu // self.gpus_per_switch

    def local_link(self, group, i, j):
        a = self.switches_per_group
        return self.local_offset + (group * a + i) * (a - 1) + j - (j > i)

    def rank(self, group, other):
        """Rank of group ``other`` among the remote groups of ``group``."""
        return other - (other > group)

    def global_switch(self, group, other, copy):
        """Switch index (within ``group``) holding copy ``copy`` of the cable to ``other``."""
        return (self.rank(group, other) * self.copies + copy) % self.switches_per_group

    def global_link(self, group, other, copy):
        """Link id ``group -> other`` carrying copy ``copy`` (bundled copies share a link)."""
        slot = copy % self.links_per_pair
        return (
            self.global_offset
            + (group * (self.groups - 1) + self.rank(group, other)) * self.links_per_pair
            + slot
        )

    def bisection_Bps(self, fabric) -> float:
        """One-direction capacity of a cut between group halves ``[0, groups // 2)`` and
        the rest: the working global links crossing it, or the working NIC links of either
        half if those are smaller. This is a cut, so an upper bound on the min cut; it is
        the min cut unless local links are thinner than both (tests compare with max-flow).
        """
        half = self.groups // 2
        if half == 0:
            return 0.0
        a, p = self.switches_per_group, self.gpus_per_switch
        node_group = fabric.node_group
        lo = self.global_offset
        hi = lo + self.groups * (self.groups - 1) * self.links_per_pair
        ids = np.arange(lo, hi)
        crossing = ids[
            (node_group[fabric.link_src[ids]] < half) & (node_group[fabric.link_dst[ids]] >= half)
        ]
        global_cut = fabric.capacity[crossing].sum()
        gpus_a = half * a * p
        num_gpus = self.groups * a * p
        nic_a = fabric.capacity[self.nic_up_offset + np.arange(gpus_a)].sum()
        nic_b = fabric.capacity[self.nic_down_offset + np.arange(gpus_a, num_gpus)].sum()
        return float(min(global_cut, nic_a, nic_b))


def build_dragonfly(topology: sr.Section, common: CommonSpec) -> Fabric:
    """Build a dragonfly fabric from the ``topology`` section and the common spec."""
    groups, a, p, copies = _group_shape(topology, common)
    nic_bw = topology.get("nic_bandwidth", sr.bandwidth)
    local_bw = topology.get("local_bandwidth", sr.bandwidth, nic_bw)
    local_bundle = topology.get("local_links_per_switch_pair", sr.positive_int, 1)
    global_bw = topology.get("global_bandwidth", sr.bandwidth, nic_bw)
    nic_lat = topology.get("nic_latency", sr.time, 0.5e-6)
    local_lat = topology.get("local_latency", sr.time, 0.35e-6)
    global_lat = topology.get("global_latency", sr.time, 0.5e-6)
    num_gpus = common.num_gpus
    check_build_size(
        num_nodes=num_gpus + groups * a + (num_gpus if common.scale_up else 0),
        num_links=(4 if common.scale_up else 2) * num_gpus
        + groups * a * (a - 1)
        + groups * (groups - 1) * copies,
        what=f"a dragonfly of {groups} groups x {a} switches",
    )

    asm = Assembler()
    gpu = np.arange(num_gpus, dtype=np.int64)
    gpu_node = asm.add_nodes(num_gpus, "gpu", tier=0) + gpu
    scale_up = add_scale_up(asm, gpu_node, common.scale_up) if common.scale_up else None
    num_switches = groups * a
    switch_offset = asm.add_nodes(
        num_switches, "switch", tier=1, group=np.arange(num_switches) // a
    )
    nic_up, nic_down = asm.add_cables(gpu_node, switch_offset + gpu // p, nic_bw, nic_lat, "nic")

    local_offset = asm.num_links
    _add_local_links(
        asm, switch_offset, groups, a, local_bundle * local_bw, local_lat, local_bundle
    )

    links_per_pair = min(copies, a)
    structure = DragonflyStructure(
        groups=groups,
        switches_per_group=a,
        gpus_per_switch=p,
        copies=copies,
        links_per_pair=links_per_pair,
        switch_offset=switch_offset,
        nic_up_offset=nic_up,
        nic_down_offset=nic_down,
        local_offset=local_offset,
        global_offset=asm.num_links,
        scale_up=scale_up,
    )
    _add_global_links(asm, structure, global_bw, global_lat)

    domains = gpu // common.scale_up.domain_size if common.scale_up else gpu // common.gpus_per_node
    node_groups: tuple[tuple[np.ndarray, np.ndarray], ...] = ()
    if scale_up is not None and common.scale_up is not None:
        # a domain switch belongs to the group of its first GPU
        first_gpu = np.arange(scale_up.switch_node.size) * common.scale_up.domain_size
        node_groups = ((scale_up.switch_node, first_gpu // (a * p)),)
    return finish_fabric(
        asm,
        common,
        gpu_node,
        domains,
        structure,
        group_of_gpu=gpu // (a * p),
        node_groups=node_groups,
        meta={"dragonfly_global_arrangement": "round-robin, remote-group major"},
    )


def _group_shape(topology: sr.Section, common) -> tuple[int, int, int, int]:
    """``(groups, switches_per_group, gpus_per_switch, global_links_per_group_pair)`` of
    the ``topology`` section, checked against each other and the spec's GPU count
    (:class:`SpecError` naming the field)."""
    groups = topology.get("groups", sr.positive_int)
    a = topology.get("switches_per_group", sr.positive_int)
    if topology.has("gpus_per_switch") == topology.has("nodes_per_switch"):
        raise SpecError(
            topology.field("gpus_per_switch"),
            "give exactly one of gpus_per_switch "
            "or nodes_per_switch (servers of gpus_per_node GPUs per switch)",
        )
    if topology.has("gpus_per_switch"):
        p = topology.get("gpus_per_switch", sr.positive_int)
    else:
        p = topology.get("nodes_per_switch", sr.positive_int) * common.gpus_per_node
    copies = topology.get("global_links_per_group_pair", sr.positive_int, 1)
    if groups < 2:
        raise SpecError(
            topology.field("groups"), f"a dragonfly needs at least 2 groups, got {groups}"
        )
    expected = groups * a * p
    if common.num_gpus != expected:
        raise SpecError(
            "gpus",
            f"groups x switches_per_group x gpus_per_switch = {groups} x {a} x "
            f"{p} = {expected} GPUs, but gpus is {common.num_gpus}",
        )
    return groups, a, p, copies


def _add_local_links(
    asm: Assembler,
    switch_offset: int,
    groups: int,
    a: int,
    capacity: float,
    latency: float,
    bundle: int,
) -> None:
    """Add each group's local all-to-all between its ``a`` switches: ordered pairs
    ``(i, j)``, ``i != j``, numbered ``(G a + i)(a - 1) + j - (j > i)`` from the first
    link added (``capacity`` B/s and ``latency`` s per link, ``bundle`` cables each)."""
    num_switches = groups * a
    if a > 1:
        sw = np.repeat(np.arange(num_switches), a - 1)
        jj = np.tile(np.arange(a - 1), num_switches)
        i = sw % a
        j = jj + (jj >= i)
        asm.add_links(
            switch_offset + sw,
            switch_offset + (sw - i) + j,
            capacity,
            latency,
            "local",
            bundle,
        )


def _add_global_links(
    asm: Assembler, structure: DragonflyStructure, bandwidth: float, latency: float
) -> None:
    """Add the global links from link id ``structure.global_offset`` on: every ordered
    pair of groups ``A -> B``, slots ``0..links_per_pair - 1`` in id order; copies ``c``
    with the same ``c mod a`` share the switch pair and are bundled into slot ``c mod a``
    (``bandwidth`` B/s per copy, ``latency`` s)."""
    groups, a = structure.groups, structure.switches_per_group
    copies, links_per_pair = structure.copies, structure.links_per_pair
    src_group = np.repeat(np.arange(groups), groups - 1)
    rank = np.tile(np.arange(groups - 1), groups)
    dst_group = rank + (rank >= src_group)
    slot = np.arange(links_per_pair)
    A = np.repeat(src_group, links_per_pair)
    B = np.repeat(dst_group, links_per_pair)
    c = np.tile(slot, src_group.size)
    bundled = (copies - c + a - 1) // a  # copies c, c + a, c + 2a, ... < copies
    start = asm.add_links(
        structure.switch_offset + A * a + structure.global_switch(A, B, c),
        structure.switch_offset + B * a + structure.global_switch(B, A, c),
        bundled * bandwidth,
        latency,
        "global",
        bundled,
    )
    assert start == structure.global_offset
