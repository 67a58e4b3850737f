"""Packet-fidelity corrections to the fluid flow-completion engine.

One module per mechanism, each testable on its own:

* :mod:`.overheads`: MTU and header bytes, store-and-forward serialization per hop,
  propagation and the ACK return path (fixed per-flow costs).
* :mod:`.queue_structure`: the hop entries and arbitration groups of a flow set (FIFO output
  queues or per-input-port round-robin at each switch egress, queue pairs at each NIC)
  and the last ACK's return path through them.
* :mod:`.pfc_queues`: a lossless fabric without congestion control: PFC pauses of
  ingress links at XOFF/XON after the pause frame's delay, head-of-line blocking (victim
  flows) and pause spreading, and the last ACK queued behind data, as a time-stepped
  fluid of per-hop queues.
"""
