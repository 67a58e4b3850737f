"""The planner runs on the max-min engine: JAX is imported exactly when its backend runs,
and the step time does not depend on the backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# One fresh process: the numpy backend first (JAX must stay unimported), then the same
# step cold on the JAX backend (FABRICFLOW_MAXMIN_METHOD is read at every solve). The
# coupling is off so that one kernel compiles (its JAX event loop is tested in
# tests/test_completion.py).
SCRIPT = """
import json, os, sys
import fabricflow as ff
from fabricflow.collective import structure_cache
from fabric_specs import fat_tree_spec
fabric = ff.build_fabric(fat_tree_spec(4, gpus_per_node=4, scale_up={"domain_size": 4,
                         "bandwidth_per_direction": "100GB/s"}))
layout = ff.Layout(tp=4, pp=2, dp=2, micro_batch=1, global_batch=8, seq_len=2048)
out = {}
for method in ("numpy", "jax"):
    os.environ["FABRICFLOW_MAXMIN_METHOD"] = method
    structure_cache.clear()
    result = ff.step_time("megatron-1.7b", "h100-sxm", layout, fabric, coupling=False)
    out[method] = {"step_time_s": result.step_time_s, "jax": "jax" in sys.modules}
print(json.dumps(out))
"""


def test_jax_is_imported_when_and_only_when_its_backend_runs():
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("JAX_")},
        "JAX_PLATFORMS": "cpu",
        "FABRICFLOW_NO_JAX_CACHE": "1",
        "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]),
    }
    env.pop("FABRICFLOW_MAXMIN_METHOD", None)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    runs = json.loads(done.stdout.strip().splitlines()[-1])
    numpy_run, jax_run = runs["numpy"], runs["jax"]
    assert not numpy_run["jax"] and jax_run["jax"]
    assert abs(jax_run["step_time_s"] - numpy_run["step_time_s"]) <= 1e-9 * numpy_run["step_time_s"]
