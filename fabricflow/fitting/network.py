"""The network side of a calibration: nccl-tests logs -> the collective model's constants.

Each log is one collective (op from the binary named in the log, e.g. ``all_reduce_perf``,
else ``op``) on the job's first ``gpus`` GPUs of the fabric (the ranks the log lists, when
it lists them), as ``fabricflow collective`` runs it. Its measured time per size (the
mean of the out-of-place and in-place columns), at sizes of at least ``min_size``, is
fitted by the ``network.*`` parameters (:data:`~fabricflow.workload.calibration.NETWORK_PARAMETERS`):
the scale-up and network payload efficiencies, the NVLS and SHARP reduction efficiencies
and the scale-up and network latency scales.

Two logs of the same op and GPU count whose bus bandwidths at a size differ by more than
:data:`CONTRADICTION` are refused, naming both files: no set of physical constants can
reproduce both.
"""

from __future__ import annotations

import dataclasses
import os
import re

import numpy as np

from fabricflow.collective.nccl_cost import CostModel
from fabricflow.collective.nccl_tests import NCCL_TESTS_OPS, NcclTestsLog, read_nccl_tests
from fabricflow.collective.ops import busbw_factor, canonical_op
from fabricflow.collective.timing import prepare_collective
from fabricflow.errors import SpecError
from fabricflow.fabric.fabric import Fabric

__all__ = ["CONTRADICTION", "LOG_SIGMA", "MIN_SIZE", "NcclInput", "network_inputs"]

LOG_SIGMA = 0.02
"""Relative run-to-run noise of an nccl-tests time (about 2 % on a quiet system)."""

CONTRADICTION = 0.10
"""Bus bandwidths of one op, GPU count and size further apart than this contradict each
other (about 3 sigma of two measurements with :data:`LOG_SIGMA` noise each, rounded up)."""

MIN_SIZE = 2**20
"""Smallest message size fitted by default (1 MiB)."""

_BINARIES = {binary: op for op, (binary, _, _) in NCCL_TESTS_OPS.items()}
_BINARY = re.compile(r"\b(" + "|".join(sorted(_BINARIES)) + r")\b")


@dataclasses.dataclass(frozen=True)
class NcclInput:
    """One nccl-tests log prepared for the fit.

    Attributes:
        name: the file. op: the collective. gpus: ranks of the run.
        groups: int ``[1, gpus]`` fabric GPUs of the run.
        bytes: float64 ``[S]`` sizes fitted. time_s: float64 ``[S]`` measured seconds.
        busbw_GBps: float64 ``[S]`` measured bus bandwidth.
    """

    name: str
    op: str
    gpus: int
    groups: np.ndarray
    bytes: np.ndarray
    time_s: np.ndarray
    busbw_GBps: np.ndarray

    def predict(self, fabric: Fabric, cost: CostModel) -> np.ndarray:
        """float64 ``[S]`` modeled seconds with ``cost``."""
        prepared = prepare_collective(fabric, self.op, self.groups, cost=cost)
        return np.array([r.time_s for r in prepared.evaluate(self.bytes)])

    def busbw(self, time_s: np.ndarray) -> np.ndarray:
        """Bus bandwidth (GB/s) of times ``time_s`` at this log's sizes."""
        return self.bytes / time_s * busbw_factor(self.op, self.gpus) / 1e9


def _op_of(path: str, log: NcclTestsLog, op: str | None, ranks: int | None) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            found = _BINARY.search(handle.read(4096))
    except OSError as error:
        raise SpecError("nccl-tests", f"cannot read {path!r}: {error}") from error
    named = _BINARIES[found.group(1)] if found else None
    if named is None:
        named = _BINARIES.get(next((b for b in _BINARIES if b in os.path.basename(path)), ""))
    if named is not None:
        if op is not None and canonical_op(op) != named:
            raise SpecError("--op", f"{path} is a {named} log, not {op}")
        return named
    if op is not None:
        return canonical_op(op)
    inferred = _infer_op(log, ranks or 0)
    if inferred is None:
        raise SpecError(
            "--op",
            f"{path} does not name its nccl-tests binary and its columns fit several ops; "
            f"give the op (one of {sorted(NCCL_TESTS_OPS)})",
        )
    return inferred


_TYPE_BYTES = {
    "float": 4, "half": 2, "bfloat16": 2, "double": 8, "int8": 1, "uint8": 1, "int32": 4,
    "uint32": 4, "int64": 8, "uint64": 8, "float8e4m3": 1, "float8e5m2": 1,
}  # fmt: skip


def _infer_op(log: NcclTestsLog, ranks: int) -> str | None:
    """The op of a log from its columns (nccl-tests' ``count`` is per rank's buffer):
    a reduction whose count covers the size is an all-reduce, one whose count is a rank's
    share a reduce-scatter; a root marks a broadcast, a whole-size count without a
    reduction a send/receive. None when the columns fit several ops (all-gather and
    all-to-all) or the type is unknown."""
    width = _TYPE_BYTES.get(log.data_type)
    if width is None or ranks < 2:
        return None
    whole = bool(np.all(log.count * width == log.bytes))
    share = bool(np.all(log.count * width * ranks == log.bytes))
    if log.redop != "none":
        return "all_reduce" if whole else ("reduce_scatter" if share else None)
    if np.all(log.root >= 0):
        return "broadcast"
    return "sendrecv" if whole else None


def network_inputs(
    paths,
    fabric: Fabric,
    gpus: int | None,
    *,
    op: str | None = None,
    min_size: float = MIN_SIZE,
) -> list[NcclInput]:
    """The logs at ``paths`` read and checked (module docstring).

    Raises:
        SpecError: a log that cannot be read, names another op than ``op``, has no size
            of at least ``min_size``, lists another GPU count than ``gpus``, needs more
            GPUs than ``fabric`` has, or contradicts another log (both named).
    """
    inputs = []
    for path in paths:
        name = os.fspath(path)
        log = read_nccl_tests(name)
        ranks = log.ranks or gpus
        collective = _op_of(name, log, op, ranks)
        if ranks is None:
            raise SpecError("--gpus", f"{name} lists no ranks; give the job's GPU count")
        if gpus is not None and log.ranks and log.ranks != gpus:
            raise SpecError("--gpus", f"{name} lists {log.ranks} ranks, not --gpus {gpus}")
        if ranks < 2 or ranks > fabric.num_gpus:
            raise SpecError(
                "--gpus", f"{name}: {ranks} GPUs; the fabric {fabric.name!r} has {fabric.num_gpus}"
            )
        keep = log.bytes >= min_size
        if not keep.any():
            raise SpecError(
                "nccl-tests", f"{name}: no size of at least {int(min_size)} B to calibrate on"
            )
        time_s = log.time_us[:, keep].mean(axis=0) * 1e-6
        if np.any(time_s <= 0):
            raise SpecError("nccl-tests", f"{name}: a time of 0 us at a fitted size")
        sizes = log.bytes[keep].astype(np.float64)
        inputs.append(
            NcclInput(
                name,
                collective,
                int(ranks),
                np.arange(ranks)[None, :],
                sizes,
                time_s,
                sizes / time_s * busbw_factor(collective, int(ranks)) / 1e9,
            )
        )
    _refuse_contradictions(inputs)
    return inputs


def _refuse_contradictions(inputs: list[NcclInput]) -> None:
    for i, a in enumerate(inputs):
        for b in inputs[i + 1 :]:
            if (a.op, a.gpus) != (b.op, b.gpus):
                continue
            common, ia, ib = np.intersect1d(a.bytes, b.bytes, return_indices=True)
            ratio = a.busbw_GBps[ia] / b.busbw_GBps[ib]
            bad = np.flatnonzero(np.abs(np.log(ratio)) > np.log1p(CONTRADICTION))
            if bad.size:
                k = int(bad[np.argmax(np.abs(np.log(ratio[bad])))])
                raise SpecError(
                    "nccl-tests",
                    f"{a.name} and {b.name} contradict each other: {a.op} on {a.gpus} GPUs at "
                    f"{int(common[k])} B measured {a.busbw_GBps[ia[k]]:.1f} and "
                    f"{b.busbw_GBps[ib[k]]:.1f} GB/s bus bandwidth (more than "
                    f"{100 * CONTRADICTION:.0f}% apart); drop one, or rerun both",
                )
