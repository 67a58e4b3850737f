"""The congestion-control scenarios (:mod:`fabricflow.dynamics.scenarios`): fabrics and
routes as the loop-per-path builder made them."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from fabricflow.dynamics import scenarios

# sha256 (first 16 hex digits) of every array of each scenario's fabric and routes, as
# the loop-per-path builder made them before the scenarios were built with Assembler.
SCENARIO_FINGERPRINTS = {
    ("dumbbell", 1): "ad9318dfd3f97e53",
    ("dumbbell", 3): "0470d8b4b7ee7966",
    ("incast", 2): "0db4c6f0beca74df",
    ("incast", 8): "abdc00809d8124d1",
    ("alltoall", 2): "9f8dbc8ed351c904",
    ("alltoall", 8): "76c7f7d3dc71389f",
    ("alltoall", 5): "22c3779cb541554e",
    ("ring", 3): "bf4d4febf63cc088",
    ("ring", 6): "c1d8988215f2065b",
    ("multi_bottleneck", 0): "a0f11d3ad4ea3b93",
    ("parking_lot", 2): "93f5cf3616f53dfa",
    ("parking_lot", 5): "ca09fedc39287db5",
}


def _fingerprint(scenario) -> str:
    fabric, routes = scenario.fabric, scenario.routes
    digest = hashlib.sha256()
    for name in (
        "link_src",
        "link_dst",
        "capacity",
        "latency",
        "link_kind_id",
        "node_kind_id",
        "node_tier",
        "node_group",
        "gpu_node",
        "gpu_domain",
    ):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(np.asarray(getattr(fabric, name), np.float64)).tobytes())
    for name in ("links", "src", "dst"):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(np.asarray(getattr(routes, name), np.float64)).tobytes())
    digest.update(
        repr(
            (
                fabric.name,
                tuple(fabric.link_kinds),
                tuple(fabric.node_kinds),
                fabric.gpus_per_node,
                fabric.meta,
                routes.coef,
                routes.num_links,
                routes.policy,
                scenario.name,
                scenario.bottleneck,
                scenario.roles,
            )
        ).encode()
    )
    return digest.hexdigest()[:16]


@pytest.mark.parametrize(("name", "size"), sorted(SCENARIO_FINGERPRINTS))
def test_scenarios_built_with_assembler_equal_the_old_builder(name, size):
    scenario = scenarios.build_scenario(name, size)
    assert _fingerprint(scenario) == SCENARIO_FINGERPRINTS[name, size]
