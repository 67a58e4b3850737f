"""Exact equivalence: a phase whose groups are translations of one another inside their
own scale-up domains is routed and solved for one group; the answer must equal the full
solve bit for bit, and any broken symmetry must fall back to the full solve."""

from __future__ import annotations

import numpy as np
import pytest

from fabricflow.collective import DEFAULT_COST, make_groups
from fabricflow.collective import flow_rates as fr
from fabricflow.collective.algorithms import ALGORITHMS, Context
from fabricflow.collective.flow_rates import effective_capacity, solve_phase
from fabricflow.collective.groups import domain_grid
from fabricflow.collective.symmetry import domain_replica, replicated_domains


def _phases(fabric, algorithm, op, groups, channels=2):
    grid = domain_grid(groups, fabric.gpu_domain)
    grid = grid if grid is not None else groups[:, :, None]
    ctx = Context(op, groups, groups, grid, channels, nvls=algorithm == "nvls")
    return ALGORITHMS[algorithm].build(ctx)


def _full(fabric, phase, capacity, monkeypatch, routing="ecmp"):
    with monkeypatch.context() as patch:
        patch.setattr(fr, "replicated_domains", lambda *_: None)
        return solve_phase(fabric, phase, capacity, routing=routing)


def _assert_same(a, b):
    for name in ("rate", "path_latency_s", "intra_steps", "network_steps", "links", "coef"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.mark.parametrize("routing", ["ecmp", "adaptive"])
@pytest.mark.parametrize(
    "algorithm, op",
    [("ring", "all_reduce"), ("halving_doubling", "reduce_scatter"), ("direct", "all_to_all")],
)
def test_replicated_phase_equals_the_full_solve(
    small_rail_fabric, monkeypatch, algorithm, op, routing
):
    fabric = small_rail_fabric  # 4-GPU NVLink domains
    groups = make_groups(fabric.num_gpus, 4, layout="contiguous")
    capacity = effective_capacity(fabric, DEFAULT_COST)
    for phase in _phases(fabric, algorithm, op, groups):
        assert replicated_domains(fabric, phase) is not None
        fast = solve_phase(fabric, phase, capacity, routing=routing)
        assert fast.replicated
        _assert_same(fast, _full(fabric, phase, capacity, monkeypatch, routing))


def test_broken_symmetry_falls_back_to_the_full_solve(small_rail_fabric, monkeypatch):
    fabric = small_rail_fabric
    groups = make_groups(fabric.num_gpus, 4, layout="contiguous")
    (phase,) = _phases(fabric, "ring", "all_reduce", groups)
    # one NVLink of domain 5 slower: its group is no longer a translation of group 0
    capacity = effective_capacity(fabric, DEFAULT_COST).copy()
    nvlink = fabric.links_of_kind("nvlink")
    victim = nvlink[np.isin(fabric.link_src[nvlink], fabric.gpu_node[groups[5]])][0]
    capacity[victim] /= 2
    domains = replicated_domains(fabric, phase)
    assert domains is not None  # same hop pattern ...
    assert domain_replica(fabric, phase, domains, capacity, routing="ecmp", seed=0) is None
    slow = solve_phase(fabric, phase, capacity, routing="ecmp")  # ... but solved in full
    assert not slow.replicated
    _assert_same(slow, _full(fabric, phase, capacity, monkeypatch))
    assert slow.rate[5].min() < slow.rate[0].min()


def test_groups_across_domains_or_sharing_one_are_not_replicated(small_rail_fabric):
    fabric = small_rail_fabric
    strided = make_groups(fabric.num_gpus, 4, layout="strided")  # one GPU per domain
    (phase,) = _phases(fabric, "ring", "all_reduce", strided)
    assert replicated_domains(fabric, phase) is None
    halves = make_groups(fabric.num_gpus, 2, layout="contiguous")  # two groups per domain
    (phase,) = _phases(fabric, "ring", "all_reduce", halves)
    assert replicated_domains(fabric, phase) is None


def test_step_time_is_the_same_with_and_without_replication(small_rail_fabric, monkeypatch):
    import fabricflow as ff
    from fabricflow.collective import structure_cache

    layout = ff.Layout(tp=4, pp=2, dp=16, micro_batch=1, global_batch=64, seq_len=2048)
    structure_cache.clear()
    fast = ff.step_time("megatron-1.7b", "h100-sxm", layout, small_rail_fabric)
    structure_cache.clear()
    with monkeypatch.context() as patch:
        patch.setattr(fr, "replicated_domains", lambda *_: None)
        full = ff.step_time("megatron-1.7b", "h100-sxm", layout, small_rail_fabric)
    structure_cache.clear()
    assert fast.step_time_s == full.step_time_s
    assert fast.breakdown == full.breakdown


def test_collective_results_are_the_same_with_and_without_replication(
    small_rail_fabric, monkeypatch
):
    from fabricflow.collective import collective_time, structure_cache

    groups = make_groups(small_rail_fabric.num_gpus, 4, layout="contiguous")
    structure_cache.clear()
    fast = collective_time(small_rail_fabric, "all_reduce", groups, 2**24, routing="ecmp")
    structure_cache.clear()
    with monkeypatch.context() as patch:
        patch.setattr(fr, "replicated_domains", lambda *_: None)
        full = collective_time(small_rail_fabric, "all_reduce", groups, 2**24, routing="ecmp")
    structure_cache.clear()
    assert fast.to_dict() == full.to_dict()
    np.testing.assert_array_equal(fast.group_time_s, full.group_time_s)
