"""The shared congestion-control integrator and the law interface: registry, parameters,
signals built only for the laws that read them, capacity scenarios under vmap."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from fabricflow.commands.cc import CC_CHOICES
from fabricflow.dynamics.congestion import prepare_fabric_run, simulate_cc
from fabricflow.dynamics.scenarios import dumbbell
from fabricflow.errors import SpecError
from fabricflow.solve.cc import integrator
from fabricflow.solve.cc.laws import CC_NAMES, LAWS, resolve_law
from fabricflow.solve.cc.timely import TimelyParams

C40 = 40e9 / 8


def test_registry_cli_and_names_agree():
    names = ("dcqcn", "hpcc", "timely", "swift", "predictive", "nscc", "rccc")
    assert CC_CHOICES == CC_NAMES == names
    for name, law in LAWS.items():
        assert law.name == name and resolve_law(name.upper()) is law
        assert law.signals and law.signals <= {"ecn", "delay", "int", "ack", "nack", "credit"}
        for preset in law.params_class.PRESETS.values():
            preset.validate()
    with pytest.raises(SpecError, match="cc") as error:
        resolve_law("bbr")
    assert "hpcc" in str(error.value)


@pytest.mark.parametrize(
    ("cc", "overrides", "field"),
    [
        ("hpcc", {"eta": 1.5}, "params.eta"),
        ("hpcc", {"expected_flows": 0}, "params.expected_flows"),
        ("timely", {"t_low": "1ms"}, "params.t_low"),  # above t_high
        ("swift", {"max_mdf": 1.0}, "params.max_mdf"),
        ("swift", {"fs_min_cwnd": 200}, "params.fs_min_cwnd"),
        ("predictive", {"horizon": 0}, "params.horizon"),
        ("dcqcn", {"kmin": "300KB"}, "params.kmin"),
    ],
)
def test_bad_parameters_name_their_field(cc, overrides, field):
    with pytest.raises(SpecError) as error:
        resolve_law(cc).preset(None, **overrides)
    assert error.value.field == field


def test_unknown_parameter_and_preset_list_the_allowed_ones():
    with pytest.raises(SpecError, match="eta") as error:
        resolve_law("hpcc").preset(None, kmax="1MB")
    assert error.value.field == "params"
    with pytest.raises(SpecError, match="patched"):
        resolve_law("timely").preset("fast")


@pytest.mark.parametrize("cc", ["timely", "swift", "predictive", "hpcc"])
def test_each_law_refuses_a_step_beyond_its_stable_one(cc):
    sc = dumbbell(2)
    with pytest.raises(SpecError) as error:
        prepare_fabric_run(sc.fabric, sc.routes, cc=cc, dt=2e-4, duration=0.01)
    assert error.value.field == "dt"


def test_rings_exist_only_for_the_signals_a_law_reads():
    sc = dumbbell(2)
    seen = {}
    for cc in CC_NAMES:
        prepared = prepare_fabric_run(sc.fabric, sc.routes, cc=cc, duration=1e-4, records=2)
        problem, params, pfc = integrator.cast(
            prepared.problem, prepared.params_arrays, prepared.pfc_arrays, jnp.float32
        )
        state = integrator.init_state(problem, prepared.law, params, prepared.config, jnp.float32)
        seen[cc] = {name for name, ring in state.rings._asdict().items() if ring is not None}
    assert seen["dcqcn"] == {"rate", "log_no_mark"}
    assert seen["timely"] == seen["swift"] == {"rate", "queue_delay"}
    assert seen["hpcc"] == seen["predictive"] == {"rate", "queue_delay", "utilization", "load"}
    assert seen["nscc"] == {"rate", "log_no_mark", "queue_delay", "ack", "nack"}
    assert seen["rccc"] == {"rate", "receivers"}


def test_timely_patched_is_a_preset_of_one_law():
    patched = TimelyParams.preset("patched")
    assert patched.patched == 1.0 and patched.beta == pytest.approx(0.008)
    assert patched.segment == pytest.approx(16e3)


def test_capacity_scenarios_vmap_in_one_run_and_match_single_runs():
    sc = dumbbell(2, bandwidth=C40)
    kw = dict(duration=0.1, records=500)  # the timing of the dumbbell runs of test_dcqcn.py
    scenarios = np.stack([sc.fabric.capacity, sc.fabric.capacity * 0.5])
    batch = simulate_cc(sc.fabric, sc.routes, capacity=scenarios, **kw)
    assert batch.rate.shape == (2, 500, 2) and batch.capacity.shape == (2, sc.fabric.num_links)
    halved = dataclasses.replace(sc.fabric, capacity=sc.fabric.capacity * 0.5)
    single = simulate_cc(halved, sc.routes, **kw)
    # Over the first 10 ms (50 records): float32 rounding differs between the vmapped and
    # the single kernel and the gap grows over a long run.
    np.testing.assert_allclose(batch.queue[1, :50], single.queue[:50], rtol=1e-4, atol=1.0)
    np.testing.assert_allclose(batch.batch_item(1).mean_rate(), single.mean_rate(), rtol=1e-5)
    assert batch.batch_item(0).mean_rate().sum() == pytest.approx(
        2 * batch.batch_item(1).mean_rate().sum(), rel=0.02
    )
    with pytest.raises(SpecError, match="batch lengths differ"):
        simulate_cc(
            sc.fabric,
            sc.routes,
            capacity=np.stack([sc.fabric.capacity] * 3),
            pfc="on",
            pfc_params=_pfc_batch(2),
            **kw,
        )


def _pfc_batch(count):
    from fabricflow.solve.parameters import stack_params
    from fabricflow.solve.pfc.params import PFCParams

    return stack_params([PFCParams(xoff=50e3 * (i + 1)) for i in range(count)])


def test_parameter_batch_of_the_bench_draws_within_its_ranges():
    from fabricflow.bench.cc import BATCH_RANGES, parameter_batch

    for cc, ranges in BATCH_RANGES.items():
        batch = parameter_batch(cc, 50)
        assert batch.batch_size() == 50
        for name, (low, high) in ranges.items():
            values = np.asarray(getattr(batch, name))
            assert np.all((values >= low * (1 - 1e-9)) & (values <= high * (1 + 1e-9)))
            assert np.unique(values).size == 50
