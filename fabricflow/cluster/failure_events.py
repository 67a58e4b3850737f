"""The failure processes of a simulated cluster: which components exist, when the next one
fails, what a failure takes down, and the down counters of GPUs and links.

:class:`FailureProcesses` holds, for a fabric:

- the components of each class (:data:`~.failures.COMPONENTS`): one ``gpu`` and one
  ``nic`` per GPU, one ``node`` per server, one ``link`` per switch-to-switch cable (both
  directions), one ``switch`` per scale-out switch;
- one seeded exponential stream per class (the class's failure rate = components / MTBF
  of one); :meth:`draw` gives the next failure time and component;
- what a failure takes down (:meth:`take_down`: GPUs, links) and puts back
  (:meth:`bring_up`), as per-GPU and per-link down counters, so that overlapping failures
  (a node and one of its GPUs) are repaired independently;
- each GPU's scale-out uplinks, to find GPUs a switch failure cuts off the network
  (:meth:`cut_off`).

The simulator (:mod:`.simulate`) owns the event heap and what a failure does to jobs.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fabricflow.cluster.failures import COMPONENTS, FailureModel
from fabricflow.fabric.fabric import Fabric


class FailureProcesses:
    """Components, failure streams and down counters of ``fabric`` (see the module docs).

    Args:
        fabric: the healthy fabric.
        model: MTBF and MTTR per class, or None (nothing fails).
        gpus_per_node: GPUs of a server (a ``node`` component).
        seed: seed of the streams (one child stream per class, in
            :data:`~.failures.COMPONENTS` order).
    """

    def __init__(self, fabric: Fabric, model: FailureModel | None, gpus_per_node: int, seed: int):
        self.fabric = fabric
        self.model = model
        self.gpn = gpus_per_node
        num_gpus = fabric.num_gpus
        self.gpu_down = np.zeros(num_gpus, dtype=np.int32)
        self.gpu_drain = np.zeros(num_gpus, dtype=np.int32)  # out after an alarm (prediction)
        self.link_down = np.zeros(fabric.num_links, dtype=np.int32)
        tier = fabric.node_tier
        src_tier, dst_tier = tier[fabric.link_src], tier[fabric.link_dst]
        switch_links = (src_tier >= 1) & (dst_tier >= 1)
        self.cables = np.flatnonzero(switch_links & (fabric.link_src < fabric.link_dst))
        self.switches = np.flatnonzero(tier >= 1)
        # each GPU's scale-out uplinks (GPU node -> a tier >= 1 switch)
        gpu_of_node = np.full(fabric.num_nodes, -1, dtype=np.int64)
        gpu_of_node[fabric.gpu_node] = np.arange(num_gpus)
        uplink = (gpu_of_node[fabric.link_src] >= 0) & (dst_tier >= 1)
        self.uplinks = np.flatnonzero(uplink)
        self.uplink_gpu = gpu_of_node[fabric.link_src[self.uplinks]]
        self.has_uplink = np.bincount(self.uplink_gpu, minlength=num_gpus) > 0
        self.cable_reverse = _reverse_links(fabric, self.cables)
        self._once: np.ndarray | None = None  # bool [L]: the links that count a cable
        self.count = {
            "gpu": num_gpus,
            "nic": num_gpus,
            "node": num_gpus // gpus_per_node,
            "link": int(self.cables.size),
            "switch": int(self.switches.size),
        }
        self.active = {kind: np.zeros(n, dtype=bool) for kind, n in self.count.items()}
        self.records: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
        self.rng: dict[str, np.random.Generator] = {}
        if model is not None:
            streams = np.random.SeedSequence(seed).spawn(len(COMPONENTS))
            for kind, stream in zip(COMPONENTS, streams, strict=True):
                if kind in model.mtbf_s and self.count[kind] > 0:
                    self.rng[kind] = np.random.default_rng(stream)

    def rate(self, kind: str) -> float:
        """Failures per second of the class ``kind`` (all its components together)."""
        assert self.model is not None
        return self.count[kind] / self.model.mtbf_s[kind]

    def draw(self, kind: str, now: float) -> tuple[float, int]:
        """``(time, component)`` of the next failure of class ``kind`` after ``now``."""
        rng = self.rng[kind]
        return now + rng.exponential(1.0 / self.rate(kind)), int(rng.integers(self.count[kind]))

    def parts(self, kind: str, index: int) -> tuple[np.ndarray, np.ndarray]:
        """``(GPUs, links)`` (int64) that component ``index`` of ``kind`` takes down."""
        empty = np.empty(0, dtype=np.int64)
        if kind in ("gpu", "nic"):
            return np.array([index], dtype=np.int64), empty
        if kind == "node":
            return np.arange(index * self.gpn, (index + 1) * self.gpn, dtype=np.int64), empty
        if kind == "link":
            links = np.array([self.cables[index], self.cable_reverse[index]], dtype=np.int64)
            return empty, links[links >= 0]
        node = self.switches[index]
        fabric = self.fabric
        links = np.flatnonzero((fabric.link_src == node) | (fabric.link_dst == node))
        return empty, links.astype(np.int64)

    def take_down(self, kind: str, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Component ``index`` of ``kind`` fails: its GPUs and links count one more down;
        returns them (int64). The caller pushes the repair."""
        gpus, links = self.parts(kind, index)
        self.active[kind][index] = True
        self.records[(kind, index)] = (gpus, links)
        np.add.at(self.gpu_down, gpus, 1)
        np.add.at(self.link_down, links, 1)
        return gpus, links

    def bring_up(self, kind: str, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Component ``index`` of ``kind`` is repaired; returns its GPUs and links."""
        gpus, links = self.records.pop((kind, index))
        self.active[kind][index] = False
        np.subtract.at(self.gpu_down, gpus, 1)
        np.subtract.at(self.link_down, links, 1)
        return gpus, links

    def cut_off(self) -> np.ndarray:
        """bool ``[G]``: GPUs with scale-out uplinks none of which is up."""
        up = self.link_down[self.uplinks] == 0
        reach = np.bincount(self.uplink_gpu[up], minlength=self.fabric.num_gpus) > 0
        return self.has_uplink & ~reach

    def failed_fabric(self) -> Fabric:
        """The healthy fabric with the links whose down counter is > 0 failed (as
        ``Fabric.without`` would: both directions are counted already, cables and switch
        links alike), without its search for reverse links over every link."""
        down = self.link_down > 0
        if not down.any():
            return self.fabric
        base = self.fabric
        assert base.link_up is not None and base.link_cables is not None  # __post_init__
        down |= ~base.link_up
        if self._once is None:  # each cable once: src < dst, or its only direction
            self._once = (base.link_src < base.link_dst) | (base.reverse_links() < 0)
        lost = int(base.link_cables[down & self._once].sum())
        return dataclasses.replace(
            base,
            capacity=np.where(down, 0.0, base.capacity),
            link_up=~down,
            link_cables=np.where(down, 0, base.link_cables),
            meta={
                **base.meta,
                "failed_links": int(down.sum()),
                "failed_cables": int(base.meta.get("failed_cables", 0)) + lost,
            },
        )


def _reverse_links(fabric: Fabric, links: np.ndarray) -> np.ndarray:
    """int64: the link with swapped endpoints of each of ``links`` (-1 when none)."""
    key = fabric.link_src.astype(np.int64) * fabric.num_nodes + fabric.link_dst
    order = np.argsort(key, kind="stable")
    rev_key = fabric.link_dst[links].astype(np.int64) * fabric.num_nodes + fabric.link_src[links]
    where = np.minimum(np.searchsorted(key[order], rev_key), key.size - 1)
    found = key[order][where] == rev_key
    return np.where(found, order[where], -1)
