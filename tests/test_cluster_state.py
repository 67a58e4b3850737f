"""ClusterState keeps its counts (free, busy, down, spare GPUs, free GPUs per server, wholly
free servers, fragmentation) in step with the owner array through any sequence of
allocations, releases, failures, repairs, spares and held-back GPUs."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import fabricflow as ff
from fabricflow.cluster.state import DOWN, FREE, SPARE, ClusterState

FABRIC = ff.load_fabric("dgx-h100-superpod")


def _check(state: ClusterState) -> None:
    owner = state.owner
    assert state.num_free == np.count_nonzero(owner == FREE)
    assert state.num_busy == np.count_nonzero(owner >= 0)
    assert state.num_down == np.count_nonzero(owner == DOWN)
    assert state.num_spare == np.count_nonzero(owner == SPARE)
    per_server = (owner == FREE).reshape(state.num_servers, state.gpus_per_node).sum(axis=1)
    np.testing.assert_array_equal(state.free_per_server(), per_server)
    free = per_server.sum()
    whole = per_server[per_server == state.gpus_per_node].sum()
    expected = 0.0 if free == 0 else 1.0 - whole / free
    assert abs(state.fragmentation() - expected) < 1e-12


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 10**6)), max_size=60))
def test_counts_follow_every_change(operations):
    state = ClusterState(FABRIC)
    rng_keys = 0
    for op, value in operations:
        rng = np.random.default_rng(value)
        if op == 0:  # allocate some free GPUs
            free = state.free_gpus()
            if free.size:
                state.allocate(
                    rng_keys, rng.choice(free, size=min(free.size, 1 + value % 64), replace=False)
                )
                rng_keys += 1
        elif op == 1 and rng_keys:  # release a job
            state.release(int(value % rng_keys))
        elif op == 2:  # GPUs fail
            state.set_down(rng.choice(FABRIC.num_gpus, size=1 + value % 16, replace=False))
        elif op == 3:  # repairs
            state.set_up(rng.choice(FABRIC.num_gpus, size=1 + value % 64, replace=False))
        elif op == 4:  # spares from whole free servers, taken back
            whole = np.flatnonzero(state.whole_free_servers())[:2]
            if whole.size:
                state.reserve_spares((whole[:, None] * 8 + np.arange(8)).ravel())
            if value % 2:
                state.take_spare(8)
        else:  # held back for a placement, then given back
            before = state.owner.copy()
            with state.held_back(rng.choice(FABRIC.num_gpus, size=32, replace=False)):
                _check(state)
            np.testing.assert_array_equal(state.owner, before)
        _check(state)
    copy = state.copy()
    _check(copy)
