"""DCQCN fluid model: fixed point, convergence to fair shares, max-min agreement,
numerics in float32, vmap over parameter sets, flow completion, input errors."""

from __future__ import annotations

import numpy as np
import pytest
from reference_solvers import progressive_filling
from small_cases import SHORT_RUN
from small_cases import small_dumbbell as _dumbbell

from fabricflow.dynamics.congestion import simulate_cc
from fabricflow.dynamics.scenarios import dumbbell, multi_bottleneck, parking_lot, union
from fabricflow.errors import MemoryBudgetError, SpecError
from fabricflow.routing.routes import Routes
from fabricflow.solve.cc import integrator as dcqcn_kernel
from fabricflow.solve.cc.dcqcn import DCQCNParams, dcqcn_derivatives
from fabricflow.solve.cc.dcqcn_analysis import fixed_point
from fabricflow.solve.parameters import stack_params
from fabricflow.solve.status import SolverStatus

C40 = 40e9 / 8  # 40 Gb/s in bytes/s
# One timing for the dumbbell runs here (0.1 s in 500 records of 200 steps): the kernel is
# jitted on its static configuration and shapes, so runs that share them compile once
# (a compilation costs far more than the steps of these small runs).
LONG = dict(duration=0.1, records=500)


def test_fixed_point_matches_paper_numbers():
    # docs/references.md §2: 40 Gb/s, paper defaults, N = 2.
    fp = fixed_point(C40, 2, DCQCNParams.preset("paper"))
    assert fp["p"] == pytest.approx(7.77e-4, rel=0.01)
    assert fp["queue_bytes"] == pytest.approx(20.2e3, rel=0.01)
    assert fp["alpha"] == pytest.approx(0.101, rel=0.01)


@pytest.mark.parametrize("flows", [2, 4])
def test_dumbbell_converges_to_fair_share_and_fixed_point_queue(flows):
    sc = dumbbell(flows, bandwidth=C40)
    res = simulate_cc(
        sc.fabric, sc.routes, cc="dcqcn", params="paper", dt=1e-6, extra_delay=4e-6, **LONG
    )
    assert res.status == SolverStatus.CONVERGED
    np.testing.assert_allclose(res.mean_rate(), C40 / flows, rtol=0.01)
    late = res.time >= 0.05
    queue = res.queue[late, sc.bottleneck].mean()
    expected = fixed_point(C40, flows)["queue_bytes"]
    assert queue == pytest.approx(expected, rel=0.10)
    if flows == 2:
        assert queue == pytest.approx(20.2e3, rel=0.10)
    # Final alpha of every flow close to the analytic alpha*.
    np.testing.assert_allclose(res.alpha, fixed_point(C40, flows)["alpha"], rtol=0.1)


@pytest.fixture(scope="module")
def max_min_run():
    """The multi-bottleneck and the parking-lot scenarios side by side, in one run (one
    compilation): their fabrics are disjoint, so each part behaves as if run alone."""
    scenarios = [multi_bottleneck(bandwidth=C40), parking_lot(2, bandwidth=C40)]
    both = union(scenarios)
    res = simulate_cc(both.fabric, both.routes, cc="dcqcn", **LONG)
    assert res.status == SolverStatus.CONVERGED
    return res, scenarios, both.parts


def test_multi_bottleneck_long_run_matches_max_min(max_min_run):
    res, (sc, _), (part, _) = max_min_run
    ideal = progressive_filling(sc.routes.links, sc.fabric.capacity)
    assert len(np.unique(np.round(ideal / C40, 6))) == 3  # three bottleneck levels
    np.testing.assert_allclose(res.mean_rate()[part.flows], ideal, rtol=0.03)


def test_parking_lot_long_flow_gets_less_than_max_min(max_min_run):
    # Documented DCQCN behaviour: a flow crossing two congested queues collects marks at
    # both and ends up well below its max-min share, while the links stay saturated.
    res, _, (_, part) = max_min_run
    rate = res.mean_rate()[part.flows]
    assert rate[0] < 0.85 * C40 / 2
    np.testing.assert_allclose(rate[0] + rate[1:], C40, rtol=0.01)


@pytest.mark.parametrize("log_keep", [0.0, -1e-30, -1e-8, -7.8e-4, -0.009, -0.7, -100.0])
@pytest.mark.parametrize("rate", [0.0, 1.0, 2.5e9, 5e10])
def test_derivatives_finite_in_float32_and_match_float64_formula(log_keep, rate):
    import jax.numpy as jnp

    params = DCQCNParams.preset("paper")
    f32 = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
    out = dcqcn_derivatives(f32(2e9), f32(3e9), f32(0.5), f32(log_keep), f32(rate), params)
    assert all(np.isfinite(np.asarray(v)) for v in out)
    # Direct textbook formula in float64 numpy (valid away from the removable limits).
    p = -np.expm1(log_keep)
    if 1e-6 < p < 0.5 and rate > 0:
        n = rate / params.packet_bytes
        b_pk = params.byte_counter / params.packet_bytes
        a = 1 - (1 - p) ** (params.tau * n)
        b = p / ((1 - p) ** (-b_pk) - 1)
        c = b * (1 - p) ** (params.fast_recovery * b_pk)
        d = p / ((1 - p) ** (-params.timer * n) - 1)
        e = d * (1 - p) ** (params.fast_recovery * params.timer * n)
        d_rt = -(3e9 - 2e9) * a / params.tau + params.rate_ai * n * (c + e)
        d_rc = -2e9 * 0.5 * a / (2 * params.tau) + 0.5 * (3e9 - 2e9) * n * (b + d)
        np.testing.assert_allclose(float(out[0]), d_rc, rtol=2e-3, atol=1e6)
        np.testing.assert_allclose(float(out[1]), d_rt, rtol=2e-3, atol=1e6)


def test_limits_of_the_safe_forms():
    import jax.numpy as jnp

    params = DCQCNParams.preset("paper")
    rc, rt = jnp.float32(1e9), jnp.float32(2e9)
    # p = 0: a = 0, R'b = R'/B, R'd = 1/T -> pure increase, alpha decays.
    d_rc, d_rt, d_alpha = dcqcn_derivatives(
        rc, rt, jnp.float32(0.5), jnp.float32(0.0), jnp.float32(1e9), params
    )
    n = 1e9 / params.packet_bytes
    expected = 0.5 * 1e9 * (n / (params.byte_counter / params.packet_bytes) + 1 / params.timer)
    assert float(d_rc) == pytest.approx(expected, rel=1e-4)
    assert float(d_alpha) == pytest.approx(-params.g / params.tau_prime * 0.5, rel=1e-5)
    # p -> 1: a -> 1, no increase terms: d_rt = -(rt - rc)/tau.
    _, d_rt, _ = dcqcn_derivatives(
        rc, rt, jnp.float32(0.5), jnp.float32(-100.0), jnp.float32(1e9), params
    )
    assert float(d_rt) == pytest.approx(-1e9 / params.tau, rel=1e-4)


@pytest.mark.parametrize("preset", ["paper", "connectx"])
def test_no_nan_in_float32_under_heavy_overload(preset):
    # 24 flows at line rate into one link: the queue passes Kmax (p = 1), rates crash to
    # the minimum and recover; everything must stay finite.
    sc = dumbbell(24, bandwidth=C40)
    res = simulate_cc(
        sc.fabric,
        sc.routes,
        cc="dcqcn",
        params=preset,
        duration=0.01,
        records=100,
        overrides={"min_rate": 0.0},
    )
    assert res.status == SolverStatus.CONVERGED
    for array in (res.rate, res.queue, res.delivered, res.alpha, res.target_rate):
        assert np.all(np.isfinite(array))
    assert res.queue[:, sc.bottleneck].max() > 200e3  # p = 1 region was reached
    assert np.all(res.rate >= 0) and np.all(res.rate <= C40 * (1 + 1e-6))


def test_vmap_over_parameter_sets_compiles_once_and_matches_single_runs():
    sc = dumbbell(2, bandwidth=C40)
    kw = LONG
    batch = stack_params([DCQCNParams.preset("paper", kmax=k) for k in (100e3, 200e3, 400e3)])
    res = simulate_cc(sc.fabric, sc.routes, cc="dcqcn", params=batch, **kw)
    assert res.rate.shape == (3, 500, 2) and res.queue.shape[0] == 3
    size_before = dcqcn_kernel.run_batch._cache_size()
    batch2 = stack_params(
        [DCQCNParams.preset("paper", kmax=k, rate_ai="20Mbps") for k in (150e3, 250e3, 500e3)]
    )
    simulate_cc(sc.fabric, sc.routes, cc="dcqcn", params=batch2, **kw)
    assert dcqcn_kernel.run_batch._cache_size() == size_before
    single = simulate_cc(
        sc.fabric, sc.routes, cc="dcqcn", params="paper", overrides={"kmax": 400e3}, **kw
    )
    # Over the first 10 ms (50 records): float32 rounding differs between the vmapped and
    # the single kernel and the gap grows over a long run.
    np.testing.assert_allclose(res.queue[2, :50], single.queue[:50], rtol=1e-4, atol=1.0)


def test_flows_with_sizes_and_starts_finish_and_conserve_bytes():
    sc = dumbbell(2, bandwidth=C40)
    size = np.array([1e6, 2e6])
    start = np.array([0.0, 1e-3])
    res = simulate_cc(sc.fabric, sc.routes, cc="dcqcn", size=size, start=start, **LONG)
    assert np.all(np.isfinite(res.finish_time))
    np.testing.assert_allclose(res.delivered[-1], size, rtol=1e-5)
    fct = res.finish_time - start
    # Flow 0 runs alone at 40 Gb/s: 1 MB takes 200 us (+ a few us of hops).
    assert 200e-6 <= fct[0] <= 230e-6
    # Flow 1 starts after flow 0 finished: alone too.
    assert 400e-6 <= fct[1] <= 440e-6
    # Nothing is delivered before a flow starts.
    assert np.all(res.delivered[res.time < 1e-3, 1] == 0)


def test_bad_inputs_name_the_field():
    sc = dumbbell(2, bandwidth=C40)
    with pytest.raises(SpecError, match="params"):
        simulate_cc(sc.fabric, sc.routes, cc="dcqcn", params="nope")
    with pytest.raises(SpecError, match="dt"):
        simulate_cc(sc.fabric, sc.routes, cc="dcqcn", params="connectx", dt=1e-5)
    with pytest.raises(SpecError, match="size"):
        simulate_cc(sc.fabric, sc.routes, cc="dcqcn", size=[-1.0, 1.0])
    with pytest.raises(SpecError, match="pfc"):
        simulate_cc(sc.fabric, sc.routes, cc="dcqcn", pfc="sometimes")
    with pytest.raises(SpecError, match="kmin"):
        DCQCNParams.preset("paper", kmin="300KB")
    with pytest.raises(SpecError, match="g"):
        DCQCNParams.preset("paper", g=2)
    multipath = Routes(
        links=sc.routes.links,
        coef=np.ones(sc.routes.links.shape),
        src=sc.routes.src,
        dst=sc.routes.dst,
        num_links=sc.routes.num_links,
    )
    with pytest.raises(SpecError, match="routes"):
        simulate_cc(sc.fabric, multipath, cc="dcqcn")
    with pytest.raises(MemoryBudgetError, match="GiB"):
        simulate_cc(
            sc.fabric, sc.routes, cc="dcqcn", records=10_000, duration=0.01, memory_budget=1000
        )


def test_presets_and_unit_overrides():
    cx = DCQCNParams.preset("connectx", rate_ai="10Mbps", kmax="400KB", g="1/128")
    assert cx.rate_ai == pytest.approx(10e6 / 8)
    assert cx.kmax == pytest.approx(400e3)
    assert cx.g == pytest.approx(1 / 128)
    assert cx.timer == pytest.approx(300e-6) and cx.byte_counter == pytest.approx(32767)
    assert DCQCNParams.preset("paper").max_stable_dt() == pytest.approx(25e-6)
    assert DCQCNParams.preset("connectx").max_stable_dt() == pytest.approx(2e-6)


def test_new_capacities_and_sizes_do_not_recompile():
    sc = dumbbell(4, bandwidth=C40)  # the shapes and timing of the 4-flow convergence run
    kw = LONG
    simulate_cc(sc.fabric, sc.routes, cc="dcqcn", **kw)
    before = dcqcn_kernel.run._cache_size()
    faster = sc.fabric.with_capacity(sc.fabric.capacity * 2.5)
    sizes = dict(size=[1e5, 2e5, 3e5, 4e5], start=[0, 1e-4, 2e-4, 3e-4])
    res = simulate_cc(faster, sc.routes, cc="dcqcn", **sizes, **kw)
    assert dcqcn_kernel.run._cache_size() == before
    assert np.all(np.isfinite(res.finish_time))


def test_bench_section_smoke():
    from fabricflow.bench import cc as bench

    result: dict = {}
    bench._case(2_000, 200, result, "cpu")
    assert result["cpu_status"] == "converged"
    assert result["cpu_run_s"] > 0 and result["cpu_flows"] == 2_000
    assert 0 < result["cpu_mean_rate_Gbps"] <= 400


def test_hyper_increase_term():
    import jax.numpy as jnp

    paper = DCQCNParams.preset("paper")
    hyper = paper.replace(rate_hai="400Mbps")
    args = (
        jnp.float32(1e9),
        jnp.float32(2e9),
        jnp.float32(0.5),
        jnp.float32(0.0),
        jnp.float32(1e9),
    )
    _, base, _ = dcqcn_derivatives(*args, paper)
    _, more, _ = dcqcn_derivatives(*args, hyper)
    # p = 0: both counters are always past F, every increase event is a hyper one.
    events = 1e9 / paper.packet_bytes / (paper.byte_counter / paper.packet_bytes) + 1 / paper.timer
    assert float(more - base) == pytest.approx((400e6 / 8 - paper.rate_ai) * events, rel=1e-3)
    # Under heavy marking the hyper stage is never reached.
    heavy = (*args[:3], jnp.float32(np.log1p(-0.01)), args[4])
    np.testing.assert_allclose(
        float(dcqcn_derivatives(*heavy, hyper)[1]),
        float(dcqcn_derivatives(*heavy, paper)[1]),
        rtol=1e-5,
    )


def test_connectx_preset_shares_the_link_fairly():
    sc = dumbbell(2, bandwidth=C40)
    res = simulate_cc(sc.fabric, sc.routes, cc="dcqcn", params="connectx", **LONG)
    rate = res.mean_rate()
    assert rate.sum() >= 0.95 * C40
    assert rate[0] == pytest.approx(rate[1], rel=0.01)


# ------------------------------------------------------------------ long DCQCN runs


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
