"""The routing policy that stands for a fabric's transport in the fluid model.

It reads the transport (:mod:`fabricflow.fabric.transport`) and the fabric's structure (a
Clos router can spray), so it lives on the routing floor, above every fabric module.
"""

from __future__ import annotations

from fabricflow.fabric.clos import ClosStructure


def routing_for(fabric) -> str:
    """The routing policy that stands for ``fabric.transport`` in the fluid model.

    ``adaptive`` (an even split over all equal-cost paths, the fluid limit of per-packet
    adaptive routing; the Clos router's compact form of ``spray``, with the same max-min
    rates at the cost of ECMP) when adaptive routing is on and the fabric is a Clos;
    ``spray`` (the generic router's even split at every hop over the minimal out-links)
    when adaptive routing is on and the fabric is a graph (a ``graph`` spec, an imported
    Slurm file or netlist); ``ecmp`` (one hashed path per flow) otherwise. Torus and
    dragonfly routers have no spray: their adaptive routing (Slingshot's non-minimal UGAL-style choices) is not
    modelled and flows keep one minimal path each.
    """
    transport = fabric.transport
    if transport.adaptive_routing and isinstance(fabric.structure, ClosStructure):
        return "adaptive"
    if transport.adaptive_routing and fabric.structure is None:
        return "spray"  # a graph fabric (an imported file): the generic router's even split
    return "ecmp"
