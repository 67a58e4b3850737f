"""Topology-aware placement: the heaviest dimension in the smallest subtree of the fabric."""

import numpy as np
import pytest

from fabricflow.errors import SpecError
from fabricflow.fabric.spec import build_fabric
from fabricflow.routing.clos import lca_level
from fabricflow.workload.comm_volume import DEFAULT_RANKING, dimension_bytes
from fabricflow.workload.layout import Layout
from fabricflow.workload.model_spec import load_model
from fabricflow.workload.placement import locality_order, place, topology_aware_order
from fabricflow.workload.step import step_time

MODEL = "megatron-1.7b"
GPU = "h100-sxm"


@pytest.fixture(scope="module")
def clos():
    """64 GPUs in 16 nodes of 4 (one NVLink domain each), rail-optimized: 4 rail groups of
    4 nodes, each rail leaf with 4 hosts down and one uplink (4:1 oversubscribed)."""
    return build_fabric(
        {
            "name": "small-oversubscribed",
            "gpus": 64,
            "gpus_per_node": 4,
            "scale_up": {"domain_size": 4, "bandwidth_bidirectional": "900GB/s"},
            "topology": {
                "type": "clos",
                "attachment": "rail",
                "nic_bandwidth": "400Gbps",
                "tiers": [{"down_ports": 4, "up_ports": 1}, {"down_ports": 16}],
            },
        }
    )


def _span(fabric, groups):
    """Per group: 0 when inside one scale-up domain, else the highest Clos level (1 = one
    leaf, 2 = through the spine) any two members need to meet."""
    st = fabric.structure
    slot = st.slot_of_gpu[groups]
    level = lca_level(st, np.broadcast_to(slot[:, :1], slot.shape), slot).max(axis=1)
    same_domain = np.all(fabric.gpu_domain[groups] == fabric.gpu_domain[groups[:, :1]], axis=1)
    return np.where(same_domain, 0, level)


def test_heaviest_dimension_lands_in_the_smallest_subtree(clos):
    layout = Layout(tp=4, dp=4, pp=4, global_batch=16, seq_len=2048)
    model = load_model(MODEL)
    volume = dimension_bytes(model, layout)
    assert volume["tp"] > volume["dp"] > volume["pp"] > 0  # this case: TP heaviest
    where = place(layout, 64, placement="topology-aware", fabric=clos, model=model)
    assert where.order[0] == "tp"
    assert np.all(_span(clos, where.groups("tp")) == 0)  # TP inside NVLink domains
    assert np.all(_span(clos, where.groups("dp")) == 1)  # DP on one rail leaf
    # The order that splits TP over domains sends it through the NICs of a rail leaf.
    split = place(layout, 64, order="dp-tp-cp-ep-pp")
    assert np.all(_span(clos, split.groups("tp")) == 1)
    again = place(layout, 64, placement="topology-aware", fabric=clos, model=model)
    assert np.array_equal(where.gpu_of_rank, again.gpu_of_rank)  # deterministic


def test_step_time_never_worse_than_contiguous(clos):
    layout = Layout(tp=4, dp=4, pp=4, global_batch=16, seq_len=2048)
    aware = step_time(MODEL, GPU, layout, clos, placement="topology-aware")
    split = step_time(MODEL, GPU, layout, clos, order="dp-tp-cp-ep-pp")
    default = step_time(MODEL, GPU, layout, clos)
    assert aware.details["order"].startswith("tp-")
    assert aware.step_time_s < 0.8 * split.step_time_s  # TP kept off the 4:1 uplinks
    assert aware.step_time_s <= default.step_time_s
    assert aware.details["placement"] == "topology-aware"


def test_pipeline_heavier_than_data_parallel_goes_first(clos):
    # A small model with many micro-batches: the pipeline sends more bytes than the gradient
    # reduction, so topology-aware keeps PP on a rail leaf and DP crosses the spine, which
    # the default order (DP before PP) does the other way round.
    layout = Layout(
        tp=4, dp=4, pp=4, global_batch=1024, seq_len=2048, pp_overlap=False, dp_overlap=False
    )
    volume = dimension_bytes(load_model(MODEL), layout)
    assert volume["pp"] > volume["dp"]
    aware = step_time(MODEL, GPU, layout, clos, placement="topology-aware")
    default = step_time(MODEL, GPU, layout, clos)
    assert aware.details["order"].startswith("tp-pp-")
    assert aware.breakdown["pp"] < default.breakdown["pp"]
    assert aware.step_time_s < default.step_time_s


def test_volume_scales_with_what_each_dimension_moves():
    model = load_model(MODEL)
    base = dict(tp=4, dp=4, pp=4, global_batch=16)
    short, long = (dimension_bytes(model, Layout(seq_len=s, **base)) for s in (1024, 2048))
    # Activations (TP, PP) double with the sequence; gradients (DP) do not.
    assert long["tp"] == pytest.approx(2 * short["tp"])
    assert long["pp"] == pytest.approx(2 * short["pp"])
    assert long["dp"] == pytest.approx(short["dp"])
    alone = dimension_bytes(model, Layout(tp=1, dp=16, global_batch=16))
    assert alone["tp"] == alone["pp"] == alone["cp"] == alone["ep"] == 0.0


def test_expert_parallel_sits_inside_the_data_parallel_block():
    moe = Layout(tp=2, dp=4, ep=4, global_batch=4)
    order = topology_aware_order(moe)
    assert order[order.index("ep") + 1] in ("cp", "dp")  # ep just before the dp x cp block
    assert topology_aware_order(Layout(tp=2, dp=4, global_batch=4)) == (
        "tp",
        "ep",
        "cp",
        "dp",
        "pp",
    )
    assert DEFAULT_RANKING[0] == "tp"


def test_locality_order_and_errors(clos):
    order = locality_order(clos)
    assert np.array_equal(np.sort(order), np.arange(64))
    # Consecutive runs of 4 are one domain; of 16, one rail group (four nodes, all rails).
    assert np.all(clos.gpu_domain[order].reshape(-1, 4) == clos.gpu_domain[order][::4, None])
    # Rail leaf of a GPU = slot // 4 (4 hosts per leaf); its rail group = leaf // 4 (4 rails).
    rail_group = clos.structure.slot_of_gpu[order] // 4 // 4
    assert np.all(rail_group.reshape(-1, 16) == rail_group[::16, None])
    layout = Layout(tp=4, dp=4, global_batch=4)
    with pytest.raises(SpecError, match="picks the rank order itself") as info:
        place(layout, 64, order="dp-tp-cp-ep-pp", placement="topology-aware", fabric=clos)
    assert info.value.field == "order"
    with pytest.raises(SpecError, match="topology-aware"):
        place(layout, 64, placement="packed")
