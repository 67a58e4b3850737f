"""Price files (``--cost-file``, a ``cost:`` section, ``cost=`` overrides): typos in a
name, numbers whose totals overflow and files with two layouts are refused, naming the
key and the file."""

from __future__ import annotations

import json

import pytest

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.errors import SpecError
from fabricflow.fabric.cost_table import read_cost_file


def _cli(tmp_path, capsys, text: str, suffix: str = ".yaml") -> tuple[int, dict]:
    path = tmp_path / f"prices{suffix}"
    path.write_text(text)
    code = main(["fabric", "dgx-h100-superpod", "--cost", "--cost-file", str(path), "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("cost", "field", "suggestion"),
    [
        ({"switch_models": {"spien": "qm9700"}}, "cost.switch_models.spien", "'spine'"),
        ({"reach": {"lef": "row"}}, "cost.reach.lef", "'leaf'"),
        ({"media": {"rwo": "dac"}}, "cost.media.rwo", "'row'"),
        ({"reach": {"leaf": "rwo"}}, "cost.reach.leaf", "'row'"),
    ],
)
def test_a_typo_in_a_tier_or_reach_name_is_refused_with_the_closest(
    fabric, cost, field, suggestion
):
    with pytest.raises(SpecError) as error:
        ff.fabric_cost(fabric, cost)
    assert error.value.field == field
    assert f"did you mean {suggestion}" in str(error.value)


def test_a_standard_tier_the_fabric_lacks_is_accepted(fabric):
    # one cost file for fabrics of two and three tiers: pinning the core is not a typo
    base = ff.fabric_cost(fabric).capex
    assert ff.fabric_cost(fabric, {"switch_models": {"core": "qm9700"}}).capex == base


@pytest.mark.parametrize(
    ("cost", "field"),
    [
        ({"transceivers": {"multimode-800G": {"price": 1e308, "power_W": 1}}},
         "cost.transceivers.multimode-800G.price"),
        ({"transceivers": {"multimode-800G": {"price": 1, "power_W": 1e308}}},
         "cost.transceivers.multimode-800G.power_W"),
        ({"switches": {"qm9700": {"price": 3e306}}, "nics": {"cx7": {"price": 1.5e305}}},
         "cost"),
    ],
)  # fmt: skip
def test_prices_whose_totals_overflow_are_refused(fabric, cost, field):
    with pytest.raises(SpecError, match="not a finite number") as error:
        ff.fabric_cost(fabric, cost)
    assert error.value.field == field


def test_a_work_cost_that_overflows_is_refused(fabric):
    network = ff.fabric_cost(fabric, {"lifetime_years": 1e-308})
    with pytest.raises(SpecError, match="cost per hour"):
        ff.work_cost(network, "h100-sxm", tokens_per_s=1e6)
    network = ff.fabric_cost(fabric, {"gpus": {"h100-sxm": {"price": 1e306, "power_W": 700}}})
    with pytest.raises(SpecError, match="GPUs x their price") as error:
        ff.work_cost(network, "h100-sxm", tokens_per_s=1e6)
    assert error.value.field == "cost.gpus.h100-sxm.price"


def test_a_file_with_a_cost_section_and_top_level_keys_is_refused(tmp_path, capsys):
    code, out = _cli(tmp_path, capsys, "cost: {pue: 1.3}\nlifetime_years: 5\n")
    assert code == 2
    assert "both a 'cost:' section and top-level table keys ['lifetime_years']" in out["message"]
    # either layout alone applies
    for text in ("cost: {pue: 1.5}\n", "pue: 1.5\n"):
        code, out = _cli(tmp_path, capsys, text)
        assert code == 0 and out["cost"]["capex"] > 0


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"switches": {"qm9700": {"prize": 3}}}', "did you mean 'price'"),
        ('{"foo": 3}', "unknown key(s) ['foo']"),
        ('{"pue": 1e400}', "must be finite"),
        ('{"switches": {"qm9700": {"cages": 9223372036854775807}}}', "at most 2,147,483,647"),
        ('{"transceivers": {"multimode-800G": {"price": ' + "9" * 30 + "}}}", "64-bit"),
        ('{"cost": 5}', "'cost:' must be a mapping"),
        ("[1, 2]", "must hold a mapping"),
    ],
)
def test_bad_cost_files_are_refused_naming_the_file(tmp_path, capsys, text, words):
    code, out = _cli(tmp_path, capsys, text, ".json")
    assert code == 2 and out["error"] == "SpecError", out
    assert words in out["message"] and "prices.json" in out["message"], out


def test_the_api_reads_cost_files_as_the_cli_does(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("switch_models: {leaf: qm9700}\n")
    assert read_cost_file(path) == {"switch_models": {"leaf": "qm9700"}}
    path.write_text("cost: {switch_models: {leaf: qm9700}}\n")
    assert read_cost_file(path) == {"switch_models": {"leaf": "qm9700"}}
