"""Work shared between collectives and joint solves gives the answers of solving
separately: phases with identical flows (a ring reduce-scatter and all-gather) are routed
and solved once, and the step coupling's connectivity walk runs on each phase's own rows."""

from __future__ import annotations

import numpy as np

from fabricflow.collective import make_groups
from fabricflow.collective.coupling import _connected, _connected_parts
from fabricflow.collective.flow_rates import solve_phase
from fabricflow.collective.timing import prepare_collective
from fabricflow.study.collective_effects import small_clos


def _phases(prepared):
    return {(s.algorithm.name, i): sp for s in prepared.solved for i, sp in enumerate(s.phases)}


def _same_solve(sp, fresh):
    for name in ("rate", "path_latency_s", "intra_steps", "network_steps", "links", "coef"):
        a, b = getattr(sp, name), getattr(fresh, name)
        assert a.shape == b.shape and a.dtype == b.dtype, name
        assert np.array_equal(a, b), name  # bit for bit, not approximately


def test_identical_phases_are_solved_once_and_match_a_separate_solve():
    fabric = small_clos(gpus=128, leaf_up=8)  # oversubscribed: rates depend on the routes
    groups = make_groups(128, 16, layout="strided")  # rings across leaves
    rs = prepare_collective(fabric, "reduce_scatter", groups)
    ag = prepare_collective(fabric, "all_gather", groups)
    shared = 0
    for key, sp in _phases(ag).items():
        # every phase, shared or not, equals a separate route and solve of its own phase
        fresh = solve_phase(fabric, sp.phase, ag.capacity, routing=ag.routing)
        _same_solve(sp, fresh)
        other = _phases(rs).get(key)
        if other is not None and other.rate is sp.rate:
            shared += 1
            assert sp.phase is not other.phase  # priced with its own bytes and name
            assert np.array_equal(sp.phase.hop_src, other.phase.hop_src)
    assert shared >= 1  # the rings carry the same flows in both ops


def test_a_fabric_edited_in_place_is_solved_again():
    fabric = small_clos(gpus=128, leaf_up=8)
    groups = make_groups(128, 16, layout="strided")
    before = prepare_collective(fabric, "reduce_scatter", groups, algorithm="ring")
    rate_before = before.solved[0].phases[0].rate.copy()
    nic = np.flatnonzero(fabric.link_kind == "nic")
    fabric.capacity[nic] *= 0.25  # the NICs lose three quarters of their bandwidth
    after = prepare_collective(fabric, "all_gather", groups, algorithm="ring")
    sp = after.solved[0].phases[0]
    assert sp.rate is not before.solved[0].phases[0].rate
    _same_solve(sp, solve_phase(fabric, sp.phase, after.capacity, routing=after.routing))
    assert sp.rate.min() < rate_before.min()


def test_connected_parts_matches_the_stacked_walk():
    rng = np.random.default_rng(3)
    num_links = 60
    parts = []
    for rows, width in ((5, 7), (40, 2), (30, 12), (8, 1)):
        links = rng.integers(0, num_links, size=(rows, width))
        links[rng.random((rows, width)) < 0.3] = -1  # padding, also inside rows
        parts.append(links)
    width = max(p.shape[1] for p in parts)
    stacked = np.full((sum(p.shape[0] for p in parts), width), -1)
    row = 0
    for p in parts:
        stacked[row : row + p.shape[0], : p.shape[1]] = p
        row += p.shape[0]
    seed = np.zeros(stacked.shape[0], dtype=bool)
    seed[: parts[0].shape[0]] = True
    expected = _connected(stacked, seed, num_links)
    got = np.concatenate(_connected_parts(parts, num_links))
    assert np.array_equal(got, expected)
    assert 0 < np.count_nonzero(got) < got.size  # the walk kept some rows and left others
