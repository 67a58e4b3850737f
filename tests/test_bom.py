"""Bill of materials: counts equal hand calculations on presets (bundles, breakout,
planes, partly used top tiers, rail-only trees, NVL72 trays)."""

from __future__ import annotations

import pytest

import fabricflow as ff
from fabricflow.fabric.bom import cages_needed


def counts(bom) -> dict[tuple[str, str], int]:
    """(part, tier) -> units."""
    out: dict[tuple[str, str], int] = {}
    for item in bom.items:
        out[item.part, item.tier] = out.get((item.part, item.tier), 0) + item.count
    return out


def test_dgx_h100_superpod_by_hand():
    """1,024 GPUs, 8 rails, QM9700 (32 twin-port OSFP cages of 2 x 400G) leaves at 32 down /
    32 up in bundles of 2 to 16 spines."""
    bom = ff.bill_of_materials(ff.load_fabric("dgx-h100-superpod"))
    c = counts(bom)
    assert c["qm9700", "leaf"] == 1024 // 32 == 32
    assert c["qm9700", "spine"] == 32 * 32 // 64 == 16
    assert c["cx7", "nic"] == 1024
    assert c["in-server", "scale-up"] == 128  # one HGX baseboard per node
    # GPU-leaf: rail leaves serve a row: multimode optics, one 400G module per NIC port,
    # one twin-port 800G module per 2 leaf ports (16 per leaf), one fibre per link
    assert c["multimode-400G", "nic"] == 1024
    assert c["multimode-800G", "nic"] == 32 * 32 // 2 == 512
    assert c["fiber-multimode", "nic"] == 1024
    # leaf-spine: 32 leaves x 16 spines x bundle 2 = 1,024 cables (each bundle is 2 cables)
    assert c["fiber-multimode", "leaf"] == 32 * 16 * 2 == 1024
    # modules: 16 per leaf (32 up ports / 2) + 32 per spine (64 down ports / 2)
    assert c["multimode-800G", "leaf"] == 32 * 16 + 16 * 32 == 1024
    assert bom.count(category="transceiver") == 1024 + 512 + 1024
    assert bom.count(category="switch") == 48


def test_alibaba_hpn_breakout_and_planes_by_hand():
    """2 planes, 2 x 200G per GPU on a dual-port NIC; ToRs 128 x 200G down (4 per 800G cage,
    a breakout) and 60 x 400G up (2 per cage) on 51.2T Ethernet switches."""
    bom = ff.bill_of_materials(ff.load_fabric("alibaba-hpn-pod"))
    c = counts(bom)
    gpus, planes = 15360, 2
    tors = planes * gpus // 128
    assert c["sn5600", "leaf"] == tors == 240
    assert c["sn5600", "spine"] == planes * 60 == 120
    assert c["cx7-2x200", "nic"] == gpus  # one dual-port card per GPU
    assert c["fiber-multimode", "nic"] == planes * gpus
    assert c["multimode-200G", "nic"] == planes * gpus
    assert c["multimode-800G", "nic"] == tors * 128 // 4
    assert c["fiber-multimode", "leaf"] == tors * 60
    assert c["multimode-800G", "leaf"] == tors * 60 // 2 + 120 * 120 // 2
    # the ToR holds 128 x 200G + 60 x 400G: 32 + 30 of its 64 cages
    assert cages_needed({25e9: 128, 50e9: 60}, 100e9) == 62


def test_fat_tree_k16_copper_in_the_rack_by_hand():
    """k = 16: 128 edge + 128 aggregation + 64 core 16-port switches; ToR cables are DAC."""
    bom = ff.bill_of_materials(ff.load_fabric("fat-tree-k16"))
    c = counts(bom)
    assert (c["sn4700", "leaf"], c["sn4700", "spine"], c["sn4700", "core"]) == (128, 128, 64)
    assert c["dac-400G", "nic"] == 1024
    assert bom.count(category="transceiver", tier="nic") == 0
    assert c["multimode-400G", "leaf"] == 2 * 128 * 8  # both ends, one per 400G cage
    assert c["singlemode-400G", "spine"] == 2 * 128 * 8  # hall reach to the core
    assert c["fiber-singlemode", "spine"] == 1024


def test_gb200_bundles_of_four_partial_top_tier_and_nvl72_trays():
    """9,216 GPUs in 128 NVL72 racks: 288 leaves, 288 spines with 8 bundles of 4 up, 256
    cores each using 9 blocks x 4 = 36 of 64 ports (a partly used top tier still buys a
    64-port switch); 9 NVLink switch trays per rack (72 x 18 / 144)."""
    bom = ff.bill_of_materials(ff.load_fabric("gb200-nvl72-superpod"))
    c = counts(bom)
    assert (c["qm9700", "leaf"], c["qm9700", "spine"], c["qm9700", "core"]) == (288, 288, 256)
    assert c["nvlink-switch-tray", "scale-up"] == 128 * 9
    assert c["fiber-singlemode", "spine"] == 288 * 32 == 256 * 36
    assert c["singlemode-800G", "spine"] == 288 * 32 // 2 + 256 * 36 // 2


def test_rail_only_fabric_drops_the_spines_that_join_rails():
    """8 rails of 128 GPUs: one 1-tier switch per rail holds a whole rail (radix 128 at
    400G needs 64 x 800G cages: an SN5600), against a rail-optimized 2-tier Clos."""
    spec = {
        "name": "rail-only-1k",
        "gpus": 1024,
        "gpus_per_node": 8,
        "scale_up": {"domain_size": 8, "bandwidth_bidirectional": "900GB/s"},
        "topology": {
            "type": "clos",
            "attachment": "rail-only",
            "nic_bandwidth": "400Gbps",
            "tiers": [{"name": "leaf", "radix": 128}],
        },
    }
    bom = ff.bill_of_materials(ff.build_fabric(spec))
    c = counts(bom)
    assert c["sn5600", "leaf"] == 8
    assert c["multimode-800G", "nic"] == 1024 // 2
    assert bom.count(category="switch") == 8


def test_bom_refuses_failed_links_and_covers_other_generators():
    fabric = ff.load_fabric("dgx-h100-superpod")
    with pytest.raises(ff.SpecError, match="as built"):
        ff.bill_of_materials(fabric.without(links=[int(fabric.links_of_kind("leaf")[0])]))
    dragonfly = counts(ff.bill_of_materials(ff.load_fabric("frontier-dragonfly")))
    # 74 groups x 32 switches; 4 global cables per group pair
    assert dragonfly["rosetta", "switch"] == 74 * 32
    assert dragonfly["fiber-singlemode", "global"] == 74 * 73 // 2 * 4
    assert dragonfly["dac-200G", "local"] == 74 * 32 * 31 // 2
    torus = counts(ff.bill_of_materials(ff.load_fabric("tpu-v4-pod")))
    assert torus == {("dac-400G", "ici"): 4096 * 3}  # 6 ICI links per chip, 2 chips each
