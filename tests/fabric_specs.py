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


def leaf_spine_spec(gpus: int, up: int, *, spine_radix: int = 16, bundle: int = 1) -> dict:
    """Spec of a 2-tier ToR Clos of 8-GPU servers with NVLink domains and 400G NICs:
    leaves of 16 GPU ports and ``up`` uplinks (16 / up : 1) in bundles of ``bundle``
    cables, spines of ``spine_radix`` ports."""
    return {
        "name": f"leaf-spine-{gpus}-{up}",
        "gpus": gpus,
        "gpus_per_node": 8,
        "scale_up": {"domain_size": 8, "bandwidth_bidirectional": "900GB/s"},
        "topology": {
            "type": "clos",
            "attachment": "tor",
            "nic_bandwidth": "400Gbps",
            "tiers": [
                {"name": "leaf", "down_ports": 16, "up_ports": up, "uplink_bundle": bundle},
                {"name": "spine", "radix": spine_radix},
            ],
        },
    }
