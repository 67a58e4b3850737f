"""The layout search on 16,384 GPUs of the Llama 3 cluster preset equals brute force over a
restricted space (four candidates over two group structures; tens of seconds on two cores,
so marked slow: run with ``-m slow``)."""

from __future__ import annotations

import itertools

import pytest

import fabricflow as ff
from fabricflow.layout_search.optimize import optimize_layout

GPUS, BATCH, SEQ = 16384, 2048, 8192
SPACE = {
    "tp": [8],
    "pp": [16],
    "vpp": [1, 2],
    "zero": [1],
    "recompute": ["full"],
    "order": ["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"],
}


@pytest.fixture(scope="module")
def fabric():
    return ff.load_fabric("meta-llama3-24k")


@pytest.mark.slow
def test_search_equals_brute_force_on_16k_gpus(fabric):
    model = ff.load_model("llama3-405b")
    search = optimize_layout(
        model, "h100-sxm", fabric, gpus=GPUS, global_batch=BATCH, seq_len=SEQ, space=SPACE,
        top_k=2,
    )  # fmt: skip
    times = []
    for vpp, zero, order in itertools.product(SPACE["vpp"], SPACE["zero"], SPACE["order"]):
        layout = ff.Layout(
            tp=8, pp=16, vpp=vpp, dp=GPUS // 128, zero=zero, recompute="full",
            global_batch=BATCH, seq_len=SEQ,
        )  # fmt: skip
        times.append(ff.step_time(model, "h100-sxm", layout, fabric, order=order).step_time_s)
    times.sort()
    assert search.exhaustive
    assert [r.step_time_s for _, r in search.top] == pytest.approx(times[:2], rel=1e-12)
    counts = search.counts
    assert counts["considered"] == 4 and counts["infeasible"] == 0
    assert counts["evaluated"] + counts["pruned"] == 4
