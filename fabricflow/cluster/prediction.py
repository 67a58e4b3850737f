"""Failure prediction and proactive migration: a predictor with recall, precision and lead
time; a proactive checkpoint and a move to spare (or idle) nodes on an alarm; the cost of
false alarms; and the renewal-theory goodput it gives one job.

**The predictor** (:class:`Predictor`). Each failure of a predicted class is announced,
with probability ``recall`` and independently of the others, ``lead_s`` before it
strikes. Besides these true alarms it raises false alarms at random components of the
class, at the rate that makes ``precision`` the share of true ones among all alarms:
``recall x (1 - precision) / precision`` false alarms per failure of the class. Defaults
(docs/references.md §8): recall 0.6 and precision 0.85 (Gainaru et al., SC 2012, online
prediction on Blue Waters: "over 60% recall and a precision of over 85%" for some failure
types), a lead of 3 minutes (Das et al., HPDC 2018, Desh: "as high as 3 minutes average
lead time" at 85% recall). Predicted classes default to those whose failure restarts a job
(``gpu``, ``nic``, ``node``).

**What an alarm does** (:class:`PredictedFailures`, driven by the simulator). The alarmed
component is drained: its free GPUs leave the pool at once, and no job is placed on it
until it is repaired (a true alarm: at the failure, then after its repair time) or
inspected (a false alarm: ``drain_s``). Every job on it:

- computing: takes a proactive checkpoint (``checkpoint_s``, default the policy's write
  time; an alarm during a periodic write lets that write finish instead), then moves:
  its nodes with drained GPUs are swapped for hot spare nodes, or wholly free nodes when
  no spare is left, and it restarts there (``restart_s``); without any it goes back to
  the queue with its checkpoint (wait reason ``alarm``). A job smaller than a node goes
  back to the queue;
- restarting: restarts over on other nodes at once;
- checkpointing already: moves off every drained node when the write ends.

A failure that strikes before the proactive checkpoint is written (a lead shorter than
the write) loses the work since the last checkpoint, as an unpredicted one does. A false
alarm costs the job its checkpoint and its restart, and the cluster the drained node.

**Renewal theory** (:func:`expected_goodput_with_prediction`): the simulator follows
exactly the assumptions of :func:`~.failures.expected_goodput` (Daly), extended with the
two alarm streams, so the expected goodput of one job has a closed form over one
checkpoint segment (see the function); the tests hold the simulator to it.
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import numpy as np

from fabricflow.cluster import events as ev
from fabricflow.cluster.failures import FailureModel
from fabricflow.cluster.jobspec import parse_duration
from fabricflow.cluster.records import CHECKPOINTING, RESTARTING, RUNNING
from fabricflow.errors import SpecError

DEFAULT_RECALL = 0.6
DEFAULT_PRECISION = 0.85
DEFAULT_LEAD_S = 180.0
DEFAULT_DRAIN_S = 3600.0  # our assumption: a node flagged by a false alarm is out for an hour
PREDICTED_CLASSES = ("gpu", "nic", "node")


@dataclasses.dataclass(frozen=True)
class Predictor:
    """A failure predictor and the response to its alarms (seconds).

    Attributes:
        recall: share of failures announced (0-1).
        precision: share of alarms that are followed by the failure they announce (0-1].
        lead_s: how long before its failure a true alarm comes.
        classes: the component classes predicted (of ``gpu``, ``nic``, ``node``).
        checkpoint_s: time of the proactive checkpoint; None: the checkpoint policy's
            write time.
        drain_s: how long a component stays out of service after a false alarm.
    """

    recall: float = DEFAULT_RECALL
    precision: float = DEFAULT_PRECISION
    lead_s: float = DEFAULT_LEAD_S
    classes: tuple[str, ...] = PREDICTED_CLASSES
    checkpoint_s: float | None = None
    drain_s: float = DEFAULT_DRAIN_S

    def __post_init__(self) -> None:
        for name, low_open in (("recall", False), ("precision", True)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise SpecError(f"prediction.{name}", f"must be a number in [0, 1], got {value!r}")
            value = float(value)
            if not (0.0 < value <= 1.0 if low_open else 0.0 <= value <= 1.0):
                bound = "(0, 1]" if low_open else "[0, 1]"
                raise SpecError(f"prediction.{name}", f"must lie in {bound}, got {value!r}")
            object.__setattr__(self, name, value)
        object.__setattr__(self, "lead_s", parse_duration(self.lead_s, "prediction.lead_s"))
        object.__setattr__(self, "drain_s", parse_duration(self.drain_s, "prediction.drain_s"))
        if self.checkpoint_s is not None:
            object.__setattr__(
                self, "checkpoint_s", parse_duration(self.checkpoint_s, "prediction.checkpoint_s")
            )
        classes = (self.classes,) if isinstance(self.classes, str) else tuple(self.classes)
        unknown = [c for c in classes if c not in PREDICTED_CLASSES]
        if unknown or not classes:
            raise SpecError(
                "prediction.classes",
                f"predicted classes are some of {list(PREDICTED_CLASSES)} (the failures that "
                f"restart a job), got {list(classes)}",
            )
        object.__setattr__(self, "classes", classes)

    @property
    def false_per_failure(self) -> float:
        """False alarms per failure of a predicted class: ``recall (1 - p) / p``."""
        return self.recall * (1.0 - self.precision) / self.precision


def check_predictor(value, model: FailureModel | None) -> Predictor | None:
    """``value`` if it is None or a :class:`Predictor` (which needs failures to predict)."""
    if value is None:
        return None
    if not isinstance(value, Predictor):
        raise SpecError("prediction", f"expected None or a Predictor, got {value!r}")
    if model is None:
        raise SpecError("prediction", "a predictor needs failures to predict (failures=...)")
    return value


class PredictedFailures:
    """The predictor inside one simulation: failures drawn ahead by ``lead_s``, alarms,
    drains, proactive checkpoints and moves (see the module docs). ``sim`` is the
    simulator (:mod:`.simulate`); the event kinds are :mod:`.events`."""

    def __init__(self, predictor: Predictor, sim):
        self.predictor = predictor
        self.sim = sim
        model = sim.model
        self.classes = {kind for kind in predictor.classes if kind in model.mtbf_s}
        self.rng = np.random.default_rng(np.random.SeedSequence([sim.seed, 0x5EED]))
        self.drained: dict[tuple[str, int], bool] = {}  # (class, index) -> true alarm
        self.protected = np.zeros(sim.num_gpus, dtype=bool)  # drained, job still writing
        self.counts = {
            "alarms": 0,
            "true_alarms": 0,
            "false_alarms": 0,
            "ignored_alarms": 0,
            "predicted_failures": 0,
            "proactive_checkpoints": 0,
            "migrations": 0,
            "requeued_after_alarm": 0,
            "failures_during_checkpoint": 0,
        }

    # -------------------------------------------------------------- streams
    def start(self, kind: str) -> None:
        """Begin the failure stream of ``kind`` (drawn ``lead_s`` ahead) and its false alarms."""
        sim = self.sim
        when, index = sim.failing.draw(kind, 0.0)
        sim.push(max(0.0, when - self.predictor.lead_s), ev.DRAW, kind, (when, index))
        self._next_false_alarm(kind, 0.0)

    def _next_false_alarm(self, kind: str, now: float) -> None:
        rate = self.sim.failing.rate(kind) * self.predictor.false_per_failure
        if rate > 0:
            when = now + self.rng.exponential(1.0 / rate)
            index = int(self.rng.integers(self.sim.failing.count[kind]))
            self.sim.push(when, ev.ALARM, kind, (index, None))

    def handle(self, kind: int, a, b) -> None:
        """One predictor event (:mod:`.events`)."""
        if kind == ev.DRAW:
            self._draw(a, *b)
        elif kind == ev.ALARM:
            self._alarm(a, *b)
        elif kind == ev.PREDICTED_FAIL:
            self._strike(a, b)
        elif kind == ev.CHECKPOINTED:
            self._checkpointed(a, b)
        elif kind == ev.UNDRAIN:
            self._undrain(a, b)
        else:  # pragma: no cover - the simulator hands over only these kinds
            raise AssertionError(kind)

    def _draw(self, kind: str, when: float, index: int) -> None:
        """``lead_s`` before the failure of component ``index`` at ``when``: maybe alarm."""
        sim = self.sim
        if self.rng.random() < self.predictor.recall:
            self._alarm(kind, index, when)
        sim.push(when, ev.PREDICTED_FAIL, kind, index)
        after, next_index = sim.failing.draw(kind, when)
        sim.push(max(sim.t, after - self.predictor.lead_s), ev.DRAW, kind, (after, next_index))

    # -------------------------------------------------------------- alarms and drains
    def _alarm(self, kind: str, index: int, failure_at: float | None) -> None:
        sim = self.sim
        self.counts["alarms"] += 1
        self.counts["true_alarms" if failure_at is not None else "false_alarms"] += 1
        if failure_at is None:
            self._next_false_alarm(kind, sim.t)
        key = (kind, index)
        if sim.failing.active[kind][index] or key in self.drained:
            self.counts["ignored_alarms"] += 1  # already failed or drained
            return
        self.drained[key] = failure_at is not None
        gpus, _ = sim.failing.parts(kind, index)
        sim.failing.gpu_drain[gpus] += 1
        owners = np.unique(sim.state.owner[gpus])
        for owner in owners[owners >= 0].tolist():
            self._respond(sim.jobs[int(owner)])
        sim.failure_handling.apply_health(
            False
        )  # the component's GPUs leave the pool (held ones later)
        if failure_at is None:
            sim.push(sim.t + self.predictor.drain_s, ev.UNDRAIN, kind, index)

    def _respond(self, job) -> None:
        """A job on an alarmed component: checkpoint then move, or move now."""
        sim = self.sim
        job.alarms += 1
        if job.state == RUNNING:
            sim.lifecycle.advance(job)
            writing = sim.tau is not None and job.pos > sim.tau
            period = (sim.tau or 0.0) + sim.delta
            write = (
                period - job.pos
                if writing
                else (
                    self.predictor.checkpoint_s
                    if self.predictor.checkpoint_s is not None
                    else sim.policy.write_s
                )
            )
            job.state = CHECKPOINTING
            job.version += 1  # cancels its FINISH
            job.checkpoint_until = sim.t + write
            self.protected[job.gpus] = True
            self.counts["proactive_checkpoints"] += 1
            sim.push(job.checkpoint_until, ev.CHECKPOINTED, job.key, job.version)
            sim.lifecycle.log(job)
        elif job.state == RESTARTING:
            job.version += 1  # cancels its RESTARTED: it restarts over elsewhere
            self._move(job)
        # CHECKPOINTING already: it moves off every drained node when its write ends

    def _checkpointed(self, key: int, version: int) -> None:
        sim = self.sim
        job = sim.jobs[key]
        if job.version != version or job.state != CHECKPOINTING:
            return
        job.committed = job.steps  # no progress while writing: all of it is kept
        job.pos = 0.0
        job.t_last = sim.t
        sim.lifecycle.stop_running(job)
        self._move(job)

    def _move(self, job) -> None:
        """Swap the job's drained nodes for spare or idle ones and restart it there; back
        to the queue (with its checkpoint) when there are none."""
        sim = self.sim
        self.protected[job.gpus] = False
        out = sim.failure_handling.out_of_service(job)
        if not out.any():  # drained nodes repaired meanwhile: carry on where it is
            sim.lifecycle.restart(job)
            return
        if sim.failure_handling.swap_nodes(job, job.gpus[out], idle_too=True):
            job.migrations += 1
            self.counts["migrations"] += 1
            sim.lifecycle.restart(job)
        else:
            self.counts["requeued_after_alarm"] += 1
            sim.lifecycle.requeue(job, "alarm")
        sim.failure_handling.apply_health(False)

    def _strike(self, kind: str, index: int) -> None:
        """A failure drawn ahead strikes: a drained component's drain ends into it."""
        sim = self.sim
        key = (kind, index)
        predicted = self.drained.get(key) is True
        gpus, _ = sim.failing.parts(kind, index)
        if predicted:
            self.counts["predicted_failures"] += 1
            held = np.unique(sim.state.owner[gpus])
            for owner in held[held >= 0].tolist():
                if sim.jobs[int(owner)].state == CHECKPOINTING:
                    self.counts["failures_during_checkpoint"] += 1
        sim.failure_handling.component_fails(kind, index)
        if predicted:
            del self.drained[key]
            sim.failing.gpu_drain[gpus] -= 1
            sim.failure_handling.apply_health(False)

    def _undrain(self, kind: str, index: int) -> None:
        """A falsely alarmed component is back after inspection."""
        if self.drained.pop((kind, index), None) is None:
            return
        gpus, _ = self.sim.failing.parts(kind, index)
        self.sim.failing.gpu_drain[gpus] -= 1
        self.sim.failure_handling.apply_health(False)

    # -------------------------------------------------------------- outputs
    def report(self) -> dict:
        """Counts of alarms, drains, checkpoints and moves (see :class:`~.records.ClusterRun`)."""
        return dict(self.counts)

    def settings(self) -> dict:
        return dataclasses.asdict(self.predictor)


# ---------------------------------------------------------------------------- theory
def expected_goodput_with_prediction(
    interval_s: float,
    write_s: float,
    restart_s: float,
    mtbf_s: float,
    *,
    recall: float,
    precision: float,
    lead_s: float,
    checkpoint_s: float | None = None,
) -> dict:
    """Expected goodput and lost work of one job with a failure predictor (renewal theory).

    The job computes ``interval_s`` (``tau``) then writes ``write_s`` (``delta``), over
    and over; its failures are exponential with mean ``mtbf_s`` (``M``; rate ``l``).
    A failure is announced ``lead_s`` (``L``) ahead with probability ``recall`` (``r``);
    false alarms come at rate ``l r (1 - p) / p`` (``p`` = ``precision``). So three
    independent Poisson streams act on the job: unpredicted failures (rate ``u = (1 - r)
    l``), true alarms (``t = r l``) and false alarms (``f``). An alarm while computing
    starts a proactive checkpoint of ``checkpoint_s`` (``c``, default ``delta``); one during
    a periodic write lets it finish. When the checkpoint is written (no unpredicted
    failure meanwhile, and for a true alarm ``L`` at least the remaining write) the work
    is kept and the job restarts on other nodes (``restart_s`` = ``R``); otherwise the work
    since the last checkpoint is lost and it restarts. Every event during a restart
    starts it over. Each cycle from a fresh start (all work committed) ends at the end of
    the segment, or at a restart, so renewal-reward gives

        goodput = E[kept work per cycle] / E[cycle time],

    with ``E[restart] = (e^{(u+t+f) R} - 1) / (u + t + f)`` and the first event of the
    cycle at ``x`` with density ``(u + t + f) e^{-(u+t+f) x}`` over ``[0, tau + delta)``;
    the expectations over ``x`` are integrated numerically (Gauss-Legendre, exact to
    ~1e-12). With ``r = 0`` it is :func:`~.failures.expected_goodput` exactly.

    To first order in ``tau / M`` (long leads, small checkpoints), predicted failures
    lose no work, so the lost work per unit time falls by the factor ``1 - r``, and each
    alarm (``r / p`` per failure) costs ``c + R``.

    Returns:
        ``{"goodput", "lost_work_per_s", "cycle_s", "kept_s"}``.
    """
    tau = float(interval_s)
    delta = float(write_s)
    restart = float(restart_s)
    rate = 1.0 / float(mtbf_s)
    c = delta if checkpoint_s is None else float(checkpoint_s)
    u = (1.0 - recall) * rate
    t = recall * rate
    f = recall * rate * (1.0 - precision) / precision
    total = u + t + f
    seg = tau + delta
    restart_mean = math.expm1(total * restart) / total if total > 0 else restart

    def m(d):  # E[min(Y, d)], Y ~ Exp(u)
        d = np.asarray(d, dtype=np.float64)
        return d if u == 0 else -np.expm1(-u * d) / u

    def survive(d):  # P(Y > d)
        return np.exp(-u * np.asarray(d, dtype=np.float64))

    def lost_by(d):  # E[Y; Y < d]: the time an unpredicted failure takes to strike within d
        d = np.asarray(d, dtype=np.float64)
        return m(d) - d * survive(d)

    time_sum = seg * math.exp(-total * seg)
    kept_sum = tau * math.exp(-total * seg)
    lost_sum = 0.0
    # (start, end) pieces of x with smooth integrands: breaks at tau and at seg - L
    cuts = sorted({0.0, tau, seg, min(max(seg - lead_s, tau), seg)})
    nodes, weights = np.polynomial.legendre.leggauss(96)
    for low, high in zip(cuts[:-1], cuts[1:], strict=True):
        if high <= low:
            continue
        x = 0.5 * (high - low) * nodes + 0.5 * (high + low)
        w = 0.5 * (high - low) * weights * np.exp(-total * x)
        writing = x >= tau
        rest = np.where(writing, seg - x, c)  # the write still to do
        kept_base = np.where(writing, tau, x)
        # unpredicted failure first: lose x, restart
        time_sum += u * float(np.sum(w * (x + restart_mean)))
        lost_sum += u * float(np.sum(w * x))
        # false alarm first: the write finishes unless an unpredicted failure strikes
        time_sum += f * float(np.sum(w * (x + m(rest) + restart_mean)))
        kept_sum += f * float(np.sum(w * kept_base * survive(rest)))
        lost_sum += f * float(np.sum(w * (x * (1 - survive(rest)) + lost_by(rest))))
        # true alarm first: as a false one when L covers the write, else lost at x + L
        covered = lead_s >= rest
        end = np.where(covered, rest, lead_s)
        time_sum += t * float(np.sum(w * (x + m(end) + restart_mean)))
        kept_sum += t * float(np.sum(w * np.where(covered, kept_base * survive(rest), 0.0)))
        lost_true = np.where(
            covered,
            x * (1 - survive(rest)) + lost_by(rest),
            x + m(end),  # the failure strikes while writing (or an unpredicted one before)
        )
        lost_sum += t * float(np.sum(w * lost_true))
    return {
        "goodput": kept_sum / time_sum,
        "lost_work_per_s": lost_sum / time_sum,
        "cycle_s": time_sum,
        "kept_s": kept_sum,
    }


__all__ = [
    "DEFAULT_DRAIN_S",
    "DEFAULT_LEAD_S",
    "DEFAULT_PRECISION",
    "DEFAULT_RECALL",
    "PREDICTED_CLASSES",
    "PredictedFailures",
    "Predictor",
    "check_predictor",
    "expected_goodput_with_prediction",
]
