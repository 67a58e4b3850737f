"""Fault injection for the CLI, file reader and unit parsers: bad input gets a clear error."""

from __future__ import annotations

import pytest

from fabricflow.errors import SpecError
from fabricflow.units import parse_bandwidth, parse_size, parse_time


@pytest.mark.parametrize("text", ["1b", "1kb", "8Mb", "400kb", "1Gb", "1kib", "2 Tb"])
def test_sizes_in_bits_are_refused_with_a_bytes_hint(text):
    with pytest.raises(SpecError, match=r"x: .*sizes are in bytes: write e\.g\. 8MB or 8MiB"):
        parse_size(text, "x")


def test_bandwidths_still_take_bits():
    assert parse_bandwidth("400Gbps") == 50e9
    assert parse_bandwidth("8Mb/s") == 1e6


@pytest.mark.parametrize("text", ["８MiB", "١٢٣", "1٢", "８", "1\u00a0MB", "１e3"])
def test_non_ascii_digits_and_spaces_are_refused(text):
    with pytest.raises(SpecError, match="cannot read"):
        parse_size(text, "x")
    with pytest.raises(SpecError, match="cannot read"):
        parse_time(text, "x")


def test_clos_gpu_count_hint_names_distinct_multiples():
    from fabricflow.fabric.spec import build_fabric

    spec = {
        "name": "x",
        "gpus_per_node": 1,
        "topology": {"type": "clos", "nic_bandwidth": "400Gbps", "tiers": [{"radix": 8}] * 2},
    }
    with pytest.raises(SpecError, match=r"multiple of 4 \(e\.g\. 4\)$"):
        build_fabric({**spec, "gpus": 2})
    with pytest.raises(SpecError, match=r"multiple of 4 \(e\.g\. 4 or 8\)$"):
        build_fabric({**spec, "gpus": 6})
