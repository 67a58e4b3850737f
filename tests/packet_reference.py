"""A small discrete-event packet-level reference (pure Python, float64, tens of hosts).

Independent of the model it checks (:mod:`fabricflow.solve.packet`): it moves packets,
not rates. Each directed link has an egress at its source node with one FIFO per input
port (the link the packet arrived on, or the flow's queue pair at the sending NIC),
served round-robin one packet at a time; a packet is forwarded only once it has fully
arrived (store-and-forward), after the link's serialization (bytes / capacity) and
propagation (latency). With PFC on, every node counts the bytes that arrived over each
ingress link and have not yet left; above ``xoff`` it pauses that link (the pause takes
effect one link latency later), at or below ``xon`` it resumes it. Without PFC buffers
are unbounded (no drops). The ACK of a flow's last packet returns over the reverse
links without queueing (a high priority), one ACK serialization plus latency per hop.

Returns, per flow, the time its last byte reached the receiver and the time the sender
got the last ACK, both from time 0 (flows start at their ``start``).
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np


def simulate_packets(
    links,
    capacity,
    latency,
    size,
    *,
    start=None,
    reverse=None,
    mtu: float = 9000.0,
    header: float = 64.0,
    ack_bytes: float = 64.0,
    pfc: bool = True,
    xoff: float = 100e3,
    xon: float = 90e3,
):
    """``(delivered, acked)`` float64 ``[F]`` seconds. ``links`` int ``[F, H]`` (-1 padded)."""
    links = np.asarray(links)
    capacity = np.asarray(capacity, float)
    latency = np.asarray(latency, float)
    num_flows = links.shape[0]
    start = np.zeros(num_flows) if start is None else np.asarray(start, float)
    paths = [[int(x) for x in row if x >= 0] for row in links]
    payload = mtu - header
    num_links = capacity.shape[0]
    queues: list[dict] = [dict() for _ in range(num_links)]  # port -> deque of packets
    order: list[deque] = [deque() for _ in range(num_links)]  # round-robin of ports
    busy = [False] * num_links
    paused = [False] * num_links
    pause_pending = [False] * num_links  # the state the downstream last signalled
    counter = [0.0] * num_links  # bytes from ingress link l held at its downstream node
    delivered = np.full(num_flows, np.nan)
    acked = np.full(num_flows, np.nan)
    events: list = []
    seq = 0

    def push(time, kind, *data):
        nonlocal seq
        heapq.heappush(events, (time, seq, kind, data))
        seq += 1

    def enqueue(link, port, packet):
        q = queues[link].get(port)
        if q is None:
            q = queues[link][port] = deque()
        if not q:
            order[link].append(port)
        q.append(packet)

    def try_send(now, link):
        if busy[link] or paused[link] or not order[link]:
            return
        port = order[link].popleft()
        q = queues[link][port]
        packet = q.popleft()
        if q:
            order[link].append(port)
        if isinstance(port, int) and port >= 0 and pfc:
            counter[port] -= packet[2]
            signal(now, port)
        busy[link] = True
        push(now + packet[2] / capacity[link], "sent", link, packet)

    def signal(now, ingress):
        if not pfc:
            return
        if not pause_pending[ingress] and counter[ingress] > xoff:
            pause_pending[ingress] = True
            push(now + latency[ingress], "pause", ingress)
        elif pause_pending[ingress] and counter[ingress] <= xon:
            pause_pending[ingress] = False
            push(now + latency[ingress], "resume", ingress)

    for flow in range(num_flows):
        push(start[flow], "start", flow)
    while events:
        now, _, kind, data = heapq.heappop(events)
        if kind == "start":
            flow = data[0]
            count = max(math.ceil(size[flow] / payload), 1)
            last = size[flow] - (count - 1) * payload
            for index in range(count):
                body = payload if index < count - 1 else last
                enqueue(paths[flow][0], -1 - flow, (flow, 0, body + header, index == count - 1))
            try_send(now, paths[flow][0])
        elif kind == "sent":
            link, packet = data
            busy[link] = False
            push(now + latency[link], "arrive", link, packet)
            try_send(now, link)
        elif kind == "arrive":
            link, (flow, hop, wire, is_last) = data
            path = paths[flow]
            if hop == len(path) - 1:
                if is_last:
                    delivered[flow] = now
                    back = [reverse[x] if reverse is not None else x for x in path]
                    acked[flow] = now + sum(ack_bytes / capacity[x] + latency[x] for x in back)
                continue
            nxt = path[hop + 1]
            if pfc:
                counter[link] += wire
                signal(now, link)
            enqueue(nxt, link, (flow, hop + 1, wire, is_last))
            try_send(now, nxt)
        elif kind == "pause":
            paused[data[0]] = True
        elif kind == "resume":
            paused[data[0]] = False
            try_send(now, data[0])
    return delivered, acked
