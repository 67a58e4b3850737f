"""Cost and power of fabrics and of the work: arithmetic by hand, overrides, bad prices,
and rankings that a uniform price change cannot move."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys

import pytest

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.fabric.cost import HOURS_PER_YEAR
from fabricflow.fabric.cost_table import default_table
from fabricflow.fabric.spec import read_spec


def test_dgx_h100_network_capex_and_power_by_hand():
    table = default_table()
    cost = ff.fabric_cost(ff.load_fabric("dgx-h100-superpod"))
    price = {
        name: entry["price"]
        for section in ("switches", "nics", "transceivers", "cables")
        for name, entry in table[section].items()
    }
    power = {
        name: entry["power_W"]
        for section in ("switches", "nics", "transceivers", "cables")
        for name, entry in table[section].items()
    }
    bill = {  # counts of test_bom's hand calculation
        "qm9700": 48,
        "cx7": 1024,
        "multimode-400G": 1024,
        "multimode-800G": 512 + 1024,
        "fiber-multimode": 2048,
    }
    assert cost.capex == pytest.approx(sum(n * price[p] for p, n in bill.items()))
    assert cost.power_W == pytest.approx(sum(n * power[p] for p, n in bill.items()))
    assert cost.capex_per_gpu == pytest.approx(cost.capex / 1024)
    tiers = cost.by("tier")
    assert tiers["spine"]["capex"] == pytest.approx(16 * price["qm9700"])
    assert sum(t["capex"] for t in tiers.values()) == pytest.approx(cost.capex)
    assert sum(t["power_W"] for t in tiers.values()) == pytest.approx(cost.power_W)


def test_infiniband_and_ethernet_parts_are_priced_separately():
    ib = ff.load_fabric("dgx-h100-superpod")
    roce = ff.load_fabric("dgx-h100-superpod", transport={"protocol": "rocev2"})
    assert {i.part for i in ff.bill_of_materials(ib).items if i.category == "switch"} == {"qm9700"}
    # 64 x 400G needs 32 cages of 800G: the smallest Ethernet switch that holds it
    assert {i.part for i in ff.bill_of_materials(roce).items if i.category == "switch"} == {
        "sn5600"
    }
    cheap_ib = {"switches": {"qm9700": {"price": 1.0}}}
    assert ff.fabric_cost(ib, cheap_ib).capex < ff.fabric_cost(ib).capex
    assert ff.fabric_cost(roce, cheap_ib).capex == ff.fabric_cost(roce).capex


def test_spec_cost_section_and_run_overrides_apply_in_order():
    spec = read_spec("dgx-h100-superpod")
    spec["cost"] = {"switches": {"qm9700": {"price": 10000}}, "switch_models": {"spine": "q3400"}}
    fabric = ff.build_fabric(spec)
    cost = ff.fabric_cost(fabric)
    lines = {(line.part, line.tier): line for line in cost.lines}
    assert lines["qm9700", "leaf"].unit_price == 10000
    assert ("q3400", "spine") in lines  # pinned model
    run = ff.fabric_cost(fabric, {"switches": {"qm9700": {"price": 20000}}})
    assert {(li.part, li.tier): li for li in run.lines}["qm9700", "leaf"].unit_price == 20000
    with pytest.raises(ff.SpecError, match="cannot hold"):
        ff.fabric_cost(fabric, {"switch_models": {"spine": "qm8700"}})


def test_a_missing_price_names_the_part_and_the_key():
    fabric = ff.load_fabric("dgx-h100-superpod")
    with pytest.raises(ff.SpecError, match="multimode-800G") as error:
        ff.fabric_cost(fabric, {"transceivers": {"multimode-800G": None}})
    assert error.value.field == "cost.transceivers.multimode-800G"
    assert "set cost.transceivers.multimode-800G" in str(error.value)
    network = ff.fabric_cost(fabric)
    with pytest.raises(ff.SpecError) as error:
        ff.work_cost(network, "tpu-v4", tokens_per_s=1e6)
    assert error.value.field == "cost.gpus.tpu-v4"


@pytest.mark.parametrize(
    "override, field",
    [
        ({"switches": {"qm9700": {"price": -1}}}, "cost.switches.qm9700.price"),
        ({"transceivers": {"multimode-400G": {"price": math.nan}}}, "cost.transceivers"),
        ({"cables": {"fiber-multimode": {"power_W": math.inf}}}, "cost.cables"),
        ({"nics": {"cx7": {"price": True}}}, "cost.nics.cx7.price"),
        ({"lifetime_years": 0}, "cost.lifetime_years"),
        ({"lifetime_years": math.inf}, "cost.lifetime_years"),
        ({"power_price_per_kWh": -0.1}, "cost.power_price_per_kWh"),
        ({"pue": 0.9}, "cost.pue"),
        ({"media": {"row": "carrier-pigeon"}}, "cost.media.row"),
        ({"nic_model": "cx99"}, "cost.nic_model"),
        ({"switchez": {}}, "cost"),
    ],
)
def test_bad_tables_are_refused_naming_the_field(override, field):
    with pytest.raises(ff.SpecError) as error:
        ff.fabric_cost(ff.load_fabric("dgx-h100-superpod"), override)
    assert error.value.field.startswith(field)


def test_work_cost_by_hand():
    network = ff.fabric_cost(ff.load_fabric("dgx-h100-superpod"))
    work = ff.work_cost(network, "h100-sxm", tokens_per_s=2.0e6, model_tflops_per_gpu=400.0)
    table = default_table()
    gpu = table["gpus"]["h100-sxm"]
    capex = 1024 * gpu["price"] + network.capex
    watts = 1024 * gpu["power_W"] + network.power_W
    per_hour = capex / (table["lifetime_years"] * HOURS_PER_YEAR) + (
        watts * table["pue"] / 1000 * table["power_price_per_kWh"]
    )
    assert work.per_hour == pytest.approx(per_hour)
    assert work.per_million_tokens == pytest.approx(per_hour / (3600 * 2.0e6) * 1e6)
    assert work.per_pflops_day == pytest.approx(per_hour * 24 / (400.0 * 1024 / 1000))
    with pytest.raises(ff.SpecError, match="tokens_per_s"):
        ff.work_cost(network, "h100-sxm", tokens_per_s=0.0)


def _doubled(table: dict) -> dict:
    out = copy.deepcopy(table)
    for section in ("switches", "nics", "transceivers", "cables", "scale_up", "gpus"):
        for entry in out[section].values():
            entry["price"] *= 2
    out["power_price_per_kWh"] *= 2
    return out


def test_doubling_every_price_leaves_the_ranking_unchanged():
    """Designs ranked by cost per token: every price (parts, GPUs, energy) x 2 doubles every
    cost exactly and keeps the order."""
    designs = {
        "ib-rail": ff.load_fabric("dgx-h100-superpod"),
        "roce-rail": ff.load_fabric("dgx-h100-superpod", transport={"protocol": "rocev2"}),
        "ib-2:1": ff.load_fabric(
            "dgx-h100-superpod",
            topology={
                "tiers": [
                    {"name": "leaf", "down_ports": 32, "up_ports": 16},
                    {"name": "spine", "radix": 64},
                ]
            },
        ),
        "ib-tor": ff.load_fabric("dgx-h100-superpod", topology={"attachment": "tor"}),
    }
    throughput = {"ib-rail": 2.00e6, "roce-rail": 1.93e6, "ib-2:1": 1.85e6, "ib-tor": 1.97e6}

    def ranking(table):
        costs = {
            name: ff.work_cost(ff.fabric_cost(f, table), "h100-sxm", tokens_per_s=throughput[name])
            for name, f in designs.items()
        }
        return sorted(costs, key=lambda n: costs[n].per_million_tokens), costs

    base_order, base = ranking(default_table())
    doubled_order, doubled = ranking(_doubled(default_table()))
    assert doubled_order == base_order
    for name in designs:
        assert doubled[name].per_million_tokens == pytest.approx(2 * base[name].per_million_tokens)
    assert len({round(c.network_capex) for c in base.values()}) > 1  # the designs differ


def test_cli_fabric_cost_json_and_a_bad_cost_file(tmp_path, capsys):
    result = subprocess.run(
        [sys.executable, "-m", "fabricflow.cli", "fabric", "dgx-h100-superpod", "--cost", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["cost"]["capex"] == pytest.approx(
        ff.fabric_cost(ff.load_fabric("dgx-h100-superpod")).capex
    )
    assert {item["part"] for item in out["bom"]["items"]} >= {"qm9700", "cx7"}
    bad = tmp_path / "prices.yaml"
    bad.write_text("cost:\n  gpus: {h100-sxm: {price: .nan, power_W: 1}}\n  lifetime_years: -4\n")
    assert main(["fabric", "dgx-h100-superpod", "--cost-file", str(bad)]) == 2
    assert "cost.lifetime_years" in capsys.readouterr().err
