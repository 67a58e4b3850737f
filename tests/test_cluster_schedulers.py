"""Cluster state and schedulers (fabricflow.cluster.state / schedulers): whole-node,
slicing and block rules, no double allocation, no DOWN/SPARE GPUs, packing, load
avoidance, preemption."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fabricflow as ff
from fabricflow.cluster.schedulers import SCHEDULERS, Request, make_scheduler
from fabricflow.cluster.state import DOWN, FREE, SPARE, ClusterState
from fabricflow.errors import SpecError


@cache
def superpod():
    """1,024 H100 in 128 8-GPU servers; 4 rail groups (scalable units) of 32 servers."""
    return ff.load_fabric("dgx-h100-superpod")


def request(key, gpus, priority=0):
    return Request(key, gpus, priority, None)


def servers_of(gpus, per=8):
    return np.unique(np.asarray(gpus) // per)


def test_subtrees_of_the_presets():
    assert [int(b.max()) + 1 for b in ClusterState(superpod()).levels] == [4]
    clos = ClusterState(ff.load_fabric("clos-100k"))
    # 64 servers per rail group (64-port rail leaves), 4,096 GPUs per pod
    assert [int(b.max()) + 1 for b in clos.levels] == [200, 25]
    assert ClusterState(ff.load_fabric("tpu-v4-pod")).levels == []  # torus: locality order
    assert [
        int(b.max()) + 1 for b in ClusterState(ff.load_fabric("frontier-dragonfly")).levels
    ] == [74]
    nvl = ClusterState(ff.load_fabric("gb200-nvl72-superpod"))
    assert int(nvl.levels[0].max()) + 1 == 128  # NVL72 racks (18 servers) come first


def test_unknown_scheduler_names_the_allowed_ones():
    with pytest.raises(SpecError, match="first-fit") as info:
        make_scheduler("round-robin", superpod())
    assert info.value.field == "scheduler"
    for name in SCHEDULERS:
        assert "'" + name + "'" in str(info.value)
    with pytest.raises(SpecError, match="block_servers"):
        make_scheduler("packed", superpod(), block_servers=4)


def test_state_updates_and_errors():
    state = ClusterState(superpod())
    state.allocate(3, np.arange(16))
    with pytest.raises(SpecError, match="not free"):
        state.allocate(4, np.arange(8, 24))
    assert state.set_down(np.array([0, 500])).tolist() == [3]
    assert state.gpus_of(3).size == 15
    held = state.release(3)
    assert held.size == 16 and state.owner[0] == DOWN and np.all(state.owner[1:16] == FREE)
    state.set_up(np.array([0, 500]))
    assert np.all(state.owner == FREE)
    state.reserve_spares(np.arange(1016, 1024))
    got = state.take_spare(4)
    assert got is not None and got.tolist() == [1016, 1017, 1018, 1019]
    assert np.all(state.owner[1020:] == SPARE) and state.take_spare(8) is None


def test_fragmentation_counts_free_gpus_stranded_in_partly_used_servers():
    state = ClusterState(superpod())
    assert state.fragmentation() == 0.0
    state.allocate(0, np.array([0, 1]))  # server 0: 6 free, stranded
    state.set_down(np.array([8]))  # server 1: 7 free, stranded
    assert state.fragmentation() == pytest.approx(13 / (1024 - 3))
    state.allocate(1, np.arange(16, 1024))
    assert state.fragmentation() == 1.0


@pytest.mark.parametrize("name", SCHEDULERS)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["job", "job", "job", "release", "down", "up", "spare"]),
            st.sampled_from([1, 2, 4, 8, 12, 16, 64, 256, 300]),
            st.integers(0, 1023),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_placements_respect_the_rules(name, ops):
    fabric = superpod()
    scheduler = make_scheduler(name, fabric)
    state = ClusterState(fabric)
    running: list[int] = []
    for key, (op, size, where) in enumerate(ops):
        if op == "job":
            before = state.owner.copy()
            gpus = scheduler.place(state, request(key, size), None)
            if gpus is None:
                # refusing is only allowed when it cannot fit by its own rule
                assert int((before == FREE).sum()) < size or name != "first-fit"
                continue
            assert gpus.shape == (size,) and np.unique(gpus).size == size
            assert np.all(before[gpus] == FREE)  # never DOWN, SPARE or another job's
            used = servers_of(gpus)
            if name != "first-fit":
                if size < 8:
                    assert used.size == 1  # sliced onto one server
                else:
                    assert used.size == -(-size // 8)  # whole servers
                    whole = (before.reshape(128, 8) == FREE).all(axis=1)
                    assert whole[used].all()
            if name == "block" and size >= 8:
                blocks = scheduler.blocks(state)[used]
                if used.size < 32:
                    assert np.unique(blocks).size == 1
                else:
                    assert np.unique(blocks).size == -(-used.size // 32)
            state.allocate(key, gpus)
            running.append(key)
        elif op == "release" and running:
            state.release(running.pop(where % len(running)))
        elif op == "down":
            for victim in state.set_down(np.arange(where, min(where + size, 1024))):
                state.release(int(victim))
                running.remove(int(victim))
        elif op == "up":
            state.set_up(np.arange(where, min(where + size, 1024)))
        elif op == "spare":
            free = state.free_gpus()
            state.reserve_spares(free[:size])
    owned = state.owner >= 0
    assert sorted(np.unique(state.owner[owned]).tolist()) == sorted(running)


def fragmented():
    """Every other server of rail groups 0 and 1 busy (16 free servers in each); rail
    group 2 wholly free, rail group 3 full."""
    state = ClusterState(superpod())
    busy = [s for s in range(64) if s % 2] + list(range(96, 128))
    gpus = (np.asarray(busy)[:, None] * 8 + np.arange(8)).reshape(-1)
    state.allocate(999, gpus)
    return state


def rail_groups(state, gpus):
    return np.unique(state.levels[0][servers_of(gpus)])


def test_packed_uses_fewer_subtrees_than_first_fit():
    state = fragmented()
    first = make_scheduler("first-fit", superpod()).place(state, request(1, 192), None)
    packed = make_scheduler("packed", superpod()).place(state, request(1, 192), None)
    assert rail_groups(state, first).tolist() == [0, 1]  # the holes of rail groups 0, 1
    assert rail_groups(state, packed).tolist() == [2]
    # best fit: a 64-GPU job goes to the smallest room that fits (rail group 0)
    small = make_scheduler("packed", superpod()).place(state, request(2, 64), None)
    assert rail_groups(state, small).tolist() == [0]


def test_small_jobs_fill_partly_used_servers_first():
    state = ClusterState(superpod())
    scheduler = make_scheduler("packed", superpod())
    state.allocate(0, np.arange(8, 14))  # server 1: 2 free
    state.allocate(1, np.arange(16, 20))  # server 2: 4 free
    two = scheduler.place(state, request(2, 2), None)
    assert two.tolist() == [14, 15]  # the tightest fit
    four = scheduler.place(state, request(3, 4), None)
    assert four.tolist() == [20, 21, 22, 23]


def test_topology_avoids_loaded_links():
    fabric = ff.load_fabric("clos-100k")
    state = ClusterState(fabric)
    # rail group 0 holds one busy server, so best fit (packed) prefers it for a small job
    state.allocate(7, np.arange(8))
    load = np.zeros(fabric.num_links)
    topology = make_scheduler("topology", fabric)
    packed = make_scheduler("packed", fabric)
    # load the spine links of the leaves of rail group 0
    leaf_links = fabric.links_of_kind("leaf")
    anchors = topology._anchors.anchor_of_gpu[np.arange(8)]
    hot = leaf_links[np.isin(fabric.link_src[leaf_links], anchors)]
    load[hot] = 0.9 * fabric.capacity[hot]
    job = request(1, 64)
    quiet = topology.place(state, job, load)
    assert rail_groups(state, packed.place(state, job, load)).tolist() == [0]
    assert rail_groups(state, quiet).tolist() != [0]
    assert not np.isin(topology._anchors.anchor_of_gpu[quiet], anchors).any()
    # rail-aware: rank r of every server sits on the rail leaf of rank r of the first
    per_server = topology._anchors.anchor_of_gpu[quiet].reshape(-1, 8)
    leaves = fabric.structure.slot_of_gpu[quiet].reshape(-1, 8) // int(fabric.structure.H[1])
    assert np.all(leaves == leaves[0]) and np.unique(per_server[0]).size == 8
    # no load: the same best fit as packed
    assert (
        topology.place(state, job, np.zeros(fabric.num_links)).tolist()
        == packed.place(state, job, None).tolist()
    )


def test_block_gives_whole_blocks_to_large_jobs():
    state = fragmented()
    block = make_scheduler("block", superpod())
    # 33 servers need two wholly free blocks: only rail group 2 is -> none
    assert block.place(state, request(1, 264), None) is None
    assert rail_groups(state, block.place(state, request(1, 256), None)).tolist() == [2]
    state = ClusterState(superpod())
    state.allocate(5, np.arange(8))  # rail group 0 no longer wholly free
    gpus = block.place(state, request(1, 264), None)
    assert rail_groups(state, gpus).tolist() == [1, 2]
    custom = make_scheduler("block", superpod(), block_servers=4)
    assert custom.blocks(state).max() == 31
    with pytest.raises(SpecError, match="block_servers"):
        make_scheduler("block", superpod(), block_servers=0)


def test_preemption_picks_the_cheapest_lower_priority_victims():
    fabric = superpod()
    scheduler = make_scheduler("packed", fabric)
    state = ClusterState(fabric)
    # four jobs fill the cluster: 256 GPUs each, priorities 0, 0, 1, 5
    for key in range(4):
        state.allocate(key, np.arange(key * 256, (key + 1) * 256))
    running = {0: 0, 1: 0, 2: 1, 3: 5}
    assert scheduler.victims(state, request(9, 256, priority=2), running) == [0]
    pair = scheduler.victims(state, request(9, 512, priority=2), running)
    assert sorted(pair) == [0, 1]
    # never a job of equal or higher priority
    assert scheduler.victims(state, request(9, 1024, priority=2), running) == []
    assert scheduler.victims(state, request(9, 768, priority=6), running) == [0, 1, 2]
    # nothing to preempt when it fits already
    state.release(0)
    assert scheduler.victims(state, request(9, 256, priority=9), running) == []


def test_first_fit_takes_the_lowest_free_gpus():
    state = ClusterState(superpod())
    state.allocate(0, np.array([0, 2, 4]))
    got = make_scheduler("first-fit", superpod()).place(state, request(1, 4), None)
    assert got.tolist() == [1, 3, 5, 6]
    with pytest.raises(SpecError, match="gpus"):
        make_scheduler("first-fit", superpod()).place(state, request(2, 0), None)
    with pytest.raises(SpecError, match="fabric has 1024"):
        make_scheduler("packed", superpod()).place(state, request(2, 2048), None)


@pytest.mark.parametrize("preset", ["tpu-v4-pod", "frontier-dragonfly"])
def test_fabrics_without_clos_subtrees_get_whole_servers_in_locality_order(preset):
    fabric = ff.load_fabric(preset)
    per = fabric.gpus_per_node
    for name in ("packed", "topology", "block"):
        state = ClusterState(fabric)
        scheduler = make_scheduler(name, fabric)
        first = scheduler.place(state, request(0, 8 * per), np.zeros(fabric.num_links))
        state.allocate(0, first)
        second = scheduler.place(state, request(1, 8 * per), None)
        for gpus in (first, second):
            used = np.unique(gpus // per)
            assert used.size == 8 and np.all(np.isin(np.arange(per), gpus % per))
        assert not np.intersect1d(first, second).size
    # the torus has no subtrees: consecutive servers in the fabric's locality order
    if preset == "tpu-v4-pod":
        state = ClusterState(fabric)
        got = make_scheduler("packed", fabric).place(state, request(0, 4 * per), None)
        assert np.array_equal(np.unique(got // per), state.server_order[:4])


def test_topology_places_a_job_without_network_traffic_best_fit():
    from fabricflow.cluster.interference import JobTraffic

    fabric = ff.load_fabric("clos-100k")
    state = ClusterState(fabric)
    state.allocate(7, np.arange(8))  # rail group 0 is the best fit
    topology = make_scheduler("topology", fabric)
    load = np.zeros(fabric.num_links)
    leaf_links = fabric.links_of_kind("leaf")
    anchors = topology._anchors.anchor_of_gpu[np.arange(8)]
    hot = leaf_links[np.isin(fabric.link_src[leaf_links], anchors)]
    load[hot] = 0.9 * fabric.capacity[hot]
    quiet = JobTraffic(64, {"tp": 1.0}, 0.0, 1.0)  # nothing leaves its servers
    noisy = JobTraffic(64, {"dp": 1.0}, 1.0, 1.0)
    assert rail_groups(state, topology.place(state, Request(1, 64, 0, quiet), load)).tolist() == [0]
    assert rail_groups(state, topology.place(state, Request(1, 64, 0, noisy), load)).tolist() != [0]
