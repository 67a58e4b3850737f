"""Scale-up (NVLink/NVSwitch-style) domains: D GPUs around one logical switch.

Each domain of ``domain_size`` consecutive GPUs gets one ``nvswitch`` node (the NVSwitch
planes of a node or an NVL72 rack are modeled as one non-blocking switch, which is what
they are for bandwidth purposes). Every GPU has one cable to it with the per-direction
bandwidth: vendors quote NVLink bandwidth bidirectional (900 GB/s for NVLink4 = 450 GB/s
each way), so the spec says which it gives.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fabricflow import schema as sr
from fabricflow.errors import SpecError
from fabricflow.fabric.assemble import Assembler

SCALE_UP_KEYS = (
    "domain_size",
    "bandwidth_bidirectional",
    "bandwidth_per_direction",
    "latency",
    "nvls",
    "name",
)


@dataclasses.dataclass(frozen=True)
class ScaleUpSpec:
    """domain_size GPUs per domain; bandwidth_Bps per GPU per direction; latency_s per hop."""

    domain_size: int
    bandwidth_Bps: float
    latency_s: float
    nvls: bool = False
    name: str = "nvlink"

    @classmethod
    def parse(cls, section: sr.Section) -> ScaleUpSpec:
        both = section.has("bandwidth_bidirectional") and section.has("bandwidth_per_direction")
        if both or not (
            section.has("bandwidth_bidirectional") or section.has("bandwidth_per_direction")
        ):
            raise SpecError(
                section.field("bandwidth_bidirectional"),
                "give exactly one of bandwidth_bidirectional (as vendors quote NVLink, "
                "e.g. 900GB/s) or bandwidth_per_direction (e.g. 450GB/s)",
            )
        if section.has("bandwidth_bidirectional"):
            per_direction = section.get("bandwidth_bidirectional", sr.bandwidth) / 2
        else:
            per_direction = section.get("bandwidth_per_direction", sr.bandwidth)
        return cls(
            domain_size=section.get("domain_size", sr.positive_int),
            bandwidth_Bps=per_direction,
            latency_s=section.get("latency", sr.time, 0.5e-6),
            nvls=section.get("nvls", sr.boolean, False),
            name=section.get("name", sr.text, "nvlink"),
        )


@dataclasses.dataclass(frozen=True)
class ScaleUpLinks:
    """Per-GPU link ids into (``up``) and out of (``down``) its domain switch, int64 ``[G]``."""

    up: np.ndarray
    down: np.ndarray
    switch_node: np.ndarray  # node id of each domain's switch, [num_domains]


def gpu_domains(num_gpus: int, domain_size: int) -> np.ndarray:
    if num_gpus % domain_size:
        raise SpecError(
            "scale_up.domain_size",
            f"the GPU count {num_gpus} is not a multiple of domain_size {domain_size}",
        )
    return np.arange(num_gpus, dtype=np.int64) // domain_size


def add_scale_up(assembler: Assembler, gpu_node: np.ndarray, spec: ScaleUpSpec) -> ScaleUpLinks:
    """Add one switch per domain and a cable from every GPU to it."""
    domains = gpu_domains(gpu_node.size, spec.domain_size)
    num_domains = gpu_node.size // spec.domain_size
    first = assembler.add_nodes(num_domains, "nvswitch", tier=-1, group=np.arange(num_domains))
    switch_node = first + np.arange(num_domains)
    up, down = assembler.add_cables(
        gpu_node, switch_node[domains], spec.bandwidth_Bps, spec.latency_s, spec.name
    )
    ids = np.arange(gpu_node.size)
    return ScaleUpLinks(up=up + ids, down=down + ids, switch_node=switch_node)
