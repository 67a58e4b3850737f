"""The ``clos-1m`` preset (1,048,576 GPUs): its structure against the fat-tree formulas,
a small slice of the same design routed and solved, the build's memory guard, and the
Clos generator's output for ``clos-100k`` pinned (scaling work must not change it)."""

import hashlib

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.errors import MemoryBudgetError

GPUS = 2**20
NIC_PORT_Bps = 400e9 / 8  # one 400G port per plane
PLANES = 2
RADIX = 256


def _digest(fabric) -> str:
    arrays = (
        fabric.link_src.astype(np.int64),
        fabric.link_dst.astype(np.int64),
        fabric.capacity.astype(np.float64),
        fabric.latency.astype(np.float64),
        fabric.link_kind_id.astype(np.int8),
        fabric.node_kind_id.astype(np.int8),
        fabric.node_tier.astype(np.int8),
        fabric.node_group.astype(np.int64),
        fabric.gpu_node.astype(np.int64),
        fabric.gpu_domain.astype(np.int64),
    )
    h = hashlib.sha256()
    for array in arrays:
        h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()


def test_clos_100k_generator_output_is_unchanged():
    # sha256 of every node and link array of clos-100k as the generator built it before
    # the clos-1m work; any change to ids, order, capacities or groups shows here.
    fabric = ff.load_fabric("clos-100k")
    assert _digest(fabric) == "ed27bf07303009fd0b197ac88b3c85e57a318f87d38d045dd36320572afd649d"


def test_clos_1m_full_size_matches_the_fat_tree_formulas():
    fabric = ff.load_fabric("clos-1m")
    assert fabric.meta["sources"] and fabric.meta["assumptions"]
    assert fabric.num_gpus == GPUS and fabric.gpus_per_node == 8
    summary = fabric.summary()
    tiers = summary["tiers"]
    # 3-tier fat-tree of radix k: k^3/4 hosts per plane at most, (2n-1) N / k = 5 N / k
    # switches per plane: N / (k/2) leaves, as many spines, N / k cores.
    assert GPUS <= RADIX**3 // 4
    assert [t["switches"] for t in tiers] == [
        PLANES * GPUS // (RADIX // 2),
        PLANES * GPUS // (RADIX // 2),
        PLANES * GPUS // RADIX,
    ]
    assert sum(t["switches"] for t in tiers) == PLANES * 5 * GPUS // RADIX
    assert [t["oversubscription"] for t in tiers[:2]] == [1.0, 1.0]
    # non-blocking, 2 x 400G per GPU: half the GPUs at full rate across the cut
    assert summary["bisection_bandwidth_Bps"] == pytest.approx(GPUS * PLANES * NIC_PORT_Bps / 2)
    # every core switch uses all 256 ports: 64 pods x one bundle of 4 x 400G, each way
    core = np.flatnonzero(fabric.node_tier == 3)
    spine_links = fabric.links_of_kind("spine")
    into_core = fabric.link_dst[spine_links]
    per_core = np.bincount(into_core, minlength=fabric.num_nodes)[core]
    assert np.all(per_core == 64)
    assert np.all(fabric.capacity[spine_links] == 4 * NIC_PORT_Bps)
    assert np.all(fabric.capacity[fabric.links_of_kind("nvlink")] == 900e9)
    assert fabric.links_of_kind("nic").size == 2 * PLANES * GPUS


def test_a_slice_of_the_design_is_non_blocking_on_both_planes():
    # Two pods (32,768 GPUs) of the same design: every GPU of pod 0 sends to one of pod 1
    # and back. Under spray (adaptive) a non-blocking Clos gives each flow both planes'
    # full 2 x 400G; ECMP's hash collisions on the uplinks can only lower rates.
    fabric = ff.load_fabric("clos-1m", gpus=32768)
    assert fabric.summary()["bisection_bandwidth_Bps"] == pytest.approx(32768 * 100e9 / 2)
    src = np.arange(32768)
    dst = (src + 16384) % 32768
    spray = ff.route(fabric, src, dst, policy="adaptive")
    rates = ff.max_min_rates(spray.links, fabric.capacity, coef=spray.coef)
    np.testing.assert_allclose(rates, 2 * NIC_PORT_Bps, rtol=1e-5)
    ecmp = ff.route(fabric, src, dst, policy="ecmp")
    assert ecmp.links.shape[1] == 6  # NIC, leaf, spine up; spine, leaf, NIC down
    ecmp_rates = ff.max_min_rates(ecmp.links, fabric.capacity)
    assert np.all(ecmp_rates <= NIC_PORT_Bps * (1 + 1e-5))  # one hashed plane per flow
    assert ecmp_rates.min() < NIC_PORT_Bps  # and collisions cost some flows


def test_the_build_is_refused_before_allocating_over_the_budget(monkeypatch):
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "1GiB")
    with pytest.raises(MemoryBudgetError, match=r"11,534,336 directed links"):
        ff.load_fabric("clos-1m")


def test_bench_build_runs_in_its_own_process_under_a_budget():
    from fabricflow.bench import million

    figures = million.measure_build("clos-1m", gpus=16384)
    assert figures["gpus"] == 16384 and figures["memory_budget"] == "12GiB"
    assert figures["switches_per_tier"]["leaf"] == PLANES * 16384 // 128
    assert 0 < figures["build_s"] < figures["process_wall_s"]
    assert figures["peak_rss_bytes"] > 10 * 2**20  # the child's own peak, in bytes


@pytest.mark.parametrize("fraction", [0.0, 0.4])
def test_ecmp_routes_do_not_depend_on_the_chunk_size(monkeypatch, fraction):
    # ECMP paths are drawn in chunks of flows (for cache and memory at 10M flows); every
    # flow's path, redraws around failed links included, must be what one chunk gives.
    from fabricflow.routing import clos

    fabric = ff.load_fabric("dgx-h100-superpod").without(
        link_kind="leaf", fraction=fraction, seed=2
    )
    src, dst = ff.traffic.patterns.alltoall_groups(fabric.num_gpus, 16, 64)
    whole = ff.route(fabric, src, dst, policy="ecmp", seed=5).links
    monkeypatch.setattr(clos, "ROUTE_CHUNK", 97)
    chunked = ff.route(fabric, src, dst, policy="ecmp", seed=5).links
    assert whole.dtype == chunked.dtype == np.int32
    np.testing.assert_array_equal(whole, chunked)
    assert fabric.link_up[whole[whole >= 0]].all()  # redrawn around every failed link
    assert fabric.link_up.all() == (fraction == 0)
