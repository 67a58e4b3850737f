"""Fabric summaries: physical cables (bundles counted cable by cable, and failed cable by
cable), network vs scale-up switches, the scale-up link named by its technology,
bisection per GPU as architects quote it, and per-tier port use with its warning."""

from __future__ import annotations

import numpy as np
import pytest
from fabric_specs import leaf_spine_spec

import fabricflow as ff
from fabricflow.errors import SpecError
from fabricflow.fabric.spec import build_fabric
from fabricflow.sweeps import solver_tasks


def two_tier(*, spines_radix: int = 64, bundle: int = 1, leaves_up: int = 16) -> dict:
    """16 leaves of 16 GPU ports and ``leaves_up`` uplinks (bundles of ``bundle``), the
    spines of ``spines_radix`` ports: 256 GPUs in 8-GPU servers with NVLink domains."""
    return leaf_spine_spec(256, leaves_up, spine_radix=spines_radix, bundle=bundle)


def test_bundled_cables_are_counted_and_failed_one_by_one():
    fabric = ff.load_fabric("dgx-h100-superpod")  # leaf-spine bundles of 2 cables
    summary = fabric.summary()
    assert summary["links_per_kind"]["leaf"] == 1024  # 512 bundles, two directions
    assert summary["cables_per_kind"]["leaf"] == 1024  # physical cables
    assert summary["cables_per_kind"]["nic"] == 1024
    broken = fabric.without(link_kind="leaf", fraction=0.1, seed=3)
    assert broken.meta["failed_cables"] == 102  # 10 % of 1,024 cables, not of 512 bundles
    assert broken.summary()["cables_per_kind"]["leaf"] == 1024 - 102
    leaf = fabric.links_of_kind("leaf")
    lost = fabric.link_cables[leaf] - broken.link_cables[leaf]
    assert lost.sum() == 2 * 102  # both directions of each failed cable
    # a bundle with one of its two cables failed keeps half its capacity, stays up
    half = leaf[lost == 1]
    assert half.size and np.all(broken.link_up[half])
    np.testing.assert_allclose(broken.capacity[half], fabric.capacity[half] / 2)
    gone = leaf[lost == 2]
    assert np.all(~broken.link_up[gone]) and np.all(broken.capacity[gone] == 0)
    # the sweep's batched failures draw the same cables
    batch = solver_tasks.failure_capacities(fabric, "leaf", [0.1, 0.0], [3, 0])
    np.testing.assert_array_equal(batch[0], broken.capacity)
    np.testing.assert_array_equal(batch[1], fabric.capacity)
    # failing more of a partly failed fabric draws among the working cables only
    again = broken.without(link_kind="leaf", fraction=0.5, seed=4)
    assert again.meta["failed_cables"] == 102 + round(0.5 * (1024 - 102))


def test_unbundled_failures_are_the_former_draw():
    """Without bundles the cable draw is the link draw it replaced (same seed, same set)."""
    fabric = build_fabric(two_tier())
    broken = fabric.without(link_kind="leaf", fraction=0.2, seed=5)
    cables = fabric.links_of_kind("leaf")
    cables = cables[fabric.link_src[cables] < fabric.link_dst[cables]]
    chosen = np.random.default_rng(5).choice(cables, size=round(0.2 * cables.size), replace=False)
    assert set(np.flatnonzero(~broken.link_up & (fabric.link_src < fabric.link_dst))) == set(
        chosen.tolist()
    )


def test_switches_are_counted_apart_and_the_scale_up_kind_is_named():
    summary = ff.load_fabric("dgx-h100-superpod").summary()
    assert (summary["num_network_switches"], summary["num_scale_up_switches"]) == (48, 128)
    # num_switches is the sum, as Fabric.num_switches; nothing is listed as deprecated
    assert summary["num_switches"] == 48 + 128 and "deprecated" not in summary
    assert summary["scale_up_link_kind"] == "nvlink"
    frontier = ff.load_fabric("frontier-dragonfly")
    assert frontier.num_network_switches == 74 * 32
    assert frontier.scale_up_link_kind == "infinity-fabric"
    assert not np.any(frontier.link_kind == "nvlink")  # AMD Infinity Fabric is no NVLink


def test_bisection_per_gpu_is_over_one_half_and_full_bisection_reads_100_percent():
    summary = ff.load_fabric("dgx-h100-superpod").summary()  # 1:1, 400G per GPU
    assert summary["bisection_per_gpu_Bps"] == pytest.approx(400e9 / 8)
    assert summary["bisection_ratio"] == pytest.approx(1.0)
    half = build_fabric(two_tier(leaves_up=8, spines_radix=32)).summary()  # 2:1 leaves
    assert half["bisection_ratio"] == pytest.approx(0.5)
    assert half["bisection_per_gpu_Bps"] == pytest.approx(200e9 / 8)


def test_unused_switch_ports_are_reported_with_a_warning():
    summary = build_fabric(two_tier(spines_radix=64)).summary()  # 16 leaves on 64-port spines
    spine = next(t for t in summary["tiers"] if t["name"] == "spine")
    assert spine["ports_per_switch"] == 64
    assert spine["ports_used"] == {"min": 16, "max": 16}
    assert any("16 of 64 ports" in w for w in summary["warnings"])
    leaf = next(t for t in summary["tiers"] if t["name"] == "leaf")
    assert leaf["ports_used"] == {"min": 32, "max": 32} and "warning" not in leaf
    full = build_fabric(two_tier(spines_radix=16)).summary()
    assert full["warnings"] == []
    bundled = build_fabric(two_tier(spines_radix=32, bundle=2, leaves_up=16)).summary()
    # 8 spines, each with bundles of 2 cables from 16 leaves: 32 ports
    spine = next(t for t in bundled["tiers"] if t["name"] == "spine")
    assert spine["switches"] == 8 and spine["ports_used"] == {"min": 32, "max": 32}


def test_a_kind_the_fabric_does_not_have_is_explained():
    fabric = build_fabric(two_tier())
    with pytest.raises(SpecError, match="'leaf' = leaf-spine cables") as error:
        fabric.without(link_kind="spine", fraction=0.1)
    assert "top tier (spine) has no uplinks" in str(error.value)
    with pytest.raises(SpecError, match="did you mean 'leaf'"):
        fabric.without(link_kind="lief", fraction=0.1)
