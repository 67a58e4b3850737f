"""Small fabric specs used across the tests (importable as `fabric_specs`)."""

from __future__ import annotations


def fat_tree_spec(
    k: int,
    *,
    gpus_per_node: int = 1,
    attachment: str = "tor",
    scale_up=None,
    tiers: int = 3,
    planes: int = 1,
    nic: str = "100Gbps",
) -> dict:
    """Spec of a non-blocking k-ary fat-tree with ``tiers`` tiers (k^3/4 hosts for 3)."""
    hosts = 2 * (k // 2) ** tiers
    spec = {
        "name": f"fat-tree-k{k}",
        "gpus": hosts,
        "gpus_per_node": gpus_per_node,
        "topology": {
            "type": "clos",
            "attachment": attachment,
            "planes": planes,
            "nic_bandwidth": nic,
            "tiers": [{"radix": k} for _ in range(tiers)],
        },
    }
    if scale_up:
        spec["scale_up"] = scale_up
    return spec
