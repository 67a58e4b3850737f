"""``fabricflow bench``: scale benchmarks, one module per section.

:data:`SECTIONS` names every section with what it measures; the section ``NAME`` lives in
the module ``NAME`` (``-`` as ``_``), which provides ``run(options) -> dict`` returning
JSON-able figures (times in s, memory in bytes, sizes) and imports what it needs at its
top: ``fabricflow bench`` imports only the sections it runs (:func:`load`). ``options`` is
the argparse namespace (``quick``, ``gpu`` flags, ...). A new benchmark is a new module
here and its line in :data:`SECTIONS`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: Section name -> what it measures, in module-name order (the order "all" runs them).
SECTIONS = {
    "cc": "congestion-control fluid model: flows x steps per second; 1,000-set batches",
    "cluster": "cluster simulation: 1,000-job 30-day trace on clos-100k with failures",
    "cluster-90d": "cluster simulation: 10,000-job 90-day trace on clos-100k with failures",
    "collective": "reduce-scatter of 2,048 concurrent DP groups of a 16k-GPU job (3-tier Clos)",
    "design": "fabric design search: Llama-3-405B on 16,384 H100, 72 designs, <= 30 min",
    "fabric": "build clos-100k; ECMP/multipath routing of 1M all-to-all flows",
    "failures": "4,096 link-failure scenarios of max-min on 100k flows as one vmapped batch",
    "fct": "flow completion times: 2 MB permutation on fat-tree k=16 / k=32, fluid vs packet",
    "gpu": "the prepared GPU run: 10M-flow max-min, 16k/98k searches, CC vmap, cluster (8 min)",
    "grids": "sweep grids of 2x10^5 and 10^7 points: seconds to the first points, memory",
    "maxmin": "max-min engine: numpy and JAX backends on 1M-flow MoE all-to-all and a ring",
    "million": "clos-1m (1,048,576 GPUs): build, route and max-min solve a 10M-flow all-to-all",
    "optimize": "layout search: Llama-3-405B on 16k (meta-llama3-24k) and 98k H100, "
    "GPT-3 on 1k A100",
    "planner": "step_time on each max-min backend and the engine's batch layouts, on the device",
    "report": "design-review report: Llama-3-70B on 1,024 H100 (dgx-h100-superpod), <= 2 min",
    "routing": "routing optimizer vs ECMP and spray on MoE all-to-all; 1M-flow optimization",
    "stages": "DeepSeek-V3 on 2,048 H800 (PP16 uneven, EP64, DualPipe) vs published GPU hours; "
    "a Llama-3-70B job over H100 + H20",
    "step": "Llama-3-405B step time on 16,384 GPUs of meta-llama3-24k (TP8 PP16 DP128); "
    "Megatron Table 1 errors",
    "sweep": "1,000-point step-time sweep on clos-100k with 2 local workers; kill and resume",
}


def load(name: str) -> ModuleType:
    """The module of the section ``name`` (one of :data:`SECTIONS`), imported now."""
    return importlib.import_module(f"{__name__}.{name.replace('-', '_')}")
