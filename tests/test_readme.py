"""The README's tables cover what ships: every command in the CLI table, every preset in
the presets table, and the fabric spec's port and link-kind rules spelled out."""

from __future__ import annotations

import re
from pathlib import Path

from fabricflow.cli import _subparsers, build_parser
from fabricflow.fabric.spec import list_presets

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _table_rows(heading_pattern: str) -> list[str]:
    """First cells of the first table after the line matching ``heading_pattern``."""
    lines = README.splitlines()
    start = next(i for i, line in enumerate(lines) if re.search(heading_pattern, line))
    rows, seen = [], False
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            seen = True
            rows.append(line.split("|")[1].strip())
        elif seen:
            break
    return rows


def test_the_cli_table_lists_every_command():
    commands = set(_subparsers(build_parser()))
    listed = {
        m.group(1)
        for row in _table_rows(r"^\| command \|")
        if (m := re.match(r"`fabricflow ([\w-]+)", row))
    }
    assert commands <= listed, sorted(commands - listed)


def test_the_presets_table_lists_every_preset():
    names = {p["name"] for p in list_presets()}
    listed = {
        m.group(1) for row in _table_rows(r"^\| preset \|") if (m := re.match(r"`([\w.-]+)`", row))
    }
    assert names <= listed, sorted(names - listed)


def test_the_spec_section_says_down_and_up_ports_replace_radix_and_what_a_leaf_link_is():
    text = " ".join(README.split())
    assert "`down_ports` and `up_ports` in place of both" in text
    assert "`leaf` links are the leaf-to-spine cables" in text
    assert "a few minutes" not in text  # the suite's time is given as measured


def test_the_summary_keys_architects_read_are_documented():
    import fabricflow as ff

    summary = ff.load_fabric("dgx-h100-superpod").summary()
    tier = summary["tiers"][0]
    for key in (
        "num_network_switches",
        "num_scale_up_switches",
        "scale_up_link_kind",
        "cables_per_kind",
        "bisection_per_gpu_Bps",
        "full_bisection_Bps",
        "bisection_ratio",
        "warnings",
        "num_switches",
    ):
        assert key in summary and f"`{key}`" in README, key
    assert "deprecated" not in summary and "`deprecated`" not in README
    for key in ("ports_per_switch", "ports_used"):
        assert key in tier and f"`{key}`" in README, key
