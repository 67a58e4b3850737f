"""Timing and peak-memory helpers for benchmarks."""

from __future__ import annotations

import resource
import sys
import threading
import time
from contextlib import contextmanager


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def current_rss_bytes() -> int:
    """Current resident set size (bytes), from /proc where available."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
        return pages * resource.getpagesize()
    except OSError:
        return peak_rss_bytes()


class _PeakSampler:
    """Samples RSS in a thread to find the peak *during* a block (ru_maxrss never resets)."""

    def __init__(self, interval_s: float = 0.01):
        self.interval_s = interval_s
        self.peak = current_rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, current_rss_bytes())
            self._stop.wait(self.interval_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, current_rss_bytes())


@contextmanager
def measured(result: dict, prefix: str):
    """Record ``{prefix}_s`` (wall time) and ``{prefix}_peak_rss_bytes`` into ``result``."""
    with _PeakSampler() as sampler:
        start = time.perf_counter()
        yield
        result[f"{prefix}_s"] = time.perf_counter() - start
    result[f"{prefix}_peak_rss_bytes"] = sampler.peak
