"""The budget covers the whole layout search, enumeration included, and Ctrl-C returns the
best found so far with honest counts at any phase."""

from __future__ import annotations

import time

import pytest
from optimize_cases import GPU, SEQ, small_model, tiny_oversubscribed

from fabricflow.optimize import analytic, search

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
    real = analytic.Analyser.analyse
    calls = []

    def analyse(self, rows):
        calls.append(1)
        if interrupt_at is not None and len(calls) > interrupt_at:
            raise KeyboardInterrupt
        time.sleep(sleep_s)
        return real(self, rows)

    monkeypatch.setattr(search, "ANALYSIS_CHUNK", 4)
    monkeypatch.setattr(analytic.Analyser, "analyse", analyse)
    return calls


def _check_counts(counts):
    assert (
        counts["evaluated"] + counts["pruned"] + counts["infeasible"] + counts["unvisited"]
        == counts["considered"]
    )


def run(**kwargs):
    return search.optimize_layout(
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
    with pytest.raises(search.SearchInterrupted) as info:
        run()
    stop = info.value
    assert isinstance(stop, KeyboardInterrupt)  # a caller's Ctrl-C still propagates
    assert stop.counts["evaluated"] == 0 and stop.counts["unexamined"] > 0
    assert stop.to_dict()["best"] is None and stop.to_dict()["stopped"] == "interrupted"
    _check_counts(stop.counts)


@pytest.mark.parametrize("phase", ["enumeration", "visit"])
def test_cli_interrupt_at_any_phase_prints_one_object(phase, monkeypatch, capsys):
    import json

    from fabricflow.cli import main
    from fabricflow.optimize import visit

    if phase == "enumeration":
        _slow_analysis(monkeypatch, interrupt_at=0)
    else:

        def interrupted(*args, **kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(visit, "step_time", interrupted)
    code = main(
        [
            "optimize", "--fabric", "dgx-a100-superpod", "--gpu", GPU, "--model",
            "megatron-1.7b", "--gpus", "16", "--global-batch", "32", "--seq", "2048",
            "--space", "tp=1,2", "--space", "pp=1,2", "--json",
        ]
    )  # fmt: skip
    assert code == 130
    out = json.loads(capsys.readouterr().out)
    assert out["stopped"] == "interrupted" and out["best"] is None
    assert out["counts"]["evaluated"] == 0
