"""MoE token dispatch: the dispatchers, what they move, at what rate, on how many SMs.

A MoE layer sends each token's ``top_k`` routed copies to the ranks holding their experts
(dispatch) and brings the expert outputs back (combine). Megatron-Core offers four ways,
the layout's ``dispatcher``:

* ``alltoall``: NCCL all-to-all. Tokens are permuted into destination order first (a
  global permutation, ``top_k`` copies written), exchanged, then sorted by local expert
  (a second, local permutation). Timed by the collective model on the fabric, at the
  stack's ``alltoall_dispatch`` / ``alltoall_combine`` fraction of its rate; NCCL holds
  ``alltoall_sms`` SMs.
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

The collective model times each exchange on the fabric (flows sharing the links). NCCL's
all-to-all takes ``t_fabric / e`` (``e`` the stack's ``alltoall_*``, 1: as the collective
model times it). A flex dispatcher whose kernels reach the measured fraction ``e`` of the
per-GPU line rate ``L`` (their algorithm bandwidth over the link's) takes
``max(t_fabric, bytes / (e L))``: its kernel caps the rate, the fabric (contention,
placement) may slow it further; the flex kernels add the stack's ``dispatch_latency_s``
per call. The NVLink fraction and line rate
apply when the expert-parallel group lies in one scale-up domain, the RDMA ones (the
NIC's rate) when it spans several (the slower side sets the pace of DeepEP's and
HybridEP's two-hop transfer).

Load imbalance (``Layout.moe_imbalance``, max/mean tokens per rank) scales the bytes and
the expert work of the most loaded rank (the published benchmark recipes force-balance
routing: 1.0). Dropless layers process every routed copy; a capacity factor caps the
expert work (see :func:`fabricflow.workload.layer_cost.routed_tokens`).

All functions are vectorized over the rows of a layout table (arrays ``[N]``).
"""

from __future__ import annotations

import numpy as np

from fabricflow.workload.layout_table import LayoutTable
from fabricflow.workload.stack import Stack

# Dispatchers whose global permutation is fused into the communication kernel.
FLEX = ("deepep", "hybridep")


def dispatch_efficiency(
    stack: Stack, table: LayoutTable, ep_nodes
) -> tuple[np.ndarray, np.ndarray]:
    """(dispatch, combine) fractions ``[N]`` each row's dispatcher reaches: NCCL's of the
    collective model's rate (``alltoall_*``), a flex dispatcher's of the per-GPU line rate,
    NVLink inside one scale-up domain (``ep_nodes`` = 1), RDMA across domains."""
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
            np.where(d == "hybridep", hybridep, getattr(stack, f"alltoall_{kind}")),
        )
        out.append(np.asarray(value, dtype=np.float64) * np.ones(len(table)))
    return out[0], out[1]


def line_rate(fabric, ep_nodes: int) -> float:
    """Per-GPU line rate (B/s, one direction) an expert-parallel group's exchange runs on:
    the scale-up (NVLink) link's inside one domain (``ep_nodes`` = 1), the NIC's across
    domains; 0 where the fabric has no such link."""
    kind = fabric.scale_up_link_kind if ep_nodes <= 1 else "nic"
    if kind is None or kind not in fabric.link_kinds:
        return 0.0
    capacity = fabric.capacity[fabric.links_of_kind(kind)]
    return float(capacity.max()) if len(capacity) else 0.0


def dispatch_seconds(
    stack: Stack, table: LayoutTable, fabric_s, num_bytes, ep_nodes, line: float
) -> tuple[np.ndarray, np.ndarray]:
    """(dispatch, combine) seconds ``[N]`` of one exchange each: ``fabric_s`` = (dispatch,
    combine) seconds of the collective model, ``num_bytes`` their sizes (bytes per rank),
    ``line`` the per-GPU line rate (:func:`line_rate`; 0: the fractions scale the collective
    model's times instead): ``t_fabric / e`` for NCCL's all-to-all and all-gather,
    ``max(t_fabric, f bytes / (e line))`` plus the latency per call for the flex kernels;
    0 stays 0. ``f`` is the share of the bytes on ``line``: 1 inside one scale-up domain,
    ``1 - 1/ep_nodes`` across ``ep_nodes`` domains (balanced routing sends that share of a
    rank's tokens to other domains; DeepEP's and HybridEP's internode figures are the
    bandwidth of that RDMA part, the rest moves over NVLink at the same time)."""
    efficiency = dispatch_efficiency(stack, table, ep_nodes)
    flex = np.isin(table.dispatcher, FLEX)
    latency = np.where(flex, stack.dispatch_latency_s, 0.0)
    domains = np.maximum(np.asarray(ep_nodes, dtype=np.float64), 1.0)
    on_line = np.where(domains > 1.0, 1.0 - 1.0 / domains, 1.0)
    out = []
    for seconds, size, eff in zip(fabric_s, num_bytes, efficiency, strict=True):
        seconds = np.asarray(seconds, dtype=np.float64)
        if line > 0:
            line_bytes = on_line * np.asarray(size, dtype=np.float64)
            kernel = np.maximum(seconds, line_bytes / (eff * line))
        else:
            kernel = seconds / eff
        time = np.where(flex, kernel, seconds / eff)
        out.append(np.where(seconds > 0, time + latency, 0.0))
    return out[0], out[1]


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
    into HybridEP's permutation."""
    d = table.dispatcher
    global_ = np.where(d == "alltoall", 4.0 * hidden * copies, 0.0)
    local = 4.0 * hidden * pairs
    pad = np.where((table.precision == "fp8") & (d != "hybridep"), 4.0 * hidden * pairs, 0.0)
    return global_, local, pad


__all__ = [
    "FLEX",
    "dispatch_efficiency",
    "dispatch_seconds",
    "dispatcher_sms",
    "line_rate",
    "permute_bytes",
]
