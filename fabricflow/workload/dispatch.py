"""MoE token dispatch: the dispatchers, what they move, at what rate, on how many SMs.

A MoE layer sends each token's ``top_k`` routed copies to the ranks holding their experts
(dispatch) and brings the expert outputs back (combine). Megatron-Core offers four ways,
the layout's ``dispatcher``:

* ``alltoall``: NCCL all-to-all. Tokens are permuted into destination order first (a
  global permutation, ``top_k`` copies written), exchanged, then sorted by local expert
  (a second, local permutation). Timed by the collective model on the fabric, at the
  stack's ``alltoall_efficiency`` of its rate; NCCL holds ``alltoall_sms`` SMs.
* ``allgather``: every rank all-gathers the tokens of its expert-parallel group and keeps
  those routed to its experts; combine is a reduce-scatter of the same size. No
  permutation before the exchange.
* ``deepep``: DeepEP's normal (high-throughput) kernels through the flex dispatcher: the
  global permutation is fused into the communication kernel (no ``top_k`` copies written
  before it), its preprocessing is one fused kernel, the host waits for the received
  counts as with all-to-all. It reaches a measured fraction of the line rate (the stack's
  ``deepep_{nvlink,rdma}_{dispatch,combine}``) on ``deepep_sms`` SMs.
* ``hybridep``: NVIDIA's HybridEP (TMA copies inside the NVLink domain, RDMA across),
  flex-dispatched like DeepEP; its buffer-to-tensor copy and the FP8 padding are fused
  into the local permutation. ``hybridep_*`` fractions, ``hybridep_sms`` SMs.

The collective model times each exchange at the line rates the fabric shares out; a
dispatcher reaching the fraction ``e`` of the line rate takes ``t_fabric / e`` (plus the
stack's ``dispatch_latency_s`` per call for the flex kernels). The NVLink fraction applies
when the expert-parallel group lies in one scale-up domain, the RDMA one when it spans
several (the slower side sets the pace of DeepEP's and HybridEP's two-hop transfer).

Load imbalance (``Layout.moe_imbalance``, max/mean tokens per rank) scales the bytes and
the expert work of the most loaded rank (the published benchmark recipes force-balance
routing: 1.0). Dropless layers process every routed copy; a capacity factor caps the
expert work (see :func:`fabricflow.workload.layer_cost.routed_tokens`).

All functions are vectorized over the rows of a layout table (arrays ``[N]``).
"""

from __future__ import annotations

import numpy as np

from .stack import Stack
from .table import LayoutTable

# Dispatchers whose global permutation is fused into the communication kernel.
FLEX = ("deepep", "hybridep")


def dispatch_efficiency(
    stack: Stack, table: LayoutTable, ep_nodes
) -> tuple[np.ndarray, np.ndarray]:
    """(dispatch, combine) fractions ``[N]`` of the collective model's rate that each
    row's dispatcher reaches: its measured fraction of the NVLink line rate inside one
    scale-up domain (``ep_nodes`` = 1), of the RDMA one across domains."""
    inside = np.asarray(ep_nodes) <= 1
    d = table.dispatcher
    out = []
    for kind in ("dispatch", "combine"):
        deepep = np.where(
            inside,
            getattr(stack, f"deepep_nvlink_{kind}"),
            getattr(stack, f"deepep_rdma_{kind}"),
        )
        hybridep = np.where(
            inside,
            getattr(stack, f"hybridep_nvlink_{kind}"),
            getattr(stack, f"hybridep_rdma_{kind}"),
        )
        value = np.where(
            d == "deepep",
            deepep,
            np.where(d == "hybridep", hybridep, stack.alltoall_efficiency),
        )
        out.append(np.asarray(value, dtype=np.float64) * np.ones(len(table)))
    return out[0], out[1]


def dispatch_seconds(
    stack: Stack, table: LayoutTable, dispatch_s, combine_s, ep_nodes
) -> tuple[np.ndarray, np.ndarray]:
    """(dispatch, combine) seconds ``[N]`` of one exchange each, from the collective
    model's times at line rate (``dispatch_s``, ``combine_s``): over the dispatcher's
    achieved fraction, plus the flex kernels' fixed latency per call; 0 stays 0."""
    eff_d, eff_c = dispatch_efficiency(stack, table, ep_nodes)
    latency = np.where(np.isin(table.dispatcher, FLEX), stack.dispatch_latency_s, 0.0)
    d = np.asarray(dispatch_s, dtype=np.float64)
    c = np.asarray(combine_s, dtype=np.float64)
    return (
        np.where(d > 0, d / eff_d + latency, 0.0),
        np.where(c > 0, c / eff_c + latency, 0.0),
    )


def dispatcher_sms(stack: Stack, table: LayoutTable) -> np.ndarray:
    """SMs ``[N]`` the dispatcher's kernels hold while they run (NCCL's for all-to-all
    and all-gather)."""
    d = table.dispatcher
    return np.where(
        d == "deepep",
        stack.deepep_sms,
        np.where(d == "hybridep", stack.hybridep_sms, stack.alltoall_sms),
    ).astype(np.float64)


def permute_bytes(table: LayoutTable, copies, pairs, hidden: float) -> tuple[np.ndarray, ...]:
    """(global permutation, local permutation, FP8 padding) bytes ``[N]`` per pass of a MoE
    layer's token movement around the exchange: ``copies`` token copies this rank sends,
    ``pairs`` token-expert pairs it receives, bf16 rows of ``hidden``.

    All-to-all writes ``top_k`` copies in destination order before the exchange (read 2 +
    write 2 bytes per element) and sorts the received ones by local expert after it; the
    flex dispatchers fuse the first into their kernel; all-gather needs neither (its
    local selection is the un-permutation's mirror, charged as a local permutation).
    Under FP8 the expert inputs are padded to the GEMM's row alignment by a copy, fused
    into HybridEP's permutation. Without ``moe_permute_fusion`` the permutations run
    Megatron-Core's earlier kernels, up to 10x slower for ``top_k`` much smaller than the
    expert count (Transformer Engine PR 1927): charged 10x the bytes."""
    d = table.dispatcher
    unfused = np.where(table.moe_permute_fusion, 1.0, 10.0)
    global_ = np.where(d == "alltoall", 4.0 * hidden * copies, 0.0) * unfused
    local = 4.0 * hidden * pairs * unfused
    pad = np.where((table.precision == "fp8") & (d != "hybridep"), 4.0 * hidden * pairs, 0.0)
    return global_, local, pad


__all__ = [
    "FLEX",
    "dispatch_efficiency",
    "dispatch_seconds",
    "dispatcher_sms",
    "permute_bytes",
]
