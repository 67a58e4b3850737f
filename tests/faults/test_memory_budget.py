"""The memory budget: every refusal for memory goes through ``check_memory``
(``$FABRICFLOW_MEMORY_BUDGET`` or ``budget=``), estimated before the work, and reaches the
command line as a named error; limits that are not about memory are not
``MemoryBudgetError``; a bad budget is a ``SpecError``."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from fabric_specs import fat_tree_spec
from fault_helpers import one_json as _one_json
from fault_helpers import raises_named as _raises_named
from routing_checks import random_pairs

import fabricflow
import fabricflow as ff
from fabricflow.cli import main
from fabricflow.collective import estimate, flow_rates, make_groups
from fabricflow.collective.algorithms.p2p import _pairs
from fabricflow.collective.phase import make_phase
from fabricflow.errors import (
    MemoryBudgetError,
    RoutingError,
    SpecError,
)
from fabricflow.fabric import summary
from fabricflow.fabric.spec import build_fabric, load_fabric
from fabricflow.memory_budget import check_memory, memory_budget
from fabricflow.routing import clos
from fabricflow.routing.route import route
from fabricflow.routing.route_limits import MERGE_BYTES_PER_ENTRY

# ------------------------------------------------------------------ parking-lot estimate


def test_parking_lot_of_many_hops_is_refused_before_building():
    from fabricflow.dynamics.scenarios import build_scenario
    from fabricflow.errors import MemoryBudgetError

    with pytest.raises(MemoryBudgetError, match="parking_lot"):
        build_scenario("parking_lot", 100_000)


def test_parking_lot_estimate_counts_the_quadratic_paths(monkeypatch):
    from fabricflow.dynamics.scenarios import parking_lot
    from fabricflow.errors import MemoryBudgetError

    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", str(8 * 2**20))
    assert parking_lot(50).routes.links.shape == (51, 52)  # ~170 KB: fits
    with pytest.raises(MemoryBudgetError, match="fewer hops"):
        parking_lot(1000)  # ~64 MB of paths and temporaries


# ------------------------------------------------ memory errors at the command line
@pytest.mark.parametrize(
    "raised, words",
    [
        (MemoryError(), "fabricflow presets ran out of memory"),
        (fabricflow.MemoryBudgetError("routing needs 9 GiB; budget 1 GiB"), "routing needs 9 GiB"),
    ],
)
def test_memory_errors_are_named_errors(monkeypatch, capsys, raised, words):
    import fabricflow.commands.presets as presets

    def out_of_memory(args):
        raise raised

    monkeypatch.setattr(presets, "run", out_of_memory)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["presets", "--json"]) == 2
    captured = capsys.readouterr()
    data = _one_json(captured.out)
    assert data["error"] == "MemoryBudgetError" and words in data["message"]
    assert "Traceback" not in captured.err
    assert main(["presets"]) == 2
    assert "fabricflow presets: error:" in capsys.readouterr().err


def test_alltoall_traffic_is_checked_against_the_memory_budget(monkeypatch):
    from fabricflow.errors import MemoryBudgetError
    from fabricflow.traffic.patterns import alltoall_groups

    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", str(2**20))
    _raises_named(lambda: alltoall_groups(1024, 1024), "1,047,552 flows", MemoryBudgetError)
    src, dst = alltoall_groups(16, 4)  # small ones still fit
    assert src.shape == dst.shape == (48,) and not (src == dst).any()


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


def test_simulate_cc_dcqcn_names_memory_budget():
    from fabricflow.dynamics.congestion import simulate_cc
    from fabricflow.dynamics.scenarios import dumbbell

    sc = dumbbell(2, bandwidth=5e9)
    for bad in (float("nan"), "lots", True):
        with pytest.raises(SpecError) as error:
            simulate_cc(sc.fabric, sc.routes, cc="dcqcn", duration=1e-4, dt=1e-6, memory_budget=bad)
        assert error.value.field == "memory_budget"
    with pytest.raises(MemoryBudgetError, match="DCQCN run"):
        simulate_cc(sc.fabric, sc.routes, cc="dcqcn", duration=1e-4, dt=1e-6, memory_budget="1KiB")


# ------------------------------------------- collective work: refused before routing
def _no_routing(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("routed before the work was checked")

    monkeypatch.setattr(flow_rates, "route", refuse)


def test_absurd_work_is_refused_before_routing_with_the_estimate(two_pods, monkeypatch):
    from fabricflow.collective import estimate
    from fabricflow.collective.timing import prepare_collective
    from fabricflow.errors import SpecError

    _no_routing(monkeypatch)
    monkeypatch.setattr(estimate, "MAX_ESTIMATE_S", 0.01)
    with pytest.raises(SpecError) as info:
        prepare_collective(two_pods, "all_reduce", make_groups(8192, 8, layout="strided"))
    assert info.value.field == "groups"
    message = str(info.value)
    assert "min to route and solve" in message and "network hops" in message
    assert "fewer or smaller groups" in message


def test_work_over_the_memory_budget_is_refused_before_routing(two_pods, monkeypatch):
    from fabricflow.collective.timing import prepare_collective
    from fabricflow.errors import MemoryBudgetError

    _no_routing(monkeypatch)
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "1MiB")
    # refused as its phases are built ("all-to-all (N flow hops)"), or by check_work
    # ("largest phase: N hops") when only a fused phase is over: one estimate for both
    with pytest.raises(MemoryBudgetError, match=r"hops\).*fewer or smaller"):
        prepare_collective(two_pods, "all_to_all", make_groups(8192, 8, layout="strided"))


def test_estimate_counts_network_and_scale_up_hops(two_pods):
    from fabricflow.collective import estimate
    from fabricflow.collective.algorithms import ALGORITHMS, Context

    strided = make_groups(8192, 8, layout="strided")  # one member per node
    ctx = Context("all_reduce", strided, strided, strided[:, :, None], 2)
    phases = ALGORITHMS["ring"].build(ctx)
    assert estimate.count_hops(two_pods, phases) == (0, 1024 * 2 * 8)
    contiguous = make_groups(8192, 8)  # one node per group
    ctx = Context("all_reduce", contiguous, contiguous, contiguous[:, :, None], 2)
    assert estimate.count_hops(two_pods, ALGORITHMS["ring"].build(ctx)) == (1024 * 2 * 8, 0)


# ------------------------------------------------------------------ one memory policy


def test_shared_memory_budget_refuses_a_moderate_maxmin_solve(monkeypatch):
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "1MiB")
    with pytest.raises(MemoryBudgetError, match=r"max_min_rates.*GiB.*FABRICFLOW_MEMORY_BUDGET"):
        ff.max_min_rates(np.zeros((20_000, 4), np.int32), [1.0])


def test_shared_memory_budget_refuses_a_dcqcn_run(monkeypatch):
    from fabricflow.solve.cc.prepare import prepare_cc

    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "1MiB")
    links = np.zeros((2_000, 1), np.int32)
    with pytest.raises(MemoryBudgetError, match=r"DCQCN run.*2000 flows.*GiB"):
        prepare_cc(links, [5e9], np.zeros(2_000), records=500)
    # An explicit budget still overrides the policy.
    prepare_cc(links, [5e9], np.zeros(2_000), records=500, memory_budget=2**30)


REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------- memory guard

_DRAGONFLY_10M = """name: df-10m
gpus: 10000000
gpus_per_node: 4
topology:
  type: dragonfly
  groups: 100
  switches_per_group: 100
  nodes_per_switch: 250
  nic_bandwidth: 200Gbps
"""


_CLOS_1M = """name: clos-1m
gpus: 1048576
gpus_per_node: 8
scale_up: {domain_size: 8, bandwidth_per_direction: 450GB/s}
topology:
  type: clos
  attachment: rail
  nic_bandwidth: 400Gbps
  tiers: [{radix: 128}, {radix: 128}, {radix: 128}, {radix: 128}]
"""


# `ulimit -v 1048576` set inside the child before anything is imported (a preexec_fn would
# fork this JAX-threaded test process, which can deadlock).
_UNDER_1GIB = (
    "import resource, runpy, sys; "
    "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
    "sys.argv = ['fabricflow', *sys.argv[1:]]; "
    "runpy.run_module('fabricflow.cli', run_name='__main__', alter_sys=True)"
)


@pytest.mark.parametrize("text", [_DRAGONFLY_10M, _CLOS_1M], ids=["dragonfly-10M", "clos-1M"])
def test_cli_under_1gib_address_space_refuses_with_memory_budget_error(tmp_path, text):
    # Both fabrics got past the old fixed 8 GiB guard and died in numpy under `ulimit -v`.
    path = tmp_path / "big.yaml"
    path.write_text(text)
    env = {key: value for key, value in os.environ.items() if key != "FABRICFLOW_MEMORY_BUDGET"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["JAX_PLATFORMS"] = "cpu"
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _UNDER_1GIB, "fabric", str(path), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    answer = json.loads(done.stdout)
    assert answer["error"] == "MemoryBudgetError"
    assert "GiB" in answer["message"] and "RLIMIT_AS" in answer["message"]
    assert time.perf_counter() - start < 30


def test_build_and_route_follow_the_memory_budget(monkeypatch):
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "64KiB")
    with pytest.raises(MemoryBudgetError, match=r"nodes.*directed links.*FABRICFLOW_MEMORY_BUDGET"):
        build_fabric(fat_tree_spec(8))
    monkeypatch.delenv("FABRICFLOW_MEMORY_BUDGET")
    fabric = build_fabric(fat_tree_spec(8))
    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", "1MiB")
    src = np.zeros(10_000, np.int64)
    with pytest.raises(MemoryBudgetError, match="routing 10,000 flows"):
        route(fabric, src, src + 1)
    assert route(fabric, src[:10], src[:10] + 1).num_flows == 10


def test_raw_memory_errors_become_named_memory_budget_errors(monkeypatch):
    from fabricflow.fabric import assemble
    from fabricflow.routing import clos

    fabric = build_fabric(fat_tree_spec(4))

    def out_of_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 76.3 MiB")

    monkeypatch.setattr(clos, "_single_paths", out_of_memory)
    with pytest.raises(MemoryBudgetError, match=r"routing 1 flows.*ran out of memory.*76\.3 MiB"):
        route(fabric, [0], [5])
    monkeypatch.setattr(assemble.Assembler, "build", out_of_memory)
    with pytest.raises(MemoryBudgetError, match="building fabric 'fat-tree-k4' ran out of memory"):
        build_fabric(fat_tree_spec(4))
    with pytest.raises(MemoryBudgetError, match="ran out of memory"):
        load_fabric("dgx-h100-superpod")
