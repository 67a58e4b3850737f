"""Host-side structure of the PFC queue engine: hop entries, arbitration groups, ACK paths.

Every valid ``(flow, hop)`` pair of the ``[F, H]`` paths is an *entry*: the bytes of that
flow waiting at that hop's egress. Entries are grouped by how the egress arbitrates:

* at a flow's first hop, its own queue pair (a NIC serves its queue pairs round-robin);
* at a switch egress, one FIFO holding all transit traffic (``arbitration="fifo"``: the
  output-queued, shared-buffer switches of RoCE fabrics), or one FIFO per input port
  served round-robin (``"round_robin"``: a crossbar with virtual output queues).

The groups of one egress link share it round-robin (a water level per link); the
entries of one group leave in FIFO order. The last ACK of a flow returns over the
reverse links of its path; :func:`build_groups` also says, for each of its hops, which
link it crosses and which group it queues in.

All numpy, decided once per flow set (the engine's static shapes).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fabricflow.errors import SpecError

ARBITRATIONS = ("fifo", "round_robin")


class Groups(NamedTuple):
    """Entries, groups and ACK paths of one flow set. Entries ``e`` are sorted by group
    and groups by egress link, so the engine's per-step sums are sorted segment sums.

    Attributes:
        entry_group: int32 ``[E]`` group of each entry (non-decreasing).
        entry_prev: int32 ``[E]`` entry of the same flow's previous hop (``E`` if none).
        entry_ingress: int32 ``[E]`` link the entry's bytes came in over (``L`` if none).
        entry_flow: int32 ``[E]`` flow of each entry.
        entry_first: bool ``[E]`` whether the entry is its flow's first hop.
        entry_last: bool ``[E]`` whether the entry is its flow's last hop.
        flow_last: int32 ``[F]`` entry of each flow's last hop.
        flow_hops: int32 ``[F]`` hops of each flow.
        group_link: int32 ``[G]`` egress link of each group (non-decreasing).
        shared_group: int32 ``[S]`` the groups whose link holds two or more groups (the
            only ones that need a water level), ascending.
        shared_slot: int32 ``[S]`` index of each one's link among ``shared_link``.
        shared_link: int32 ``[K]`` the links holding two or more groups, ascending.
        ack_link: int32 ``[F, H]`` link of each hop of the last ACK's return path, in
            return order (``L``: no such link or past the end: the ACK passes freely).
        ack_group: int32 ``[F, H]`` group the ACK waits in at that hop (``G``: none; at
            the receiving NIC the ACK goes ahead of data and waits only for a pause).
    """

    entry_group: np.ndarray
    entry_prev: np.ndarray
    entry_ingress: np.ndarray
    entry_flow: np.ndarray
    entry_first: np.ndarray
    entry_last: np.ndarray
    flow_last: np.ndarray
    flow_hops: np.ndarray
    group_link: np.ndarray
    shared_group: np.ndarray
    shared_slot: np.ndarray
    shared_link: np.ndarray
    ack_link: np.ndarray
    ack_group: np.ndarray


def build_groups(
    links: np.ndarray,
    num_links: int,
    *,
    reverse: np.ndarray | None = None,
    arbitration: str = "fifo",
) -> Groups:
    """Entries and arbitration groups of ``[F, H]`` paths (``-1`` padded at the end of
    each row).

    Args:
        links: int ``[F, H]`` link ids. num_links: ``L``.
        reverse: int ``[L]`` reverse link of each link (``-1`` none), for the last ACK's
            return path; ``None``: the ACK does not queue.
        arbitration: ``"fifo"`` or ``"round_robin"`` at switch egresses (module docs).

    Raises:
        SpecError: an unknown ``arbitration``.
    """
    if arbitration not in ARBITRATIONS:
        raise SpecError("arbitration", f"must be one of {list(ARBITRATIONS)}, got {arbitration!r}")
    links = np.asarray(links, np.int64)
    num_flows = links.shape[0]
    valid = links >= 0
    own = num_links + np.arange(num_flows, dtype=np.int64)[:, None]
    transit = num_links + num_flows  # the port id of a switch FIFO's transit traffic
    port = np.concatenate([own, links[:, :-1]], axis=1)[:, : links.shape[1]]
    if arbitration == "fifo":
        port[:, 1:] = transit
    stride = num_links + num_flows + 1
    flow, hop = np.nonzero(valid)
    keys, group = np.unique(links[flow, hop] * stride + port[flow, hop], return_inverse=True)
    order = np.argsort(group, kind="stable")
    flow, hop, group = flow[order], hop[order], group[order]
    num_entries = flow.size
    entry_of = np.full(links.shape, num_entries, np.int64)
    entry_of[flow, hop] = np.arange(num_entries)
    hops = valid.sum(axis=1)
    entry_prev = np.where(hop > 0, entry_of[flow, np.maximum(hop - 1, 0)], num_entries)
    ingress = np.where(hop > 0, links[flow, np.maximum(hop - 1, 0)], num_links)
    group_link = keys // stride
    shared_group, shared_slot, shared_link = _shared_links(group_link)
    ack_link, ack_group = _ack_path(
        links, hops, num_links, reverse, keys, stride, transit, arbitration
    )
    return Groups(
        group.astype(np.int32),
        entry_prev.astype(np.int32),
        ingress.astype(np.int32),
        flow.astype(np.int32),
        hop == 0,
        hop == hops[flow] - 1,
        entry_of[np.arange(num_flows), np.maximum(hops - 1, 0)].astype(np.int32),
        hops.astype(np.int32),
        group_link.astype(np.int32),
        shared_group,
        shared_slot,
        shared_link,
        ack_link,
        ack_group,
    )


def _shared_links(group_link: np.ndarray):
    """``(shared_group, shared_slot, shared_link)`` of :class:`Groups`."""
    links, first, count = np.unique(group_link, return_index=True, return_counts=True)
    many = count > 1
    shared_link = links[many]
    shared_group = np.flatnonzero(np.repeat(many, count))  # group_link is sorted
    shared_slot = np.repeat(np.arange(shared_link.size), count[many])
    return (
        shared_group.astype(np.int32),
        shared_slot.astype(np.int32),
        shared_link.astype(np.int32),
    )


def _ack_path(links, hops, num_links, reverse, keys, stride, transit, arbitration):
    """``(ack_link, ack_group)`` int32 ``[F, H]`` of :class:`Groups`. The ACK's hop ``j``
    crosses the reverse of the flow's hop ``hops - 1 - j``; at ``j = 0`` it leaves the
    receiving NIC ahead of data (no group), at a switch it joins the group its data would
    (the FIFO, or its input port's group), or none where no data goes."""
    num_flows, num_hops = links.shape
    num_groups = keys.size
    if reverse is None or num_hops == 0 or num_groups == 0:
        return (
            np.full((num_flows, num_hops), num_links, np.int32),
            np.full((num_flows, num_hops), num_groups, np.int32),
        )
    reverse = np.asarray(reverse, np.int64)
    j = np.arange(num_hops)[None, :]
    forward_hop = hops[:, None] - 1 - j
    forward = np.take_along_axis(links, np.maximum(forward_hop, 0), axis=1)
    back = np.where((forward_hop >= 0) & (forward >= 0), reverse[np.maximum(forward, 0)], -1)
    came_over = np.concatenate([np.full((num_flows, 1), -1), back[:, :-1]], axis=1)
    port = np.full_like(back, transit) if arbitration == "fifo" else came_over
    key = back * stride + port
    pos = np.minimum(np.searchsorted(keys, key), num_groups - 1)
    hit = (back >= 0) & (came_over >= 0) & (keys[pos] == key)
    ack_link = np.where(back >= 0, back, num_links)
    ack_group = np.where(hit, pos, num_groups)
    return ack_link.astype(np.int32), ack_group.astype(np.int32)
