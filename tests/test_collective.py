"""Collective algorithms -> flow phases: byte accounting per GPU, structure, conventions.

No fabric needed: the decomposition is pure numpy over groups and a GPU -> domain map.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from reference_solvers import progressive_filling

from fabricflow.cli import main
from fabricflow.collective import busbw_factor, canonical_op, flow_rates, make_groups, nccl_sizes
from fabricflow.collective.algorithms import ALGORITHMS, Context, NotApplicable, get_algorithm
from fabricflow.collective.algorithms.hops import btree_parents, dtree_parents, tree_depth
from fabricflow.collective.groups import as_groups, domain_grid
from fabricflow.errors import SpecError

GPUS_PER_DOMAIN = 8


def context(
    op, groups, *, channels=4, rail_aware=True, nvls=False, sharp=False, per_domain=GPUS_PER_DOMAIN
):
    groups = np.asarray(groups, dtype=np.int64)
    domain = np.arange(int(groups.max()) + 1) // per_domain
    grid = domain_grid(groups, domain)
    ordered = grid.reshape(groups.shape) if grid is not None else np.sort(groups, axis=1)
    return Context(canonical_op(op), groups, ordered, grid, channels, rail_aware, nvls, sharp)


def sent(phases, num_gpus, size=1.0):
    return sum(p.bytes_sent(num_gpus, size) for p in phases)


def received(phases, num_gpus, size=1.0):
    return sum(p.bytes_received(num_gpus, size) for p in phases)


def cross_domain_sent(phases, num_gpus):
    """Bytes each GPU sends to GPUs of other domains."""
    out = np.zeros(num_gpus)
    for p in phases:
        valid = p.hop_src >= 0
        cross = valid & (p.hop_src // GPUS_PER_DOMAIN != p.hop_dst // GPUS_PER_DOMAIN)
        per_hop = p.hop_load * p.bytes_per_size[:, :, None] * p.repeat
        out += np.bincount(p.hop_src[cross], weights=per_hop[cross], minlength=num_gpus)
    return out


# ------------------------------------------------------------------ conventions


def test_busbw_factors_match_nccl_tests():
    assert busbw_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    for op in ("reduce_scatter", "all_gather", "all_to_all"):
        assert busbw_factor(op, 16) == pytest.approx(15 / 16)
    assert busbw_factor("broadcast", 8) == 1.0
    assert busbw_factor("sendrecv", 2) == 1.0
    with pytest.raises(SpecError, match="one of"):
        busbw_factor("allreduse", 8)


def test_nccl_sizes_doubling_and_errors():
    sizes = nccl_sizes(8 * 2**20, 8 * 2**30)
    assert sizes[0] == 8 * 2**20 and sizes[-1] == 8 * 2**30 and sizes.size == 11
    with pytest.raises(SpecError, match="maxbytes"):
        nccl_sizes(2**30, 2**20)
    with pytest.raises(SpecError, match="stepfactor"):
        nccl_sizes(1, 2, 1.0)


def test_group_validation_errors():
    with pytest.raises(SpecError, match="twice"):
        as_groups([[0, 1, 1]], 8)
    with pytest.raises(SpecError, match="0..7"):
        as_groups([[0, 8]], 8)
    with pytest.raises(SpecError, match="at least 2"):
        as_groups([[3]], 8)
    with pytest.raises(SpecError, match="same size"):
        as_groups([[0, 1], [2, 3, 4]], 8)
    with pytest.raises(SpecError, match="divide"):
        make_groups(12, 5)
    assert make_groups(16, 4, layout="strided")[1].tolist() == [1, 5, 9, 13]


def test_domain_grid_regular_and_irregular():
    domain = np.arange(32) // 8
    grid = domain_grid(np.array([[9, 1, 0, 8]]), domain)
    assert grid.tolist() == [[[0, 1], [8, 9]]]
    assert domain_grid(np.array([[0, 1, 8]]), domain) is None


def test_double_binary_tree_is_two_valid_trees_with_disjoint_inner_nodes():
    for n in (2, 3, 7, 8, 13, 64):
        for parent in dtree_parents(n):
            assert (parent < 0).sum() == 1
            assert tree_depth(parent) <= int(np.ceil(np.log2(n))) + 1
        first, second = dtree_parents(n)
        inner_first = np.isin(np.arange(n), first)
        inner_second = np.isin(np.arange(n), second)
        if n > 2:
            assert not np.any(
                inner_first & inner_second & (np.arange(n) > 0) & (np.arange(n) < n - 1)
            )
    assert btree_parents(8).tolist() == [-1, 2, 4, 2, 0, 6, 4, 6]


# ------------------------------------------------------------------ byte accounting

GROUPS_2x4 = make_groups(32, 8, layout="contiguous").reshape(4, 8)  # single domain each
GROUPS_4x2 = np.array([[0, 1, 8, 9, 16, 17, 24, 25], [2, 3, 10, 11, 18, 19, 26, 27]])


@pytest.mark.parametrize("groups", [GROUPS_2x4, GROUPS_4x2])
@pytest.mark.parametrize(
    "op, factor", [("all_reduce", 2.0), ("reduce_scatter", 1.0), ("all_gather", 1.0)]
)
def test_ring_every_gpu_sends_and_receives_its_share(groups, op, factor):
    n = groups.shape[1]
    phases = ALGORITHMS["ring"].build(context(op, groups, rail_aware=False))
    members = np.unique(groups)
    expected = factor * (n - 1) / n
    np.testing.assert_allclose(sent(phases, 32)[members], expected)
    np.testing.assert_allclose(received(phases, 32)[members], expected)
    assert sent(phases, 32).sum() == pytest.approx(expected * members.size)


def test_rail_aware_ring_keeps_network_hops_on_one_rail():
    ctx = context("all_reduce", GROUPS_4x2, channels=4)
    (phase,) = ALGORITHMS["ring"].build(ctx)
    valid = phase.hop_src >= 0
    cross = valid & (phase.hop_src // 8 != phase.hop_dst // 8)
    assert np.all(phase.hop_src[cross] % 8 == phase.hop_dst[cross] % 8)
    # Each channel leaves each domain once: per domain 2 (n-1)/n S cross the network.
    per_domain = np.bincount(
        np.arange(32) // 8, weights=cross_domain_sent([phase], 32), minlength=4
    )
    np.testing.assert_allclose(per_domain, 2 * (2 * 7 / 8))  # two groups per domain
    plain = ALGORITHMS["ring"].build(
        context("all_reduce", GROUPS_4x2, channels=4, rail_aware=False)
    )
    cross_plain = plain[0].hop_src // 8 != plain[0].hop_dst // 8
    assert np.any(plain[0].hop_src[cross_plain] % 8 != plain[0].hop_dst[cross_plain] % 8)


def test_tree_moves_each_chunk_once_up_and_once_down_every_edge():
    groups = np.arange(32)[None, :]  # 4 domains x 8
    (phase,) = ALGORITHMS["tree"].build(context("all_reduce", groups, channels=4))
    # n - 1 edges per tree, both directions, S / C per channel, C channels: 2 (n-1) S.
    assert sent([phase], 32).sum() == pytest.approx(2 * 31)
    # A node sends about 2 S over the network in total (NCCL: algbw = busbw / 2).
    per_domain = np.bincount(np.arange(32) // 8, weights=cross_domain_sent([phase], 32))
    np.testing.assert_allclose(per_domain.sum(), 2 * 3)
    assert per_domain.max() <= 2.0 + 1e-9


@pytest.mark.parametrize(
    "op, repeat", [("all_reduce", 2), ("reduce_scatter", 1), ("all_gather", 1)]
)
def test_halving_doubling_bytes_and_steps(op, repeat):
    phases = ALGORITHMS["halving_doubling"].build(context(op, GROUPS_4x2))
    assert len(phases) == 3 and all(p.repeat == repeat for p in phases)
    np.testing.assert_allclose(sent(phases, 32)[GROUPS_4x2.ravel()], repeat * 7 / 8)
    # The largest exchange (S/2) stays inside the domain.
    first = phases[0]
    assert np.all(first.hop_src // 8 == first.hop_dst // 8)
    with pytest.raises(NotApplicable, match="power-of-two"):
        ALGORITHMS["halving_doubling"].build(context(op, np.arange(6)[None, :]))


def test_hierarchical_allreduce_volumes_per_level():
    phases = ALGORITHMS["hierarchical"].build(context("all_reduce", GROUPS_4x2, channels=4))
    assert [p.name for p in phases] == ["intra-reduce-scatter", "inter-rail", "intra-all-gather"]
    members = GROUPS_4x2.ravel()
    k, d = 2, 4
    np.testing.assert_allclose(sent(phases[:1], 32)[members], (k - 1) / k)
    np.testing.assert_allclose(sent(phases[1:2], 32)[members], 2 * (d - 1) / d / k)
    np.testing.assert_allclose(cross_domain_sent(phases, 32)[members], 2 * (d - 1) / d / k)


def test_direct_and_hierarchical_all_to_all_deliver_the_same_data():
    groups = GROUPS_4x2
    n = groups.shape[1]
    direct = ALGORITHMS["direct"].build(context("all_to_all", groups, channels=1))
    members = groups.ravel()
    np.testing.assert_allclose(sent(direct, 32)[members], (n - 1) / n)
    np.testing.assert_allclose(received(direct, 32)[members], (n - 1) / n)
    hier = ALGORITHMS["hierarchical"].build(context("all_to_all", groups, channels=1))
    # Network bytes equal the direct scheme's (6 of the 7 peers are remote: 6/8 S each),
    # but go in D - 1 = 3 aggregated rail flows per GPU instead of 6 cross-rail ones.
    np.testing.assert_allclose(cross_domain_sent(hier, 32)[members], 6 / 8)
    np.testing.assert_allclose(cross_domain_sent(direct, 32)[members], 6 / 8)
    rail = hier[1]
    assert np.all(rail.hop_src % 8 == rail.hop_dst % 8)
    assert rail.transfers_per_group == 2 * 4 * 3


def test_nvls_loads_each_switch_port_with_s_times_n_plus_1_over_n():
    groups = np.arange(8)[None, :]
    (phase,) = ALGORITHMS["nvls"].build(context("all_reduce", groups, nvls=True))
    np.testing.assert_allclose(sent([phase], 8), 9 / 8)
    with pytest.raises(NotApplicable, match="NVLS"):
        ALGORITHMS["nvls"].build(context("all_reduce", groups, nvls=False))


def test_sharp_is_one_pipelined_transfer_with_max_merged_trees():
    ctx = context("all_reduce", GROUPS_4x2, channels=2, sharp=True)
    (phase,) = ALGORITHMS["sharp"].build(ctx)
    assert phase.name == "sharp-pipelined" and phase.transfers_per_group == 1
    tree_hops = phase.max_group >= 0
    # Two rails x one channel: two reduction trees, each 2 (D-1) hops to/from its root.
    assert np.unique(phase.max_group[tree_hops]).size == 2
    assert tree_hops.sum(axis=2).tolist() == [[12], [12]]
    # Per GPU: intra ring reduce-scatter + all-gather ((k-1)/k S each) + its S/k shard
    # sent once up the tree (the root also sends the result back to D-1 members).
    members = GROUPS_4x2.ravel()
    intra = sent([phase], 32) - cross_domain_sent([phase], 32)
    np.testing.assert_allclose(intra[members], 2 * (2 - 1) / 2)


def test_nvls_across_domains_is_pipelined_with_rail_rings():
    ctx = context("all_reduce", GROUPS_4x2, channels=4, nvls=True)
    (phase,) = ALGORITHMS["nvls"].build(ctx)
    assert phase.transfers_per_group == 1
    members = GROUPS_4x2.ravel()
    np.testing.assert_allclose(cross_domain_sent([phase], 32)[members], 2 * 3 / 4 / 2)


def test_broadcast_chain_reaches_everyone_from_the_root():
    groups = np.array([[9, 0, 1, 8, 16, 17, 24, 25]])  # root 9
    (phase,) = ALGORITHMS["ring"].build(context("broadcast", groups, channels=2, rail_aware=False))
    got = received([phase], 32)
    assert got[9] == 0.0
    np.testing.assert_allclose(got[[0, 1, 8, 16, 17, 24, 25]], 1.0)


def test_sendrecv_ring_shift_in_rank_order():
    groups = np.array([[3, 0, 5]])
    (phase,) = ALGORITHMS["direct"].build(context("sendrecv", groups, channels=2))
    pairs = set(zip(phase.hop_src.ravel().tolist(), phase.hop_dst.ravel().tolist(), strict=True))
    assert pairs == {(3, 0), (0, 5), (5, 3)}
    np.testing.assert_allclose(sent([phase], 8)[[3, 0, 5]], 1.0)


def test_algorithm_names_one_spelling_each():
    assert get_algorithm("halving_doubling").name == "halving_doubling"
    with pytest.raises(SpecError, match="auto"):
        get_algorithm("butterfly")
    # former nicknames and other spellings are refused with the names allowed
    for other in ("hd", "pxn", "p2p", "Ring"):
        with pytest.raises(SpecError, match="halving_doubling"):
            get_algorithm(other)
    with pytest.raises(SpecError, match="did you mean 'ring'"):
        get_algorithm("Ring")


def test_op_names_one_spelling_each():
    assert canonical_op("all_reduce") == "all_reduce"
    for other in ("allreduce", "AllReduce", "all-reduce", "bcast", "p2p"):
        with pytest.raises(SpecError, match="reduce_scatter") as error:
            canonical_op(other)
        assert error.value.field == "op"
    with pytest.raises(SpecError, match="did you mean 'all_reduce'"):
        canonical_op("all-reduce")


# ------------------------------------------------- strided groups: make_groups, one name


@pytest.mark.parametrize(
    ("num_gpus", "group_size", "num_groups"), [(64, 8, None), (64, 8, 3), (70, 8, None)]
)
def test_alltoall_groups_runs_in_make_groups_strided_without_warning(
    num_gpus, group_size, num_groups
):
    import warnings

    from fabricflow.collective import make_groups
    from fabricflow.traffic.patterns import alltoall_flows, alltoall_groups

    stride = num_gpus // group_size
    groups = make_groups(stride * group_size, group_size, layout="strided")[:num_groups]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the live path warns of nothing
        src, dst = alltoall_groups(num_gpus, group_size, num_groups)
    expected_src, expected_dst = alltoall_flows(groups)
    assert np.array_equal(src, expected_src) and np.array_equal(dst, expected_dst)


def test_strided_groups_is_gone_make_groups_is_the_one_name():
    import fabricflow.traffic.patterns as patterns
    from fabricflow.collective import make_groups

    # strided_groups was a second name of make_groups(layout="strided") before 0.1.0
    with pytest.raises(ImportError, match="strided_groups"):
        from fabricflow.traffic.patterns import strided_groups  # noqa: F401
    assert not hasattr(patterns, "strided_groups")
    assert make_groups(64, 8, layout="strided")[:3].shape == (3, 8)


@pytest.mark.parametrize(
    ("num_gpus", "group_size", "num_groups"),
    [(64, 8, None), (64, 8, 3), (70, 8, None), (9, 2, 4), (16, 16, 1)],
)
def test_alltoall_groups_are_make_groups_strided(num_gpus, group_size, num_groups):
    from fabricflow.collective import make_groups
    from fabricflow.traffic.patterns import alltoall_flows, alltoall_groups

    src, dst = alltoall_groups(num_gpus, group_size, num_groups)
    stride = num_gpus // group_size
    # The definition: member j of group i is GPU i + j * stride.
    expected = np.arange(num_groups or stride)[:, None] + stride * np.arange(group_size)
    expected_src, expected_dst = alltoall_flows(expected)
    assert src.dtype == np.int64 and np.array_equal(src, expected_src)
    assert np.array_equal(dst, expected_dst)
    if num_gpus % group_size == 0:
        full = make_groups(num_gpus, group_size, layout="strided")
        full_src, full_dst = alltoall_flows(full[: expected.shape[0]])
        assert np.array_equal(src, full_src) and np.array_equal(dst, full_dst)


def test_strided_groups_bad_sizes_name_the_field():
    from fabricflow.errors import SpecError
    from fabricflow.traffic.patterns import alltoall_groups

    with pytest.raises(SpecError) as error:
        alltoall_groups(64, 8, 9)
    assert error.value.field == "num_groups"
    with pytest.raises(SpecError) as error:
        alltoall_groups(4, 8)
    assert error.value.field == "group_size"


# ----------------------------------------------------- wide collectives and the fast paths


def test_wide_collective_flows_solve_as_before():
    """Wide merged ring transfers (hundreds of links per row) on a 3-tier fabric give the
    textbook loop's rates (to float64 rounding), through the engine's default choice."""

    from fabricflow.collective import DEFAULT_COST
    from fabricflow.collective.algorithms import ALGORITHMS, Context
    from fabricflow.collective.flow_rates import effective_capacity, solve_phase
    from fabricflow.fabric.spec import load_fabric

    fabric = load_fabric("clos-100k", gpus=8192)  # two pods: rings cross the core
    groups = make_groups(8192, 8, layout="strided")
    grid = groups[:, :, None]
    ctx = Context("all_reduce", groups, groups, grid, 2)
    (phase,) = ALGORITHMS["ring"].build(ctx)
    capacity = effective_capacity(fabric, DEFAULT_COST)
    default = solve_phase(fabric, phase, capacity)
    assert default.links.shape[1] > 32  # wider than the jitted kernel compiles quickly
    textbook = solve_phase(fabric, phase, capacity, solver=progressive_filling)
    np.testing.assert_allclose(default.rate, textbook.rate, rtol=1e-12, atol=0)


def _random_hops(rng, num_transfers, num_hops, width, num_links, fill):
    hop_valid = rng.random(num_transfers * num_hops) < fill
    hop_index = np.flatnonzero(hop_valid)
    hop_links = rng.integers(-1, num_links, size=(hop_index.size, width)).astype(np.int64)
    hop_links = np.sort(np.where(hop_links >= 0, hop_links, num_links), axis=1)
    hop_links[hop_links == num_links] = -1  # -1 padded at the end of each row
    hop_coef = np.where(hop_links >= 0, rng.choice([0.5, 1.0, 2.0], size=hop_links.shape), 0.0)
    return hop_index, hop_links, hop_coef


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("num_links", [5, 1000])  # many repeats / almost none
def test_row_merge_equals_the_global_sort_merge(seed, num_links):
    rng = np.random.default_rng(seed)
    num_transfers, num_hops, width = 50, int(rng.integers(1, 6)), int(rng.integers(1, 5))
    fill = 1.0 if seed % 2 else 0.7  # every hop slot used, or some hops missing
    hop_index, hop_links, hop_coef = _random_hops(
        rng, num_transfers, num_hops, width, num_links, fill
    )
    transfer = hop_index // num_hops
    expected = flow_rates._merge_transfers(transfer, None, hop_links, hop_coef, num_transfers)
    got = flow_rates._merge_rows(hop_index, hop_links, hop_coef, num_transfers, num_hops)
    assert got[0].dtype == expected[0].dtype == np.int32
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])  # same sums in the same order


def test_large_collective_phase_agrees_across_backends(two_pods):
    """All-to-all of 1,024 strided groups of 8 (57,344 transfers crossing the network):
    on a CPU the engine's ``auto`` solves it with the numpy backend (nothing compiled);
    the JAX backend, given as the solver, gives the same rates within 1e-12."""
    from fabricflow.collective.timing import prepare_collective
    from fabricflow.solve.maxmin.engine import max_min

    groups = make_groups(8192, 8, layout="strided")
    fast = prepare_collective(two_pods, "all_to_all", groups)
    phases = fast.solved[0].phases
    assert all(sp.solver == "numpy" for sp in phases)

    def jax_backend(links, capacity, coef):
        return max_min(links, capacity, coef=coef, method="jax", dtype=np.float64).rates

    slow = prepare_collective(two_pods, "all_to_all", groups, solver=jax_backend)
    for a, b in zip(phases, slow.solved[0].phases, strict=True):
        np.testing.assert_array_equal(a.links, b.links)
        np.testing.assert_allclose(a.rate, b.rate, rtol=1e-12, atol=0)
    sizes = [2.0**20, 2.0**30]
    for r_fast, r_slow in zip(fast.evaluate(sizes), slow.evaluate(sizes), strict=True):
        assert r_fast.time_s == pytest.approx(r_slow.time_s, rel=1e-12)


def test_links_up_check_still_sees_failures(two_pods):
    from fabricflow.routing.links_up import all_links_up

    last = two_pods.num_links - 1
    links = np.array([[0, 1, -1], [last, -1, -1]])
    assert np.array_equal(all_links_up(two_pods, links), [True, True])
    failed = two_pods.without(links=[1])
    assert failed.link_up[last]  # the failed cable is not the last link's
    assert np.array_equal(all_links_up(failed, links), [False, True])


@pytest.mark.parametrize("seed", range(6))
def test_upper_envelope_keeps_every_slowest_transfer(seed):
    from fabricflow.collective.timing import _upper_envelope

    rng = np.random.default_rng(seed)
    # Few distinct values: many ties and dominated transfers, as in real phases.
    slope = rng.choice([1e-9, 2e-9, 3e-9, 5e-9], size=(30, 40))
    offset = rng.choice([1e-6, 2e-6, 4e-6], size=slope.shape)
    if seed == 5:
        slope[0, 3] = np.inf  # a transfer with rate 0
    new_slope, new_offset = _upper_envelope(slope, offset)
    assert new_slope.shape[1] * 2 <= slope.shape[1]
    for size in (0.0, 1.0, 1e3, 1e6, 1e9, 3e10):
        with np.errstate(invalid="ignore"):
            expected = (size * slope + offset).max(axis=1)
            got = (size * new_slope + new_offset).max(axis=1)
        np.testing.assert_array_equal(got, expected)


def test_long_collective_reports_progress_on_stderr(two_pods, monkeypatch, capsys):

    from fabricflow.cli import main
    from fabricflow.collective import estimate

    monkeypatch.setattr(estimate, "PROGRESS_AFTER_S", 0.0)
    args = ["collective", "--fabric", "dgx-h100-superpod", "--op", "all_reduce"]
    assert main([*args, "--gpus", "64", "--group-size", "8", "-e", "16MiB", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["rows"]  # stdout: exactly the JSON object
    lines = captured.err.splitlines()
    assert lines[0].startswith("collective all_reduce: 8 groups of 8") and "estimated" in lines[0]
    assert any("ring phase 1/1 (ring)" in line and "flows solved" in line for line in lines)


def test_short_collective_prints_nothing(capsys):

    args = ["collective", "--fabric", "dgx-h100-superpod", "--op", "all_reduce", "--gpus", "16"]
    assert main([*args, "-e", "16MiB", "--json"]) == 0
    assert capsys.readouterr().err == ""
