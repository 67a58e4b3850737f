"""Rank order -> groups of GPUs, and contiguous / scattered / deployed placement."""

import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fabricflow as ff
from fabricflow.errors import SpecError
from fabricflow.layout_search.knobs import default_space, default_value
from fabricflow.workload.layout import Layout
from fabricflow.workload.placement import parse_order, place
from fabricflow.workload.step import step_time
from fabricflow.workload.step_command import step_arguments


def _is_partition(groups, num_ranks):
    return np.array_equal(np.sort(groups.ravel()), np.arange(num_ranks))


def test_megatron_order_groups():
    layout = Layout(tp=2, cp=2, dp=3, pp=2, ep=3, global_batch=3)
    where = place(layout, 24)
    tp, cp, dp, pp = (where.groups(d) for d in ("tp", "cp", "dp", "pp"))
    assert (
        tp.shape == (12, 2) and cp.shape == (12, 2) and dp.shape == (8, 3) and pp.shape == (12, 2)
    )
    assert tp[0].tolist() == [0, 1]  # tp fastest
    assert cp[0].tolist() == [0, 2]  # then cp
    assert dp[0].tolist() == [0, 4, 8]  # then dp
    assert pp[0].tolist() == [0, 12]  # pp slowest
    for groups in (tp, cp, dp, pp, where.groups(("dp", "cp"))):
        assert _is_partition(groups, 24)
    dpcp = where.groups(("dp", "cp"))
    assert dpcp.shape == (4, 6) and dpcp[0].tolist() == [0, 2, 4, 6, 8, 10]
    # Expert layers: tp-ep-edp-pp with edp = dp * cp / ep = 2.
    ep, edp = where.groups("ep", expert=True), where.groups("dp", expert=True)
    assert ep.shape == (8, 3) and ep[0].tolist() == [0, 2, 4]
    assert edp.shape == (12, 2) and edp[0].tolist() == [0, 6]
    assert _is_partition(ep, 24) and _is_partition(edp, 24)


def test_order_changes_groups():
    layout = Layout(tp=4, dp=2, pp=2, global_batch=2)
    where = place(layout, 16, order="dp-tp-cp-ep-pp")
    assert where.groups("dp")[0].tolist() == [0, 1]
    assert where.groups("tp")[0].tolist() == [0, 2, 4, 6]


def test_scattered_placement_moves_whole_servers_and_is_seeded():
    layout = Layout(tp=8, dp=4, global_batch=4)
    a = place(layout, 128, placement="scattered", seed=3, gpus_per_node=8)
    b = place(layout, 128, placement="scattered", seed=3, gpus_per_node=8)
    c = place(layout, 128, placement="scattered", seed=4, gpus_per_node=8)
    assert np.array_equal(a.gpu_of_rank, b.gpu_of_rank)
    assert not np.array_equal(a.gpu_of_rank, c.gpu_of_rank)
    assert np.unique(a.gpu_of_rank).size == 32
    tp = a.groups("tp")
    assert np.all(tp // 8 == tp[:, :1] // 8)  # a TP group stays in one server
    assert np.all(np.diff(tp, axis=1) == 1)


@pytest.mark.parametrize("order", ["tp-dp-pp", "tp-tp-cp-dp-pp", "tp-cp-ep-dp-xx"])
def test_bad_order(order):
    with pytest.raises(SpecError, match="order"):
        parse_order(order)


def test_layout_larger_than_fabric():
    with pytest.raises(SpecError, match="fabric has 8"):
        place(Layout(dp=16, global_batch=16), 8)
    with pytest.raises(SpecError, match="placement"):
        place(Layout(dp=2, global_batch=2), 8, placement="random")


@settings(max_examples=60, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4]),
    cp=st.sampled_from([1, 2]),
    dp=st.sampled_from([1, 2, 3, 4]),
    pp=st.sampled_from([1, 2, 3]),
    data=st.data(),
)
def test_every_dimension_partitions_the_ranks(tp, cp, dp, pp, data):
    ep = data.draw(st.sampled_from([e for e in (1, 2, 3, 4, 6, 8) if (dp * cp) % e == 0]))
    dims = list(data.draw(st.permutations(["tp", "cp", "ep", "dp", "pp"])))
    layout = Layout(tp=tp, cp=cp, dp=dp, pp=pp, ep=ep, global_batch=dp)
    where = place(layout, layout.num_gpus, order="-".join(dims))
    n = layout.num_gpus
    for dim, size in (("tp", tp), ("cp", cp), ("dp", dp), ("pp", pp)):
        groups = where.groups(dim)
        assert groups.shape == (n // size, size) and _is_partition(groups, n)
    for dim, size in (("ep", ep), ("dp", dp * cp // ep)):
        groups = where.groups(dim, expert=True)
        assert groups.shape == (n // size, size) and _is_partition(groups, n)
    # A TP group and a DP group share at most one rank (orthogonal dimensions).
    tp_of = np.empty(n, dtype=int)
    tp_of[where.groups("tp")] = np.arange(n // tp)[:, None]
    for row in where.groups("dp"):
        assert np.unique(tp_of[row]).size == dp


def _nvl_like():
    """Eight 72-GPU NVLink domains of 18 trays of 4 GPUs (an NVL72-like rack) under one
    two-tier Clos: 576 GPUs, built in well under a second."""
    return ff.load_fabric(
        "fat-tree-k16",
        name="nvl-like",
        scale_up={"domain_size": 72, "bandwidth_bidirectional": "1.8TB/s"},
        gpus_per_node=4,
        gpus=576,
        topology={
            "tiers": [
                {"name": "leaf", "down_ports": 72, "up_ports": 72},
                {"name": "spine", "down_ports": 8},
            ]
        },
    )


def _straddling(fabric, where, dim, *, expert):
    domains = fabric.gpu_domain[where.groups(dim, expert=expert)]
    return int(np.sum(domains.min(axis=1) != domains.max(axis=1)))


@pytest.mark.parametrize(
    "layout",
    [
        Layout(pp=4, ep=32, dp=128, global_batch=128),  # 32-rank expert groups
        Layout(ep=48, dp=384, global_batch=384),  # 48 does not divide 64: 48 per rack
        Layout(tp=4, pp=4, ep=16, dp=32, expert_tp=1, global_batch=32),
    ],
)
def test_deployed_placement_keeps_tp_and_ep_groups_inside_a_rack(layout):
    """As NVL72 racks are run: whole trays, spares kept, and no expert or tensor group
    straddling two racks; contiguous ranks straddle them."""
    fabric = _nvl_like()
    where = place(layout, fabric.num_gpus, placement="deployed", fabric=fabric)
    assert _straddling(fabric, where, "ep", expert=True) == 0
    assert _straddling(fabric, where, "tp", expert=False) == 0
    per_rack = np.bincount(fabric.gpu_domain[where.gpu_of_rank].astype(int))
    assert per_rack.max() <= 64 and np.all(per_rack % 4 == 0)  # whole trays, 2+ spares
    contiguous = place(layout, fabric.num_gpus, placement="contiguous", fabric=fabric)
    assert _straddling(fabric, contiguous, "ep", expert=True) > 0


def test_deployed_placement_on_the_superpod_preset():
    """gb200-nvl72-superpod: an EP 32 job of 256 GPUs runs on 4 racks, 64 GPUs each, and
    every expert group stays on its rack's NVLink."""
    fabric = ff.load_fabric("gb200-nvl72-superpod")
    layout = Layout(pp=8, ep=32, dp=32, global_batch=8192)
    where = place(layout, fabric.num_gpus, placement="deployed", fabric=fabric)
    assert _straddling(fabric, where, "ep", expert=True) == 0
    racks = np.bincount(fabric.gpu_domain[where.gpu_of_rank].astype(int))
    assert sorted(racks[racks > 0].tolist()) == [64] * 4


def test_deployed_placement_is_contiguous_without_spare_domains_or_room():
    """8-GPU servers keep every GPU (the same groups as contiguous); a job that needs the
    spares runs on every GPU in order."""
    dgx = ff.load_fabric("dgx-h100-superpod")
    layout = Layout(tp=8, pp=2, dp=4, global_batch=4)
    where = place(layout, dgx.num_gpus, placement="deployed", fabric=dgx)
    assert np.array_equal(where.gpu_of_rank, np.arange(64))
    fabric = _nvl_like()
    whole = Layout(ep=8, dp=576, global_batch=576)  # more than 8 racks x 64
    everything = place(whole, fabric.num_gpus, placement="deployed", fabric=fabric)
    assert np.array_equal(everything.gpu_of_rank, np.arange(576))
    with pytest.raises(SpecError, match="fabric"):
        place(layout, 64, placement="deployed")


def test_step_and_optimizer_place_as_deployed_by_default():
    assert inspect.signature(step_time).parameters["placement"].default == "deployed"
    assert default_value("placement") == "deployed"
    model = ff.load_model("qwen3-30b-a3b")
    nvl = default_space(model, _nvl_like(), gpus=64, global_batch=64, seq_len=4096)
    assert {"deployed", "contiguous", "domain-aligned"} <= set(nvl["placement"])
    dgx = default_space(
        model, ff.load_fabric("dgx-h100-superpod"), gpus=64, global_batch=64, seq_len=4096
    )
    assert "deployed" not in dgx["placement"] and "contiguous" in dgx["placement"]


def test_a_printed_step_command_names_a_placement_other_than_the_default():
    """``fabricflow step`` places as deployed by default, so a timed contiguous placement
    must be written out for the command to repeat its number."""
    layout = Layout(tp=2, dp=4, global_batch=4)
    assert "--placement" not in step_arguments(layout, placement="deployed")
    words = step_arguments(layout, placement="contiguous")
    assert words[words.index("--placement") + 1] == "contiguous"
