"""Small cases the layout-search tests share: a 48-GPU oversubscribed fabric, an 8-layer
GPT, a small space and its brute force (each built once per process)."""

from __future__ import annotations

import functools
import itertools

import fabricflow as ff
from fabricflow.errors import SpecError

GPU = "a100-80gb"
SEQ = 2048


@functools.cache
def tiny_oversubscribed():
    """48 GPUs in 4-GPU NVLink domains under leaves with 3:1 oversubscription."""
    from fabricflow.fabric.spec import build_fabric

    return build_fabric(
        {
            "name": "tiny-oversubscribed",
            "gpus": 48,
            "gpus_per_node": 4,
            "topology": {
                "type": "clos",
                "attachment": "tor",
                "nic_bandwidth": "100Gbps",
                "tiers": [{"radix": 8, "oversubscription": 3}, {"radix": 8}],
            },
            "scale_up": {"domain_size": 4, "bandwidth_per_direction": "100GB/s"},
        }
    )


@functools.cache
def small_model():
    """Megatron's 1.7B GPT cut to 8 layers."""
    return ff.load_model("megatron-1.7b", num_hidden_layers=8)


SPACE = {
    "tp": [1, 2, 4],
    "pp": [1, 2, 4],
    "micro_batch": [1, 2],
    "zero": [1, 3],
    "order": ["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"],
    "placement": ["contiguous", "scattered"],
    # overlap switches: off is dominated by on, which the search uses to defer off
    "dp_overlap": [False, True],
    "tp_overlap": [False, True],
    "sequence_parallel": [True],
}


def brute_force(model, fabric, space, gpus, global_batch, **step_options):
    """Every point of ``space`` timed with ff.step_time: ``[(layout, step seconds)]`` of
    the points that run, shortest first."""
    results = []
    keys = list(space)
    for values in itertools.product(*(space[k] for k in keys)):
        knobs = dict(zip(keys, values, strict=True))
        order = knobs.pop("order", "tp-cp-ep-dp-pp")
        placement = knobs.pop("placement", "contiguous")
        ranks = knobs.get("tp", 1) * knobs.get("pp", 1) * knobs.get("cp", 1)
        if gpus % ranks:
            continue
        try:
            layout = ff.Layout(dp=gpus // ranks, global_batch=global_batch, seq_len=SEQ, **knobs)
            result = ff.step_time(
                model, GPU, layout, fabric, order=order, placement=placement, **step_options
            )
        except SpecError:
            continue
        results.append((layout, result.step_time_s))
    return sorted(results, key=lambda item: item[1])


@functools.cache
def small_brute_force():
    """:func:`brute_force` of :data:`SPACE` for the small model on 32 GPUs of the
    oversubscribed fabric, global batch 64 (the exact answer several tests check)."""
    return brute_force(small_model(), tiny_oversubscribed(), SPACE, 32, 64)
