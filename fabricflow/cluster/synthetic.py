"""Synthetic traces and the model mix that gives a bare GPU count a model and a layout.

- :data:`SYNTHETIC_MIX` and :func:`mix_shape`: the model and parallel layout of a job of
  ``n`` GPUs when a trace gives only the GPU count (synthetic traces, public cluster
  traces): 1-7 GPUs ``megatron-1.7b`` (data parallel), 8-63 ``llama3-8b`` (TP 8), 64-1,023
  ``llama3-70b`` (TP 8 x PP 4, full recompute), 1,024 and more ``llama3-405b`` (TP 8 x
  PP 16, full recompute); a count the entry's TP x PP does not divide falls back to the
  next smaller entry whose TP x PP divides it (``megatron-1.7b`` divides every count).
  Every entry fits the 80 GB of an H100 (``tests/test_cluster_trace.py`` checks each size
  against the memory model).
- :func:`synthetic_trace`: Poisson arrivals, power-of-two sizes, log-uniform lengths.

A trace of a million jobs is built in seconds: the model, GPU and layout objects are
built once per size and shared by the jobs of that size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fabricflow.cluster.jobspec import JobSpec, is_real, parse_duration, positive_int
from fabricflow.errors import SpecError
from fabricflow.memory_budget import check_memory
from fabricflow.workload.gpu import GpuSpec, load_gpu
from fabricflow.workload.layout import Layout
from fabricflow.workload.model_spec import ModelSpec, load_model

# (smallest size, model, layout without dp) for the mix, smallest first: a job takes the
# largest entry whose size it reaches (and whose TP x PP divides its GPU count).
SYNTHETIC_MIX: tuple[tuple[int, str, dict], ...] = (
    (1, "megatron-1.7b", {"tp": 1, "pp": 1, "micro_batch": 2, "seq_len": 2048}),
    (8, "llama3-8b", {"tp": 8, "pp": 1, "micro_batch": 1, "seq_len": 8192}),
    (64, "llama3-70b", {"tp": 8, "pp": 4, "micro_batch": 1, "seq_len": 8192, "recompute": "full"}),
    (
        1024,
        "llama3-405b",
        {"tp": 8, "pp": 16, "micro_batch": 1, "seq_len": 8192, "recompute": "full"},
    ),
)
DEFAULT_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
# Bytes a synthetic job costs in memory before the simulation (a JobSpec and its share of
# the arrays the generator draws), for the up-front memory check.
JOB_SPEC_BYTES = 400


def mix_shape(gpus: int) -> tuple[str, dict]:
    """``(model preset, Layout keyword arguments)`` of a job of ``gpus`` GPUs in the mix
    (see the module docs); the layout's ``dp`` is ``gpus / (tp x pp)``."""
    gpus = positive_int(gpus, "gpus")
    for smallest, name, shape in reversed(SYNTHETIC_MIX):
        shard = shape["tp"] * shape["pp"]
        if gpus >= smallest and gpus % shard == 0:
            dp = gpus // shard
            batch = dp * shape["micro_batch"] * max(1, 4 * shape["pp"])
            return name, {**shape, "dp": dp, "global_batch": batch}
    raise AssertionError("the 1-GPU entry divides every count")  # pragma: no cover


class MixCache:
    """Models, GPUs and layouts of the mix built once and shared (:func:`mix_shape`)."""

    def __init__(self) -> None:
        self._models: dict[str, ModelSpec] = {}
        self._gpus: dict[str, GpuSpec] = {}
        self._shapes: dict[int, tuple[ModelSpec, Layout]] = {}

    def gpu(self, name: str) -> GpuSpec:
        """The GPU preset ``name`` (loaded once)."""
        if name not in self._gpus:
            self._gpus[name] = load_gpu(name)
        return self._gpus[name]

    def shape(self, gpus: int) -> tuple[ModelSpec, Layout]:
        """The model and validated layout of a job of ``gpus`` GPUs."""
        if gpus not in self._shapes:
            name, kwargs = mix_shape(gpus)
            if name not in self._models:
                self._models[name] = load_model(name)
            model = self._models[name]
            self._shapes[gpus] = (model, Layout(**kwargs).validate(model, gpus))
        return self._shapes[gpus]

    def job(self, job_id: str, gpus: int, gpu: str, **fields) -> JobSpec:
        """A :class:`JobSpec` of the mix (``fields``: arrival_s, duration_s, priority, ...)."""
        model, layout = self.shape(gpus)
        return JobSpec(
            id=job_id,
            model=model,
            gpu=self.gpu(gpu),
            gpus=gpus,
            layout=layout,
            precision=layout.precision,
            seq_len=layout.seq_len,
            global_batch=layout.global_batch,
            **fields,
        )


def synthetic_trace(
    num_jobs: int,
    *,
    seed: int = 0,
    mean_interarrival_s: float = 1800.0,
    sizes: Sequence[int] = DEFAULT_SIZES,
    size_exponent: float = 0.5,
    duration_range: tuple[float, float] = (3600.0, 3 * 86400.0),
    gpu: str = "h100-sxm",
    high_priority_fraction: float = 0.1,
    fabric=None,
    usable_gpus: int | None = None,
) -> list[JobSpec]:
    """A seeded random trace: Poisson arrivals, power-of-two sizes, a model mix.

    Sizes are drawn with probability proportional to ``size ** -size_exponent`` (many
    small jobs, few large ones, as published cluster traces show; 0.5 is our assumption,
    see docs/cluster.md), the model from :data:`SYNTHETIC_MIX` by size, durations
    log-uniform in ``duration_range`` (standalone seconds), and a fraction
    ``high_priority_fraction`` of jobs gets priority 1 (the rest 0).

    Args:
        num_jobs: jobs in the trace (>= 1).
        seed: random seed.
        mean_interarrival_s: mean of the exponential gaps between arrivals (s).
        sizes: allowed GPU counts (powers of two); those above the usable GPU count are
            dropped.
        size_exponent: the size distribution's decay (>= 0).
        duration_range: (min, max) standalone length of a job (s).
        gpu: the GPU preset of every job.
        fabric: optional; caps the sizes at its GPU count.
        usable_gpus: optional; caps the sizes at the GPUs jobs may use (the fabric's less
            the hot spares), so that every job can run.

    Raises:
        SpecError: a bad argument, or no size fits.
        MemoryBudgetError: the trace would not fit in memory (checked before drawing).
    """
    num_jobs = positive_int(num_jobs, "num_jobs")
    check_memory(num_jobs * JOB_SPEC_BYTES, f"a synthetic trace of {num_jobs:,} jobs")
    if not (is_real(mean_interarrival_s) and 0 < mean_interarrival_s < math.inf):
        raise SpecError(
            "mean_interarrival_s", f"must be a finite number > 0 s, got {mean_interarrival_s!r}"
        )
    sizes_array = np.asarray([positive_int(s, "sizes") for s in sizes], dtype=np.int64)
    if np.any(sizes_array & (sizes_array - 1)):
        raise SpecError("sizes", f"must be powers of two, got {sizes_array.tolist()}")
    cap = math.inf if fabric is None else fabric.num_gpus
    if usable_gpus is not None:
        cap = min(cap, positive_int(usable_gpus, "usable_gpus"))
    sizes_array = sizes_array[sizes_array <= cap]
    if sizes_array.size == 0:
        raise SpecError("sizes", f"no size fits the {cap} usable GPUs")
    low, high = (parse_duration(d, "duration_range", allow_zero=False) for d in duration_range)
    if high < low:
        raise SpecError("duration_range", f"(min, max) with min <= max, got {duration_range!r}")
    if not is_real(high_priority_fraction) or not 0.0 <= high_priority_fraction <= 1.0:
        raise SpecError(
            "high_priority_fraction", f"must lie in [0, 1], got {high_priority_fraction!r}"
        )
    # NaN or a negative exponent would reach numpy as NaN probabilities or favour big jobs
    if not is_real(size_exponent) or not 0.0 <= size_exponent < math.inf:
        raise SpecError("size_exponent", f"must be a finite number >= 0, got {size_exponent!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise SpecError("seed", f"must be an integer >= 0, got {seed!r}")
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(mean_interarrival_s, num_jobs))
    arrivals -= arrivals[0]  # the first job arrives at 0
    weights = sizes_array.astype(np.float64) ** -float(size_exponent)
    drawn = rng.choice(sizes_array, size=num_jobs, p=weights / weights.sum())
    durations = np.exp(rng.uniform(np.log(low), np.log(high), num_jobs))
    priorities = (rng.random(num_jobs) < high_priority_fraction).astype(int)
    mix = MixCache()
    mix.gpu(gpu)  # an unknown GPU fails before any job is built
    width = max(4, len(str(num_jobs - 1)))
    return [
        mix.job(
            f"job-{index:0{width}d}",
            int(size),
            gpu,
            priority=int(priority),
            arrival_s=float(arrival),
            duration_s=float(duration),
        )
        for index, (size, priority, arrival, duration) in enumerate(
            zip(
                drawn.tolist(),
                priorities.tolist(),
                arrivals.tolist(),
                durations.tolist(),
                strict=True,
            )
        )
    ]
