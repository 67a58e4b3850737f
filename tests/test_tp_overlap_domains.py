"""Transformer Engine's TP comm-GEMM overlap (userbuffers) works only inside one NVLink
domain (TransformerEngine issue 1071; multi-node NVLink since PR 1470): a TP group that
spans scale-up domains runs its collectives through NCCL."""

from __future__ import annotations

import dataclasses

import pytest
from optimize_cases import SEQ, brute_force, small_model, tiny_oversubscribed

import fabricflow as ff
from fabricflow.layout_search.optimize import optimize_layout
from fabricflow.workload.layout import Layout
from fabricflow.workload.step import step_time

LAYOUT = Layout(tp=4, cp=4, dp=1, micro_batch=1, global_batch=4, seq_len=8192, zero=1)


@pytest.fixture(scope="module")
def dgx():
    return ff.load_fabric("dgx-h100-superpod")


def test_a_tp_group_across_servers_gets_no_userbuffers_overlap(dgx):
    """CP fastest: each TP group of 4 takes every fourth GPU of 16, two 8-GPU servers. Its
    step is the step without TP overlap; the same layout with TP inside a server keeps
    the overlap."""
    across = step_time("llama3-8b", "h100-sxm", LAYOUT, dgx, order="cp-tp-ep-dp-pp")
    plain = step_time(
        "llama3-8b",
        "h100-sxm",
        dataclasses.replace(LAYOUT, tp_overlap=False),
        dgx,
        order="cp-tp-ep-dp-pp",
    )
    assert not across.details["tp_userbuffers"]
    assert across.step_time_s == pytest.approx(plain.step_time_s, rel=1e-12)
    inside = step_time("llama3-8b", "h100-sxm", LAYOUT, dgx)  # tp fastest: one server
    assert inside.details["tp_userbuffers"]
    assert inside.breakdown["tp"] < across.breakdown["tp"]


def test_the_search_stays_exact_when_tp_groups_span_domains():
    """With CP fastest, TP groups of 4 span two 4-GPU domains: the optimizer's bounds drop
    the TP overlap there as step_time does (tighter bounds, still bounds), and the search
    still equals brute force."""
    space = {
        "tp": [2, 4],
        "cp": [1, 2],
        "micro_batch": [1],
        "order": ["tp-cp-ep-dp-pp", "cp-tp-ep-dp-pp"],
        "placement": ["contiguous"],
        "tp_overlap": [False, True],
    }
    model, fabric = small_model(), tiny_oversubscribed()
    expected = brute_force(model, fabric, space, 16, 16)
    search = optimize_layout(
        model, "a100-80gb", fabric, gpus=16, global_batch=16, seq_len=SEQ, space=space, top_k=3
    )
    # one layout's equal results under several orders are one answer (cp = 1: the two
    # orders place the same groups)
    distinct: list = []
    for layout, t in expected:
        if not any(lay == layout and abs(t - best) <= 1e-9 * best for lay, best in distinct):
            distinct.append((layout, t))
    assert search.exhaustive
    got = [r.step_time_s for _, r in search.top]
    assert got == pytest.approx([t for _, t in distinct[:3]], rel=1e-12)
