"""One memory policy: every memory refusal goes through ``check_memory`` (so the budget of
``$FABRICFLOW_MEMORY_BUDGET`` or ``budget=`` decides, with calibrated bytes), limits that
are not about memory raise SpecError/RoutingError, and a bad budget is a SpecError."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from fabric_specs import fat_tree_spec
from routing_checks import random_pairs

import fabricflow as ff
from fabricflow.collective import estimate
from fabricflow.collective.algorithms.p2p import _pairs
from fabricflow.collective.phase import make_phase
from fabricflow.errors import MemoryBudgetError, RoutingError, SpecError
from fabricflow.fabric import summary
from fabricflow.fabric.spec import build_fabric
from fabricflow.memory_budget import check_memory, memory_budget
from fabricflow.routing import clos
from fabricflow.routing.route_limits import MERGE_BYTES_PER_ENTRY


class Reached(Exception):
    """Raised by a stub: the code got past every size check to the real work."""


# --- collective phases: the budget and BYTES_PER_HOP decide, not a fixed hop count


def _phase(valid: int, padded: int = 0):
    """One group of ``valid`` GPU 0 -> GPU 1 hops (and ``padded`` -1 hops)."""
    src = np.concatenate([np.zeros(valid, np.int64), np.full(padded, -1)]).reshape(1, -1, 1)
    dst = np.where(src >= 0, 1, -1)
    return make_phase("p", "p2p", src, dst, bytes_per_size=1.0)


def test_phase_hops_are_costed_at_bytes_per_hop_against_the_budget(monkeypatch):
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", str(1400 * estimate.BYTES_PER_HOP))
    _phase(1400, padded=5000)  # padding is not routed: only valid hops count
    # 1,401 hops: over by one hop at 700 B (a fixed cap, or ~150 B per hop, would pass it)
    with pytest.raises(MemoryBudgetError, match=r"phase 'p' \(1,401 flow hops\).*BUDGET"):
        _phase(1401)


def test_check_work_applies_the_same_estimate_to_fused_phases(monkeypatch):
    from fabricflow.collective.phase import pipelined

    fabric = build_fabric(fat_tree_spec(4))
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", str(1500 * estimate.BYTES_PER_HOP))
    stages = [_phase(1000), _phase(1000)]  # each fits; fused they are 2,000 hops
    estimate.check_work(fabric, "all_reduce", (1, 2), [("ring", stages, ())])
    fused = pipelined("fused", "ring", stages)
    with pytest.raises(MemoryBudgetError, match=r"largest phase: 2,000 hops\).*fewer"):
        estimate.check_work(fabric, "all_reduce", (1, 2), [("ring", [fused], ())])


def test_all_to_all_pairs_are_checked_before_they_are_made(monkeypatch):
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "1MiB")
    members = np.arange(64)[None, :]  # 64 x 63 = 4,032 hops, ~2.7 MiB at 700 B
    with pytest.raises(MemoryBudgetError, match=r"all-to-all \(4,032 flow hops\).*fewer"):
        _pairs(members, 1)
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "4MiB")
    src, dst = _pairs(members, 1)
    assert src.shape == dst.shape == (1, 4032)


# --- Clos routing: no fixed entry cap before check_memory


def test_spray_beyond_64m_entries_goes_to_check_memory_with_calibrated_bytes(monkeypatch):
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "1TiB")
    seen = []

    def spy(nbytes, what, **_):
        seen.append((nbytes, what))
        raise Reached

    monkeypatch.setattr(clos, "check_memory", spy)
    fabric = ff.load_fabric("clos-100k")
    src, dst = random_pairs(fabric.num_gpus, 20_000, seed=3)
    with pytest.raises(Reached):
        ff.route(fabric, src, dst, policy="spray")
    ((nbytes, what),) = seen
    entries = nbytes // MERGE_BYTES_PER_ENTRY
    assert entries > 64_000_000 and nbytes == entries * MERGE_BYTES_PER_ENTRY
    assert f"({entries:,} route entries)" in what


def test_multipath_beyond_64m_entries_is_left_to_the_budget(monkeypatch):
    fabric = build_fabric(fat_tree_spec(4))  # 16 GPUs, paths of 6 links
    src, dst = random_pairs(fabric.num_gpus, 1000, seed=4)
    monkeypatch.setattr(clos, "_single_paths", lambda *a, **k: (_ for _ in ()).throw(Reached()))
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "1TiB")
    with pytest.raises(Reached):  # 1000 x 11000 x 6 = 66M entries, ~6.6 GB: within 1 TiB
        ff.route(fabric, src, dst, policy="multipath", k=11_000)
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "1GiB")
    with pytest.raises(MemoryBudgetError, match=r"routing 1,000 flows \(multipath\).*GiB"):
        ff.route(fabric, src, dst, policy="multipath", k=11_000)


# --- limits that are not memory are not MemoryBudgetError


def test_generic_search_step_limit_is_a_routing_error(monkeypatch):
    from fabricflow.routing import generic

    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "1TiB")  # memory is not the reason
    monkeypatch.setattr(generic, "GENERIC_MAX_WORK", 100)
    fabric = build_fabric(fat_tree_spec(4))
    plain = dataclasses.replace(fabric, structure=None)  # the generic router
    with pytest.raises(RoutingError, match=r"breadth-first-search steps, over the limit") as e:
        ff.route(plain, np.array([0, 1]), np.array([2, 3]))
    assert not isinstance(e.value, MemoryError)


def test_max_flow_link_limit_is_a_spec_error(monkeypatch):
    fabric = build_fabric(fat_tree_spec(4))
    half = np.arange(fabric.num_gpus) < fabric.num_gpus // 2
    monkeypatch.setattr(summary, "MAX_FLOW_LINK_LIMIT", 10)
    with pytest.raises(SpecError, match=r"96 links.*limit 10 links.*structured generator") as e:
        summary.max_flow_between(fabric, half, ~half)
    assert e.value.field == "fabric" and not isinstance(e.value, MemoryError)


def test_max_flow_capacities_beyond_int32_are_a_spec_error(monkeypatch):
    fabric = build_fabric(fat_tree_spec(4))  # 100 Gb/s links: 1.25e10 B/s > int32 in 1 B/s
    half = np.arange(fabric.num_gpus) < fabric.num_gpus // 2
    monkeypatch.setattr(summary, "_integer_unit", lambda values, total: 1.0)
    with pytest.raises(SpecError, match=r"int32 capacities.*units of 1 B/s") as e:
        summary.max_flow_between(fabric, half, ~half)
    assert e.value.field == "capacity" and not isinstance(e.value, MemoryError)


# --- the budget itself


@pytest.mark.parametrize(
    "bad, words",
    [
        (float("nan"), "must be a number"),
        (float("inf"), "beyond the ceiling"),
        (True, "boolean"),
        (np.bool_(False), "False"),  # rejected as not a number
        (0, "> 0"),
        (-1.0, "> 0"),
        ("6 lots", "unknown size unit"),
        ([2**30], "expected a size"),
        ({"bytes": 1}, "expected a size"),
    ],
)
def test_a_bad_budget_is_a_spec_error_naming_the_field(bad, words):
    with pytest.raises(SpecError, match=words) as error:
        check_memory(1.0, "x", budget=bad)
    assert error.value.field == "budget"
    with pytest.raises(SpecError) as error:
        check_memory(1.0, "x", budget=bad, field="memory_budget")
    assert error.value.field == "memory_budget"


def test_a_budget_may_be_a_size_string_or_an_exact_integer():
    assert memory_budget("6GiB") == (6 * 2**30, "the budget passed in")
    assert memory_budget(2**62 + 1)[0] == 2**62 + 1  # no float rounding
    assert memory_budget(np.int64(4096), "memory_budget") == (4096, "the memory_budget passed in")
    check_memory(2**29, "x", budget="1GiB")
    with pytest.raises(MemoryBudgetError, match=r"x needs about 2\.00 GiB.*1\.00 GiB") as e:
        check_memory(2**31, "x", budget="1GiB", field="memory_budget")
    # the variable does not override an explicit budget, so the message does not name it
    assert "pass a larger memory_budget" in str(e.value) and "$FABRICFLOW" not in str(e.value)


def test_simulate_dcqcn_names_memory_budget():
    from fabricflow.dynamics.congestion import simulate_dcqcn
    from fabricflow.dynamics.scenarios import dumbbell

    sc = dumbbell(2, bandwidth=5e9)
    for bad in (float("nan"), "lots", True):
        with pytest.raises(SpecError) as error:
            simulate_dcqcn(sc.fabric, sc.routes, duration=1e-4, dt=1e-6, memory_budget=bad)
        assert error.value.field == "memory_budget"
    with pytest.raises(MemoryBudgetError, match="DCQCN run"):
        simulate_dcqcn(sc.fabric, sc.routes, duration=1e-4, dt=1e-6, memory_budget="1KiB")
