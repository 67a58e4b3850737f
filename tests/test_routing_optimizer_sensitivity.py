"""Design review from capacity gradients: tier ranking and the 400G-per-leaf upgrade."""

from __future__ import annotations

import numpy as np
import pytest
from fabric_specs import fat_tree_spec
from routing_checks import random_pairs

from fabricflow.errors import SpecError
from fabricflow.fabric.spec import build_fabric
from fabricflow.plots.routing_optimizer import leaf_uplinks, plot_upgrade_review, upgrade_review


def test_leaf_bound_traffic_ranks_the_leaf_tier_first_and_an_upgrade_helps(tmp_path):
    fabric = build_fabric(fat_tree_spec(8, nic="400Gbps"))
    # leaf uplinks at a quarter of their capacity: the leaf tier is the bottleneck
    links, _ = leaf_uplinks(fabric)
    capacity = fabric.capacity.astype(np.float64).copy()
    capacity[links] /= 4
    fabric = fabric.with_capacity(capacity)
    src, dst = random_pairs(fabric.num_gpus, 400, seed=3)
    review = upgrade_review(fabric, src, dst, 1e7, k=4)
    assert review["upgrade_first"].startswith("leaf@2")
    up = review["leaf_upgrade"]
    assert up["leaves"] == 32
    # more capacity never slows the same routing; the first-order estimate is a
    # tangent of the convex map c -> max(b / c), so it cannot overshoot that
    assert up["fixed_routing_s"] < review["makespan_s"]
    assert up["first_order_s"] <= up["fixed_routing_s"] * (1 + 1e-3)
    assert up["reoptimized_s"] <= up["fixed_routing_s"] * 1.02
    from fabricflow.plots.figures import save_figure

    path = save_figure(plot_upgrade_review(review, title="k=8 fat-tree"), tmp_path / "up.png")
    assert path.stat().st_size > 1000
    with pytest.raises(SpecError, match="added_Bps"):
        upgrade_review(fabric, src, dst, 1e7, added_Bps=-1.0)
