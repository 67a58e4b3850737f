"""Benchmark section ``cluster-90d``: 10,000 jobs over 90 days on clos-100k with failures.

As section ``cluster`` (:mod:`.cluster`: the topology scheduler, EASY backfill,
interference, the published MTBFs, 30 min checkpoints of 60 s, 10 min restarts, 16 spare
nodes), with ten times the jobs over three times the days. Standalone lengths are
log-uniform in 30 min - 1 day (mean 6.1 h) so that the offered load stays near the
30-day case's (about 60% of the GPU-hours; the 1 h - 3 d lengths would offer 160% and the
queue would only grow). Target on the 2-core machine: at most 1,800 s and 12 GiB of peak
RSS (``/usr/bin/time -v``). ``--quick``: 1,000 jobs of up to 512 GPUs over 9 days on
dgx-h100-superpod.
"""

from __future__ import annotations

from fabricflow.bench.cluster import run_case, with_targets

TARGET_S = 1800.0
TARGET_RSS_BYTES = 12 * 2**30


def run(args) -> dict:
    lengths = (1800.0, 86400.0)
    if bool(getattr(args, "quick", False)):
        return run_case(
            "dgx-h100-superpod", jobs=1000, days=9.0, largest=512, spares=2, duration_range=lengths
        )
    result = run_case(
        "clos-100k", jobs=10_000, days=90.0, largest=16384, spares=16, duration_range=lengths
    )
    return with_targets(result, TARGET_S, TARGET_RSS_BYTES)
