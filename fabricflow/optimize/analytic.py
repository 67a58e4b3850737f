"""The search's one door to the compute and memory model: feasibility, memory per GPU and
a true lower bound of the step time for a table of layouts at once.

Every compute or memory number the layout search uses comes through :func:`analyse`, which
takes the candidate table's rows (Layout field -> numpy column ``[K]``) and returns arrays
``[K]``. No physics formula lives in ``optimize/``: this module calls the step model's own
functions (:meth:`Layout.validate`, :func:`~fabricflow.workload.memory.memory_per_gpu`,
:func:`~fabricflow.workload.step.compute_only`, :func:`~fabricflow.workload.layer_cost.
layer_cost`), memoised by the fields each depends on; when the workload offers table
versions of them, only this module changes.

The bound (``bound_s``) is the step time with every collective taking zero seconds
(:func:`~fabricflow.workload.step.compute_only`: the step model's own compute, pipeline
bubble, optimizer and offload parts). :func:`fabricflow.step_time` is non-decreasing in
every collective time (sums, ``max``, ``max(0, t - hidden)``, positive multiples), so this
never exceeds the step time of any order, placement or fabric (proof in docs/optimize.md).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..errors import SpecError
from ..workload.gpu import GpuSpec
from ..workload.layer_cost import layer_cost
from ..workload.layout import Layout
from ..workload.memory import GIB, memory_per_gpu, stage_parameters
from ..workload.model import ModelSpec
from ..workload.step import compute_only

# Layout fields that do not enter one layer's compute (the memo key of layer_cost drops
# them, so that layouts differing only in these share one call).
_NOT_IN_LAYER: dict[str, Any] = dict(
    pp=1, dp=1, vpp=1, zero=0, global_batch=1, dp_overlap=True, pp_overlap=True,
    grad_reduce_dtype="fp32", tp_overlap=False, ep_overlap=False,
)  # fmt: skip

# What the step bound (:mod:`.stepbound`) combines with collective bounds, per key.
PART_NAMES = (
    "backward_s", "m", "pp", "vpp", "optimizer_s", "dense", "expert", "buckets", "hop_bytes",
    "tp_bytes", "forward_gemm_s", "backward_gemm_s", "passes_forward", "sequence_parallel",
    "min_layers", "bubble_s", "bubble_share", "grad_bytes", "zero", "cp_bytes", "cp_steps",
    "cp_redo", "forward_attention_s", "backward_attention_s", "ep_bytes", "dispatch_bytes",
    "moe_share", "moe_forward_s", "moe_backward_s", "dualpipe",
)  # fmt: skip


@dataclasses.dataclass
class Analytic:
    """Per layout (arrays ``[K]``): feasibility, memory and the step-time bound.

    ``reason`` holds the SpecError message of infeasible layouts ('' when feasible);
    ``parts`` the numbers of :data:`PART_NAMES` (NaN where infeasible).
    """

    feasible: np.ndarray
    memory_bytes: np.ndarray
    bound_s: np.ndarray
    reason: list
    parts: dict


class Analyser:
    """:func:`analyse` for one (model, gpu), memoised across calls (chunks of a table)."""

    def __init__(self, model: ModelSpec, gpu: GpuSpec):
        self.model = model
        self.gpu = gpu
        self._memo: dict = {}

    def analyse(self, rows: dict[str, np.ndarray]) -> Analytic:
        """Validate, size and bound each row (Layout field -> ``[K]`` values)."""
        n = len(next(iter(rows.values()))) if rows else 0
        feasible = np.zeros(n, dtype=bool)
        memory = np.full(n, np.nan)
        bound = np.full(n, np.inf)
        reason = [""] * n
        parts = {name: np.full(n, np.nan) for name in PART_NAMES}
        names = list(rows)
        for i, values in enumerate(zip(*(rows[k] for k in names), strict=True)):
            layout = Layout(**{k: _python(v) for k, v in zip(names, values, strict=True)})
            try:
                estimate = memory_per_gpu(self.model, layout)  # validates the layout
            except SpecError as error:
                reason[i] = str(error)
                continue
            memory[i] = estimate.total
            if estimate.total > self.gpu.hbm:
                reason[i] = (
                    f"memory: {estimate.total / GIB:.1f} GiB per GPU > "
                    f"{self.gpu.hbm / GIB:.1f} GiB HBM"
                )
                continue
            feasible[i] = True
            bound[i] = sum(self._free(layout).values())
            for name, value in self._parts(layout).items():
                parts[name][i] = value
        return Analytic(feasible, memory, bound, reason, parts)

    def _free(self, layout: Layout) -> dict:
        """The step's breakdown with every collective free (memoised)."""
        key = ("free", layout)
        if key not in self._memo:
            self._memo[key] = compute_only(self.model, self.gpu, layout)
        return self._memo[key]

    def _per_layer(self, layout: Layout) -> dict:
        """Seconds of one layer and one micro-batch, kernels over the framework
        efficiency (as the step model charges them): share-weighted over the dense / MoE
        layer mix (backward, weight GEMMs forward and backward, attention core forward and
        backward) and the MoE layer's forward and backward alone (0 for a dense model)."""
        key = ("layer", dataclasses.replace(layout, **_NOT_IN_LAYER))
        if key not in self._memo:
            model = self.model
            kinds = [(False, model.num_dense_layers / model.num_layers)]
            if model.is_moe:
                kinds.append((True, model.num_moe_layers / model.num_layers))
            eff = layout.framework_efficiency
            costs = [
                (moe, share, layer_cost(model, self.gpu, layout, moe=moe).scaled(1.0 / eff))
                for moe, share in kinds
            ]

            def mix(name: str) -> float:
                return sum(share * getattr(c, name) for _, share, c in costs)

            moe_cost = next((c for moe, _, c in costs if moe), None)
            self._memo[key] = {
                "backward_s": mix("backward_s"),
                "forward_gemm_s": mix("forward_gemm_s"),
                "backward_gemm_s": mix("backward_gemm_s"),
                "forward_attention_s": mix("forward_attention_s"),
                "backward_attention_s": mix("backward_attention_s"),
                "moe_forward_s": moe_cost.forward_s if moe_cost else 0.0,
                "moe_backward_s": moe_cost.backward_s if moe_cost else 0.0,
            }
        return self._memo[key]

    def _parts(self, layout: Layout) -> dict:
        """The compute-side numbers of :data:`PART_NAMES`: the largest rank's backward
        compute ``backward_s``, micro-batches ``m``, ``pp``, ``vpp``, ``optimizer_s``,
        parameters per GPU (``dense``, ``expert``), ``buckets``, and for each collective
        the bytes the step model sends and the compute that can hide it."""
        model = self.model
        first, middle, last = layout.stage_layers(model)
        dense, expert = stage_parameters(model, layout)
        layer = self._per_layer(layout)
        free = self._free(layout)
        tokens = layout.micro_batch * layout.seq_len / layout.cp
        return {
            **{name: layer[name] for name in layer if name != "backward_s"},
            "backward_s": max(first, middle, last) * layer["backward_s"],
            "m": layout.num_micro_batches,
            "pp": layout.pp,
            "vpp": layout.vpp,
            "optimizer_s": free["optimizer"],
            "dense": dense,
            "expert": expert,
            "buckets": max(first, last, 1),
            # one pipeline hop (Megatron's scatter-gather: activations / tp), TP's
            # activations per collective, CP's K/V chunk per ring step
            "hop_bytes": 2.0 * tokens * model.hidden_size / layout.tp,
            "tp_bytes": 2.0 * tokens * model.hidden_size,
            "cp_bytes": 2.0 * tokens * model.kv_width / layout.tp,
            "cp_steps": float(layout.cp - 1),
            "cp_redo": 1.0 if layout.recompute in ("full", "selective") else 0.0,
            "passes_forward": 2.0 if layout.recompute == "full" else 1.0,
            "sequence_parallel": float(layout.sequence_parallel),
            # EP: top-k token copies per MoE layer (scaled by the routing imbalance), the
            # dispatch's bytes per element (fp8 under fp8 training), the MoE layer share
            "ep_bytes": tokens
            / layout.tp
            * model.experts_per_token
            * model.hidden_size
            * layout.moe_imbalance
            if model.is_moe
            else 0.0,
            "dispatch_bytes": 1.0 if layout.precision == "fp8" else 2.0,
            "moe_share": model.num_moe_layers / model.num_layers if model.is_moe else 0.0,
            "dualpipe": float(layout.schedule == "dualpipe"),
            "min_layers": float(min(first, middle, last)),
            # the pipeline bubble with free communication (uneven ranks, DualPipe included)
            "bubble_s": free["bubble"],
            # communication added to every rank's micro-batch also lengthens the bubble by
            # (p - 1) / v of it (sum minus maximum of the ranks' times); DualPipe's bubble
            # is counted without that share
            "bubble_share": 0.0 if layout.schedule == "dualpipe" else (layout.pp - 1) / layout.vpp,
            "grad_bytes": 4.0 if layout.grad_reduce_dtype == "fp32" else 2.0,
            "zero": float(layout.zero),
        }


def _python(value):
    """A numpy scalar as the Python value Layout expects."""
    return value.item() if isinstance(value, np.generic) else value
