"""Packet-fidelity corrections to the fluid flow-completion engine.

One module per mechanism, each testable on its own:

* :mod:`.overheads`: MTU and header bytes, store-and-forward serialization per hop,
  propagation and the ACK return path (fixed per-flow costs).
* :mod:`.pfc_queues`: a lossless fabric without congestion control: per-input-port
  round-robin arbitration at each egress, PFC pauses of ingress links at XOFF/XON,
  head-of-line blocking (victim flows) and pause spreading, as a time-stepped fluid of
  per-hop queues.
"""
