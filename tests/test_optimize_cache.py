"""Structure cache of solved collectives, and step_time(algorithms=...)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.collective import structure_cache
from fabricflow.collective.comm import prepared_collective
from fabricflow.errors import SpecError

LAYOUT = dict(tp=2, pp=2, dp=8, micro_batch=1, global_batch=32, seq_len=2048)


@pytest.fixture
def fabric(small_rail_fabric):
    return small_rail_fabric


def test_warm_call_reuses_solved_structures(fabric):
    structure_cache.clear()
    layout = ff.Layout(**LAYOUT)
    cold = ff.step_time("megatron-1.7b", "a100-80gb", layout, fabric)
    misses = structure_cache.info()["misses"]
    # (the coupling's joint solves are stored, and read back within the call, too)
    assert misses > 0
    hits = structure_cache.info()["hits"]
    warm = ff.step_time("megatron-1.7b", "a100-80gb", layout, fabric)
    assert structure_cache.info()["misses"] == misses  # nothing routed or solved again
    assert structure_cache.info()["hits"] > hits
    assert warm.step_time_s == cold.step_time_s and warm.breakdown == cold.breakdown


def test_changed_fabric_never_hits_a_stale_entry(fabric):
    structure_cache.clear()
    layout = ff.Layout(**LAYOUT)
    healthy = ff.step_time("megatron-1.7b", "a100-80gb", layout, fabric)
    # the same fabric with every NIC at a tenth of its capacity: a new fingerprint
    nic = fabric.link_kinds.index("nic")
    capacity = np.where(fabric.link_kind_id == nic, fabric.capacity / 10, fabric.capacity)
    slow = dataclasses.replace(fabric, capacity=capacity)
    assert structure_cache.fabric_fingerprint(slow) != structure_cache.fabric_fingerprint(fabric)
    degraded = ff.step_time("megatron-1.7b", "a100-80gb", layout, slow)
    assert degraded.step_time_s > healthy.step_time_s
    # an in-place change of the same object is seen too
    before = structure_cache.fabric_fingerprint(slow)
    slow.capacity[0] *= 0.5
    assert structure_cache.fabric_fingerprint(slow) != before


def test_cache_is_bounded(fabric, monkeypatch):
    structure_cache.clear()
    monkeypatch.setattr(structure_cache, "MAX_ENTRIES", 2)
    for tp in (1, 2, 4):
        layout = ff.Layout(**{**LAYOUT, "tp": tp, "dp": 32 // (tp * 2)})
        ff.step_time("megatron-1.7b", "a100-80gb", layout, fabric)
    assert structure_cache.info()["entries"] <= 2


def test_cache_counts_the_prepared_collectives_it_holds(fabric, monkeypatch):
    """The byte bound covers what an entry keeps alive: a solved collective's capacities,
    routes and phases. (They went uncounted, so a simulation re-solving on ever new
    failed fabrics grew by megabytes per entry up to the 16k-entry bound.)"""
    structure_cache.clear()
    groups = np.arange(fabric.num_gpus).reshape(-1, 8)
    solved = prepared_collective(fabric, "all_reduce", groups)
    assert structure_cache.info()["bytes"] >= solved.prepared._capacity.nbytes
    # with room for about one entry, a second collective evicts the first
    monkeypatch.setattr(structure_cache, "MAX_BYTES", structure_cache.info()["bytes"] * 3 // 2)
    prepared_collective(fabric, "all_gather", groups)
    assert structure_cache.info()["entries"] == 1


def test_algorithms_per_dimension(fabric):
    layout = ff.Layout(**LAYOUT)
    auto = ff.step_time("megatron-1.7b", "a100-80gb", layout, fabric)
    ring = ff.step_time(
        "megatron-1.7b", "a100-80gb", layout, fabric, algorithms={"dp": "ring", "tp": "ring"}
    )
    # auto takes the fastest algorithm per size: a fixed one is never faster
    assert ring.step_time_s >= auto.step_time_s * (1 - 1e-12)
    with pytest.raises(SpecError) as info:
        ff.step_time("megatron-1.7b", "a100-80gb", layout, fabric, algorithms={"dp": "magic"})
    assert info.value.field == "algorithms.dp" and "ring" in str(info.value)
    with pytest.raises(SpecError) as info:
        ff.step_time("megatron-1.7b", "a100-80gb", layout, fabric, algorithms={"xp": "ring"})
    assert info.value.field == "algorithms"
    # pipeline send/recv has no ring: the op is named
    with pytest.raises(SpecError) as info:
        ff.step_time("megatron-1.7b", "a100-80gb", layout, fabric, algorithms={"pp": "ring"})
    assert info.value.field == "algorithms.pp"
