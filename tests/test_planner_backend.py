"""The planner runs on the max-min engine: JAX is imported exactly when its backend runs,
and the step time does not depend on the backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = """
import json, sys
import fabricflow as ff
from fabric_specs import fat_tree_spec
fabric = ff.build_fabric(fat_tree_spec(8, gpus_per_node=4, scale_up={"domain_size": 4,
                         "bandwidth_per_direction": "100GB/s"}))
layout = ff.Layout(tp=4, pp=2, dp=16, micro_batch=1, global_batch=64, seq_len=2048)
result = ff.step_time("megatron-1.7b", "h100-sxm", layout, fabric)
print(json.dumps({"step_time_s": result.step_time_s, "jax": "jax" in sys.modules}))
"""


def _run(method: str) -> dict:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("JAX_")},
        "JAX_PLATFORMS": "cpu",
        "FABRICFLOW_MAXMIN_METHOD": method,
        "FABRICFLOW_NO_JAX_CACHE": "1",
        "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_jax_is_imported_when_and_only_when_its_backend_runs():
    numpy_run, jax_run = _run("numpy"), _run("jax")
    assert not numpy_run["jax"] and jax_run["jax"]
    assert abs(jax_run["step_time_s"] - numpy_run["step_time_s"]) <= 1e-9 * numpy_run["step_time_s"]
