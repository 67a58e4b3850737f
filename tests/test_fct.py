"""Packet-fidelity flow completion times: each mechanism on a hand-computable case, the
PFC engine against the discrete-event packet reference, and the fluid mode unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from packet_reference import simulate_packets

import fabricflow as ff
from fabricflow.fabric.spec import load_fat_tree
from fabricflow.solve.packet.overheads import PacketParams, reverse_links, wire_bytes
from fabricflow.traffic.patterns import permutation_flows

C = 50e9  # 400 Gb/s in bytes/s
LAT = 1e-6


def star(hosts: int):
    """One switch, ``hosts`` hosts, 400 Gb/s and 1 us per cable."""
    return ff.build_fabric(
        {
            "name": "star",
            "gpus": hosts,
            "gpus_per_node": 1,
            "topology": {
                "type": "graph",
                "defaults": {"bandwidth": "400Gbps", "latency": "1us", "kind": "nic"},
                "nodes": [{"name": "s0", "kind": "leaf", "tier": 1}],
                "gpus": [f"h{i}" for i in range(hosts)],
                "links": [{"a": f"h{i}", "b": "s0"} for i in range(hosts)],
            },
        }
    )


def reference(fabric, routes, size, **options):
    return simulate_packets(
        routes.links,
        fabric.capacity,
        fabric.latency,
        np.broadcast_to(np.asarray(size, float), (routes.num_flows,)),
        reverse=reverse_links(fabric.link_src, fabric.link_dst),
        **options,
    )


def test_one_flow_one_path_exact():
    """Headers, one packet time per hop after the first, latency both ways, the ACK."""
    fabric = load_fat_tree(4)
    routes = ff.route(fabric, [0], [15])  # across the core: 6 links
    hops = int((routes.links >= 0).sum())
    assert hops == 6
    size = 2e6
    packets = np.ceil(size / (9000 - 64))
    wire = size + packets * 64
    delivered = wire / C + (hops - 1) * 9000 / C + hops * LAT
    acked = delivered + hops * (64 / C + LAT)
    times = ff.flow_completion_times(fabric, routes, size, fidelity="packet")
    assert times.delivered[0] == pytest.approx(delivered, rel=1e-9)
    assert times.fct[0] == pytest.approx(acked, rel=1e-9)
    assert times.components["store_forward"][0] == pytest.approx(5 * 9000 / C, rel=1e-12)
    assert times.components["ack"][0] == pytest.approx(6 * (64 / C + LAT), rel=1e-12)
    assert times.components["pfc_hol"][0] == pytest.approx(0, abs=1e-12)
    # one time base: a late start changes no duration (the PFC engine starts its clock
    # at the earliest start)
    late = ff.flow_completion_times(fabric, routes, size, start=1e9, fidelity="packet")
    assert late.fct[0] == pytest.approx(acked, rel=1e-9)
    # and the packets themselves agree
    ref_delivered, ref_acked = reference(fabric, routes, size)
    assert ref_delivered[0] == pytest.approx(delivered, rel=1e-9)
    assert ref_acked[0] == pytest.approx(acked, rel=1e-9)
    # the fluid mode: W = size, no packets, propagation both ways
    fluid = ff.flow_completion_times(fabric, routes, size)
    assert fluid.fct[0] == pytest.approx(size / C + 2 * hops * LAT, rel=1e-6)


def test_header_overhead_and_small_flows():
    params = PacketParams()
    wire, first = wire_bytes(np.array([1.0, 8936.0, 8937.0, 2e6]), params)
    np.testing.assert_allclose(wire, [65, 9000, 8937 + 128, 2e6 + 224 * 64])
    np.testing.assert_allclose(first, [65, 9000, 9000, 9000])
    fabric = load_fat_tree(4)
    routes = ff.route(fabric, [0, 1], [15, 14])
    times = ff.flow_completion_times(fabric, routes, [100.0, 5000.0], fidelity="packet")
    ref_delivered, _ = reference(fabric, routes, [100.0, 5000.0])
    np.testing.assert_allclose(times.delivered, ref_delivered, rtol=1e-9)
    # a start 1,000 s later: the same times, and the engine's clock skips the idle gap
    late = ff.flow_completion_times(
        fabric, routes, [100.0, 5000.0], start=[0.0, 1e3], fidelity="packet"
    )
    np.testing.assert_allclose(late.delivered, ref_delivered, rtol=1e-6)  # float64 at 1e3 s
    assert late.settings["steps"] < 1000


def test_fluid_is_the_max_min_engine_plus_latency():
    fabric = load_fat_tree(4)
    src, dst = permutation_flows(16, seed=3)
    routes = ff.route(fabric, src, dst, seed=3)
    size = np.linspace(1e5, 2e6, 16)
    start = np.linspace(0, 20e-6, 16)
    times = ff.flow_completion_times(fabric, routes, size, start=start)
    engine = ff.max_min_completion(routes.links, fabric.capacity, size, start=start)
    latency = np.where(routes.links >= 0, fabric.latency[routes.links], 0).sum(axis=1)
    np.testing.assert_array_equal(times.delivered, engine.elapsed + latency)
    np.testing.assert_allclose(engine.finish_time, start + engine.elapsed, rtol=1e-6)
    np.testing.assert_array_equal(times.fct, times.delivered + latency)
    assert np.all(times.components["pfc_hol"] == 0)


def test_incast_victim_and_queued_ack_behind_pfc():
    """Hosts 1..3 send to host 0; host 1 also sends to idle host 4 (the victim), and host 0
    sends to idle host 5. Host 1's NIC serves its two flows in turn and the switch pauses
    host 1's link whenever the bytes it brought for host 0 pass XOFF, so the victim is
    held to the incast's pace, far slower than max-min's 1.5 W / C. It is even slower
    than the incast's fair third (3 W / C): the FIFO at host 0's egress serves each input
    in proportion to what it holds, and hosts 2 and 3, sending at C, overshoot XOFF by
    more during the pause frame's delay than host 1 does at C / 2. Each extra byte of
    XOFF lets the victim run about one byte ahead before the first pause (its time falls
    by about 3 dXOFF / C). The ACK of flow 0 -> 5 returns to host 0 through the congested
    egress and waits behind the queued incast data there (FIFO, the data's priority
    class), as in the packet simulation."""
    fabric = star(6)
    routes = ff.route(fabric, [1, 2, 3, 1, 0], [0, 0, 0, 4, 5])
    size = 2e6
    fluid = ff.flow_completion_times(fabric, routes, size, fidelity="fluid")
    wire = wire_bytes(np.array([size]), PacketParams())[0][0]
    victim = {}
    for xoff in (100e3, 300e3):
        pfc_params = ff.PFCParams(xoff=xoff, hysteresis=10e3)
        packet = ff.flow_completion_times(
            fabric, routes, size, fidelity="packet", pfc_params=pfc_params
        )
        victim[xoff] = packet.delivered[3] - packet.components["propagation"][3]
        victim[xoff] -= packet.components["store_forward"][3]
        assert 1.5 * wire / C < victim[xoff] < 3.3 * wire / C
        assert packet.dominant[3] == "pfc_hol"
        ref_delivered, ref_acked = reference(fabric, routes, size, xoff=xoff, xon=xoff - 10e3)
        np.testing.assert_allclose(packet.delivered, ref_delivered, rtol=0.05)
        np.testing.assert_allclose(packet.fct, ref_acked, rtol=0.05)
        # the queued ACK: the incast's backlog at host 0's egress when it gets there (a
        # snapshot of a pulsing queue: the engine's fluid is within 40% of the packets')
        ref_wait = ref_acked[4] - ref_delivered[4] - packet.components["ack"][4]
        assert ref_wait > xoff / C
        assert packet.components["ack_queueing"][4] > xoff / C
        assert packet.components["ack_queueing"][4] == pytest.approx(ref_wait, rel=0.4)
        assert np.all(packet.components["ack_queueing"][[0, 1, 2, 3]] < 1e-7)
    assert victim[100e3] - victim[300e3] == pytest.approx(3 * 200e3 / C, rel=0.15)
    assert fluid.delivered[3] - 2 * LAT == pytest.approx(1.5 * size / C, rel=1e-6)
    # no PFC pauses with congestion control: the victim keeps its max-min share
    dcqcn = ff.flow_completion_times(fabric, routes, size, fidelity="packet", cc="dcqcn")
    assert dcqcn.delivered[3] - 2 * LAT == pytest.approx(1.5 * wire / C + 9000 / C, rel=1e-6)


@pytest.mark.parametrize("seed", [0, 1])
def test_permutation_matches_packet_reference(seed):
    """k=8 fat-tree (128 hosts), 2 MB permutation: p50 and p90 within 5% of the packet
    simulation, p99 (between the two slowest of 128 flows) within 6%, and every flow
    within 25% (the order in which FIFOs and pauses serve single flows is chaotic); the
    fluid model is off by far more per flow."""
    fabric = load_fat_tree(8)
    src, dst = permutation_flows(fabric.num_gpus, seed=seed)
    routes = ff.route(fabric, src, dst, seed=seed)
    _, acked = reference(fabric, routes, 2e6)
    packet = ff.flow_completion_times(fabric, routes, 2e6, fidelity="packet")
    fluid = ff.flow_completion_times(fabric, routes, 2e6)
    q = [50, 90, 99]
    error = np.percentile(packet.fct, q) / np.percentile(acked, q) - 1
    assert np.all(np.abs(error) < [0.05, 0.05, 0.06]), error
    assert np.all(np.abs(packet.fct / acked - 1) < 0.25)
    assert np.max(np.abs(fluid.fct / acked - 1)) > 0.3


def test_bad_inputs_name_the_field():
    fabric = load_fat_tree(4)
    routes = ff.route(fabric, [0, 1], [5, 6])
    for kwargs, field in [
        ({"fidelity": "packets"}, "fidelity"),
        ({"cc": "hpcc"}, "cc"),
        ({"arbitration": "wfq", "fidelity": "packet"}, "arbitration"),
        ({"pfc": False, "fidelity": "packet"}, "pfc"),
        ({"pfc": "yes"}, "pfc"),
        ({"start": [0, -1]}, "start"),
    ]:
        with pytest.raises(ff.SpecError) as error:
            ff.flow_completion_times(fabric, routes, 1e6, **kwargs)
        assert error.value.field == field
    # the fluid fidelity has no packets: PFC and congestion control do not change it
    fluid = ff.flow_completion_times(fabric, routes, 1e6, pfc=False, cc="dcqcn")
    np.testing.assert_array_equal(fluid.fct, ff.flow_completion_times(fabric, routes, 1e6).fct)
    for size in (0, -5, np.nan, [1, 2, 3]):
        with pytest.raises(ff.SpecError) as error:
            ff.flow_completion_times(fabric, routes, size)
        assert error.value.field == "size"
    with pytest.raises(ff.SpecError) as error:
        ff.flow_completion_times(
            fabric, routes, 1e6, fidelity="packet", pfc_params=ff.PFCParams(xoff=5000, hysteresis=0)
        )
    assert error.value.field == "pfc.xoff"
    # routes of another fabric: other link ids, or paths that do not join their endpoints
    other = ff.route(load_fat_tree(8), [0, 1], [5, 6])
    with pytest.raises(ff.SpecError, match="links, but 'fat-tree-k4'|links, but") as error:
        ff.flow_completion_times(fabric, other, 1e6)
    assert error.value.field == "routes"
    moved = ff.Routes(routes.links, None, np.array([2, 1]), routes.dst, routes.num_links)
    with pytest.raises(ff.SpecError, match="flow 0 .* is not a path") as error:
        ff.flow_completion_times(fabric, moved, 1e6)
    assert error.value.field == "routes"
    spray = ff.route(fabric, [0, 1], [15, 14], policy="spray")
    with pytest.raises(ff.SpecError) as error:
        ff.flow_completion_times(fabric, spray, 1e6, fidelity="packet")
    assert error.value.field == "routes"
