"""The budget covers the whole layout search, enumeration included, and Ctrl-C returns the
best found so far with honest counts at any phase."""

from __future__ import annotations

import time

import pytest
from optimize_cases import GPU, SEQ, small_model, tiny_oversubscribed

from fabricflow.layout_search import compute_model, optimize

SPACE = {
    "tp": [1, 2, 4],
    "pp": [1, 2, 4],
    "micro_batch": [1, 2],
    "zero": [0, 1, 3],
    "recompute": ["none", "full"],
    "order": ["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"],
}


def _slow_analysis(monkeypatch, *, sleep_s=0.0, interrupt_at=None):
    """Analyse 4 keys per chunk, sleeping ``sleep_s`` each; raise KeyboardInterrupt at
    chunk ``interrupt_at`` (0-based)."""
    real = compute_model.ComputeModel.analyse
    calls = []

    def analyse(self, rows):
        calls.append(1)
        if interrupt_at is not None and len(calls) > interrupt_at:
            raise KeyboardInterrupt
        time.sleep(sleep_s)
        return real(self, rows)

    monkeypatch.setattr(optimize, "ANALYSIS_CHUNK", 4)
    monkeypatch.setattr(compute_model.ComputeModel, "analyse", analyse)
    return calls


def _check_counts(counts):
    assert (
        counts["evaluated"] + counts["pruned"] + counts["infeasible"] + counts["unvisited"]
        == counts["considered"]
    )


def run(**kwargs):
    return optimize.optimize_layout(
        small_model(), GPU, tiny_oversubscribed(), gpus=32, global_batch=64, seq_len=SEQ,
        space=SPACE, **kwargs,
    )  # fmt: skip


def test_budget_includes_the_enumeration(monkeypatch):
    calls = _slow_analysis(monkeypatch, sleep_s=0.05)
    started = time.monotonic()
    result = run(budget_s=0.3)
    elapsed = time.monotonic() - started
    chunks = len(calls)
    assert result.stopped == "budget" and not result.exhaustive
    assert result.best is not None and result.counts["evaluated"] >= 1
    assert result.counts["unexamined"] > 0  # the enumeration itself was cut short
    assert chunks * 4 < 72  # fewer keys analysed than the space has
    _check_counts(result.counts)
    assert elapsed < 0.3 + 0.05 + 5.0  # the budget, a chunk and one timed candidate


def test_interrupt_during_enumeration_returns_the_best_so_far(monkeypatch):
    _slow_analysis(monkeypatch, interrupt_at=3)
    result = run()
    assert result.stopped == "interrupted" and not result.exhaustive
    assert result.best is not None and result.counts["evaluated"] == 1
    assert result.counts["unexamined"] > 0
    _check_counts(result.counts)


def test_interrupt_before_anything_is_examined_raises_with_the_counts(monkeypatch):
    _slow_analysis(monkeypatch, interrupt_at=0)
    with pytest.raises(optimize.SearchInterrupted) as info:
        run()
    stop = info.value
    assert isinstance(stop, KeyboardInterrupt)  # a caller's Ctrl-C still propagates
    assert stop.counts["evaluated"] == 0 and stop.counts["unexamined"] > 0
    assert stop.to_dict()["error"] == "Interrupted" and stop.to_dict()["stopped"] == "interrupted"
    _check_counts(stop.counts)


@pytest.mark.parametrize("phase", ["enumeration", "visit"])
def test_cli_interrupt_at_any_phase_prints_one_object(phase, monkeypatch, capsys):
    import json

    from fabricflow.cli import main
    from fabricflow.layout_search import branch_and_bound

    if phase == "enumeration":
        _slow_analysis(monkeypatch, interrupt_at=0)
    else:

        def interrupted(*args, **kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(branch_and_bound, "step_time", interrupted)
    code = main(
        [
            "optimize", "--fabric", "dgx-a100-superpod", "--gpu", GPU, "--model",
            "megatron-1.7b", "--gpus", "16", "--global-batch", "32", "--seq", "2048",
            "--space", "tp=1,2", "--space", "pp=1,2", "--json",
        ]
    )  # fmt: skip
    assert code == 130
    out = json.loads(capsys.readouterr().out)
    # the commands' interrupted object, not a result with an empty best
    assert out["error"] == "Interrupted" and "before any candidate" in out["message"]
    assert out["stopped"] == "interrupted" and "best" not in out
    assert out["counts"]["evaluated"] == 0


def test_interrupt_while_structures_are_solved_returns_an_answer(monkeypatch):
    """The first candidate is timed at once: a Ctrl-C while later structures are solved
    (the long phase of a big search) still returns the best found so far."""
    from fabricflow.layout_search import group_structures

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(group_structures, "prepared_collectives", interrupted)
    result = run()
    assert result.stopped == "interrupted" and not result.exhaustive
    assert result.best is not None and result.counts["evaluated"] >= 1
    _check_counts(result.counts)


def test_budget_holds_while_structures_are_solved(monkeypatch):
    """Each engine batch takes 1 s: the budget is checked between batches, so the search
    ends within one batch of it (it used to finish every structure it had begun)."""
    from fabricflow.layout_search import group_structures

    def slow(*args, **kwargs):
        time.sleep(1.0)

    monkeypatch.setattr(group_structures, "prepared_collectives", slow)
    monkeypatch.setattr(group_structures, "PREPARE_BATCH", 1)
    started = time.monotonic()
    result = run(budget_s=0.5)
    elapsed = time.monotonic() - started
    assert result.stopped == "budget" and result.counts["evaluated"] >= 1
    assert result.counts["unvisited"] > 0
    _check_counts(result.counts)
    assert elapsed < 0.5 + 1.0 + 0.7, elapsed  # the budget, one batch, some slack


def test_work_budget_answers_the_same_every_time():
    """A budget counted in work (structures solved + candidates timed) stops at the same
    point on every run, however loaded the machine: the same answer and counts."""
    first = run(budget_work=4)
    second = run(budget_work=4)
    assert first.stopped == second.stopped == "work" and not first.exhaustive
    assert first.counts["structures"] + first.counts["evaluated"] == 4
    assert first.counts == second.counts
    assert first.best_kwargs == second.best_kwargs
    assert [r.step_time_s for _, r in first.top] == [r.step_time_s for _, r in second.top]
    _check_counts(first.counts)
    # enough work: the exact answer, as without a budget
    exact = run()
    roomy = run(budget_work=10_000)
    assert roomy.exhaustive and roomy.best_kwargs == exact.best_kwargs


def test_negative_seed_and_disconnected_fabric_are_refused_at_once():
    from fabricflow.errors import RoutingError, SpecError

    with pytest.raises(SpecError, match="placement_seed"):
        run(placement_seed=-1)
    with pytest.raises(SpecError, match="budget_work"):
        run(budget_work=0)
    no_nics = tiny_oversubscribed().without(link_kind="nic", fraction=1.0)
    started = time.process_time()
    with pytest.raises(RoutingError, match="no path between GPU 0 and GPU 4"):
        optimize.optimize_layout(
            small_model(), GPU, no_nics, gpus=32, global_batch=64, seq_len=SEQ,
            space=SPACE, budget_s=5,
        )  # fmt: skip
    assert time.process_time() - started < 1.0
    # a job inside one NVLink domain needs no NIC
    alone = optimize.optimize_layout(
        small_model(), GPU, no_nics, gpus=4, global_batch=64, seq_len=SEQ,
        space={"tp": [1, 2, 4]},
    )  # fmt: skip
    assert alone.best is not None


def test_cli_refuses_a_negative_seed_and_stops_on_work(capsys):
    import json

    from fabricflow.cli import main

    base = [
        "optimize", "--fabric", "dgx-a100-superpod", "--gpu", GPU, "--model", "megatron-1.7b",
        "--gpus", "16", "--global-batch", "32", "--seq", "2048", "--space", "tp=1,2,4",
        "--space", "pp=1,2", "--json",
    ]  # fmt: skip
    assert main([*base, "--seed", "-1", "--fix", "placement=scattered"]) == 2
    assert "seed" in json.loads(capsys.readouterr().out)["message"]
    assert main([*base, "--budget-work", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stopped"] in ("work", "bound") and out["counts"]["evaluated"] == 1
