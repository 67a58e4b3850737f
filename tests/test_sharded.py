"""Max-min across devices: flows split (psum of link sums) and scenario batches split.

Several devices on one CPU need ``XLA_FLAGS=--xla_force_host_platform_device_count=4``
before JAX starts, and this test process has started it already: the multi-device
checks run in a subprocess that prints its findings as JSON, asserted here.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from reference_solvers import progressive_filling

import fabricflow as ff
from fabricflow.errors import SpecError
from fabricflow.solve.maxmin.engine import max_min
from fabricflow.solve.maxmin.sharded import device_mesh

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_MULTI_DEVICE_SCRIPT = textwrap.dedent(
    """
    import json
    import sys
    import jax
    import numpy as np
    import fabricflow as ff
    sys.path.insert(0, "tests")
    from fabricflow.solve.maxmin.engine import max_min
    from reference_solvers import progressive_filling

    out = {"devices": len(jax.devices()), "cases": []}
    rng = np.random.default_rng(7)
    for trial in range(6):
        # F not a multiple of 4 on even trials: the padded flows must take no part.
        num_flows, hops, num_links = 203 + trial % 2, 3, 40
        links = rng.integers(-1, num_links, (num_flows, hops)).astype(np.int32)
        links[:, 0] = rng.integers(0, num_links, num_flows)  # every flow crosses a link
        capacity = rng.uniform(1.0, 10.0, num_links).astype(np.float32)
        weight = rng.uniform(0.5, 2.0, num_flows).astype(np.float32) if trial % 2 else None
        demand = np.where(rng.random(num_flows) < 0.3, rng.uniform(0.01, 0.2, num_flows), np.inf)
        demand = demand.astype(np.float32) if trial >= 3 else None
        coef = rng.uniform(0.2, 1.0, (num_flows, hops)).astype(np.float32) if trial == 5 else None
        args = dict(weight=weight, demand=demand, coef=coef, merge=False)
        single = max_min(links, capacity, method="jax", **args)
        split = max_min(links, capacity, method="jax", shard="flows", **args)
        reference = progressive_filling(links, capacity.astype(np.float64), weight, demand, coef)
        rates = np.asarray(split.rates, np.float64)
        cert = ff.certify_max_min(links, capacity, rates, weight=weight, demand=demand, coef=coef)
        checked = ff.max_min_rates(links, capacity, weight=weight, demand=demand, coef=coef,
                                   shard="flows")
        out["cases"].append({
            "vs_single": float(np.max(np.abs(rates - single.rates) / reference)),
            "vs_reference": float(np.max(np.abs(rates - reference) / reference)),
            "checked_vs_reference": float(np.max(np.abs(checked - reference) / reference)),
            "certified": bool(cert),
            "status": int(split.status),
            "rounds": [int(split.rounds), int(single.rounds)],
            "same_bottleneck": float(np.mean(split.bottleneck == single.bottleneck)),
            "shape": list(split.rates.shape),
        })
    limited = max_min(links, capacity, method="jax", shard="flows", max_iters=2, throw=False)
    out["maxiter_status"] = int(limited.status)

    # Batches: 10 scenarios (not a multiple of 4) split across the devices.
    caps = rng.uniform(0.0, 10.0, (10, num_links)).astype(np.float32)
    dem = rng.uniform(0.01, 0.5, (10, num_flows)).astype(np.float32)
    one = max_min(links, caps, demand=dem, method="jax", merge=False)
    sharded = max_min(links, caps, demand=dem, method="jax", shard="batch", merge=False)
    auto = ff.max_min_rates(links, caps, demand=dem, shard="auto", method="jax")
    out["batch_vs_one"] = float(np.max(np.abs(one.rates - sharded.rates) / np.maximum(one.rates, 1e-6)))
    out["batch_shape"] = list(sharded.rates.shape)
    out["auto_vs_one"] = float(np.max(np.abs(auto - one.rates) / np.maximum(one.rates, 1e-6)))
    out["batch_reference"] = float(max(
        np.max(np.abs(sharded.rates[b] - progressive_filling(links, caps[b], None, dem[b]))
               / np.maximum(sharded.rates[b], 1e-6))
        for b in range(10)
    ))

    # The sweep tasks' batches on 4 devices (compared with one device in the parent).
    from fabricflow.sweeps import solver_tasks as ss
    maxmin_case, cc_case = _sweep_cases()
    out["maxmin"] = ss.maxmin_batch(*maxmin_case)
    out["cc"] = ss.cc_batch(*cc_case)
    print(json.dumps(out))
    """
)


def _sweep_cases():
    """The sweep batches compared across device counts (its source runs in the subprocess)."""
    from fabricflow.fabric.spec import load_fat_tree

    varying = [{"fail_kind": "leaf", "fail_fraction": 0.05, "fail_seed": s} for s in range(5)]
    maxmin = ({"fabric": load_fat_tree(8), "traffic": "alltoall", "reroute": False}, varying)
    cc = (
        {"scenario": "incast", "flows": 3, "pfc": "on", "duration": "1ms", "records": 20},
        [{"kmax": "100KB"}, {"kmax": "400KB", "rate_ai": "80Mbps"}, {"g": 0.0625}],
    )
    return maxmin, cc


@pytest.fixture(scope="module")
def four_devices() -> dict:
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    done = subprocess.run(
        [sys.executable, "-c", inspect.getsource(_sweep_cases) + _MULTI_DEVICE_SCRIPT],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_flow_sharded_solve_equals_single_device_and_reference(four_devices):
    assert four_devices["devices"] == 4
    for case in four_devices["cases"]:
        assert case["status"] == 0
        assert case["vs_single"] <= 1e-5, case
        assert case["vs_reference"] <= 1e-5, case
        assert case["checked_vs_reference"] <= 1e-5, case
        assert case["certified"], case
        assert case["rounds"][0] == case["rounds"][1], case
        assert case["same_bottleneck"] >= 0.99, case
    # the padding flows are cut off again
    assert [c["shape"][0] for c in four_devices["cases"]] == [203, 204] * 3
    assert four_devices["maxiter_status"] == int(ff.SolverStatus.MAX_ITERS_REACHED)


def test_batch_sharded_equals_one_device(four_devices):
    assert four_devices["batch_vs_one"] <= 1e-5
    assert four_devices["batch_reference"] <= 1e-5
    assert four_devices["batch_shape"][0] == 10  # 12 padded scenarios cut back to 10
    assert four_devices["auto_vs_one"] <= 1e-5


def test_sharding_on_one_device_matches_the_plain_solve():
    rng = np.random.default_rng(3)
    links = rng.integers(-1, 20, (57, 3)).astype(np.int32)
    links[:, 0] = rng.integers(0, 20, 57)
    capacity = rng.uniform(1, 5, 20).astype(np.float32)
    single = max_min(links, capacity, method="jax")
    split = max_min(links, capacity, method="jax", shard="flows")
    np.testing.assert_allclose(split.rates, single.rates, rtol=1e-6)
    caps = rng.uniform(1, 5, (3, 20)).astype(np.float32)
    batch = max_min(links, caps, method="jax", shard="batch")
    for b in range(3):
        np.testing.assert_allclose(batch.rates[b], progressive_filling(links, caps[b]), rtol=1e-5)
    rates = ff.max_min_rates(links, capacity, shard="flows")
    np.testing.assert_allclose(rates, progressive_filling(links, capacity), rtol=1e-5)
    assert device_mesh("flows").axis_names == ("flows",)


@pytest.mark.parametrize(
    ("shard", "capacity_shape", "message"),
    [
        ("rows", (4,), "must be one of"),
        (3, (4,), "must be one of"),
        ("batch", (4,), "needs a batch"),
        ("flows", (2, 4), "splits one scenario"),
    ],
)
def test_bad_shard_is_refused(shard, capacity_shape, message):
    with pytest.raises(SpecError, match=message) as error:
        ff.max_min_rates([[0, 1], [2, 3]], np.ones(capacity_shape), shard=shard)
    assert error.value.field == "shard"


def test_sweep_batches_on_four_devices_equal_one_device(four_devices):
    """maxmin (batch-sharded max-min) and cc (parameter batch placed across devices)."""
    from fabricflow.sweeps import solver_tasks as ss

    maxmin_case, cc_case = _sweep_cases()
    maxmin = ss.maxmin_batch(*maxmin_case)
    cc = ss.cc_batch(*cc_case)
    for ours, theirs in ((maxmin, four_devices["maxmin"]), (cc, four_devices["cc"])):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            for key, value in a.items():
                assert b[key] == pytest.approx(value, rel=1e-6, abs=1e-9, nan_ok=True), key
    assert len({m["stalled_flows"] for m in maxmin}) > 1  # the seeds differ
