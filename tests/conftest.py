"""Shared pytest fixtures: small fabrics built from specs."""

from __future__ import annotations

import pytest
from fabric_specs import fat_tree_spec
from hypothesis import settings

# Property tests check values, not speed: hypothesis' default 200 ms deadline per example
# fails them on a loaded 2-core machine (the first example also pays JIT compiles).
settings.register_profile("fabricflow", deadline=None)
settings.load_profile("fabricflow")


@pytest.fixture
def small_rail_fabric():
    """128 GPUs in 4-GPU nodes with NVLink domains, 3-tier k=8 rail-optimized Clos."""
    from fabricflow.fabric.spec import build_fabric

    return build_fabric(
        fat_tree_spec(
            8,
            gpus_per_node=4,
            attachment="rail",
            scale_up={"domain_size": 4, "bandwidth_per_direction": "100GB/s"},
        )
    )


@pytest.fixture(scope="module")
def two_pods():
    """``clos-100k`` cut to 8,192 GPUs: two pods, so collectives cross the spine tier."""
    from fabricflow.fabric.spec import load_fabric

    return load_fabric("clos-100k", gpus=8192)
