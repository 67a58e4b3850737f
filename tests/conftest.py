"""Shared pytest fixtures: small fabrics built from specs."""

from __future__ import annotations

import pytest
from fabric_specs import fat_tree_spec


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
