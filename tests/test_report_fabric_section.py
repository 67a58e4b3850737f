"""The design review's fabric section: network and scale-up switches apart, physical
cables beside directed links, and bisection per GPU over one half with its share of full
bisection (a 1:1 fabric with 400G NICs reads 400 Gb/s, 100 %, not 200 Gb/s)."""

from __future__ import annotations

import fabricflow as ff
from fabricflow.report.build import _fabric_section


def test_fabric_section_counts_switches_cables_and_bisection_as_architects_do():
    section = _fabric_section(ff.load_fabric("dgx-h100-superpod"))
    overview, kinds, tiers = (table["rows"] for table in section["tables"])
    items = {row["item"]: row["value"] for row in overview}
    assert items["network switches"] == "48"
    assert items["scale-up switches"] == "128 (one per nvlink domain)"
    assert items["bisection per GPU (over the GPUs of one half)"] == (
        "400 Gb/s, 100 % of full bisection"
    )
    leaf = next(row for row in kinds if row["kind"] == "leaf")
    assert (leaf["links"], leaf["cables"]) == (1024, 1024)  # 512 bundles of 2, two ways
    assert [row["ports"] for row in tiers] == ["64 of 64", "64 of 64"]
