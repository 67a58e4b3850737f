"""Small cases the layout-search tests share: a 48-GPU oversubscribed fabric and an
8-layer GPT (built once per process)."""

from __future__ import annotations

import functools

import fabricflow as ff

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
