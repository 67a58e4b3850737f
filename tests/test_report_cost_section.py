"""The design review's cost and power section."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import fabricflow as ff
from fabricflow.report.cost_section import cost_section


def test_cost_section_prices_the_job_and_names_a_missing_price():
    fabric = ff.load_fabric("dgx-h100-superpod")
    result = SimpleNamespace(tokens_per_s=1.0e6, tflops_per_gpu=400.0)
    section = cost_section(fabric, "h100-sxm", 512, result)
    assert section["id"] == "cost" and len(section["figures"]) == 1
    work = {row["item"]: row["value"] for row in section["tables"][0]["rows"]}
    expected = ff.work_cost(ff.fabric_cost(fabric), "h100-sxm", tokens_per_s=1.0e6, gpus=512)
    assert work["cost per million tokens"] == f"{expected.per_million_tokens:,.4f} USD"
    # half the fabric's GPUs carry half its network
    assert expected.network_capex == pytest.approx(ff.fabric_cost(fabric).capex / 2)
    tiers = section["tables"][1]["rows"]
    assert sum(row["capex"] for row in tiers) == pytest.approx(ff.fabric_cost(fabric).capex, abs=5)
    missing = cost_section(fabric, "tpu-v4", 512, result)
    assert missing["text"].startswith("Not priced: cost.gpus.tpu-v4")
