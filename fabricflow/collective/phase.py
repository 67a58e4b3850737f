"""Phases and transfers: the flows a collective algorithm sends.

An algorithm is a sequence of *phases*; within a phase, every group runs ``Tg``
*transfers* at once. A transfer is a stream of data that crosses a fixed sequence of up
to ``P`` GPU-to-GPU *hops*:

* a pipelined algorithm (ring, tree, chain) is one transfer per channel whose hops are
  all the ring/tree edges: in steady state every edge carries the stream at the same
  rate, so on the fabric the transfer is a single fluid flow that loads every link of
  every hop (a link crossed by two hops carries it twice);
* a non-pipelined step (one round of halving-doubling, the sends of an all-to-all) is
  one single-hop transfer per message.

``bytes_per_size[g, t] * S`` bytes go through transfer ``t`` of group ``g`` for a
collective of size ``S``; ``hop_load`` scales what a hop puts on its links per byte of
progress (NVLS: ``(n+1)/n``); hops of one transfer with the same ``max_group >= 0`` put
the *largest* of their loads on a link they share instead of the sum (in-network
reduction: the switch combines the streams, so a link carries it once).
``hop_latency_count`` is how many times the hop's latency lies on the critical path.

:func:`pipelined` fuses the stages of a hierarchical algorithm that NCCL pipelines
(NVLS across nodes, SHARP/CollNet) into one phase: one transfer per group whose hops are
all the stages' hops, each loaded with its stage's bytes, so the steady-state rate is
set by the most loaded link over all stages together.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fabricflow.collective.estimate import check_hop_memory

FAMILIES = ("ring", "tree", "nvls", "p2p")


@dataclasses.dataclass(frozen=True, eq=False)
class Phase:
    """One phase of an algorithm, for all groups at once.

    Attributes:
        name: label (``ring``, ``intra-reduce-scatter``, ``step-2``, ...).
        family: latency family of :class:`~fabricflow.collective.nccl_cost.CostModel`
            (``ring``, ``tree``, ``nvls``, ``p2p``).
        hop_src, hop_dst: int64 ``[G, Tg, P]`` GPU indices of each hop, ``-1`` padded.
        hop_load: float64 ``[G, Tg, P]`` link load of the hop per byte/s of progress.
        hop_latency_count: float64 ``[G, Tg, P]`` times the hop latency is on the
            critical path.
        bytes_per_size: float64 ``[G, Tg]`` bytes through the transfer per byte of size.
        repeat: the phase runs this many times back to back (same flows, same bytes).
        max_group: int64 ``[G, Tg, P]``: hops of a transfer sharing an id ``>= 0``
            max-merge their link loads; ``-1``: loads add up (see the module docstring).
    """

    name: str
    family: str
    hop_src: np.ndarray
    hop_dst: np.ndarray
    hop_load: np.ndarray
    hop_latency_count: np.ndarray
    bytes_per_size: np.ndarray
    repeat: int = 1
    max_group: np.ndarray | None = None

    def __post_init__(self) -> None:
        shape = self.hop_src.shape
        if len(shape) != 3:
            raise ValueError(f"hop arrays must be [G, Tg, P], got {shape}")
        if self.max_group is None:
            object.__setattr__(self, "max_group", np.full(shape, -1, dtype=np.int64))
        for field in ("hop_dst", "hop_load", "hop_latency_count", "max_group"):
            if getattr(self, field).shape != shape:
                raise ValueError(
                    f"{field} has shape {getattr(self, field).shape}, expected {shape}"
                )
        if self.bytes_per_size.shape != shape[:2]:
            raise ValueError(
                f"bytes_per_size has shape {self.bytes_per_size.shape}, expected {shape[:2]}"
            )
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES}, got {self.family!r}")

    @property
    def num_groups(self) -> int:
        return int(self.hop_src.shape[0])

    @property
    def transfers_per_group(self) -> int:
        return int(self.hop_src.shape[1])

    def bytes_sent(self, num_gpus: int, size: float = 1.0) -> np.ndarray:
        """float64 ``[num_gpus]``: bytes each GPU sends over its hops in this phase
        (``repeat`` included), for a collective of ``size``. For checks and tests."""
        return self._per_gpu(self.hop_src, num_gpus, size)

    def bytes_received(self, num_gpus: int, size: float = 1.0) -> np.ndarray:
        """float64 ``[num_gpus]``: bytes each GPU receives over its hops in this phase."""
        return self._per_gpu(self.hop_dst, num_gpus, size)

    def _per_gpu(self, ends: np.ndarray, num_gpus: int, size: float) -> np.ndarray:
        valid = ends >= 0
        per_hop = self.hop_load * (self.bytes_per_size[:, :, None] * size * self.repeat)
        return np.bincount(ends[valid], weights=per_hop[valid], minlength=num_gpus)


def make_phase(
    name: str,
    family: str,
    hop_src,
    hop_dst,
    *,
    bytes_per_size,
    hop_load=1.0,
    hop_latency_count=1.0,
    repeat: int = 1,
    merge: str = "sum",
) -> Phase:
    """Build a :class:`Phase`, broadcasting scalar per-hop/per-transfer values.

    ``merge="max"``: all hops of a transfer max-merge their loads (one reduction tree).
    """
    if merge not in ("sum", "max"):
        raise ValueError(f"merge must be 'sum' or 'max', got {merge!r}")
    hop_src = np.asarray(hop_src, dtype=np.int64)
    hop_dst = np.asarray(hop_dst, dtype=np.int64)
    shape = hop_src.shape
    valid = hop_src >= 0
    num_hops = int(np.count_nonzero(valid))  # as check_work counts them
    check_hop_memory(num_hops, f"phase {name!r} ({num_hops:,} flow hops)")
    load = np.where(valid, np.broadcast_to(np.asarray(hop_load, dtype=np.float64), shape), 0.0)
    count = np.where(
        valid, np.broadcast_to(np.asarray(hop_latency_count, dtype=np.float64), shape), 0.0
    )
    per_transfer = np.broadcast_to(np.asarray(bytes_per_size, dtype=np.float64), shape[:2]).copy()
    max_group = np.where(valid & (merge == "max"), 0, -1).astype(np.int64)
    return Phase(name, family, hop_src, hop_dst, load, count, per_transfer, int(repeat), max_group)


def pipelined(name: str, family: str, stages: list[Phase]) -> Phase:
    """Fuse ``stages`` (all with ``repeat == 1``) into one pipelined phase.

    Each group gets one transfer of ``bytes_per_size = 1`` whose hops are every stage's
    hops with load ``hop_load x`` that stage transfer's ``bytes_per_size``. The critical-path
    latency is the sum of the stages' (mean over a stage's parallel transfers). Max-merge
    ids stay separate per stage transfer.
    """
    srcs, dsts, loads, counts, groups = [], [], [], [], []
    offset = 0
    for stage in stages:
        if stage.repeat != 1:
            raise ValueError("pipelined stages must have repeat == 1")
        num_groups, per_group, hops = stage.hop_src.shape
        flat = (num_groups, per_group * hops)
        srcs.append(stage.hop_src.reshape(flat))
        dsts.append(stage.hop_dst.reshape(flat))
        loads.append((stage.hop_load * stage.bytes_per_size[:, :, None]).reshape(flat))
        counts.append((stage.hop_latency_count / per_group).reshape(flat))
        transfer_id = offset + np.arange(per_group)[None, :, None]
        assert stage.max_group is not None  # filled in by Phase.__post_init__
        groups.append(np.where(stage.max_group >= 0, transfer_id, -1).reshape(flat))
        offset += per_group
    num_groups = stages[0].hop_src.shape[0]
    cat = [
        np.concatenate(parts, axis=1)[:, None, :] for parts in (srcs, dsts, loads, counts, groups)
    ]
    return Phase(
        name,
        family,
        cat[0],
        cat[1],
        cat[2],
        cat[3],
        np.ones((num_groups, 1)),
        1,
        cat[4].astype(np.int64),
    )
