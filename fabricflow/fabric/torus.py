"""N-dimensional torus / mesh generator (TPU-style direct-connect ICI fabrics).

Every accelerator is a node of the fabric and forwards traffic for others (as TPU ICI
routers do); there are no switches. Chip ``g`` has coordinates ``c`` with ``x``
fastest-varying: ``g = c[0] + dims[0] * (c[1] + dims[1] * c[2] ...)``, so the natural
GPU-index halving cuts the last (slowest) dimension.

Along dimension ``d`` of size ``k`` each chip has one cable to its ``+1`` neighbour:
``k`` cables per ring with wrap-around when ``k >= 3``, ``k - 1`` without (a mesh line).
A dimension of size 2 has one cable per pair (a wrap-around cable would duplicate it),
size 1 has none. Links are labelled ``ici``.

Spec (``topology`` section, ``type: torus``)::

    dims: [16, 16, 16]         # ring sizes, x first; the product is the GPU count
    wraparound: true           # torus (true) or mesh (false); one value or one per dimension
    link_bandwidth: 50GB/s     # per cable per direction; one value or one per dimension
    latency: 0.5us             # per hop (chip router + cable)
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from fabricflow import schema as sr
from fabricflow.errors import SpecError
from fabricflow.fabric.assemble import Assembler, check_build_size
from fabricflow.fabric.common_spec import CommonSpec, finish_fabric
from fabricflow.fabric.fabric import Fabric

TORUS_KEYS = ("type", "dims", "wraparound", "link_bandwidth", "latency")
MAX_DIMS = 6


@dataclasses.dataclass(frozen=True, eq=False)
class TorusStructure:
    """Arithmetic description of a built torus, used by the DOR router.

    Attributes:
        dims: int64 ``[D]`` ring sizes (x first).
        ring: bool ``[D]``: True where the dimension wraps around (size >= 3 and
            ``wraparound``); shortest direction around the ring is then used.
        strides: int64 ``[D]``: node-id stride of each dimension (``x`` fastest).
        step_link: int64 ``[D, 2, N]``: link id leaving node ``n`` along dimension ``d`` in
            direction ``+`` (index 0) or ``-`` (index 1); ``-1`` where there is none.
        coords: int64 ``[N, D]`` coordinates of every node (node id == GPU index).
    """

    dims: np.ndarray
    ring: np.ndarray
    strides: np.ndarray
    step_link: np.ndarray
    coords: np.ndarray

    @property
    def max_hops(self) -> int:
        """Longest minimal path: ``sum(k // 2)`` over ring dims plus ``k - 1`` over lines."""
        return int(np.where(self.ring, self.dims // 2, self.dims - 1).sum())

    def cut_dimension(self) -> int:
        """The dimension the bisection cuts: the longest, the last one on ties (so that the
        cut matches the GPU-index halving when all dimensions are equal)."""
        return int(len(self.dims) - 1 - np.argmax(self.dims[::-1]))

    def bisection_Bps(self, fabric) -> float:
        """One-direction capacity of the working links from the lower half
        (``c[d] < k // 2``) to the upper half of the longest dimension ``d``.

        Every node is a GPU, so this boundary is exactly the min cut between the halves:
        ``2 * prod(other dims)`` links with wrap-around, half that on a mesh line.
        Computed from the built arrays, so failures lower it.
        """
        d = self.cut_dimension()
        if self.dims[d] < 2:
            return 0.0
        lower = self.coords[:, d] < self.dims[d] // 2
        crossing = lower[fabric.link_src] & ~lower[fabric.link_dst] & fabric.link_up
        return float(fabric.capacity[crossing].sum())


def _per_dimension(section: sr.Section, key: str, parse, count: int, default) -> list:
    """A scalar or a list of ``count`` values, each parsed by ``parse``."""
    if not section.has(key):
        return [default] * count
    value = section.raw(key)
    if isinstance(value, list):
        if len(value) != count:
            raise SpecError(
                section.field(key),
                f"give one value or a list of {count} (one per "
                f"dimension of dims), got {len(value)} values",
            )
        return [parse(v, f"{section.field(key)}[{i}]") for i, v in enumerate(value)]
    return [parse(value, section.field(key))] * count


def build_torus(topology: sr.Section, common: CommonSpec) -> Fabric:
    """Build a torus/mesh fabric from the ``topology`` section and the common spec."""
    dims_raw = topology.raw("dims")
    if not isinstance(dims_raw, list) or not 1 <= len(dims_raw) <= MAX_DIMS:
        raise SpecError(
            topology.field("dims"),
            f"expected a list of 1 to {MAX_DIMS} ring sizes such as [16, 16, 16], got {dims_raw!r}",
        )
    dims = np.asarray(
        [sr.positive_int(v, f"{topology.field('dims')}[{i}]") for i, v in enumerate(dims_raw)],
        np.int64,
    )
    count = len(dims)
    wrap = np.asarray(_per_dimension(topology, "wraparound", sr.boolean, count, True))
    bandwidth = _per_dimension(topology, "link_bandwidth", sr.bandwidth, count, None)
    if bandwidth[0] is None:
        raise SpecError(
            topology.field("link_bandwidth"),
            "is required (per cable per direction, e.g. 50GB/s; one value or one per dimension)",
        )
    latency = topology.get("latency", sr.time, 0.5e-6)
    num = math.prod(int(d) for d in dims)  # Python ints: no int64 wrap-around
    if common.num_gpus != num:
        raise SpecError(
            "gpus",
            f"a torus of dims {dims.tolist()} has {num} chips, but gpus is "
            f"{common.num_gpus}; make gpus the product of dims",
        )
    if common.scale_up is not None:
        raise SpecError(
            "scale_up",
            "not supported with topology.type torus: the chips are "
            "joined directly by the torus links; remove scale_up",
        )

    check_build_size(
        num_nodes=num, num_links=2 * num * count, what=f"a torus of dims {dims.tolist()}"
    )
    strides = np.concatenate([[1], np.cumprod(dims)[:-1]]).astype(np.int64)
    node = np.arange(num, dtype=np.int64)
    coords = (node[:, None] // strides[None, :]) % dims[None, :]
    ring = wrap & (dims >= 3)

    asm = Assembler()
    gpu_node = asm.add_nodes(num, "gpu", tier=0) + node
    step_link = np.full((count, 2, num), -1, np.int64)
    for d in range(count):
        if dims[d] < 2:
            continue
        a = node if ring[d] else node[coords[:, d] < dims[d] - 1]
        b = a + strides[d] * np.where(coords[a, d] == dims[d] - 1, 1 - dims[d], 1)
        start_ab, start_ba = asm.add_cables(a, b, bandwidth[d], latency, "ici")
        step_link[d, 0, a] = start_ab + np.arange(a.size)
        step_link[d, 1, b] = start_ba + np.arange(a.size)

    structure = TorusStructure(
        dims=dims, ring=ring, strides=strides, step_link=step_link, coords=coords
    )
    # A group is a host's chips; chips forward traffic (the generic router may use them).
    return finish_fabric(
        asm,
        common,
        gpu_node,
        node // common.gpus_per_node,
        structure,
        node_groups=((node, node // common.gpus_per_node),),
        meta={"gpu_transit": True, "torus_dims": dims.tolist()},
    )
