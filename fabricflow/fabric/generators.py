"""Registers every topology generator with the spec loader (imported lazily by spec.py)."""

from __future__ import annotations

from .clos import CLOS_KEYS, build_clos
from .dragonfly import DRAGONFLY_KEYS, build_dragonfly
from .graph import GRAPH_KEYS, build_graph
from .spec import register_topology
from .torus import TORUS_KEYS, build_torus

register_topology("clos", CLOS_KEYS)(build_clos)
register_topology("torus", TORUS_KEYS)(build_torus)
register_topology("dragonfly", DRAGONFLY_KEYS)(build_dragonfly)
register_topology("graph", GRAPH_KEYS)(build_graph)
