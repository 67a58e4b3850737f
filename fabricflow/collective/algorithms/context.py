"""What an algorithm builder needs to know about the groups and the fabric."""

from __future__ import annotations

import dataclasses

import numpy as np


class NotApplicable(Exception):
    """An algorithm cannot run on these groups / this fabric; the message says why."""


@dataclasses.dataclass(frozen=True, eq=False)
class Context:
    """Inputs of the algorithm builders.

    Attributes:
        op: canonical op name (see :mod:`fabricflow.collective.ops`).
        groups: int64 ``[G, n]`` GPU indices as the user gave them (rank order; rank 0
            is the root of a broadcast).
        ordered: int64 ``[G, n]`` members sorted by (scale-up domain, GPU index).
        grid: int64 ``[G, D, k]`` the same, split by domain, or ``None`` when the groups
            do not have the same number of members in every domain they touch.
        channels: channels (parallel rings / trees / flows per pair) per group.
        rail_aware: route ring hops between domains rail to rail (PXN): the last GPU of a
            domain hands its data over the scale-up link to the GPU of the next ring's rail.
        nvls: scale-up domains reduce in the switch (NVLink SHARP).
        sharp: scale-out switches reduce in the network (SHARP).
        nvls_efficiency / sharp_efficiency: throughput factors of the in-network reductions
            (a stage at efficiency ``e`` loads its links ``1/e`` times per byte).
    """

    op: str
    groups: np.ndarray
    ordered: np.ndarray
    grid: np.ndarray | None
    channels: int
    rail_aware: bool = True
    nvls: bool = False
    sharp: bool = False
    nvls_efficiency: float = 1.0
    sharp_efficiency: float = 1.0

    @property
    def num_groups(self) -> int:
        return int(self.groups.shape[0])

    @property
    def size(self) -> int:
        return int(self.groups.shape[1])

    def require_grid(self, algorithm: str) -> np.ndarray:
        if self.grid is None:
            raise NotApplicable(
                f"{algorithm} needs the same number of group members in every "
                "scale-up domain a group touches"
            )
        return self.grid
