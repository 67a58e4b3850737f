"""Fault injection for the solvers: magnitudes float32 cannot hold, invalid tolerances and
bounds, PFC/DCQCN parameter messages, the shared memory budget, work limits and progress
of long DCQCN runs, and the fast PFC deadlock scan against the plain one."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from reference_solvers import progressive_filling

import fabricflow as ff
from fabricflow.errors import MemoryBudgetError, SpecError
from fabricflow.solve.cc.dcqcn import DCQCNParams
from fabricflow.solve.pfc.params import PFCParams

# ------------------------------------------------------------------ magnitudes (float32)

PARKING_LOT = [[0, 1], [0, -1], [1, -1]]


@pytest.mark.parametrize("magnitude", [1e39, 1e300, 1e-40, 1e-46, 1e-300])
def test_rates_of_any_magnitude_match_the_float64_reference(magnitude):
    capacity = np.array([1.0, 3.0]) * magnitude
    rates = ff.max_min_rates(PARKING_LOT, capacity)
    expected = progressive_filling(PARKING_LOT, capacity)
    assert np.all(np.isfinite(rates)) and np.all(rates > 0)
    np.testing.assert_allclose(rates, expected, rtol=1e-6)


def test_overflowing_rates_come_back_in_float64_not_inf():
    rates = ff.max_min_rates([[0], [0]], [1e39])
    assert rates.dtype == np.float64
    np.testing.assert_allclose(rates, [5e38, 5e38], rtol=1e-6)


def test_ordinary_rates_stay_float32():
    assert ff.max_min_rates(PARKING_LOT, [1e9, 2e9]).dtype == np.float32


def test_range_wider_than_float32_is_solved_in_float64():
    capacity = [1e-40, 1e39]
    demand = [1e-42, np.inf, 1e30]
    links = [[0, -1], [1, -1], [1, -1]]
    rates = ff.max_min_rates(links, capacity, demand=demand)
    np.testing.assert_allclose(
        rates, progressive_filling(links, capacity, demand=demand), rtol=1e-9
    )


def test_extreme_weights_and_demands_match_the_reference():
    links = [[0, 1], [0, -1], [1, -1], [1, -1]]
    capacity = [1e20, 3e20]
    weight = [1e-30, 1e30, 1.0, 1e10]
    demand = [np.inf, 1e15, np.inf, 1e19]
    rates = ff.max_min_rates(links, capacity, weight=weight, demand=demand)
    expected = progressive_filling(links, capacity, weight=weight, demand=demand)
    np.testing.assert_allclose(rates, expected, rtol=1e-6)
    assert ff.certify_max_min(links, capacity, rates, weight=weight, demand=demand)


def test_batched_scenarios_of_huge_capacities():
    capacity = np.array([[1.0, 2.0], [4.0, 1.0]]) * 1e38
    rates = ff.max_min_rates(PARKING_LOT, capacity)
    for b in range(2):
        np.testing.assert_allclose(
            rates[b], progressive_filling(PARKING_LOT, capacity[b]), rtol=1e-6
        )


def test_zero_and_infinite_capacities_keep_their_meaning_when_scaled():
    rates = ff.max_min_rates([[0], [1], [-1]], [0.0, 1e-40])
    assert rates[0] == 0 and rates[1] > 0 and np.isinf(rates[2])


# ------------------------------------------------------------ tolerances and loop bounds


def test_large_rtol_is_refused_instead_of_wrong_rates():
    with pytest.raises(SpecError, match=r"\[0, 0.001\]") as error:
        ff.max_min_rates(PARKING_LOT, [1.0, 3.0], rtol=10)
    assert error.value.field == "rtol"
    np.testing.assert_allclose(
        ff.max_min_rates(PARKING_LOT, [1.0, 3.0], rtol=1e-3), [0.5, 0.5, 2.5]
    )


@pytest.mark.parametrize("rtol", [-1, float("nan"), float("inf"), "1e-6", True])
def test_invalid_rtol_names_rtol_not_max_iters(rtol):
    with pytest.raises(SpecError) as error:
        ff.max_min_solution(PARKING_LOT, [1.0, 1.0], rtol=rtol)
    assert error.value.field == "rtol" and "max_iters" not in str(error.value)


@pytest.mark.parametrize("max_iters", [0, -3, 2.5, 2**31, True])
def test_invalid_max_iters_is_refused(max_iters):
    with pytest.raises(SpecError) as error:
        ff.max_min_rates(PARKING_LOT, [1.0, 1.0], max_iters=max_iters)
    assert error.value.field == "max_iters"


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"max_events": 0}, "max_events"),
        ({"max_events": -1}, "max_events"),
        ({"max_events": 1.5}, "max_events"),
        ({"mode": "batched", "eps": float("nan")}, "eps"),
        ({"mode": "batched", "eps": -0.1}, "eps"),
        ({"mode": "batched", "eps": 1.0}, "eps"),
    ],
)
def test_completion_checks_its_bounds(options, field):
    with pytest.raises(SpecError) as error:
        ff.max_min_completion([[0], [0]], [1.0], [1.0, 2.0], **options)
    assert error.value.field == field


# ----------------------------------------------------------------- PFC / DCQCN messages


def test_pfc_xoff_zero_blames_xoff():
    with pytest.raises(SpecError, match="> 0 bytes") as error:
        PFCParams().replace(xoff="0")
    assert error.value.field == "pfc.xoff"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("xoff", -1.0),
        ("xoff", 0.0),
        ("xoff", np.nan),
        ("hysteresis", -1.0),
        ("hysteresis", 2e5),
        ("dynamic_alpha", 0.0),
        ("dynamic_alpha", -1.0),
        ("shared_buffer", 0.0),
        ("shared_buffer", np.inf),
    ],
)
def test_every_pfc_field_names_itself(field, value):
    with pytest.raises(SpecError) as error:
        dataclasses.replace(PFCParams(), **{field: value}).validate()
    assert error.value.field == f"pfc.{field}"


BAD_DCQCN = [(f.name, v) for f in dataclasses.fields(DCQCNParams) for v in (-1.0, np.nan)] + [
    ("g", 2.0),
    ("pmax", 2.0),
    ("initial_alpha", 2.0),
    ("initial_rate_fraction", 2.0),
    ("kmax", 0.0),
    ("tau", 0.0),
    ("g", 0.0),
]


@pytest.mark.parametrize(("field", "value"), BAD_DCQCN)
def test_every_dcqcn_field_names_itself(field, value):
    with pytest.raises(SpecError) as error:
        dataclasses.replace(DCQCNParams(), **{field: value}).validate()
    assert error.value.field == f"params.{field}"


def test_kmin_above_kmax_names_both():
    with pytest.raises(SpecError, match="kmin < kmax") as error:
        DCQCNParams().replace(kmax="4KB")
    assert "kmax=4000" in str(error.value)


def test_cli_pfc_xoff_zero(capsys):
    from fabricflow.cli import main

    code = main(["cc", "--scenario", "dumbbell", "--set", "pfc.xoff=0", "--duration", "1ms"])
    assert code != 0
    err = capsys.readouterr().err
    assert "pfc.xoff" in err and "hysteresis" not in err


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


# ------------------------------------------------------------------ long DCQCN runs

# One run configuration for the tests below, so that the kernel compiles once for all.
SHORT_RUN = {"pfc": "static", "duration": 2e-3, "records": 37}


def _dumbbell():
    from fabricflow.dynamics.scenarios import dumbbell

    return dumbbell(2)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"duration": 1000.0}, ["entry-steps", "h on 2 CPU cores", "max_work"]),
        ({"duration": 0.05, "dt": 1e-12}, ["entry-steps", "days", "raise dt"]),
    ],
)
def test_absurd_dcqcn_runs_are_refused_before_starting(options, words):
    sc = _dumbbell()
    with pytest.raises(SpecError) as error:
        ff.simulate_dcqcn(sc.fabric, sc.routes, **options)
    assert error.value.field == "duration"
    for word in words:
        assert word in str(error.value)


def test_max_work_allows_a_long_run_and_is_checked():
    from fabricflow.solve.cc.prepare import prepare_cc
    from fabricflow.solve.cc.work import estimate_work

    sc = _dumbbell()
    links, capacity = sc.routes.links, sc.fabric.capacity
    prepared = prepare_cc(links, capacity, np.zeros(2), duration=1000.0, max_work=np.inf)
    assert prepared.work == estimate_work(2, links.shape[1], capacity.shape[0], 10**9)
    assert prepared.estimated_s > 3600
    with pytest.raises(SpecError, match="max_work"):
        prepare_cc(links, capacity, np.zeros(2), duration=0.001, max_work=10.0)
    for bad in (0, -1.0, float("nan"), "lots"):
        with pytest.raises(SpecError) as error:
            prepare_cc(links, capacity, np.zeros(2), duration=0.001, max_work=bad)
        assert error.value.field == "max_work"
    with pytest.raises(SpecError) as error:  # more steps than the int32 step counter holds
        prepare_cc(links, capacity, np.zeros(2), duration=3000.0, max_work=np.inf)
    assert "steps" in str(error.value)
    with pytest.raises(SpecError) as error:
        prepare_cc(links, capacity, np.zeros(2), duration=0.01, dt=1e-320)
    assert error.value.field == "dt"


@pytest.mark.parametrize("batched", [False, True])
def test_chunked_run_reports_progress_and_equals_the_plain_run(batched):
    from fabricflow.solve.cc import integrator as kernel
    from fabricflow.solve.cc.prepare import prepare_cc
    from fabricflow.solve.cc.run_cc import run_cc
    from fabricflow.solve.parameters import stack_params

    sc = _dumbbell()
    params = stack_params([DCQCNParams(), DCQCNParams(kmax=400e3)]) if batched else "paper"
    prepared = prepare_cc(
        sc.routes.links, sc.fabric.capacity, np.zeros(2), params=params, **SHORT_RUN
    )
    plain = run_cc(prepared)
    calls = []
    advance = kernel.advance_batch if batched else kernel.advance
    chunked = run_cc(prepared, progress=lambda f, s: calls.append((f, s)), chunks=5)
    compiled = advance._cache_size()
    again = run_cc(prepared, progress=lambda f, s: None, chunks=5)
    assert advance._cache_size() == compiled  # no compilation per chunk or call
    fractions = [f for f, _ in calls]
    assert len(calls) == 5 and fractions == sorted(fractions) and fractions[-1] == 1.0
    assert all(s >= 0 for _, s in calls)
    for name in (
        "rate",
        "delivered",
        "queue",
        "paused",
        "pause_time",
        "flow_pause_time",
        "finish_time",
        "alpha",
        "target_rate",
        "time",
    ):
        np.testing.assert_array_equal(getattr(chunked, name), getattr(plain, name), name)
        np.testing.assert_array_equal(getattr(again, name), getattr(plain, name), name)
    assert np.array_equal(np.asarray(chunked.status), np.asarray(plain.status))


def test_nonfinite_dcqcn_run_reports_status_or_raises():
    from fabricflow.errors import SolverError
    from fabricflow.solve.cc.prepare import prepare_cc
    from fabricflow.solve.cc.run_cc import run_cc

    sc = _dumbbell()
    prepared = prepare_cc(sc.routes.links, sc.fabric.capacity, np.zeros(2), **SHORT_RUN)
    # Poison the line rate after the host checks: the kernel must report, not raise.
    bad = dataclasses.replace(
        prepared, problem=prepared.problem._replace(line_rate=prepared.problem.line_rate * np.nan)
    )
    result = run_cc(bad, throw=False)
    assert result.status == ff.SolverStatus.NONFINITE
    with pytest.raises(SolverError, match="NONFINITE"):
        run_cc(bad)


def test_batch_item_is_checked():
    from fabricflow.solve.parameters import stack_params

    sc = _dumbbell()
    from fabricflow.solve.cc.prepare import prepare_cc
    from fabricflow.solve.cc.run_cc import run_cc

    single = run_cc(prepare_cc(sc.routes.links, sc.fabric.capacity, np.zeros(2), **SHORT_RUN))
    with pytest.raises(SpecError, match="index"):
        run_cc(
            prepare_cc(
                sc.routes.links,
                sc.fabric.capacity,
                np.zeros(2),
                params=stack_params([DCQCNParams()] * 2),
                **SHORT_RUN,
            )
        ).batch_item(2)
    with pytest.raises(SpecError, match="batched"):
        single.batch_item(0)


def test_cc_prints_progress_on_stderr_only(capsys, monkeypatch):
    import json

    from fabricflow.cli import main
    from fabricflow.commands import cc

    printer = cc._progress_printer
    monkeypatch.setattr(cc, "_progress_printer", lambda d: printer(d, after_s=0.0))
    assert (
        main(["cc", "--scenario", "dumbbell", "--duration", "2ms", "--pfc", "static", "--json"])
        == 0
    )
    out, err = capsys.readouterr()
    json.loads(out)
    assert "cc: simulated" in err and "100%" in err


# --------------------------------------------------------------- PFC deadlock scan


def _deadlocks_over_time_plain(result) -> list[dict]:
    """The former implementation (row-wise np.unique over every record), kept as the oracle."""
    from fabricflow.solve.pfc.deadlock import deadlock_cycles, dependency_edges

    edges = dependency_edges(result.links, result.prev_links)
    paused = np.asarray(result.paused, bool)
    if edges.size == 0 or not paused.any():
        return []
    patterns, pattern_of_instant = np.unique(paused, axis=0, return_inverse=True)
    cycles_of_pattern = [
        deadlock_cycles(p, result.links, result.prev_links, edges=edges) if p.any() else []
        for p in patterns
    ]
    found: dict[tuple, dict] = {}
    for index, time in enumerate(result.time):
        for cycle in cycles_of_pattern[int(pattern_of_instant.ravel()[index])]:
            entry = found.setdefault(
                tuple(cycle), {"links": list(cycle), "first_seen_s": float(time)}
            )
            entry["last_seen_s"] = float(time)
    return list(found.values())


@pytest.mark.parametrize("seed", range(12))
def test_fast_deadlock_scan_equals_the_plain_one(seed):
    from types import SimpleNamespace

    from fabricflow.solve.pfc.deadlock import deadlocks_over_time

    rng = np.random.default_rng(seed)
    num_links, num_flows, hops, records = 12, 30, 4, 60
    links = rng.integers(0, num_links, (num_flows, hops))
    lengths = rng.integers(1, hops + 1, num_flows)
    links[np.arange(hops)[None, :] >= lengths[:, None]] = -1
    prev_links = np.full_like(links, -1)
    prev_links[:, 1:] = np.where(links[:, 1:] >= 0, links[:, :-1], -1)
    # Pause patterns that persist over runs of records and recur later (the common case).
    palette = rng.random((5, num_links)) < rng.uniform(0.2, 0.9)
    paused = palette[rng.integers(0, 5, records)]
    paused[rng.random(records) < 0.3] = rng.random(num_links) < 0.7
    paused = np.repeat(paused, rng.integers(1, 4, records), axis=0)[:records]
    result = SimpleNamespace(
        links=links, prev_links=prev_links, paused=paused, time=np.arange(1, records + 1) * 1e-5
    )
    expected = _deadlocks_over_time_plain(result)
    assert deadlocks_over_time(result) == expected
    if seed == 0:
        assert expected  # the instances do contain deadlocks


def test_importing_the_solvers_pulls_no_scipy():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import fabricflow.solve.cc.dcqcn_analysis, fabricflow.solve.pfc.deadlock\n"
        "import fabricflow.solve.cc.run_cc, fabricflow.dynamics.congestion, fabricflow.solve.maxmin.checked\n"
        "import fabricflow.solve.completion\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
