"""Collective operations and the nccl-tests bandwidth conventions.

nccl-tests (``doc/PERFORMANCE.md``) reports, for a collective of size ``S`` bytes that took
``t`` seconds, the *algorithm bandwidth* ``algbw = S / t`` and the *bus bandwidth*
``busbw = algbw * factor(op, n)``, which removes the dependence on the rank count ``n`` so
that busbw can be compared with link speeds:

==============  ==============  =======================================================
op              factor          ``S`` is
==============  ==============  =======================================================
all_reduce      ``2 (n-1) / n``  the buffer every rank holds
reduce_scatter  ``(n-1) / n``    the *input* buffer of a rank (the total size)
all_gather      ``(n-1) / n``    the *output* buffer of a rank (the total size)
all_to_all      ``(n-1) / n``    the buffer a rank sends (``S / n`` to each peer)
broadcast       ``1``            the root's buffer
sendrecv        ``1``            what each rank sends to the next
==============  ==============  =======================================================
"""

from __future__ import annotations

from fabricflow.errors import SpecError

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "sendrecv")


def canonical_op(op: str) -> str:
    """``op`` when it names a collective of :data:`OPS` (``'all_reduce'``, one spelling
    each); SpecError listing them (with the closest) otherwise."""
    if not isinstance(op, str) or op not in OPS:
        raise SpecError(
            "op", f"unknown collective {op!r}; one of {list(OPS)}", value=op, allowed=OPS
        )
    return op


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests bus-bandwidth factor of ``op`` on ``n`` ranks (``busbw = algbw * factor``).

    Example:
        >>> busbw_factor("all_reduce", 8)
        1.75
    """
    op = canonical_op(op)
    if int(n) < 1:
        raise SpecError("n", f"the rank count must be >= 1, got {n}")
    n = int(n)
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("reduce_scatter", "all_gather", "all_to_all"):
        return (n - 1) / n
    return 1.0


def bandwidths(op: str, n: int, size, time_s):
    """``(algbw, busbw)`` in bytes/s for a collective of ``size`` that took ``time_s``.

    Works elementwise on numpy arrays.
    """
    algbw = size / time_s
    return algbw, algbw * busbw_factor(op, n)
