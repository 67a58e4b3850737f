"""Flat (ragged) route entries: the input form of the max-min engine (host side, numpy).

A flow set is the list of its *used* route entries in flow order, compressed-sparse-row
style: flow ``f`` owns entries ``start[f] : start[f + 1]``; entry ``e`` puts ``coef[e]``
bytes on link ``link[e]`` per byte of the flow's progress (``None``: 1 everywhere). Rows
of very different widths (a joint solve of 2-link NVLink transfers with 1,000-link
pipelined rings) then cost their entries, not ``F x`` the widest row.

:func:`block_diagonal` stacks independent problems into one (link ids offset per
problem), so many small solves become one call; :func:`bucket_size` is the padding rule
that keeps the number of compiled kernel shapes small.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fabricflow.errors import SpecError

__all__ = [
    "COMPACT_BELOW",
    "FlowEntries",
    "block_diagonal",
    "bucket_size",
    "compact_links",
    "used_links",
]

# Smallest padded size of a kernel axis; below it every problem shares one shape.
MIN_BUCKET = 256


# Solves on fewer entries than this many per fabric link run on the used links only
# (:func:`compact_links`): each round then costs the used links, not the fabric's.
COMPACT_BELOW = 4


def bucket_size(count: int) -> int:
    """The padded length of a kernel axis holding ``count`` items: the next power of two,
    at least :data:`MIN_BUCKET`. At most 2x the work and one compiled program per octave
    of each axis."""
    count = max(int(count), 1)
    return max(MIN_BUCKET, 1 << (count - 1).bit_length())


@dataclasses.dataclass(frozen=True, eq=False)
class FlowEntries:
    """Used route entries of ``F`` flows in flow order (CSR).

    Attributes:
        start: int64 ``[F + 1]``, non-decreasing, ``start[0] == 0``: flow ``f`` owns
            entries ``start[f]:start[f + 1]`` (none: the flow crosses no link).
        link: int64 ``[E]`` link ids in ``0..num_links - 1``.
        coef: float64 ``[E]`` bytes on the link per byte of progress, or ``None`` (all 1).
            Entries with ``coef <= 0`` constrain nothing.
        num_links: ``L``, the length of the capacity array the ids index.
    """

    start: np.ndarray
    link: np.ndarray
    coef: np.ndarray | None
    num_links: int

    @property
    def num_flows(self) -> int:
        return int(self.start.shape[0] - 1)

    @property
    def num_entries(self) -> int:
        return int(self.link.shape[0])

    def counts(self) -> np.ndarray:
        """int64 ``[F]`` entries per flow."""
        return np.diff(self.start)

    def flow_of_entry(self) -> np.ndarray:
        """int64 ``[E]`` flow of each entry."""
        return np.repeat(np.arange(self.num_flows), self.counts())

    def coef_or_ones(self) -> np.ndarray:
        """float64 ``[E]`` coefficients (ones when ``coef`` is ``None``)."""
        return np.ones(self.num_entries) if self.coef is None else self.coef

    @classmethod
    def from_padded(cls, links, coef=None, num_links: int | None = None) -> FlowEntries:
        """Entries of ``links`` int ``[F, H]`` (``-1`` padded) and ``coef`` ``[F, H]``
        (or ``None``): the entries with a link and ``coef > 0``, row by row."""
        links = np.asarray(links)
        used = links >= 0
        if coef is not None:
            coef = np.asarray(coef, np.float64)
            used &= coef > 0
        counts = np.count_nonzero(used, axis=1)
        start = np.zeros(links.shape[0] + 1, np.int64)
        np.cumsum(counts, out=start[1:])
        link = links[used].astype(np.int64)
        if num_links is None:
            num_links = int(link.max(initial=-1)) + 1
        return cls(start, link, None if coef is None else coef[used], int(num_links))

    @classmethod
    def from_rows(cls, row, link, coef, num_flows: int, num_links: int) -> FlowEntries:
        """Entries given per entry with their flow ``row`` (int ``[E]``, sorted)."""
        row = np.asarray(row, np.int64)
        if row.size and np.any(row[1:] < row[:-1]):
            raise SpecError("row", "entries must be sorted by flow")
        start = np.zeros(num_flows + 1, np.int64)
        np.cumsum(np.bincount(row, minlength=num_flows), out=start[1:])
        return cls(
            start,
            np.asarray(link, np.int64),
            None if coef is None else np.asarray(coef, np.float64),
            int(num_links),
        )

    def to_padded(self) -> tuple[np.ndarray, np.ndarray]:
        """``(links int32 [F, W], coef float64 [F, W])``, ``-1`` / ``0`` padded to the
        widest row ``W`` (at least 1)."""
        counts = self.counts()
        width = max(int(counts.max(initial=0)), 1)
        links = np.full((self.num_flows, width), -1, np.int32)
        coef = np.zeros(links.shape)
        row = self.flow_of_entry()
        position = np.arange(self.num_entries) - self.start[row]
        links[row, position] = self.link
        coef[row, position] = self.coef_or_ones()
        return links, coef

    def select(self, flows: np.ndarray) -> FlowEntries:
        """The entries of the flows ``flows`` (bool ``[F]`` or int indices), in order."""
        flows = np.asarray(flows)
        if flows.dtype == bool:
            flows = np.flatnonzero(flows)
        counts = self.counts()[flows]
        start = np.zeros(flows.size + 1, np.int64)
        np.cumsum(counts, out=start[1:])
        offsets = np.repeat(self.start[flows] - start[:-1], counts)
        index = offsets + np.arange(int(start[-1]))
        coef = None if self.coef is None else self.coef[index]
        return FlowEntries(start, self.link[index], coef, self.num_links)


def block_diagonal(problems: list[FlowEntries]) -> tuple[FlowEntries, np.ndarray, np.ndarray]:
    """Independent problems as one: link ids of problem ``i`` offset by the links of the
    problems before it, flows concatenated.

    Returns ``(entries, link_offset [P + 1], flow_offset [P + 1])``: problem ``i``'s
    capacities go to ``link_offset[i]:link_offset[i + 1]`` of the stacked capacity
    array, its rates come back at ``flow_offset[i]:flow_offset[i + 1]``.
    """
    link_offset = np.zeros(len(problems) + 1, np.int64)
    np.cumsum([p.num_links for p in problems], out=link_offset[1:])
    flow_offset = np.zeros(len(problems) + 1, np.int64)
    np.cumsum([p.num_flows for p in problems], out=flow_offset[1:])
    entry_offset = np.concatenate([[0], np.cumsum([p.num_entries for p in problems])])
    start = np.concatenate(
        [p.start[:-1] + entry_offset[i] for i, p in enumerate(problems)] + [entry_offset[-1:]]
    ).astype(np.int64)
    link = np.concatenate(
        [p.link + link_offset[i] for i, p in enumerate(problems)] + [np.zeros(0, np.int64)]
    )
    any_coef = any(p.coef is not None for p in problems)
    coef = (
        np.concatenate([p.coef_or_ones() for p in problems] + [np.zeros(0)]) if any_coef else None
    )
    return FlowEntries(start, link, coef, int(link_offset[-1])), link_offset, flow_offset


def compact_links(
    link: np.ndarray, capacity: np.ndarray
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """``(used or None, link, capacity)``: entries over fewer than :data:`COMPACT_BELOW`
    entries per fabric link renumbered onto the links they use (:func:`used_links`),
    with ``capacity`` (``[L]``) cut to them; otherwise the inputs unchanged and ``None``.
    A link id ``i`` of the result is ``used[i]`` of the input."""
    if not link.size or link.size >= COMPACT_BELOW * capacity.shape[-1]:
        return None, link, capacity
    used, renumbered = used_links(link, capacity.shape[-1])
    return used, renumbered, capacity[..., used]


def used_links(link: np.ndarray, num_links: int) -> tuple[np.ndarray, np.ndarray]:
    """``(used int [U], renumbered int [E])``: the sorted ids of the links that ``link``
    (int ``[E]``, ids in ``0..num_links - 1``) uses, and each entry's index among them.

    ``np.unique(link, return_inverse=True)`` without its sort: ``O(E + num_links)``. The
    renumbering keeps the links' order, so per-link sums over the entries are unchanged;
    a solve on ``capacity[used]`` then costs the used links per round, not the fabric's.
    """
    mark = np.zeros(num_links, dtype=bool)
    mark[link] = True
    new_id = np.cumsum(mark, dtype=np.intp) - 1
    return np.flatnonzero(mark), new_id[link]
