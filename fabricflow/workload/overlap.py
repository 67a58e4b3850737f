"""What overlapping communication with compute costs: the interference model.

A collective that runs while compute kernels run takes part of the GPU: its kernel holds
``sms`` streaming multiprocessors (one CTA per channel) for as long as it runs, and it
reads and writes HBM at about twice its wire rate (each byte sent is read, each byte
received written). While it runs, compute proceeds on the remaining ``1 - sms / SMs`` of
the GPU, and its memory-bound part also loses the HBM bandwidth the transfer takes. For
a collective of ``comm`` seconds hidden behind ``compute`` seconds of work:

    slowdown f = sms / SMs + memory_share * min(1, 2 * wire_rate / hbm_rate)
    time       = max(comm, compute + f * comm)

so the exposed part is ``max(comm - compute, f * comm)``: a collective is never free, and
one longer than the compute still shows as its excess. ``f * comm`` is what the overlap
cost; ``min(comm, compute)`` what it hid.

SM counts per dimension (:data:`COMM_SMS`, docs/references.md §15): NCCL collectives
launch one CTA per channel, 24 on H100 as observed beside a GEMM; Transformer Engine's
tensor-parallel overlap uses 1 SM (ring exchange over copy engines) for its all-gathers
and 16 SMs (pipelined reduce-scatter) for its reduce-scatters, 8.5 on average over a pass;
the MoE dispatcher's SMs are the software stack's (``alltoall_sms``, ``deepep_sms``,
``hybridep_sms``; :func:`fabricflow.workload.dispatch.dispatcher_sms`); NCCL
point-to-point for CP ring
exchange 2 channels per peer each way (4 CTAs); tensor-parallel collectives run by NCCL
beside the backward GEMMs (asynchronous TP communication, ``tp_nccl``) take NCCL's 24.
"""

from __future__ import annotations

import numpy as np

# SMs a communication kernel occupies while it runs, per dimension of the step model.
COMM_SMS = {"tp": 8.5, "tp_nccl": 24.0, "cp": 4.0, "dp": 24.0, "pp": 2.0}


def slowdown(gpu, dim: str, wire_bytes, comm_s, memory_share, sms=None) -> np.ndarray:
    """Fraction ``f`` ``[N]`` by which compute slows while ``dim``'s collective runs:
    its SMs over the GPU's, plus the memory-bound share of the hidden compute times the
    fraction of HBM bandwidth the transfer takes (``wire_bytes`` sent in ``comm_s``).
    ``sms``: the collective kernel's SMs (``[N]`` or a number) where they depend on more
    than the dimension (the MoE dispatcher's, required for ``ep``); None: :data:`COMM_SMS`."""
    comm_s = np.asarray(comm_s, dtype=np.float64)
    rate = np.divide(
        np.asarray(wire_bytes, dtype=np.float64),
        comm_s,
        out=np.zeros_like(comm_s),
        where=comm_s > 0,
    )
    hbm = gpu.hbm_bandwidth * gpu.memory_efficiency
    held = COMM_SMS[dim] if sms is None else np.asarray(sms, dtype=np.float64)
    return held / float(gpu.compute_units) + np.asarray(memory_share) * np.minimum(
        1.0, 2.0 * rate / hbm
    )


def exposed(comm_s, compute_s, f) -> np.ndarray:
    """Seconds ``[N]`` a collective of ``comm_s`` adds when overlapped with ``compute_s`` of
    compute that it slows by ``f``: ``max(comm - compute, f * comm)`` (0 for no comm)."""
    comm_s = np.asarray(comm_s, dtype=np.float64)
    return np.where(comm_s > 0, np.maximum(comm_s - compute_s, f * comm_s), 0.0)
