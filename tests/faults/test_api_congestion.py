"""Bad inputs to congestion control (``simulate_cc`` with ``cc="dcqcn"``, PFC and DCQCN parameters, the CC
scenarios, and ``cc --set`` for the same parameters): a named error that names the field,
refused before a run starts."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from fault_helpers import raises_named as _raises_named
from small_cases import SHORT_RUN
from small_cases import small_dumbbell as _dumbbell

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.dynamics import scenarios
from fabricflow.errors import SolverError, SpecError
from fabricflow.solve.cc.dcqcn import DCQCNParams
from fabricflow.solve.pfc.params import PFCParams

# ------------------------------------------------------------------ DCQCN overrides


@pytest.mark.parametrize("overrides", [[1], "kmax", {1: 2}])
def test_dcqcn_overrides_must_be_a_mapping_of_names(overrides):
    from fabricflow.dynamics.scenarios import dumbbell

    sc = dumbbell(2)
    with pytest.raises(SpecError) as info:
        ff.simulate_cc(sc.fabric, sc.routes, cc="dcqcn", overrides=overrides)
    assert info.value.field == "overrides"


def test_dcqcn_refuses_a_string_throw():
    from fabricflow.dynamics.scenarios import dumbbell

    sc = dumbbell(2)
    with pytest.raises(SpecError) as info:
        ff.simulate_cc(sc.fabric, sc.routes, cc="dcqcn", throw="no")
    assert info.value.field == "throw"


# ------------------------------------------------------------------------- DCQCN


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"size": [1.0, 2.0, 3.0]}, "size"),
        ({"size": "1MB"}, "size"),
        ({"size": True}, "size"),
        ({"start": [[0.0], [0.0, 1.0]]}, "start"),
        ({"duration": "1ms"}, "duration"),
        ({"dt": "1us"}, "dt"),
        ({"extra_delay": "1us"}, "extra_delay"),
        ({"dtype": np.int32}, "dtype"),
        ({"params": "x"}, "params"),
        ({"pfc": "maybe"}, "pfc"),
        ({"records": 1}, "records"),
    ],
)
def test_simulate_cc_dcqcn_bad_inputs(dumbbell, options, field):
    options = {"duration": 1e-4, **options}
    _raises_named(
        lambda: ff.simulate_cc(dumbbell.fabric, dumbbell.routes, cc="dcqcn", **options),
        field,
        SpecError,
    )


@pytest.mark.parametrize("count", [True, "3", 2.5, 10**8])
def test_cc_scenario_sizes_are_checked(count):
    from fabricflow.dynamics.scenarios import dumbbell

    _raises_named(lambda: dumbbell(count), "flows", SpecError)


def test_simulate_cc_dcqcn_refuses_routes_of_another_fabric(dumbbell, fabric):
    _raises_named(lambda: ff.simulate_cc(fabric, dumbbell.routes, cc="dcqcn"), "routes", SpecError)
    _raises_named(lambda: ff.simulate_cc(dumbbell.fabric, "x", cc="dcqcn"), "routes", SpecError)


def test_feedback_delay_longer_than_the_run_is_bounded_and_changes_nothing(dumbbell):
    run = dict(duration=2e-4, dt=1e-6)
    long = ff.simulate_cc(dumbbell.fabric, dumbbell.routes, cc="dcqcn", extra_delay=1e3, **run)
    just_past = ff.simulate_cc(
        dumbbell.fabric, dumbbell.routes, cc="dcqcn", extra_delay=3e-4, **run
    )
    np.testing.assert_array_equal(long.rate, just_past.rate)


def test_scenario_path_over_a_missing_cable_is_refused():
    builder = scenarios._Builder(1e9, 1e-6)
    hosts = builder.nodes(2, 0)
    switch = builder.nodes(1, 1)[0]
    builder.cables(hosts, switch)
    assert builder.links([[hosts[0], switch, hosts[1]]]).tolist() == [[0, 3]]
    with pytest.raises(ValueError, match="not a cable"):
        builder.links([[hosts[0], hosts[1]]])


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

    code = main(["cc", "--scenario", "dumbbell", "--set", "pfc.xoff=0", "--duration", "1ms"])
    assert code != 0
    err = capsys.readouterr().err
    assert "pfc.xoff" in err and "hysteresis" not in err


# ------------------------------------------------------------------ long DCQCN runs


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
        ff.simulate_cc(sc.fabric, sc.routes, cc="dcqcn", **options)
    assert error.value.field == "duration"
    for word in words:
        assert word in str(error.value)


def test_nonfinite_dcqcn_run_reports_status_or_raises():
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
