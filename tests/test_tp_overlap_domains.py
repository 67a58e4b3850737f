"""Transformer Engine's TP comm-GEMM overlap (userbuffers) works only inside one NVLink
domain (TransformerEngine issue 1071; multi-node NVLink since PR 1470): a TP group that
spans scale-up domains runs its collectives through NCCL."""

from __future__ import annotations

import dataclasses

import pytest

import fabricflow as ff
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
