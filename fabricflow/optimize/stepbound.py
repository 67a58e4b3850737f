"""A lower bound of the step time from lower bounds of its collectives, for many
candidates at once (numpy arrays ``[n]``).

:func:`fabricflow.step_time` composes collective times with sums, ``max``,
``max(0, t - hidden)`` and positive multiples, so it is non-decreasing in each of them
(docs/optimize.md). Replacing every collective by a lower bound of it, and every
compute-side quantity the composition cannot shrink below by its value, therefore gives a
lower bound of the step. With ``m`` micro-batches, ``v`` virtual stages, ``b1`` the step
with free communication (:mod:`.analytic`), ``L`` the fewest layers a pipeline rank
holds and ``x`` a lower bound of the exposed TP time of one layer and micro-batch:

* the slowest rank's micro-batch is at least its compute plus ``L x``, and the 1F1B /
  interleaved bubble grows by at least ``(p - 1) / v`` of what every rank gains:
  ``b1 + (m + (p - 1) / v) L x``; ``x`` sums the TP, CP and EP exposures of one layer,
  each as the step model hides it (behind the GEMMs, the attention core, another
  chunk's compute), share-weighted over dense and MoE layers;
* ZeRO 0-2, per gradient set: the reduction is exposed by at least
  ``max(R - backward, R / buckets)`` when overlapped (``backward`` of the rank with the
  most layers bounds the slowest rank's), ``R`` otherwise; the ZeRO-1/2 parameter
  all-gather by at least ``G / buckets`` overlapped, ``G`` otherwise;
* ZeRO-3: the step is at least ``m P + bubble + optimizer`` (``P`` the largest set's
  per-micro-batch gathers and scatter) when overlapped, and at least the compute side
  plus ``m sum(P) / buckets``; ``m sum(P)`` more than it when not overlapped;
* pipeline: the fill and drain chain ``2 (p v - 1)`` hops, and every hop of every
  micro-batch without ``pp_overlap``.

Where the bound of a collective is its time alone on the fabric (the step model's
isolated collective), the result bounds the coupled step too: coupling never shortens a
collective (``coupled = max(isolated, joint)``).
"""

from __future__ import annotations

import numpy as np

# What a bound needs from each candidate's collectives (seconds ``[n]``, slowest group):
# TP at the activation size per pass, CP's ring step forward (K/V) and backward (K/V and
# their gradients), EP's all-to-all at the dispatch and the bf16 size, the DP reduction
# and gather of each gradient set, and one pipeline hop.
COMM_TERMS = (
    "tp_all_reduce",
    "tp_all_gather",
    "tp_reduce_scatter",
    "cp_forward",
    "cp_backward",
    "ep_dispatch",
    "ep_bf16",
    "dense_reduce",
    "dense_gather",
    "expert_reduce",
    "expert_gather",
    "pp_hop",
)
SWITCHES = ("tp_overlap", "dp_overlap", "pp_overlap", "ep_overlap")


def step_lower_bound(
    b1: np.ndarray, parts: dict, switches: dict, comm: dict, *, moe: bool
) -> np.ndarray:
    """float64 ``[n]``: lower bound of the step time of ``n`` candidates.

    Args:
        b1: ``[n]`` step seconds with every collective free.
        parts: :data:`.analytic.PART_NAMES` -> ``[n]`` (each candidate's key's).
        switches: :data:`SWITCHES` -> bool ``[n]``.
        comm: :data:`COMM_TERMS` -> ``[n]`` lower bounds of those collectives' seconds
            (``dense_reduce`` is the all-reduce under ZeRO-0, the reduce-scatter under
            ZeRO 1-3; ``*_gather`` the parameter all-gather, ignored under ZeRO-0).
        moe: the model has expert layers (the ``expert`` gradient set counts).
    """
    P = parts
    m, share, zero = P["m"], P["bubble_share"], P["zero"]
    buckets = np.maximum(P["buckets"], 1.0)
    per_layer = _tp_layer(P, switches["tp_overlap"], comm) + _cp_layer(P, comm)
    if moe:
        per_layer = per_layer + P["moe_share"] * _ep_layer(P, switches["ep_overlap"], comm)
    tp_rank = P["min_layers"] * per_layer
    compute_side = b1 + (m + share) * tp_rank
    sets = ["dense"] + (["expert"] if moe else [])
    plain = np.zeros(len(b1))  # ZeRO 0-2: sum over the gradient sets
    per_mb_max = np.zeros(len(b1))  # ZeRO-3: per micro-batch traffic, largest set
    per_mb_sum = np.zeros(len(b1))
    overlap = switches["dp_overlap"]
    for name in sets:
        reduce, gather = comm[f"{name}_reduce"], comm[f"{name}_gather"]
        gather = np.where(zero == 0, 0.0, gather)
        hidden_r = np.maximum(reduce - P["backward_s"], reduce / buckets)
        plain += np.where(overlap, hidden_r + gather / buckets, reduce + gather)
        per_mb = 2 * gather + reduce
        per_mb_max = np.maximum(per_mb_max, per_mb)
        per_mb_sum += per_mb
    sharded_on = np.maximum(
        m * per_mb_max + P["bubble_s"] + share * tp_rank + P["optimizer_s"],
        compute_side + m * per_mb_sum / buckets,
    )
    sharded = np.where(overlap, sharded_on, compute_side + m * per_mb_sum)
    hops = 2 * (P["pp"] * P["vpp"] - 1) + np.where(switches["pp_overlap"], 0.0, 2 * m * P["vpp"])
    pipeline = np.where(P["pp"] > 1, hops * comm["pp_hop"], 0.0)
    return np.where(zero == 3, sharded, compute_side + plain) + pipeline


def _tp_layer(P: dict, overlap: np.ndarray, comm: dict) -> np.ndarray:
    """Exposed TP seconds of one layer and micro-batch, at least: per pass two
    all-reduces, or with sequence parallelism two all-gathers and two reduce-scatters;
    overlapped, each pass hides behind its GEMMs (share-weighted over dense and MoE
    layers: by convexity that hides no more than the per-kind form)."""
    per_pass = np.where(
        P["sequence_parallel"] > 0,
        2 * (comm["tp_all_gather"] + comm["tp_reduce_scatter"]),
        2 * comm["tp_all_reduce"],
    )
    passes = P["passes_forward"]
    hidden = passes * np.maximum(0.0, per_pass - P["forward_gemm_s"]) + np.maximum(
        0.0, per_pass - P["backward_gemm_s"]
    )
    return np.where(overlap, hidden, (passes + 1) * per_pass)


def _cp_layer(P: dict, comm: dict) -> np.ndarray:
    """Exposed CP seconds of one layer and micro-batch: ``cp - 1`` ring steps forward
    (again under recompute) and backward, each ring hidden behind the attention core."""
    ring_f = P["cp_steps"] * comm["cp_forward"]
    ring_b = P["cp_steps"] * comm["cp_backward"]
    return (1.0 + P["cp_redo"]) * np.maximum(0.0, ring_f - P["forward_attention_s"]) + np.maximum(
        0.0, ring_b - P["backward_attention_s"]
    )


def _ep_layer(P: dict, overlap: np.ndarray, comm: dict) -> np.ndarray:
    """Exposed EP seconds of one MoE layer and micro-batch: dispatch and combine forward,
    both again backward (bf16); hidden behind the MoE layer's compute with ``ep_overlap``
    or DualPipe (where the pair of chunks hides both directions together)."""
    forward = comm["ep_dispatch"] + comm["ep_bf16"]
    backward = 2 * comm["ep_bf16"]
    passes = P["passes_forward"]
    fwd_s, bwd_s = P["moe_forward_s"], P["moe_backward_s"]
    paired = np.maximum(0.0, passes * forward + backward - (passes * fwd_s + bwd_s))
    hidden = passes * np.maximum(0.0, forward - fwd_s) + np.maximum(0.0, backward - bwd_s)
    plain = passes * forward + backward
    return np.where(P["dualpipe"] > 0, paired, np.where(overlap, hidden, plain))
