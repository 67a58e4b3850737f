"""A small discrete-event packet-level reference (pure Python, float64, tens of hosts).

Independent of the model it checks (:mod:`fabricflow.solve.packet`): it moves packets,
not rates. Each directed link has an egress at its source node. At a flow's sending NIC
each flow (queue pair) has its own queue, served round-robin one packet at a time; at a
switch the transit packets wait in one FIFO per egress (``arbitration="fifo"``, a
shared-buffer output-queued switch) or in one FIFO per input port served round-robin
(``"round_robin"``). A packet is forwarded only once it has fully arrived
(store-and-forward), after the link's serialization (bytes / capacity) and propagation
(latency). With PFC on, every node counts the bytes that arrived over each ingress link
and have not yet left (a packet's buffer is freed once its transmission has ended);
above ``xoff`` it pauses that link (the pause takes effect one
link latency later), at or below ``xon`` it resumes it. Without PFC buffers are
unbounded (no drops).

ACKs (``ack_bytes`` each) return over the reverse links. ``acks="last"``: the receiver
ACKs the last packet; the ACK leaves the receiving NIC ahead of its data and at every
switch joins the data's queues (FIFO, paused with them), so it waits behind the data
queued there. ``"every"``: every data packet is ACKed that way (the ACKs' own load on
the return path). ``"free"``: the last ACK does not queue (one serialization plus
latency per hop).

Returns, per flow, the time its last byte reached the receiver and the time the sender
got the last ACK, both from time 0 (flows start at their ``start``).
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np


class _Egress:
    """The queues of one link's egress: NIC queue pairs and ACKs (priority), transit."""

    def __init__(self):
        self.priority: deque = deque()  # ACKs leaving their own NIC
        self.ports: dict = {}  # port -> deque of packets (round-robin among ports)
        self.turns: deque = deque()

    def push(self, port, packet, *, first: bool):
        if first:
            self.priority.append((None, packet))
            return
        queue = self.ports.get(port)
        if queue is None:
            queue = self.ports[port] = deque()
        if not queue:
            self.turns.append(port)
        queue.append(packet)

    def pop(self):
        if self.priority:
            return self.priority.popleft()
        if not self.turns:
            return None
        port = self.turns.popleft()
        queue = self.ports[port]
        packet = queue.popleft()
        if queue:
            self.turns.append(port)
        return port, packet


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
    arbitration: str = "fifo",
    acks: str = "last",
):
    """``(delivered, acked)`` float64 ``[F]`` seconds. ``links`` int ``[F, H]`` (-1 padded);
    ``reverse`` int ``[L]`` the reverse of each link (required unless ``acks="free"``)."""
    assert arbitration in ("fifo", "round_robin") and acks in ("last", "every", "free")
    links = np.asarray(links)
    capacity = np.asarray(capacity, float)
    latency = np.asarray(latency, float)
    num_flows = links.shape[0]
    start = np.zeros(num_flows) if start is None else np.asarray(start, float)
    paths = [[int(x) for x in row if x >= 0] for row in links]
    back = [
        [int(reverse[x]) if reverse is not None else x for x in reversed(path)] for path in paths
    ]
    payload = mtu - header
    num_links = capacity.shape[0]
    egress = [_Egress() for _ in range(num_links)]
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

    def enqueue(now, link, ingress, packet, *, nic_ack=False):
        """Queue ``packet`` at ``link``'s egress; ``ingress`` the link it came in over
        (``None`` at its sending NIC)."""
        flow = packet[0]
        if ingress is None:
            port = ("qp", flow)
        elif arbitration == "fifo":
            port = "transit"
        else:
            port = ingress
        egress[link].push(port, (ingress, packet), first=nic_ack)
        try_send(now, link)

    def try_send(now, link):
        if busy[link] or paused[link]:
            return
        item = egress[link].pop()
        if item is None:
            return
        _, (ingress, packet) = item
        busy[link] = True
        push(now + packet[2] / capacity[link], "sent", link, ingress, packet)

    def signal(now, ingress):
        if not pfc:
            return
        if not pause_pending[ingress] and counter[ingress] > xoff:
            pause_pending[ingress] = True
            push(now + latency[ingress], "pause", ingress)
        elif pause_pending[ingress] and counter[ingress] <= xon:
            pause_pending[ingress] = False
            push(now + latency[ingress], "resume", ingress)

    def send_ack(now, flow, is_last):
        if acks == "free":
            if is_last:
                trip = sum(ack_bytes / capacity[x] + latency[x] for x in back[flow])
                acked[flow] = now + trip
            return
        if acks == "last" and not is_last:
            return
        enqueue(now, back[flow][0], None, (flow, 0, ack_bytes, is_last, True), nic_ack=True)

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
                packet = (flow, 0, body + header, index == count - 1, False)
                enqueue(now, paths[flow][0], None, packet)
        elif kind == "sent":
            link, ingress, packet = data
            busy[link] = False
            if ingress is not None and pfc:  # its buffer is free once it has left
                counter[ingress] -= packet[2]
                signal(now, ingress)
            push(now + latency[link], "arrive", link, packet)
            try_send(now, link)
        elif kind == "arrive":
            link, (flow, hop, wire, is_last, is_ack) = data
            path = back[flow] if is_ack else paths[flow]
            if hop == len(path) - 1:
                if is_ack:
                    if is_last:
                        acked[flow] = now
                else:
                    if is_last:
                        delivered[flow] = now
                    send_ack(now, flow, is_last)
                continue
            if pfc:
                counter[link] += wire
                signal(now, link)
            enqueue(now, path[hop + 1], link, (flow, hop + 1, wire, is_last, is_ack))
        elif kind == "pause":
            paused[data[0]] = True
        elif kind == "resume":
            paused[data[0]] = False
            try_send(now, data[0])
    return delivered, acked
