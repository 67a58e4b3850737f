"""Routing optimization: split flows over candidate paths to minimize the makespan, and
the sensitivity of communication time to link capacities.

Modules: :mod:`.makespan` (``optimize_routing``), :mod:`.fractional` (optax solver),
:mod:`.integral` (one path per flow), :mod:`.plan` (``RoutingPlan``), :mod:`.compare`
(against ECMP and spray), :mod:`.sensitivity` (``capacity_sensitivity``).
"""

from fabricflow.routing_optimizer.makespan import optimize_routing as optimize_routing
from fabricflow.routing_optimizer.plan import RoutingPlan as RoutingPlan
from fabricflow.routing_optimizer.sensitivity import CapacitySensitivity as CapacitySensitivity
from fabricflow.routing_optimizer.sensitivity import capacity_sensitivity as capacity_sensitivity
