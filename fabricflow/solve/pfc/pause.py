"""PFC pause and resume inside the jitted queue loops (one implementation for all).

Both fluid engines that model lossless Ethernet call these functions on ``[L]`` arrays of
bytes held per ingress link (the bytes that came in over link ``l`` and still wait in the
switch at its far end): the congestion-control integrator (:mod:`fabricflow.solve.cc`) and
the packet-fidelity queue engine (:mod:`fabricflow.solve.packet.pfc_queues`).

* :func:`pause_update`: XOFF/XON with hysteresis. A link that is not paused is paused
  once its ingress queue holds more than ``xoff``; a paused link resumes once the queue
  has fallen to ``xon`` or below. Its egress sends nothing while paused.
* :func:`dynamic_xoff`: the dynamic threshold of a shared-buffer switch, ``alpha x``
  (shared buffer - what every ingress queue of that switch holds).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def pause_update(paused, held, xoff, xon):
    """New pause state ``[L]`` (bool) from the old one and the bytes held ``[L]``.

    ``xoff``, ``xon``: thresholds in bytes, scalars or ``[L]`` (``xon <= xoff``).
    """
    return (held > xoff) | (paused & (held > xon))


def dynamic_xoff(held, has_buffer, link_switch, num_switches: int, shared_buffer, alpha):
    """XOFF ``[L]`` = ``alpha x`` free shared buffer of the switch each link enters.

    Args:
        held: ``[L]`` bytes held per ingress link. has_buffer: bool ``[L]`` links that end
            at a switch (others hold nothing in a shared buffer).
        link_switch: int ``[L]`` node the link enters; num_switches: its segment count.
        shared_buffer, alpha: bytes and the dynamic-threshold factor (scalars).
    """
    use = jax.ops.segment_sum(
        jnp.where(has_buffer, held, 0.0), link_switch, num_segments=num_switches
    )
    free = jnp.maximum(shared_buffer - use[link_switch], 0.0)
    return alpha * free


def xon_of(xoff, hysteresis):
    """XON = ``max(xoff - hysteresis, 0)`` bytes."""
    return jnp.maximum(xoff - hysteresis, 0.0)
