"""Component failures, checkpoint/restart policy and the goodput of checkpointing.

Failure model: every component of a class (``gpu``, ``nic``, ``link``, ``switch``,
``node``) fails as an independent exponential (Poisson) process with the class's MTBF
(mean time between failures of ONE component) and is repaired after the class's MTTR.
The defaults come from the Llama 3 pre-training reliability report (54 days on 16,384
H100 GPUs); docs/cluster.md shows the arithmetic and which root causes fold into which
class.

What a failure does (the simulator, :mod:`fabricflow.cluster.simulate`):

- ``link``: one switch-to-switch cable (both directions) goes down; traffic is rerouted
  over the survivors, jobs slow down but do not restart.
- ``switch``: every link of the switch goes down (rerouted); GPUs left without any working
  scale-out link (a leaf of a single-plane design) are down and their jobs restart.
- ``gpu``, ``nic`` (one per GPU, its scale-out attachment), ``node`` (all GPUs of a
  server): the GPUs are down; the job restarts from its last checkpoint.

Checkpointing (:class:`CheckpointPolicy`): a job computes for ``interval_s`` then writes a
checkpoint for ``write_s`` (no progress), over and over; a restart takes ``restart_s``.
A failure during work, a write or a restart loses everything since the last completed
write and starts the restart over. These are exactly the assumptions of Daly's renewal
model, so :func:`expected_goodput` is the simulator's expectation for one job:

    E[wall time per segment] = M e^{R/M} (e^{(tau + delta)/M} - 1),
    goodput = tau / E[wall time per segment]

with ``M`` the job's MTBF, ``tau`` the interval, ``delta`` the write time and ``R`` the
restart time (J. T. Daly, "A higher order estimate of the optimum checkpoint interval for
restart dumps", FGCS 22, 2006). Young's optimum is ``sqrt(2 delta M)`` (J. W. Young, CACM
17, 1974); Daly's higher-order estimate refines it.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Mapping

import numpy as np

from fabricflow.assignments import key_values
from fabricflow.cluster.jobspec import parse_duration
from fabricflow.errors import SpecError

COMPONENTS = ("gpu", "nic", "link", "switch", "node")
HOUR = 3600.0

# --- Published statistics (Llama 3 report, Table 5): 54 days on 16,384 H100 GPUs.
LLAMA3_GPUS = 16384
LLAMA3_HOURS = 54 * 24.0
# Unexpected interruptions by root cause, folded into our component classes.
LLAMA3_CAUSES: dict[str, dict[str, float]] = {
    "gpu": {
        "faulty GPU": 148,
        "GPU HBM3 memory": 72,
        "GPU SRAM memory": 19,
        "GPU system processor": 17,
        "silent data corruption": 6,
        "GPU thermal interface + sensor": 6,
    },
    "nic": {"NIC": 7},
    "switch": {"network switch/cable (half, assumed)": 17.5},
    "link": {"network switch/cable (half, assumed)": 17.5},
    "node": {
        "host maintenance": 32,
        "SSD": 3,
        "power supply": 3,
        "server chassis": 2,
        "IO expansion board": 2,
        "CPU": 2,
        "system memory": 2,
    },
}
# Not hardware components: software bug 54, NCCL watchdog timeouts 7, dependency 2.
LLAMA3_NOT_HARDWARE = {"software bug": 54, "NCCL watchdog timeouts": 7, "dependency": 2}
# Component counts of the 16,384-GPU cluster (assumptions, see docs/cluster.md): 2,048
# 8-GPU hosts, one NIC per GPU, 1,024 ToR switches of 16 GPUs, a 1:1 ToR->spine layer of
# 16,384 cables onto 256 spines and 64 aggregation switches fed by 2,340 cables (1:7).
LLAMA3_COMPONENTS = {
    "gpu": LLAMA3_GPUS,
    "nic": LLAMA3_GPUS,
    "node": LLAMA3_GPUS // 8,
    "switch": 1024 + 256 + 64,
    "link": 16384 + 2340,
}


def _published_mtbf() -> dict[str, float]:
    """MTBF (s) of one component = component-hours / failures of its class."""
    return {
        kind: LLAMA3_COMPONENTS[kind] * LLAMA3_HOURS / sum(LLAMA3_CAUSES[kind].values()) * HOUR
        for kind in COMPONENTS
    }


DEFAULT_MTBF_S = _published_mtbf()
# Repair (MTTR) defaults, our assumptions (no published per-class figure): a GPU or node
# swap takes a day, a NIC 4 h, a cable (optic reseat/replace) 2 h, a switch 8 h.
DEFAULT_MTTR_S = {
    "gpu": 24 * HOUR,
    "nic": 4 * HOUR,
    "link": 2 * HOUR,
    "switch": 8 * HOUR,
    "node": 24 * HOUR,
}


@dataclasses.dataclass(frozen=True)
class FailureModel:
    """Per-class MTBF of one component and repair time (seconds).

    Classes absent from ``mtbf_s`` never fail. :meth:`published` gives the defaults.
    """

    mtbf_s: Mapping[str, float]
    mttr_s: Mapping[str, float] = dataclasses.field(default_factory=lambda: dict(DEFAULT_MTTR_S))

    def __post_init__(self) -> None:
        mtbf = _checked_map(self.mtbf_s, "mtbf", allow_zero=False)
        mttr = {**DEFAULT_MTTR_S, **_checked_map(self.mttr_s, "mttr", allow_zero=True)}
        object.__setattr__(self, "mtbf_s", mtbf)
        object.__setattr__(self, "mttr_s", mttr)

    @classmethod
    def published(cls, **overrides) -> FailureModel:
        """The Llama 3 defaults for every class; ``overrides`` replace some (``gpu="50000h"``)."""
        return cls({**DEFAULT_MTBF_S, **overrides})


def _checked_map(values, field: str, *, allow_zero: bool) -> dict[str, float]:
    if not isinstance(values, Mapping):
        raise SpecError(field, f"expected a mapping of {list(COMPONENTS)} to durations")
    out = {}
    for kind, value in values.items():
        if kind not in COMPONENTS:
            raise SpecError(f"{field}.{kind}", f"unknown component; allowed: {list(COMPONENTS)}")
        out[kind] = parse_duration(value, f"{field}.{kind}", allow_zero=allow_zero)
    return out


def failure_model(value) -> FailureModel | None:
    """``None``, a :class:`FailureModel`, ``"default"`` (published) or ``{class: MTBF}``."""
    if value is None or isinstance(value, FailureModel):
        return value
    if value == "default":
        return FailureModel.published()
    if isinstance(value, Mapping):
        return FailureModel(dict(value))
    raise SpecError(
        "failures",
        f"expected None, 'default', a FailureModel or a mapping "
        f"of {list(COMPONENTS)} to MTBFs, got {value!r}",
    )


@dataclasses.dataclass(frozen=True)
class CheckpointPolicy:
    """Checkpoint and restart policy of every job (seconds; nodes for ``spares``).

    Attributes:
        interval_s: compute time between checkpoints; None = never checkpoint (a restart
            starts the job over).
        write_s: time to write one checkpoint (the job makes no progress meanwhile).
        restart_s: time from a failure (or preemption) to computing again: detection,
            re-launch, loading the checkpoint.
        spares: hot spare nodes held idle; a job that loses a node continues on a spare
            after ``restart_s`` instead of waiting in the queue.
    """

    interval_s: float | None = None
    write_s: float = 0.0
    restart_s: float = 0.0
    spares: int = 0

    def __post_init__(self) -> None:
        if self.interval_s is not None:
            object.__setattr__(
                self,
                "interval_s",
                parse_duration(self.interval_s, "checkpoint.interval_s", allow_zero=False),
            )
        object.__setattr__(self, "write_s", parse_duration(self.write_s, "checkpoint.write_s"))
        object.__setattr__(
            self, "restart_s", parse_duration(self.restart_s, "checkpoint.restart_s")
        )
        spares = self.spares
        if isinstance(spares, bool) or not isinstance(spares, numbers.Integral) or spares < 0:
            raise SpecError("checkpoint.spares", f"must be an integer >= 0 nodes, got {spares!r}")
        object.__setattr__(self, "spares", int(spares))


def _positive(value, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise SpecError(field, f"must be a number of seconds, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise SpecError(field, f"must be finite and > 0 s, got {value!r}")
    return number


def _non_negative(value, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise SpecError(field, f"must be a number of seconds, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise SpecError(field, f"must be finite and >= 0 s, got {value!r}")
    return number


def young_daly_interval(write_s: float, mtbf_s: float, *, method: str = "daly") -> float:
    """Checkpoint interval (compute seconds between writes) that maximizes goodput.

    ``young``: ``sqrt(2 delta M)`` (Young 1974). ``daly``: Daly's (2006) higher-order
    estimate ``sqrt(2 delta M) [1 + sqrt(delta / 2M) / 3 + delta / 18M] - delta`` for
    ``delta < 2M``, else ``M``. Both agree to first order in ``sqrt(delta / M)``.
    """
    delta = _positive(write_s, "write_s")
    mtbf = _positive(mtbf_s, "mtbf_s")
    if method == "young":
        return math.sqrt(2.0 * delta * mtbf)
    if method != "daly":
        raise SpecError("method", f"unknown method {method!r}; allowed: ['young', 'daly']")
    if delta >= 2.0 * mtbf:
        return mtbf
    ratio = delta / (2.0 * mtbf)
    return math.sqrt(2.0 * delta * mtbf) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - delta


def expected_goodput(interval_s: float, write_s: float, restart_s: float, mtbf_s: float) -> float:
    """Expected fraction of wall time spent on kept work, exponential failures (Daly 2006).

    ``interval_s / (M e^{R/M} (e^{(interval_s + write_s)/M} - 1))``: failures strike
    during work, writes and restarts alike; a failure loses the work since the last
    completed write; a failure during a restart starts the restart over.
    """
    tau = _positive(interval_s, "interval_s")
    delta = _non_negative(write_s, "write_s")
    restart = _non_negative(restart_s, "restart_s")
    mtbf = _positive(mtbf_s, "mtbf_s")
    exponent = (restart + tau + delta) / mtbf
    if exponent > 700.0:  # e^700 ~ 1e304: the expected time overflows, goodput is ~e^-700
        return tau / mtbf * math.exp(-exponent)
    return tau / (mtbf * math.exp(restart / mtbf) * math.expm1((tau + delta) / mtbf))


def best_checkpoint_interval(
    write_s: float,
    restart_s: float,
    mtbf_s: float,
    *,
    goodput: Callable[[float], float] | None = None,
    bounds: tuple[float, float] | None = None,
    points: int = 25,
) -> tuple[float, float]:
    """``(interval_s, goodput)`` maximizing ``goodput(interval_s)``.

    ``goodput`` defaults to :func:`expected_goodput` with these ``write_s``,
    ``restart_s``, ``mtbf_s``; pass a simulation (interval -> simulated goodput) to
    optimise that instead. The search scans ``points`` intervals log-spaced over
    ``bounds`` (default ``[Young / 20, Young * 20]``), then refines by golden-section in
    log space around the best point.
    """
    delta = _positive(write_s, "write_s")
    mtbf = _positive(mtbf_s, "mtbf_s")
    restart = _non_negative(restart_s, "restart_s")
    if goodput is None:

        def goodput(tau: float) -> float:
            return expected_goodput(tau, delta, restart, mtbf)

    young = math.sqrt(2.0 * delta * mtbf)
    low, high = bounds if bounds is not None else (young / 20.0, young * 20.0)
    low, high = _positive(low, "bounds"), _positive(high, "bounds")
    if high <= low:
        raise SpecError("bounds", f"(low, high) with low < high, got {bounds!r}")
    grid = np.geomspace(low, high, max(3, int(points)))
    values = np.array([goodput(float(t)) for t in grid])
    best = int(np.argmax(values))
    a = math.log(grid[max(best - 1, 0)])
    b = math.log(grid[min(best + 1, grid.size - 1)])
    golden = (math.sqrt(5.0) - 1.0) / 2.0
    c, d = b - golden * (b - a), a + golden * (b - a)
    fc, fd = goodput(math.exp(c)), goodput(math.exp(d))
    for _ in range(40):
        if fc > fd:
            b, d, fd = d, c, fc
            c = b - golden * (b - a)
            fc = goodput(math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + golden * (b - a)
            fd = goodput(math.exp(d))
    tau = math.exp((a + b) / 2.0)
    value = goodput(tau)
    if values[best] > value:
        return float(grid[best]), float(values[best])
    return tau, float(value)


def job_mtbf(gpus: int, gpus_per_node: int, model: FailureModel) -> float:
    """MTBF (s) of a job on ``gpus`` GPUs: the failures that restart it (its GPUs, their
    NICs and its nodes; links and switches mostly reroute). ``inf`` when none can fail."""
    nodes = math.ceil(gpus / gpus_per_node)
    rate = 0.0
    for kind, count in (("gpu", gpus), ("nic", gpus), ("node", nodes)):
        if kind in model.mtbf_s:
            rate += count / model.mtbf_s[kind]
    return math.inf if rate == 0 else 1.0 / rate


def parse_component_durations(items, flag: str) -> dict[str, float]:
    """``["gpu=50000h", "link=2e6h"]`` -> ``{"gpu": 1.8e8, ...}`` (seconds); a component
    given twice with different durations is refused."""
    pairs = key_values(
        items,
        flag,
        example="COMPONENT=DURATION (e.g. gpu=50000h)",
        keys=COMPONENTS,
        key_name="component",
    )
    return {
        kind: parse_duration(value, f"{flag} {kind}", allow_zero=False)
        for kind, value in pairs.items()
    }


def log_failure_slowdown(work_s: float, mtbf_s: float, policy: CheckpointPolicy) -> float:
    """Natural log of the expected wall time to compute ``work_s`` seconds under failures
    over the failure-free wall time (0 when nothing fails), for a job whose failures are
    exponential with mean ``mtbf_s`` (Daly 2006, as :func:`expected_goodput`).

    A failure loses the work since the last completed checkpoint write and costs
    ``policy.restart_s`` (a failure during a restart starts it over). A piece of ``T``
    seconds (one checkpoint interval plus its write, or the whole job without checkpoints)
    then takes ``M e^{R/M} (e^{T/M} - 1)`` seconds on average. Computed in logs: ``T / M``
    of hundreds would overflow.
    """
    if work_s <= 0.0 or not math.isfinite(mtbf_s):
        return 0.0
    if policy.interval_s is None:
        piece, pieces, writes = work_s, 1, 0.0
    else:
        pieces = math.ceil(work_s / policy.interval_s)
        piece = work_s / pieces + policy.write_s
        writes = (pieces - 1) * policy.write_s  # none after the last piece
    ratio = piece / mtbf_s
    # log(expm1(x)) without overflow: x + log1p(-exp(-x)) for large x
    log_expm1 = (
        math.log(math.expm1(ratio)) if ratio < 50.0 else ratio + math.log1p(-math.exp(-ratio))
    )
    expected = math.log(pieces) + math.log(mtbf_s) + policy.restart_s / mtbf_s + log_expm1
    return expected - math.log(work_s + writes)
