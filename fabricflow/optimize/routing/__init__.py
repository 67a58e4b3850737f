"""Routing optimization: split flows over candidate paths to minimize the makespan, and
the sensitivity of communication time to link capacities.

Modules: :mod:`.optimize` (``optimize_routing``), :mod:`.fractional` (optax solver),
:mod:`.integral` (one path per flow), :mod:`.plan` (``RoutingPlan``), :mod:`.compare`
(against ECMP and spray), :mod:`.sensitivity` (``capacity_sensitivity``).
"""

from .optimize import optimize_routing as optimize_routing
from .plan import RoutingPlan as RoutingPlan
from .sensitivity import CapacitySensitivity as CapacitySensitivity
from .sensitivity import capacity_sensitivity as capacity_sensitivity
