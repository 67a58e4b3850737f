"""Layout optimizer: exactness against brute force, the bound, contention, bad input."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from optimize_cases import GPU, SEQ, SPACE, small_brute_force, small_model, tiny_oversubscribed

import fabricflow as ff
from fabricflow.errors import SpecError
from fabricflow.layout_search import branch_and_bound as visit_module
from fabricflow.layout_search.knobs import resolve_space
from fabricflow.layout_search.optimize import optimize_layout


@pytest.fixture(scope="module")
def oversubscribed():
    return tiny_oversubscribed()


@pytest.fixture(scope="module")
def model():
    return small_model()


def distinct_answers(results, rtol=1e-6):
    """Step times of the distinct answers of ``[(layout, seconds)]``, shortest first: one
    layout's results within ``rtol`` of each other are one answer (its fastest)."""
    answers: list = []
    for layout, t in sorted(results, key=lambda item: item[1]):
        if layout.tp == 1:  # TP settings at tp = 1 are no-ops: the same candidate
            layout = dataclasses.replace(layout, tp_overlap=False, sequence_parallel=False)
        if not any(lay == layout and abs(t - best) <= rtol * best for lay, best in answers):
            answers.append((layout, t))
    return [t for _, t in answers]


def test_equals_brute_force(model, oversubscribed):
    search = optimize_layout(
        model, GPU, oversubscribed, gpus=32, global_batch=64, seq_len=SEQ, space=SPACE, top_k=5
    )
    expected = small_brute_force()
    assert search.exhaustive
    assert search.best.step_time_s == pytest.approx(expected[0][1], rel=1e-12)
    # the top 5 are the 5 best distinct answers (equal results of one layout count once)
    got = [r.step_time_s for _, r in search.top]
    assert got == pytest.approx(distinct_answers(expected)[:5], rel=1e-12)
    counts = search.counts
    assert counts["evaluated"] + counts["pruned"] + counts["infeasible"] == counts["considered"]
    assert counts["evaluated"] < counts["considered"]  # the bound pruned something
    # best_kwargs re-times the winner
    again = ff.step_time(model, GPU, fabric=oversubscribed, **search.best_kwargs)
    assert again.step_time_s == search.best.step_time_s
    # one dataset entry per timed candidate, every knob a variable
    ds = search.candidates
    assert ds.sizes["candidate"] == counts["evaluated"]
    for name in ("tp", "pp", "dp", "order", "placement", "step_time_s", "mfu",
                 "memory_gib_per_gpu", "dp_s", "bubble_s", "lower_bound_s", "answer"):  # fmt: skip
        assert name in ds
    assert float(ds["step_time_s"].min()) == search.best.step_time_s


def _visit(model, fabric, searched_fixed, gpus=32, global_batch=64, collectives="fabric"):
    """A table of a default space with ``fixed`` pins, analysed, and a visit over it."""
    from fabricflow.layout_search.branch_and_bound import BranchAndBound
    from fabricflow.layout_search.candidate_table import build_table
    from fabricflow.layout_search.compute_model import ComputeModel

    gpu = ff.load_gpu(GPU)
    searched, single = resolve_space(
        model, fabric, gpus=gpus, global_batch=global_batch, seq_len=SEQ, precision="bf16",
        fixed=searched_fixed, space=None,
    )  # fmt: skip
    table = build_table(model, searched, single, gpus, global_batch, SEQ)
    keys = np.flatnonzero(table.sized_ok)
    table.record(keys, ComputeModel(model, gpu, gpus).analyse(table.rows(keys)))
    visit = BranchAndBound(
        model, gpu, fabric, table, top_k=1, seed=0, collectives=collectives, gpus=gpus,
        say=lambda line: None,
    )  # fmt: skip
    return table, visit


@pytest.mark.parametrize("moe", [False, True])
def test_bound_never_exceeds_the_step_time(moe, model, oversubscribed):
    """Every bound (compute only; with the cut bounds of TP/CP/EP/DP/PP traffic; with each
    collective at its time alone on the fabric) stays at or below the full evaluation on
    random candidates of a default space (dense with CP; MoE with EP)."""
    gpu = ff.load_gpu(GPU)
    fixed = {"recompute": "none"}
    if moe:
        model = ff.load_model("mixtral-8x7b", num_hidden_layers=4)
        fixed["tp"] = 1  # expert groups within the data x context ranks
    table, visit = _visit(model, oversubscribed, fixed)
    keys, combos = np.nonzero(table.runnable & table.feasible[:, None])
    rng = np.random.default_rng(1)
    pick = rng.choice(len(keys), size=40, replace=False)
    keys, combos = keys[pick], combos[pick]
    sids = visit.structures.ids(keys, combos)
    cut = visit.bound(keys, combos, sids, isolated=False)
    isolated = visit.bound(keys, combos, sids, isolated=True)
    tighter = 0
    for b2, b3, key, combo in zip(cut, isolated, keys, combos, strict=True):
        kwargs = visit.kwargs(int(key), int(combo))
        result = ff.step_time(model, gpu, fabric=oversubscribed, **kwargs)
        alone = ff.step_time(model, gpu, fabric=oversubscribed, coupling=False, **kwargs)
        assert table.bound_s[key] <= b2 <= b3 * (1 + 1e-12)
        assert b3 <= alone.step_time_s * (1 + 1e-9) <= result.step_time_s * (1 + 1e-9)
        # the compute bound is compute + the bubble of compute + optimizer, nothing more
        assert table.bound_s[key] >= result.breakdown["compute"] + result.breakdown["optimizer"]
        tighter += b3 > b2 * 1.01
    assert tighter > 10  # the solved collectives tighten the cut bound


def test_contention_changes_the_optimum(model, oversubscribed):
    """On a 3:1 oversubscribed fabric the contention-blind optimum (alpha-beta) loses to
    the contention-aware one when both are timed with contention."""
    space = {**{k: v for k, v in SPACE.items() if k not in ("zero", "dp_overlap")}, "order": [
        "tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "tp-dp-cp-ep-pp"
    ]}  # fmt: skip
    fixed = {"dp_overlap": False, "zero": 1}
    options = dict(gpus=32, global_batch=64, seq_len=SEQ, space=space, fixed=fixed, top_k=1)
    aware = optimize_layout(model, GPU, oversubscribed, **options)
    blind = optimize_layout(model, GPU, oversubscribed, collectives="alpha-beta", **options)
    blind_kwargs = {k: v for k, v in blind.best_kwargs.items() if k != "collectives"}
    assert blind_kwargs != aware.best_kwargs
    retimed = ff.step_time(model, GPU, fabric=oversubscribed, **blind_kwargs)
    assert retimed.step_time_s > 1.1 * aware.best.step_time_s


def test_routing_is_a_knob(model, oversubscribed):
    """'Best layout with optimized routing vs with ECMP' is one search over the routing."""
    space = {"tp": [1, 2], "pp": [1, 2], "routing": ["ecmp", "optimized"]}
    options = dict(gpus=32, global_batch=64, seq_len=SEQ, top_k=8)
    both = optimize_layout(model, GPU, oversubscribed, space=space, **options)
    assert both.exhaustive
    routings = {kwargs.get("routing", "auto") for kwargs, _ in both.top}
    assert routings == {"ecmp", "optimized"}  # both policies were timed
    ecmp = optimize_layout(
        model, GPU, oversubscribed, space={**space, "routing": ["ecmp"]}, **options
    )
    # a search over both is never worse than ECMP alone, and re-times to its own answer
    assert both.best.step_time_s <= ecmp.best.step_time_s
    retimed = ff.step_time(model, GPU, fabric=oversubscribed, **both.best_kwargs)
    assert retimed.step_time_s == pytest.approx(both.best.step_time_s, rel=1e-12)
    with pytest.raises(SpecError, match="routing"):
        optimize_layout(model, GPU, oversubscribed, fixed={"routing": "bogus"}, **options)


def test_tokens_per_gpu_and_gpu_sweep(model, oversubscribed, tmp_path):
    space = {"tp": [1, 2], "pp": [1, 2], "micro_batch": [1]}
    search = optimize_layout(
        model, GPU, oversubscribed, gpus=[8, 16, 32], global_batch=64, seq_len=SEQ,
        space=space, objective="tokens_per_gpu",
    )  # fmt: skip
    sweep = search.sweep
    assert list(sweep["gpus"].values) == [8, 16, 32]
    assert np.all(np.isfinite(sweep["step_time_s"].values))
    # more GPUs for the same batch: shorter steps; the search returned the most efficient
    assert sweep["step_time_s"].values[0] > sweep["step_time_s"].values[-1]
    best = int(np.argmax(sweep["tokens_per_gpu_s"].values))
    assert search.gpus == int(sweep["gpus"].values[best])
    from fabricflow.plots.layout_search import plot_sweep

    path = plot_sweep(sweep, str(tmp_path / "sweep.png"))
    assert (tmp_path / "sweep.png").stat().st_size > 0 and path.endswith("sweep.png")


def test_budget_returns_the_best_so_far(model, oversubscribed):
    search = optimize_layout(
        model, GPU, oversubscribed, gpus=32, global_batch=64, seq_len=SEQ, space=SPACE,
        budget_s=1e-6,
    )  # fmt: skip
    assert not search.exhaustive and search.stopped == "budget"
    assert search.counts["evaluated"] >= 1 and search.counts["unvisited"] > 0


def test_interrupt_returns_the_best_so_far(model, oversubscribed, monkeypatch):
    calls = []
    real = visit_module.step_time

    def interrupted_after_three(*args, **kwargs):
        calls.append(1)
        if len(calls) > 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(visit_module, "step_time", interrupted_after_three)
    search = optimize_layout(
        model, GPU, oversubscribed, gpus=32, global_batch=64, seq_len=SEQ, space=SPACE,
        collectives="alpha-beta",
    )  # fmt: skip
    assert search.stopped == "interrupted" and not search.exhaustive
    assert search.counts["evaluated"] == 3


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({"fixed": {"tensor": 8}}, "fixed", ["unknown knob 'tensor'", "'tp'"]),
        ({"space": {"tp": [1, 2]}, "fixed": {"tp": 4}}, "fixed.tp", ["excludes"]),
        ({"fixed": {"zero": "x"}}, "fixed.zero", ["integer"]),
        ({"fixed": {"placement": "random"}}, "fixed.placement", ["contiguous"]),
        ({"fixed": {"algorithm_dp": "magic"}}, "fixed.algorithm_dp", ["ring"]),
        ({"objective": "speed"}, "objective", ["tokens_per_gpu"]),
    ],
)
def test_bad_input_names_the_knob(model, oversubscribed, kwargs, field, words):
    with pytest.raises(SpecError) as info:
        optimize_layout(model, GPU, oversubscribed, gpus=32, global_batch=64, seq_len=SEQ, **kwargs)
    assert info.value.field == field
    for word in words:
        assert word in str(info.value)


def test_no_factorization_names_close_gpu_counts(model, oversubscribed):
    with pytest.raises(SpecError) as info:
        optimize_layout(
            model, GPU, oversubscribed, gpus=7, global_batch=64, seq_len=SEQ,
            space={"tp": [1, 2], "pp": [1, 2], "micro_batch": [1]},
        )  # fmt: skip
    assert info.value.field == "gpus"
    assert "closest GPU counts" in str(info.value) and "8" in str(info.value)


def test_model_that_fits_no_layout(oversubscribed):
    gpu = ff.load_gpu(GPU, hbm="2GB")
    with pytest.raises(SpecError) as info:
        optimize_layout(
            "megatron-18.4b", gpu, oversubscribed, gpus=8, global_batch=8, seq_len=SEQ,
            space={"tp": [1, 2], "pp": [1, 2]},
        )  # fmt: skip
    assert info.value.field == "model"
    assert "smallest" in str(info.value) and "GiB" in str(info.value)


def test_cli_json_and_out(tmp_path, capsys):
    from fabricflow.cli import main

    code = main(
        [
            "optimize", "--fabric", "dgx-a100-superpod", "--gpu", GPU,
            "--model", "megatron-1.7b", "--gpus", "16", "--global-batch", "32", "--seq", "2048",
            "--space", "tp=1,2", "--space", "pp=1,2", "--space", "micro_batch=1,2",
            "--fix", "zero=1", "--top-k", "3", "--json", "--out", str(tmp_path),
        ]
    )  # fmt: skip
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("best", "step_time_s", "mfu", "memory_gib_per_gpu", "counts", "exhaustive",
                "seconds", "top"):  # fmt: skip
        assert key in out
    assert out["best"]["zero"] == 1 and "order" in out["best"] and "tp" in out["best"]
    assert len(out["top"]) == 3 and out["exhaustive"] is True
    assert (tmp_path / "candidates.nc").stat().st_size > 0
    assert (tmp_path / "pareto.png").stat().st_size > 0
    assert (tmp_path / "top_breakdown.png").stat().st_size > 0


def test_cli_unknown_knob_is_bad_input(capsys):
    from fabricflow.cli import main

    code = main(
        [
            "optimize", "--fabric", "dgx-a100-superpod", "--gpu", GPU, "--model",
            "megatron-1.7b", "--gpus", "16", "--global-batch", "32", "--seq", "2048",
            "--fix", "tensor=2",
        ]
    )  # fmt: skip
    assert code == 2
    assert "unknown knob 'tensor'" in capsys.readouterr().err


def test_cli_interrupt_prints_the_best_so_far_and_writes_out(tmp_path, capsys, monkeypatch):
    import signal

    from fabricflow.cli import main
    from fabricflow.commands.interrupts import Interrupted

    calls = []
    real = visit_module.step_time

    def interrupted_after_two(*args, **kwargs):
        calls.append(1)
        if len(calls) > 2:
            raise Interrupted(signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(visit_module, "step_time", interrupted_after_two)
    code = main(
        [
            "optimize", "--fabric", "dgx-a100-superpod", "--gpu", GPU,
            "--model", "megatron-1.7b", "--gpus", "16", "--global-batch", "32", "--seq", "2048",
            "--space", "tp=1,2", "--space", "pp=1,2", "--collectives", "alpha-beta",
            "--json", "--out", str(tmp_path),
        ]
    )  # fmt: skip
    assert code == 130
    out = json.loads(capsys.readouterr().out)
    assert out["stopped"] == "interrupted" and out["exhaustive"] is False
    assert out["counts"]["evaluated"] == 2
    assert (tmp_path / "candidates.nc").stat().st_size > 0
