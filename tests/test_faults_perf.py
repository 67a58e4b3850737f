"""Speed work on the collective model: the fast paths give the results of the slow ones.

- large phases are solved by local-bottleneck rounds in float64 numpy: the rates of the
  textbook progressive filling within 1e-12 relative, with the same zeros and infinities;
- the row-by-row merge of a phase's hops gives exactly the global-sort merge;
- the collective path compiles nothing (no jitted solver call);
- routing on a fabric without failures skips the link-up check, with failures it does not.
"""

from __future__ import annotations

import numpy as np
import pytest

from fabricflow.collective import flow_rates, make_groups


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


@pytest.fixture(scope="module")
def two_pods():
    from fabricflow.fabric.spec import load_fabric

    return load_fabric("clos-100k", gpus=8192)


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


# ------------------------------------------------------------ estimate, refusal, progress
def _no_routing(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("routed before the work was checked")

    monkeypatch.setattr(flow_rates, "route", refuse)


def test_absurd_work_is_refused_before_routing_with_the_estimate(two_pods, monkeypatch):
    from fabricflow.collective import estimate
    from fabricflow.collective.timing import prepare_collective
    from fabricflow.errors import SpecError

    _no_routing(monkeypatch)
    monkeypatch.setattr(estimate, "MAX_ESTIMATE_S", 0.01)
    with pytest.raises(SpecError) as info:
        prepare_collective(two_pods, "all_reduce", make_groups(8192, 8, layout="strided"))
    assert info.value.field == "groups"
    message = str(info.value)
    assert "min to route and solve" in message and "network hops" in message
    assert "fewer or smaller groups" in message


def test_work_over_the_memory_budget_is_refused_before_routing(two_pods, monkeypatch):
    from fabricflow.collective.timing import prepare_collective
    from fabricflow.errors import MemoryBudgetError

    _no_routing(monkeypatch)
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "1MiB")
    # refused as its phases are built ("all-to-all (N flow hops)"), or by check_work
    # ("largest phase: N hops") when only a fused phase is over: one estimate for both
    with pytest.raises(MemoryBudgetError, match=r"hops\).*fewer or smaller"):
        prepare_collective(two_pods, "all_to_all", make_groups(8192, 8, layout="strided"))


def test_estimate_counts_network_and_scale_up_hops(two_pods):
    from fabricflow.collective import estimate
    from fabricflow.collective.algorithms import ALGORITHMS, Context

    strided = make_groups(8192, 8, layout="strided")  # one member per node
    ctx = Context("all_reduce", strided, strided, strided[:, :, None], 2)
    phases = ALGORITHMS["ring"].build(ctx)
    assert estimate.count_hops(two_pods, phases) == (0, 1024 * 2 * 8)
    contiguous = make_groups(8192, 8)  # one node per group
    ctx = Context("all_reduce", contiguous, contiguous, contiguous[:, :, None], 2)
    assert estimate.count_hops(two_pods, ALGORITHMS["ring"].build(ctx)) == (1024 * 2 * 8, 0)


def test_long_collective_reports_progress_on_stderr(two_pods, monkeypatch, capsys):
    import json

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
    from fabricflow.cli import main

    args = ["collective", "--fabric", "dgx-h100-superpod", "--op", "all_reduce", "--gpus", "16"]
    assert main([*args, "-e", "16MiB", "--json"]) == 0
    assert capsys.readouterr().err == ""
