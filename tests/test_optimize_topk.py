"""The top K of a layout search are K different answers; the variants stay in the data."""

from __future__ import annotations

import numpy as np
from optimize_cases import GPU, SEQ, small_model, tiny_oversubscribed

import fabricflow as ff
from fabricflow.layout_search.optimize import optimize_layout
from fabricflow.layout_search.topk import RESULT_RTOL, TopK


def test_variants_of_one_layout_are_one_answer():
    a = ff.Layout(tp=2, dp=4)
    b = ff.Layout(tp=4, dp=2)
    top = TopK(2)
    assert top.add(2.0, a, "a-contiguous") == 0
    assert top.add(2.0 * (1 + RESULT_RTOL / 2), a, "a-scattered") == 0  # same answer
    assert top.threshold() == float("inf")  # one answer so far
    assert top.add(2.0, b, "b") == 1  # another layout at the same time: another answer
    assert top.add(1.0, b, "b-faster") == 2  # the same layout, another time: another answer
    assert top.ranked() == ["b-faster", "a-contiguous"]
    assert top.threshold() == 2.0
    # a faster variant (within the tolerance) represents its answer
    assert top.add(2.0 * (1 - RESULT_RTOL / 2), a, "a-best") == 0
    assert top.ranked() == ["b-faster", "a-best"]


def test_top_k_holds_distinct_layouts_and_the_dataset_every_variant():
    """Placements of one layout that time alike are one line of the top K."""
    fabric = tiny_oversubscribed()
    search = optimize_layout(
        small_model(), GPU, fabric, gpus=16, global_batch=32, seq_len=SEQ, top_k=4,
        space={"tp": [1, 2, 4], "pp": [1, 2], "placement": ["contiguous", "topology-aware",
               "scattered"], "order": ["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"]},
    )  # fmt: skip
    layouts = [kwargs["layout"] for kwargs, _ in search.top]
    times = [r.step_time_s for _, r in search.top]
    for i in range(len(layouts)):
        for j in range(i):
            same = layouts[i] == layouts[j]
            assert not (same and abs(times[i] - times[j]) <= RESULT_RTOL * times[j])
    ds = search.candidates
    answers = ds["answer"].values
    assert ds.sizes["candidate"] == search.counts["evaluated"]
    assert len(np.unique(answers)) < len(answers)  # some variants were merged ...
    # ... and each is kept in the dataset with its answer's number
    first = int(np.flatnonzero(answers == answers[np.argmin(ds["step_time_s"].values)])[0])
    assert ds["step_time_s"].values[first] <= search.best.step_time_s * (1 + RESULT_RTOL)
