"""``collective_time(..., cc=...)``: phase rates from the congestion-control fluid.

The fast tests check the arguments and the flow layout the fluid is given; the ``slow``
one runs the fluid (a compilation of several seconds) on an all-to-all and checks the
physics: a congestion control is never faster than max-min, HPCC holds its ``eta``."""

from __future__ import annotations

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.collective.cc_rates import CCRates, _left_packed, _pad_flows, as_cc_rates
from fabricflow.errors import SpecError


@pytest.fixture(scope="module")
def fabric():
    return ff.load_fabric("fat-tree-k16")


def test_bad_cc_requests_name_the_field(fabric):
    with pytest.raises(SpecError, match="unknown congestion control") as error:
        CCRates(fabric, "reno")
    assert error.value.field == "cc"
    with pytest.raises(SpecError) as error:
        CCRates("fat-tree-k16", "dcqcn")
    assert error.value.field == "fabric"
    rates = CCRates(fabric, "hpcc")
    assert as_cc_rates(fabric, rates) is rates
    with pytest.raises(SpecError) as error:
        as_cc_rates(fabric, rates, solver=lambda links, capacity, coef=None: capacity)
    assert error.value.field == "solver"
    with pytest.raises(SpecError, match="another fabric"):
        as_cc_rates(ff.load_fabric("dgx-h100-superpod"), rates)
    with pytest.raises(SpecError) as error:
        ff.collective_time(fabric, "all_to_all", np.arange(4), 1e6, cc="cubic")
    assert error.value.field == "cc"


def test_flows_are_left_packed_and_padded_to_a_power_of_two():
    links = np.array([[-1, 3, 5], [2, -1, -1], [7, 8, -1]])
    packed = _left_packed(links)
    np.testing.assert_array_equal(packed, [[3, 5, -1], [2, -1, -1], [7, 8, -1]])
    padded, count = _pad_flows(np.repeat(packed, 7, axis=0))  # 21 flows
    assert count == 21 and padded.shape == (32, 3)
    np.testing.assert_array_equal(padded[21:], np.repeat(packed[:1], 11, axis=0))
    assert _pad_flows(packed)[0].shape == (16, 3)  # at least 16 rows


@pytest.mark.slow  # compiles the fluid (several seconds of CPU)
def test_cc_slows_an_all_to_all_and_hpcc_holds_eta(fabric):
    groups = np.arange(16).reshape(1, 16)
    ideal = ff.collective_time(fabric, "all_to_all", groups, 2**24, routing="ecmp")
    rates = CCRates(fabric, "hpcc", duration=1e-3)
    hpcc = ff.collective_time(fabric, "all_to_all", groups, 2**24, routing="ecmp", cc=rates)
    assert hpcc.time_s >= ideal.time_s
    (phase,) = rates.phases
    assert phase.flows == 16 * 15
    assert 0 < phase.min_efficiency <= phase.mean_efficiency <= 0.95 + 1e-3  # eta = 0.95
    assert phase.mean_efficiency > 0.8
    # A second collective on the same phase reuses the efficiencies: no new fluid run.
    ff.collective_time(fabric, "all_to_all", groups, 2**20, routing="ecmp", cc=rates)
    assert len(rates.phases) == 1


def test_step_time_refuses_a_bad_cc():
    fabric = ff.load_fabric("dgx-h100-superpod")
    layout = ff.Layout(tp=8, pp=1, dp=2, micro_batch=1, global_batch=8, recompute="full")
    with pytest.raises(SpecError, match="unknown congestion control") as error:
        ff.step_time("llama3-8b", "h100-sxm", layout, fabric, cc="bbr")
    assert error.value.field == "cc"
    with pytest.raises(SpecError, match="fabric collective backend") as error:
        ff.step_time("llama3-8b", "h100-sxm", layout, fabric, cc="hpcc", collectives="alpha-beta")
    assert error.value.field == "cc"


@pytest.mark.slow  # compiles the fluid for the data-parallel ring (several seconds)
def test_step_time_with_hpcc_slows_only_network_collectives():
    fabric = ff.load_fabric("dgx-h100-superpod")
    layout = ff.Layout(tp=8, pp=1, dp=4, micro_batch=1, global_batch=32, recompute="full")
    ideal = ff.step_time("llama3-8b", "h100-sxm", layout, fabric)
    hpcc = ff.step_time("llama3-8b", "h100-sxm", layout, fabric, cc="hpcc")
    assert hpcc.details["cc"] == "hpcc" and "cc" not in ideal.details
    assert hpcc.breakdown["tp"] == ideal.breakdown["tp"]  # NVLink: no RoCE congestion control
    assert ideal.breakdown["dp"] < hpcc.breakdown["dp"] < ideal.breakdown["dp"] / 0.9
