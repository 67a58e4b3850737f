"""Packet-fidelity corrections to the fluid flow-completion engine.

One module per mechanism, each testable on its own:

* :mod:`.overheads`: MTU and header bytes, store-and-forward serialization per hop,
  propagation and the ACK return path (fixed per-flow costs).
* :mod:`.pfc_hol`: the lossless steady state without congestion control: per-input-port
  round-robin arbitration at each egress and PFC head-of-line blocking of the ingress
  queues (victim flows), solved as a fixed point.
* :mod:`.events`: the event-driven completion loop over those steady-state rates.
"""
