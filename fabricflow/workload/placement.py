"""Rank-to-GPU placement and the communication groups of every parallel dimension.

A rank's coordinates come from a Megatron-style order string such as ``tp-cp-ep-dp-pp``:
the first dimension varies fastest, so with that order the TP group is ``tp`` consecutive
ranks. Dense layers use the order without ``ep`` (sizes tp, cp, dp, pp); expert layers use
it without ``cp``, with ``tp`` standing for the expert tensor-parallel size and ``dp`` for
the expert data-parallel size ``tp * cp * dp / (ep * expert_tp)`` (Megatron-Core's expert
rank generator: the expert-parallel group may span tensor-, context- and data-parallel
ranks). Ranks then map to fabric GPUs: ``contiguous`` (rank r
on GPU r), ``scattered`` (whole servers in a seeded random order, as a busy scheduler
hands them out) or ``topology-aware`` (the order itself is chosen: the dimension that moves
the most bytes per step varies fastest, and ranks fill GPUs in the fabric's locality
order, so the heaviest groups land in the smallest subtree: the scale-up domain first,
then the leaf / rail group, then the pod). ``domain-aligned`` runs 64 ranks in each
scale-up domain of 64 or more GPUs (an NVL72 rack keeps 8 GPUs, two trays, as spares), and
``deployed`` (the default of :func:`fabricflow.step_time`) places as such racks are run:
whole trays inside racks, spares kept, and the tensor- and expert-parallel groups inside one
scale-up domain whenever they fit in one (see :func:`deployed_gpus`); on fabrics without
such domains it is ``contiguous``. Placement decides what traffic stays inside NVLink
domains, rails and pods.

Groups are int64 arrays ``[num_groups, group_size]`` of GPU indices, built with one
reshape/transpose each (no Python loop over ranks).
"""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.fabric.clos import ClosStructure
from fabricflow.fabric.fabric import Fabric
from fabricflow.workload.comm_volume import rank_dimensions
from fabricflow.workload.layout import Layout
from fabricflow.workload.model_spec import ModelSpec

DIMENSIONS = ("tp", "cp", "ep", "dp", "pp")
PLACEMENTS = ("contiguous", "scattered", "topology-aware", "domain-aligned", "deployed")
# The placement a step is timed with when none is named: as racks are deployed.
DEFAULT_PLACEMENT = "deployed"
# domain-aligned placement uses a multiple of this many GPUs of each scale-up domain of at
# least this size: 64 of every 72-GPU NVL72 rack, 8 left as spares (docs/references.md §6)
DOMAIN_ALIGN = 64
DEFAULT_ORDER = "tp-cp-ep-dp-pp"


def parse_order(order: str) -> tuple[str, ...]:
    """``'tp-cp-ep-dp-pp'`` -> ('tp', 'cp', 'ep', 'dp', 'pp'); every dimension exactly once."""
    parts = tuple(part.strip().lower() for part in str(order).split("-"))
    if sorted(parts) != sorted(DIMENSIONS):
        raise SpecError(
            "order",
            f"{order!r} must name each of {list(DIMENSIONS)} exactly once, "
            "separated by '-', fastest-varying first (e.g. 'tp-cp-ep-dp-pp')",
        )
    return parts


@dataclasses.dataclass(frozen=True, eq=False)
class Placement:
    """Where each rank of a layout runs.

    Attributes:
        layout: the parallel layout.
        order: dimension order, fastest-varying first.
        gpu_of_rank: int64 ``[num_ranks]`` fabric GPU index of each rank.
    """

    layout: Layout
    order: tuple[str, ...]
    gpu_of_rank: np.ndarray

    def _grid(self, expert: bool) -> tuple[list[str], list[int]]:
        lay = self.layout
        if expert:
            # Megatron-Core's expert rank generator: the stage's tp x cp x dp ranks regrouped
            # as expert_tp x ep x expert_dp ("MoE parallel folding")
            sizes = {"tp": lay.expert_tensor, "ep": lay.ep, "dp": lay.expert_dp, "pp": lay.pp}
            dims = [d for d in self.order if d != "cp"]
        else:
            sizes = {"tp": lay.tp, "cp": lay.cp, "dp": lay.dp, "pp": lay.pp}
            dims = [d for d in self.order if d != "ep"]
        return dims, [sizes[d] for d in dims]

    def groups(self, dims: str | tuple[str, ...], *, expert: bool = False) -> np.ndarray:
        """GPU indices of every group of ``dims``: int64 ``[num_groups, group_size]``.

        ``dims`` is one dimension (``'tp'``) or several (``('dp', 'cp')``, the gradient
        reduction group); members are ordered by rank within the group. ``expert=True``
        uses the expert-layer decomposition (``'ep'``, and ``'dp'`` = expert data parallel).
        """
        wanted = (dims,) if isinstance(dims, str) else tuple(dims)
        names, sizes = self._grid(expert)
        for dim in wanted:
            if dim not in names:
                raise SpecError(
                    "dims",
                    f"{dim!r} is not a dimension of the "
                    f"{'expert' if expert else 'dense'} layout {names}",
                )
        # C-order reshape puts the last axis fastest, so reverse: axis -1 = names[0].
        grid = self.gpu_of_rank.reshape(sizes[::-1])
        axis_of = {name: len(names) - 1 - i for i, name in enumerate(names)}
        # Members ordered with the fastest-varying dimension fastest.
        move = [axis_of[d] for d in sorted(wanted, key=names.index, reverse=True)]
        grid = np.moveaxis(grid, move, list(range(grid.ndim - len(move), grid.ndim)))
        size = int(np.prod([sizes[names.index(d)] for d in wanted]))
        return grid.reshape(-1, size)


def place(
    layout: Layout,
    num_fabric_gpus: int,
    *,
    order: str = DEFAULT_ORDER,
    placement: str = "contiguous",
    seed: int = 0,
    gpus_per_node: int = 1,
    fabric: Fabric | None = None,
    model: ModelSpec | None = None,
) -> Placement:
    """Map the ranks of ``layout`` onto GPUs ``0..num_fabric_gpus-1``.

    Args:
        layout: the parallel layout (its GPU count must fit the fabric).
        num_fabric_gpus: GPUs available on the fabric.
        order: Megatron-style order string, fastest-varying dimension first.
        placement: ``contiguous`` (rank r -> GPU r) or ``scattered`` (servers of
            ``gpus_per_node`` GPUs picked and ordered at random with ``seed``; GPUs keep
            their order inside a server).
            ``topology-aware``: see :func:`topology_aware_order` and
            :func:`locality_order`; it picks the order itself, so ``order`` must stay at
            its default.
            ``domain-aligned``: rank r on the r-th of the GPUs :func:`aligned_gpus` keeps
            (the first ``D - D mod 64`` of every scale-up domain of ``D >= 64`` GPUs: an
            NVL72 rack runs 64 ranks and keeps 8 GPUs as spares), so groups of up to 64
            consecutive ranks stay inside one NVLink domain; needs ``fabric``.
            ``deployed``: rank r on the r-th of the GPUs :func:`deployed_gpus` keeps (whole
            trays of spare-keeping domains, in multiples of the TP / EP group span that fits
            one domain), or ``contiguous`` where the job needs more GPUs than they keep;
            needs ``fabric``.
        seed: random seed of ``scattered``.
        gpus_per_node: GPUs per server (the unit a scheduler allocates).
        fabric: the fabric, for ``topology-aware`` (``None``: GPU index order stands for
            locality, as the generators number GPUs node by node, leaf by leaf).
        model: ranks dimensions by bytes per step for ``topology-aware`` (``None``: the
            default ranking TP > CP > EP > DP > PP).
    """
    if not isinstance(layout, Layout):
        raise SpecError("layout", f"expected a Layout, got {type(layout).__name__}")
    layout.validate()
    for field, value in (("num_fabric_gpus", num_fabric_gpus), ("gpus_per_node", gpus_per_node)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise SpecError(field, f"must be an integer >= 1, got {value!r}")
    dims = parse_order(order)
    num_ranks = layout.num_gpus
    if num_ranks > num_fabric_gpus:
        raise SpecError(
            "gpus", f"the layout needs {num_ranks} GPUs but the fabric has {num_fabric_gpus}"
        )
    if placement == "contiguous":
        gpu_of_rank = np.arange(num_ranks, dtype=np.int64)
    elif placement == "domain-aligned":
        if fabric is None:
            raise SpecError("fabric", "domain-aligned placement needs the fabric (its domains)")
        usable = aligned_gpus(fabric)
        if usable.size < num_ranks:
            raise SpecError(
                "gpus",
                f"the layout needs {num_ranks} GPUs but domain-aligned placement keeps "
                f"{usable.size} of the fabric's {fabric.num_gpus} (a multiple of "
                f"{DOMAIN_ALIGN} per scale-up domain)",
            )
        gpu_of_rank = usable[:num_ranks]
    elif placement == "deployed":
        if fabric is None:
            raise SpecError("fabric", "deployed placement needs the fabric (its domains)")
        usable = deployed_gpus(fabric, layout, dims)
        if usable.size < num_ranks:  # the job needs the spares too: every GPU, in order
            usable = np.arange(num_fabric_gpus, dtype=np.int64)
        gpu_of_rank = usable[:num_ranks]
    elif placement == "topology-aware":
        if dims != parse_order(DEFAULT_ORDER):
            raise SpecError(
                "order",
                f"topology-aware placement picks the rank order itself; got order {order!r} "
                f"(leave it at {DEFAULT_ORDER!r}, or use contiguous placement with it)",
            )
        if fabric is not None and fabric.num_gpus != num_fabric_gpus:
            raise SpecError(
                "num_fabric_gpus",
                f"{num_fabric_gpus} differs from the fabric's {fabric.num_gpus} GPUs",
            )
        dims = topology_aware_order(layout, model)
        locality = (
            np.arange(num_fabric_gpus, dtype=np.int64) if fabric is None else locality_order(fabric)
        )
        gpu_of_rank = locality[:num_ranks]
    elif placement == "scattered":
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise SpecError("seed", f"must be an integer >= 0, got {seed!r}")
        per_node = max(int(gpus_per_node), 1)
        if num_fabric_gpus % per_node or num_ranks % per_node:
            per_node = 1
        rng = np.random.default_rng(seed)
        nodes = rng.permutation(num_fabric_gpus // per_node)[: num_ranks // per_node]
        gpu_of_rank = (nodes[:, None] * per_node + np.arange(per_node)[None, :]).reshape(-1)
    else:
        raise SpecError("placement", f"unknown placement {placement!r}; one of {list(PLACEMENTS)}")
    return Placement(layout=layout, order=dims, gpu_of_rank=gpu_of_rank.astype(np.int64))


def aligned_gpus(fabric: Fabric) -> np.ndarray:
    """int64 GPU indices that ``domain-aligned`` placement uses, in index order: the first
    ``D - D mod DOMAIN_ALIGN`` GPUs of every scale-up domain of ``D >= DOMAIN_ALIGN`` GPUs
    (every GPU of smaller domains)."""
    size = np.bincount(fabric.gpu_domain.astype(np.int64), minlength=fabric.num_domains)
    keep = np.where(size >= DOMAIN_ALIGN, size - size % DOMAIN_ALIGN, size)
    return _first_of_domains(fabric, keep)


def group_span(layout: Layout, order: tuple[str, ...], dim: str, *, expert: bool) -> int:
    """Consecutive ranks that hold every group of ``dim`` whole: the product of the sizes of
    ``dim`` and of every dimension that varies faster in ``order`` (a ``tp`` group of the
    default order spans ``tp`` ranks, an expert-parallel group ``expert_tp x ep``)."""
    if expert:
        sizes = {"tp": layout.expert_tensor, "ep": layout.ep, "dp": layout.expert_dp}
        dims = [d for d in order if d != "cp"]
    else:
        sizes = {"tp": layout.tp, "cp": layout.cp, "dp": layout.dp}
        dims = [d for d in order if d != "ep"]
    sizes["pp"] = layout.pp
    return int(np.prod([sizes[d] for d in dims[: dims.index(dim) + 1]]))


def deployed_gpus(fabric: Fabric, layout: Layout, order: tuple[str, ...]) -> np.ndarray:
    """int64 GPU indices ``deployed`` placement uses, in index order.

    Scale-up domains of ``D >= DOMAIN_ALIGN`` GPUs keep spares, as NVL72 racks are run: the
    job uses the first ``D - D mod DOMAIN_ALIGN`` of each (64 of 72: 16 of 18 trays of 4),
    rounded down to whole trays (``fabric.gpus_per_node``) and then to a multiple of the
    largest span of consecutive ranks that must share a domain and fits one: the TP and
    expert-parallel groups together (the least common multiple of their spans), else the
    expert-parallel group, else the TP group (:func:`group_span`). A 32-rank expert group
    thus never straddles two racks. Smaller domains (8-GPU servers) keep every GPU.
    """
    size = np.bincount(fabric.gpu_domain.astype(np.int64), minlength=fabric.num_domains)
    spares = size >= DOMAIN_ALIGN
    tray = max(int(fabric.gpus_per_node), 1)
    keep = np.where(spares, size - size % DOMAIN_ALIGN, size)
    keep = np.where(spares, keep - keep % tray, keep)
    if spares.any():
        room = int(keep[spares].min())
        tp_span = group_span(layout, order, "tp", expert=False)
        ep_span = group_span(layout, order, "ep", expert=True) if layout.ep > 1 else 1
        both = int(np.lcm(tp_span, ep_span))
        block = next((span for span in (both, ep_span, tp_span) if span <= room), 1)
        keep = np.where(spares, keep - keep % block, keep)
    return _first_of_domains(fabric, keep)


def _first_of_domains(fabric: Fabric, keep: np.ndarray) -> np.ndarray:
    """int64 indices of the first ``keep[d]`` GPUs (by index) of every domain ``d``
    (domains need not be index-contiguous)."""
    domain = fabric.gpu_domain.astype(np.int64)
    gpu = np.arange(fabric.num_gpus, dtype=np.int64)
    size = np.bincount(domain, minlength=fabric.num_domains)
    order = np.lexsort((gpu, domain))
    start = np.concatenate([[0], np.cumsum(size)[:-1]])
    local = np.empty_like(gpu)
    local[order] = np.arange(gpu.size) - start[domain[order]]
    return np.flatnonzero(local < keep[domain]).astype(np.int64)


def topology_aware_order(layout: Layout, model: ModelSpec | None = None) -> tuple[str, ...]:
    """The rank order of ``topology-aware`` placement, fastest-varying first.

    Dimensions go from the most bytes per GPU per step to the least
    (:func:`~fabricflow.workload.comm_volume.rank_dimensions`; without a model TP > CP >
    EP > DP > PP). ``ep`` is not a dimension of dense layers: it goes right before the
    first of ``cp``/``dp``, because expert groups split the data x context-parallel ranks
    (Megatron's expert rank generator); when both ``cp`` and ``dp`` exceed 1 under expert
    parallelism, ``dp`` follows ``cp`` directly so that their ranks form one block.
    """
    ranking = [d for d in rank_dimensions(model, layout) if d != "ep"]
    if layout.ep > 1 and layout.cp > 1 and layout.dp > 1:
        ranking.remove("dp")
        ranking.insert(ranking.index("cp") + 1, "dp")
    first = min(ranking.index("cp"), ranking.index("dp"))
    ranking.insert(first, "ep")
    return tuple(ranking)


def locality_order(fabric: Fabric) -> np.ndarray:
    """int64 ``[G]``: the fabric's GPUs ordered so that consecutive GPUs share the smallest
    subtree: GPUs of one scale-up domain together, domains under one leaf / rail group
    together, those under one pod together (a Clos's blocks, from its structure); on other
    fabrics domains are grouped by their node group (dragonfly group, torus host), then by
    index. Ties keep GPU index order. Vectorized: one ``lexsort`` over ``G`` GPUs.
    """
    gpu = np.arange(fabric.num_gpus, dtype=np.int64)
    domain = fabric.gpu_domain.astype(np.int64)
    # Each domain is placed where its lowest-indexed GPU sits (a rail-optimized node spans
    # several leaves, one per rail, but lies in one rail group).
    first = np.full(fabric.num_domains, fabric.num_gpus, dtype=np.int64)
    np.minimum.at(first, domain, gpu)
    representative = first[domain]
    keys = [gpu, domain]  # np.lexsort: the last key is the primary one
    structure = fabric.structure
    if isinstance(structure, ClosStructure):
        slot = structure.slot_of_gpu[representative]
        keys += [slot // int(structure.H[i]) for i in range(1, structure.levels)]
    else:
        keys.append(fabric.node_group[fabric.gpu_node[representative]].astype(np.int64))
    return np.lexsort(keys).astype(np.int64)
