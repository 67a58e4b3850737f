"""Fixed per-packet costs of a flow: headers, store-and-forward, propagation, ACK.

A flow of ``S`` payload bytes travels as ``n = ceil(S / (mtu - header))`` packets; every
packet carries ``header`` bytes, so the wire carries ``W = S + n * header`` bytes. A
packet is forwarded only once it has fully arrived (store-and-forward), so on a path of
links with capacities ``C_1..C_H`` and propagation delays ``d_1..d_H`` a lone flow's last
byte arrives at (pipelined packets of ``p`` wire bytes, the first one full-size)

    T_data = sum_h p / C_h + (W - p) / C_min + sum_h d_h

which is exact when the capacities are equal or the first hop is the narrowest (the
test suite checks it against a packet-level event simulation). With a rate ``r`` set
by contention instead of ``C_min``, the transfer term becomes the fluid time of ``W``
bytes and the store-and-forward term keeps one packet time per hop except the one the
transfer already counts.

The last ACK (``ack_bytes`` on the wire) returns over the reverse links of the path: it
adds ``sum_h (ack_bytes / C'_h + d'_h)`` where ``C'``, ``d'`` are those of the reverse
links (the same as forward ones on every built-in fabric).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fabricflow.errors import SpecError


@dataclasses.dataclass(frozen=True)
class PacketParams:
    """Packet framing, SI units.

    Attributes:
        mtu: wire bytes of a full data packet, headers included (RoCE jumbo: 9000).
        header: header bytes per data packet (Ethernet + IP + UDP + BTH + ICRC, ~64).
        ack_bytes: wire bytes of an ACK.
    """

    mtu: float = 9000.0
    header: float = 64.0
    ack_bytes: float = 64.0

    def validate(self) -> PacketParams:
        for name in ("mtu", "header", "ack_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not np.isfinite(value) or value < 0:
                raise SpecError(name, f"must be a finite number of bytes >= 0, got {value!r}")
        if not 0 <= self.header < self.mtu:
            raise SpecError(
                "header", f"must lie in [0, mtu) = [0, {self.mtu:g}) bytes, got {self.header:g}"
            )
        return self


def wire_bytes(size: np.ndarray, params: PacketParams) -> tuple[np.ndarray, np.ndarray]:
    """``(W, p)``: wire bytes of each flow and of its first packet, float64 ``[F]``.

    ``W = size + ceil(size / payload) * header`` with ``payload = mtu - header``; a zero-byte
    flow still sends one header-only packet (the request that opens it).
    """
    size = np.asarray(size, np.float64)
    wire = size + packet_count(size, params) * params.header
    first = np.minimum(size, params.mtu - params.header) + params.header
    return wire, first


def packet_count(size: np.ndarray, params: PacketParams) -> np.ndarray:
    """float64 ``[F]`` packets of each flow: ``ceil(size / (mtu - header))``, at least 1."""
    return np.maximum(np.ceil(np.asarray(size, np.float64) / (params.mtu - params.header)), 1.0)


def path_costs(
    links: np.ndarray,
    capacity: np.ndarray,
    latency: np.ndarray,
    first_packet: np.ndarray,
    params: PacketParams,
    reverse: np.ndarray | None = None,
    weight: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Fixed per-flow costs in seconds, float64 ``[F]`` each.

    Args:
        links: int ``[F, H]`` path link ids, ``-1`` padded.
        capacity: ``[L]`` bytes/s. latency: ``[L]`` seconds.
        first_packet: ``[F]`` wire bytes of the first packet (:func:`wire_bytes`).
        reverse: int ``[L]`` reverse link of each link (``-1`` none: the forward link is used).
        weight: ``[F, H]`` share of the flow on each entry, for flows split over several
            paths (a multipath or spray route's ``coef``: one path's shares sum to one per
            hop level), so that the per-hop costs are the mean over the flow's paths;
            ``None``: one path per row.

    Returns:
        ``propagation`` (sum of link latencies), ``store_forward`` (one packet time per hop
        beyond the narrowest one: ``sum_h p / C_h - p / C_min``), ``ack`` (the last ACK's
        trip back), and ``min_capacity`` (the narrowest link of the path, bytes/s).
    """
    links = np.asarray(links)
    valid = links >= 0
    safe = np.where(valid, links, 0)
    cap = np.where(valid, capacity[safe], np.inf)
    share = np.ones(links.shape) if weight is None else np.asarray(weight, np.float64)
    lat = np.where(valid, latency[safe] * share, 0.0)
    per_hop = np.where(valid, first_packet[:, None] / cap * share, 0.0)
    min_capacity = cap.min(axis=1) if links.shape[1] else np.full(links.shape[0], np.inf)
    narrowest = np.where(np.isfinite(min_capacity), first_packet / min_capacity, 0.0)
    back = safe if reverse is None else np.where(reverse[safe] >= 0, reverse[safe], safe)
    ack = np.where(valid, (params.ack_bytes / capacity[back] + latency[back]) * share, 0.0)
    ack = ack.sum(axis=1)
    return {
        "propagation": lat.sum(axis=1),
        "store_forward": per_hop.sum(axis=1) - narrowest,
        "ack": ack,
        "min_capacity": min_capacity,
    }


def reverse_links(link_src: np.ndarray, link_dst: np.ndarray) -> np.ndarray:
    """int64 ``[L]``: a link ``b -> a`` for each link ``a -> b`` (``-1`` where none)."""
    num_nodes = int(max(link_src.max(initial=0), link_dst.max(initial=0))) + 1
    key = link_src.astype(np.int64) * num_nodes + link_dst
    back_key = link_dst.astype(np.int64) * num_nodes + link_src
    order = np.argsort(key, kind="stable")
    pos = np.searchsorted(key[order], back_key)
    pos = np.minimum(pos, max(key.size - 1, 0))
    found = key.size > 0 and True
    out = np.full(key.size, -1, np.int64)
    if found:
        hit = key[order][pos] == back_key
        out[hit] = order[pos[hit]]
    return out
