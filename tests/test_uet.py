"""The Ultra Ethernet transport: NSCC and RCCC against their analytic rest points, trimming
instead of PFC on an incast, and the ``uet`` fabric profile (routing, design knob, presets).

NSCC and RCCC each run once (one compilation) on a 2-to-1 and a 16-to-1 incast side by
side at 40 Gb/s with trimming at one BDP of the network RTT, as the reference code sizes
its buffers."""

from __future__ import annotations

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.collective.timing import prepare_collective
from fabricflow.design.space import design_code, design_spec, parse_design
from fabricflow.dynamics.congestion import simulate_cc
from fabricflow.dynamics.scenarios import incast, union
from fabricflow.fabric.transport import Transport, parse_transport
from fabricflow.routing.transport_policy import routing_for
from fabricflow.solve.cc.nscc import nscc_params
from fabricflow.solve.cc.uet_analysis import nscc_equilibrium, rccc_fixed_point

C40 = 40e9 / 8
INCASTS = (2, 16)
BASE_RTT = 8e-6  # incast paths: 4 links of 1 us each way
BDP = C40 * BASE_RTT


@pytest.fixture(scope="module")
def incasts():
    return union([incast(n, bandwidth=C40) for n in INCASTS])


def _run(scenario, cc, **options):
    defaults = {"duration": 4e-3, "dt": 2.5e-7, "extra_delay": 0.0, "records": 400}
    return simulate_cc(scenario.fabric, scenario.routes, cc=cc, **{**defaults, **options})


@pytest.fixture(scope="module")
def nscc_run(incasts):
    return _run(incasts, "nscc", params=nscc_params(BASE_RTT, C40), trim=BDP)


@pytest.fixture(scope="module")
def rccc_run(incasts):
    return _run(incasts, "rccc", trim=BDP, records=16000)  # every step: the settle time


def _late_queue(res, part, since):
    return res.queue[res.time >= since, part.bottleneck].astype(np.float64)


def test_nscc_holds_its_rest_point_on_both_incasts(incasts, nscc_run):
    params = nscc_params(BASE_RTT, C40)
    for n, part in zip(INCASTS, incasts.parts, strict=True):
        expected = nscc_equilibrium(C40, n, BASE_RTT, params)
        queue = _late_queue(nscc_run, part, 2e-3)
        assert queue.mean() == pytest.approx(expected["queue_bytes"], rel=0.10), n
        # the queue rests above the delay target, where only marked ACKs cut the window
        assert queue.mean() > params.target * C40
        rate = nscc_run.mean_rate(2e-3)[part.roles["incast"]]
        assert rate.sum() / C40 == pytest.approx(1.0, abs=0.01)
        assert rate.min() / rate.max() > 0.9  # fair
    assert np.all(nscc_run.pause_time == 0)


def test_nscc_is_stable_in_its_step_and_converges_on_the_16_to_1_incast(incasts, nscc_run):
    """Half the step gives the same rest (the update is stable at its step), and every
    incast flow settles within 10 % of its late mean in well under a millisecond."""
    part = incasts.parts[1]
    alone = incast(16, bandwidth=C40)
    fine = _run(alone, "nscc", params=nscc_params(BASE_RTT, C40), trim=BDP, dt=1.25e-7)
    coarse_q = _late_queue(nscc_run, part, 2e-3).mean()
    fine_q = fine.queue[fine.time >= 2e-3, alone.bottleneck].mean()
    assert fine_q == pytest.approx(coarse_q, rel=0.05)
    ids = part.roles["incast"]
    delivered = nscc_run.delivered[:, ids].astype(np.float64)
    window = 0.25e-3  # throughput over windows of 0.25 ms
    steps = int(round(window / (nscc_run.time[1] - nscc_run.time[0])))
    rate = (delivered[steps:] - delivered[:-steps]) / window
    late = nscc_run.mean_rate(2e-3)[ids]
    settled = np.all(np.abs(rate / late - 1.0) <= 0.10, axis=1)
    first = nscc_run.time[steps:][np.argmax(settled & np.flip(np.cumprod(np.flip(settled))) > 0)]
    assert settled[-1] and first < 1e-3


def test_rccc_grants_the_receivers_credit_and_settles_when_it_predicts(incasts, rccc_run):
    for n, part in zip(INCASTS, incasts.parts, strict=True):
        expected = rccc_fixed_point(C40, n, BASE_RTT)
        rate = rccc_run.mean_rate(2e-3)[part.roles["incast"]]
        np.testing.assert_allclose(rate, expected["rate_Bps"], rtol=1e-3)
        assert np.all(_late_queue(rccc_run, part, 2e-3) < 1.0)  # no standing queue
    # the 16-to-1 senders leave the line rate when the speculative window is spent
    part = incasts.parts[1]
    flow = part.roles["incast"][0]
    delay = float(rccc_run.delay[flow])  # the first credit comes back one feedback delay late
    settle = rccc_fixed_point(C40, 16, BASE_RTT, feedback_delay=delay)["settle_s"]
    at_line = rccc_run.time[rccc_run.rate[:, flow] >= 0.999 * C40]
    assert at_line.max() == pytest.approx(settle, abs=2 * (rccc_run.time[1] - rccc_run.time[0]))
    # that first window overflows the one-BDP buffer: trimmed and sent again
    assert rccc_run.retransmitted[part.roles["incast"]].sum() > 0


def test_trimming_instead_of_pfc_on_an_incast():
    """Fixed-size flows on a 16-to-1 incast: with trimming no link pauses, the trimmed
    bytes are the retransmitted bytes and every flow delivers exactly its size; the same
    incast lossless under PFC pauses the fabric and retransmits nothing."""
    sc = incast(16, bandwidth=C40)
    size = np.full(17, 200e3)
    trimmed = _run(sc, "nscc", params=nscc_params(BASE_RTT, C40), trim=BDP / 4, size=size)
    assert np.all(trimmed.pause_time == 0) and not trimmed.paused.any()
    assert trimmed.retransmitted.sum() > 0.05 * size.sum()
    assert trimmed.retransmitted.sum() == pytest.approx(trimmed.trimmed.sum(), rel=1e-4)
    assert trimmed.trimmed[sc.bottleneck] == pytest.approx(trimmed.trimmed.sum(), rel=1e-4)
    np.testing.assert_allclose(trimmed.delivered[-1], size, rtol=1e-5)
    assert np.all(np.isfinite(trimmed.finish_time))
    assert trimmed.queue[:, sc.bottleneck].max() <= BDP / 4 * (1 + 1e-5)
    lossless = _run(sc, "dcqcn", pfc="on", size=size, dt=1e-6)
    assert lossless.pause_time.max() > 0
    assert np.all(lossless.retransmitted == 0) and np.all(lossless.trimmed == 0)


def test_uet_profile_routes_by_spraying_and_is_a_design_knob():
    transport = parse_transport("uet")
    assert transport == Transport("uet", True)
    assert transport.load_balancing == "per-packet spraying"
    assert "trimming" in transport.lossless
    with pytest.raises(ff.SpecError, match="transport.protocol"):
        parse_transport("ultra")
    code = "2t/1:1/rail/1p/800G/su8/uet"
    assert design_code(parse_design(code)) == code
    spec = design_spec(code, 1024)
    assert spec["transport"] == {"protocol": "uet", "adaptive_routing": True}
    fabric = ff.build_fabric(spec)
    assert routing_for(fabric) == "adaptive"
    # the collective model sprays under uet and hashes under roce: same fabric otherwise
    roce = ff.build_fabric({**spec, "transport": {"protocol": "rocev2"}})
    groups = [list(range(0, 512, 8)), list(range(1, 512, 8))]
    assert prepare_collective(fabric, "all_to_all", groups).routing == "adaptive"
    assert prepare_collective(roce, "all_to_all", groups).routing == "ecmp"
    uet_time = ff.collective_time(fabric, "all_to_all", groups, 64e6).time_s
    roce_time = ff.collective_time(roce, "all_to_all", groups, 64e6).time_s
    assert uet_time <= roce_time  # spraying never loses to one hashed path per flow


def test_a_sprayed_flow_pays_the_latency_of_one_path():
    """A lone flow split over all paths of a fat-tree completes as on one of them: its
    propagation, store-and-forward and ACK are the mean over its paths (64 on k = 16)."""
    fabric = ff.load_fabric("fat-tree-k16")
    src, dst = np.array([0]), np.array([1000])
    for fidelity, cc in (("fluid", None), ("packet", "dcqcn")):
        ecmp, spray = (
            ff.flow_completion_times(
                fabric, ff.route(fabric, src, dst, policy=policy), 2e6, fidelity=fidelity, cc=cc
            ).fct[0]
            for policy in ("ecmp", "spray")
        )
        assert spray == pytest.approx(ecmp, rel=1e-6), fidelity


@pytest.mark.parametrize("name", ["ue-800g-clos", "ualink-pod-1024", "sue-pod-64"])
def test_uet_and_scale_up_presets_build(name):
    fabric = ff.load_fabric(name)
    assert fabric.meta["sources"] and fabric.meta["assumptions"]
    assert fabric.summary()["num_gpus"] == fabric.num_gpus > 0


@pytest.mark.slow  # the study's fast run: three incast runs at 800G and three all-to-alls (~10 s)
def test_uet_compare_study_fast_run(tmp_path):
    import importlib.util
    import json
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "studies" / "uet_compare.py"
    spec = importlib.util.spec_from_file_location("study_uet_compare", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    numbers = module.run(tmp_path, fast=True)
    assert json.loads((tmp_path / "uet_compare.json").read_text()) == numbers
    assert (tmp_path / "uet_compare.png").exists()
    roce, nscc, rccc = numbers["incast"].values()
    assert roce["most_paused_link_fraction"] > 0 and roce["retransmitted_bytes"] == 0
    assert roce["victim_throughput_of_line"] < 0.5  # PFC pauses spread to the victim
    for uet in (nscc, rccc):
        assert uet["most_paused_link_fraction"] == 0 and uet["retransmitted_bytes"] > 0
        assert uet["victim_throughput_of_line"] > 0.99
    a2a = numbers["alltoall"]
    assert a2a["uet"] == pytest.approx(a2a["infiniband"]) and a2a["uet"] < a2a["rocev2"]
