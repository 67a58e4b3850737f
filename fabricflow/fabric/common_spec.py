"""What every topology generator shares: the generator-independent part of a spec
(:class:`CommonSpec`, parsed by :mod:`fabricflow.fabric.spec`) and the last step that turns
an :class:`~fabricflow.fabric.assemble.Assembler` into a :class:`Fabric`
(:func:`finish_fabric`).

It sits below both :mod:`fabricflow.fabric.spec` and the generators (``clos``, ``torus``,
``dragonfly``, ``graph``): the spec reads the common keys and picks a generator from
:data:`fabricflow.fabric.generators.GENERATORS`; a generator never imports the spec.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from fabricflow import schema as sr
from fabricflow.fabric.assemble import Assembler
from fabricflow.fabric.fabric import Fabric
from fabricflow.fabric.scale_up import ScaleUpSpec
from fabricflow.fabric.transport import Transport


@dataclasses.dataclass(frozen=True)
class CommonSpec:
    """The generator-independent part of a spec."""

    name: str
    num_gpus: int
    gpus_per_node: int
    scale_up: ScaleUpSpec | None
    in_network_reduction: bool
    meta: dict
    transport: Transport = Transport()


Builder = Callable[[sr.Section, CommonSpec], Fabric]
"""A generator: ``(topology section, common spec) -> Fabric``."""


def finish_fabric(
    assembler: Assembler,
    common: CommonSpec,
    gpu_node: np.ndarray,
    gpu_domain: np.ndarray,
    structure,
    group_of_gpu: np.ndarray | None = None,
    node_groups: tuple[tuple[np.ndarray, np.ndarray], ...] = (),
    meta: dict | None = None,
) -> Fabric:
    """Shared last step of the generators: set node groups and build the Fabric.

    ``group_of_gpu`` (int ``[G]``) is the group of each GPU's node; ``node_groups`` are
    further ``(nodes, groups)`` assignments applied after it; ``meta`` adds entries to
    the fabric's ``meta``. Everything is set before the (frozen) Fabric is made.
    """
    if group_of_gpu is not None:
        node_groups = ((gpu_node, group_of_gpu), *node_groups)
    fabric = assembler.build(
        common.name,
        gpu_node=gpu_node,
        gpu_domain=gpu_domain,
        gpus_per_node=common.gpus_per_node,
        structure=structure,
        meta={
            **common.meta,
            "nvls": bool(common.scale_up and common.scale_up.nvls),
            "in_network_reduction": common.in_network_reduction,
            "scale_up_domain_size": common.scale_up.domain_size if common.scale_up else 1,
            "transport": common.transport,
            **(meta or {}),
        },
        node_groups=node_groups,
    )
    return fabric
