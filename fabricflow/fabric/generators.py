"""The topology generators: ``topology.type`` -> (builder, the ``topology`` keys it reads).

A plain table above the generator modules: :mod:`fabricflow.fabric.spec` looks a spec's
``topology.type`` up here; the generators themselves import only what is below them
(:mod:`fabricflow.fabric.common_spec`), never the spec.
"""

from __future__ import annotations

from fabricflow.fabric.clos import CLOS_KEYS, build_clos
from fabricflow.fabric.common_spec import Builder
from fabricflow.fabric.dragonfly import DRAGONFLY_KEYS, build_dragonfly
from fabricflow.fabric.graph import GRAPH_KEYS, build_graph
from fabricflow.fabric.torus import TORUS_KEYS, build_torus

# type name -> (builder(topology: Section, common: CommonSpec) -> Fabric, topology keys)
GENERATORS: dict[str, tuple[Builder, tuple[str, ...]]] = {
    "clos": (build_clos, CLOS_KEYS),
    "torus": (build_torus, TORUS_KEYS),
    "dragonfly": (build_dragonfly, DRAGONFLY_KEYS),
    "graph": (build_graph, GRAPH_KEYS),
}
