"""Property tests over random Clos specs: whatever builds must be consistent and routable."""

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from routing_checks import assert_valid_walks, networkx_hops

import fabricflow as ff
from fabricflow.errors import SpecError
from fabricflow.fabric.spec import build_fabric
from fabricflow.fabric.summary import max_flow_between


@st.composite
def clos_specs(draw):
    tiers = draw(st.integers(1, 3))
    per_node = draw(st.sampled_from([1, 2, 4]))
    radix = draw(st.sampled_from([4, 6, 8]))
    tier_specs = []
    for level in range(tiers):
        top = level == tiers - 1
        if top:
            tier_specs.append({"radix": radix})
        else:
            ratio = draw(st.sampled_from([1, 1, 2, 3]))
            tier_specs.append(
                {
                    "radix": radix,
                    "oversubscription": ratio,
                    "uplink_bundle": draw(st.sampled_from([1, 1, 2])),
                }
            )
    return {
        "name": "random-clos",
        "gpus": draw(st.integers(1, 40)) * per_node * 2,
        "gpus_per_node": per_node,
        "scale_up": (
            {"domain_size": per_node, "bandwidth_per_direction": "200GB/s"}
            if per_node > 1 and draw(st.booleans())
            else None
        ),
        "topology": {
            "type": "clos",
            "attachment": draw(st.sampled_from(["rail", "tor"])),
            "planes": draw(st.sampled_from([1, 2])),
            "nic_bandwidth": "100Gbps",
            "tiers": tier_specs,
        },
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(clos_specs(), st.integers(0, 2**16))
def test_random_clos_is_consistent_and_routable(spec, seed):
    if spec["scale_up"] is None:
        del spec["scale_up"]
    try:
        fabric = build_fabric(spec)
    except SpecError:
        assume(False)  # many random combinations are rightly rejected
    radix = spec["topology"]["tiers"][0]["radix"]
    out_degree = np.bincount(fabric.link_src, minlength=fabric.num_nodes)
    switches = fabric.node_tier > 0
    assert np.all(out_degree[switches] <= radix)  # bundles are one link for several ports
    planes = spec["topology"]["planes"]
    assert fabric.links_of_kind("nic").size == 2 * planes * fabric.num_gpus
    # every directed link has its reverse
    forward = set(zip(fabric.link_src.tolist(), fabric.link_dst.tolist()))
    assert all((b, a) in forward for a, b in forward)

    rng = np.random.default_rng(seed)
    if fabric.num_gpus >= 2:
        src = rng.integers(0, fabric.num_gpus, 200)
        dst = (src + rng.integers(1, fabric.num_gpus, 200)) % fabric.num_gpus
        routes = ff.route(fabric, src, dst, seed=seed)
        assert_valid_walks(fabric, routes, src, dst)
        assert np.array_equal(routes.hop_count, networkx_hops(fabric, src, dst, gpu_transit=False))
        multi = ff.route(fabric, src, dst, policy="multipath", k=3, seed=seed)
        assert np.allclose(multi.coef.sum(axis=1), routes.hop_count, atol=1e-5)

    half = fabric.structure.slot_of_gpu < fabric.num_gpus // 2
    top_blocks = fabric.structure.m[fabric.structure.levels]
    if top_blocks % 2 == 0 or fabric.structure.levels == 1:
        # the natural halving is aligned with top-tier blocks: formula == min cut
        assert np.isclose(
            fabric.summary()["bisection_bandwidth_Bps"],
            max_flow_between(fabric, half, ~half),
            rtol=1e-9,
        )
