"""PFC (lossless Ethernet, IEEE 802.1Qbb): one implementation for every fluid engine.

* :mod:`.params`: :class:`~.params.PFCParams` (XOFF, hysteresis, dynamic threshold) and
  the PFC modes (``off``, ``static``, ``dynamic``).
* :mod:`.pause`: XOFF/XON hysteresis and dynamic thresholds inside jitted loops, used by
  the congestion-control integrator (:mod:`fabricflow.solve.cc`) and the
  packet-fidelity queue engine (:mod:`fabricflow.solve.packet.pfc_queues`).
* :mod:`.deadlock`: cycles of mutually paused queues in the buffer dependency graph.
* :mod:`.victims`: flows slowed by pauses rather than their own bottleneck.

Subpackage imports are explicit (``from fabricflow.solve.pfc.params import PFCParams``);
importing this package loads nothing.
"""
