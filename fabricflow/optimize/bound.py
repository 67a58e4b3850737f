"""Feasibility, memory and a true lower bound of the step time, for many layouts at once.

Candidates are integer-coded columns (one per knob). What decides compute and memory is
a few knobs (sizes, micro-batch, recompute, ZeRO, ...): the scalar model functions
(:meth:`Layout.validate`, :func:`memory_per_gpu`, :func:`layer_cost`, ...) run once per
distinct *analytic key* and numpy broadcasts the result to every candidate sharing it;
rank orders, placements, overlap switches and collective algorithms multiply the
candidates without multiplying this work.

The bound is the step time with every collective taking zero seconds
(:func:`~fabricflow.workload.step.compute_only`: the step model's own compute, pipeline
bubble, optimizer and offload parts). :func:`fabricflow.step_time` is non-decreasing in every collective time
(sums, ``max``, ``max(0, t - hidden)``, positive multiples), so this never exceeds the
step time of any order, placement or fabric (proof in docs/optimize.md).
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


@dataclasses.dataclass
class Analytic:
    """Per analytic key (arrays ``[K]``): feasibility, memory and the step-time bound.

    ``reason`` holds the SpecError message of infeasible keys ('' when feasible).
    """

    feasible: np.ndarray
    memory_bytes: np.ndarray
    bound_s: np.ndarray
    compute_s: np.ndarray
    reason: list
    parts: dict  # name -> float64 [K] (see Evaluator.parts; NaN where infeasible)


class Evaluator:
    """Memoised scalar model calls for one (model, gpu)."""

    def __init__(self, model: ModelSpec, gpu: GpuSpec):
        self.model = model
        self.gpu = gpu
        self._layer: dict = {}

    def parts(self, layout: Layout) -> dict:
        """The compute-side numbers the network bound combines with collective bounds:
        the largest rank's backward
        compute ``backward_s``, micro-batches ``m``, ``pp``, ``vpp``, ``optimizer_s``,
        parameters per GPU (``dense``, ``expert``), ``buckets`` and the pipeline hop bytes."""
        first, middle, last = layout.stage_layers(self.model)
        dense, expert = stage_parameters(self.model, layout)
        return {
            "backward_s": max(first, middle, last) * self.per_layer(layout)[0],
            "m": layout.num_micro_batches,
            "pp": layout.pp,
            "vpp": layout.vpp,
            "optimizer_s": self._free(layout)["optimizer"],
            "dense": dense,
            "expert": expert,
            "buckets": max(first, last, 1),
            "hop_bytes": 2.0
            * layout.micro_batch
            * layout.seq_len
            / layout.cp
            * self.model.hidden_size
            / layout.tp,
            # TP: the activations each all-reduce / all-gather carries, the GEMM time
            # that can hide it (share-weighted over dense/MoE layers), passes forward.
            "tp_bytes": 2.0
            * layout.micro_batch
            * layout.seq_len
            / layout.cp
            * self.model.hidden_size,
            "forward_gemm_s": self.per_layer(layout)[1],
            "backward_gemm_s": self.per_layer(layout)[2],
            "passes_forward": 2.0 if layout.recompute == "full" else 1.0,
            "sequence_parallel": float(layout.sequence_parallel),
            "min_layers": float(min(first, middle, last)),
            # the pipeline bubble with free communication (uneven ranks, DualPipe included)
            "bubble_s": self._free(layout)["bubble"],
            # communication added to every rank's micro-batch also lengthens the bubble by
            # (p - 1) / v of it (sum minus maximum of the ranks' times); DualPipe's bubble
            # is counted without that share
            "bubble_share": 0.0 if layout.schedule == "dualpipe" else (layout.pp - 1) / layout.vpp,
        }

    def per_layer(self, layout: Layout) -> tuple[float, float, float]:
        """Share-weighted seconds of one layer (dense/MoE mix), one micro-batch, kernels
        over the framework efficiency: (backward, forward weight GEMMs, backward weight
        GEMMs)."""
        key = ("layer", dataclasses.replace(layout, **_NOT_IN_LAYER))
        if key not in self._layer:
            model = self.model
            kinds = [(False, model.num_dense_layers / model.num_layers)]
            if model.is_moe:
                kinds.append((True, model.num_moe_layers / model.num_layers))
            costs = [(share, layer_cost(model, self.gpu, layout, moe=moe)) for moe, share in kinds]
            eff = layout.framework_efficiency
            self._layer[key] = (
                sum(share * c.backward_s for share, c in costs) / eff,
                sum(share * c.forward_gemm_s for share, c in costs) / eff,
                sum(share * c.backward_gemm_s for share, c in costs) / eff,
            )
        return self._layer[key]

    def bound(self, layout: Layout) -> tuple[float, float]:
        """(lower bound of the step time, compute part) in seconds: the step model itself
        with every collective free (:func:`~fabricflow.workload.step.compute_only`)."""
        parts = self._free(layout)
        return sum(parts.values()), parts["compute"]

    def _free(self, layout: Layout) -> dict:
        key = ("free", layout)
        if key not in self._layer:
            self._layer[key] = compute_only(self.model, self.gpu, layout)
        return self._layer[key]

    def analyse(self, layouts: list[Layout]) -> Analytic:
        """Validate, size and bound each layout (one per analytic key)."""
        n = len(layouts)
        feasible = np.zeros(n, dtype=bool)
        memory = np.full(n, np.nan)
        bound = np.full(n, np.inf)
        compute = np.full(n, np.inf)
        reason = [""] * n
        parts: dict = {}
        for i, layout in enumerate(layouts):
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
            bound[i], compute[i] = self.bound(layout)
            for name, value in self.parts(layout).items():
                if name not in parts:
                    parts[name] = np.full(n, np.nan)
                parts[name][i] = value
        return Analytic(feasible, memory, bound, compute, reason, parts)
