"""The text format of nccl-tests' performance tables (``all_reduce_perf`` and friends).

nccl-tests (github.com/NVIDIA/nccl-tests, ``src/common.cu``) prints one line per message
size: size in bytes, element count, data type, reduction, root, then for the out-of-place
and the in-place run the time (us), algorithm bandwidth and bus bandwidth (GB/s) and the
number of wrong elements, and at the end the average bus bandwidth. Tools that read
nccl-tests logs (dashboards, acceptance scripts, fabricflow's own calibration) read this
layout, so ``fabricflow collective --out`` writes it beside its CSV.

The model has no in-place/out-of-place difference and checks no data: both halves carry
the same figures and ``#wrong`` is ``N/A`` (what nccl-tests prints with ``-c 0``).
"""

from __future__ import annotations

__all__ = ["NCCL_TESTS_OPS", "format_nccl_tests"]

# fabricflow op -> (nccl-tests binary, redop, root) as nccl-tests prints them
NCCL_TESTS_OPS = {
    "all_reduce": ("all_reduce_perf", "sum", -1),
    "reduce_scatter": ("reduce_scatter_perf", "sum", -1),
    "all_gather": ("all_gather_perf", "none", -1),
    "all_to_all": ("alltoall_perf", "none", -1),
    "broadcast": ("broadcast_perf", "none", 0),
    "sendrecv": ("sendrecv_perf", "none", -1),
}


def _time(us: float) -> str:
    """nccl-tests' time column: fewer decimals as the time grows (``%7.0f`` from 10 ms)."""
    if us >= 10000.0:
        return f"{us:7.0f}"
    if us >= 100.0:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


def format_nccl_tests(rows: list[dict], op: str, *, gpus: int, title: str = "") -> str:
    """nccl-tests text of ``rows`` (:func:`fabricflow.collective.sweep.table_rows`: keys
    ``bytes``, ``count``, ``time_us``, ``algbw_GBps``, ``busbw_GBps``) for ``op``, run on
    ``gpus`` GPUs. ``title``: a comment line on top (what was modeled).

    Raises:
        KeyError: an ``op`` nccl-tests has no binary for (see :data:`NCCL_TESTS_OPS`).
    """
    binary, redop, root = NCCL_TESTS_OPS[op]
    sizes = [row["bytes"] for row in rows]
    lines = [
        f"# {binary}: modeled by fabricflow{': ' + title if title else ''}",
        f"# nThread 1 nGpus {gpus} minBytes {min(sizes, default=0)} maxBytes "
        f"{max(sizes, default=0)} step: 2(factor) warmup iters: 0 iters: 1 agg iters: 1 "
        "validation: 0 graph: 0",
        "#",
        f"#{'':>64}out-of-place{'':>23}in-place",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
        "            (us)  (GB/s)  (GB/s)",
    ]
    for row in rows:
        half = f"  {_time(row['time_us'])}  {row['algbw_GBps']:6.2f}  {row['busbw_GBps']:6.2f}  {'N/A':>5}"
        lines.append(
            f"{row['bytes']:12d}  {row['count']:12d}  {'float':>8}  {redop:>6}  {root:6d}"
            + half
            + half
        )
    average = sum(row["busbw_GBps"] for row in rows) / max(len(rows), 1)
    lines += [
        "# Out of bounds values : 0 OK",
        f"# Avg bus bandwidth    : {average:g} ",
        "#",
    ]
    return "\n".join(lines) + "\n"
