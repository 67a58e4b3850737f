"""The visit of a layout search: best-first over lower bounds, timing what can still win.

Keys (assignments of the compute knobs) are expanded in increasing compute bound ``B1`` while ``B1``
is below the ``top_k``-th best answer found; each expanded candidate gets the cut bound
``B2`` (:mod:`.cut_bound`, no routing) and waits in a priority queue. The candidate with the
lowest bound is taken next:

* if its structure (:mod:`.group_structures`) is not *open* yet, the structure is opened (its
  group sets routed and solved alone on the fabric, exactly as ``step_time`` will) and
  every waiting candidate of it gets the *isolated* bound ``B3`` (the step bound with each
  collective at its time alone, :func:`.compute_model.step_bound`), computed as arrays;
* otherwise it is timed with the full model (:func:`fabricflow.step_time`, contention and
  coupling included).

Opening a structure costs its isolated solves, which the full evaluation needs anyway, and
every structure whose cut bound is below the final ``top_k``-th answer must be opened for
the result to be exact, so opening before timing adds no work; the isolated bound, within
a few percent of the full model, then decides which candidates are worth timing.

The first candidate taken is timed at once (its structure opened by its own evaluation),
so that a budget or Ctrl-C always finds an answer; from then on the budget (wall seconds
or work: group structures solved plus candidates timed) is checked before every
expansion, every structure opened and every candidate timed, and between the engine
batches of an opening structure.

The visit stops when the lowest bound left is no better than the ``top_k``-th best answer
(:mod:`.topk`): every candidate left could at best tie, so the result is exact. A
candidate whose bound is already no better when it is bounded is counted as pruned at
once. Overlap switches that never lengthen a step (TP, PP, EP overlap) make the candidate
with them on a lower bound of its siblings with them off: those wait for its time.

``ranking="class"`` adds one test before a candidate is queued and again before it is
taken: a candidate whose class-level estimate (:mod:`.class_model`, the same composition
with estimated instead of bounded collective times) exceeds the ``top_k``-th answer by more
than :data:`CLASS_MARGIN` is set aside (counted in ``ranked``), with the overlap-off
siblings that waited for it; its structure is never opened for it. That is not a proof, so
such a search is not exhaustive.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import time
from collections.abc import Callable

import numpy as np

from fabricflow.collective.nccl_cost import DEFAULT_COST
from fabricflow.errors import MemoryBudgetError, RoutingError, SpecError
from fabricflow.layout_search import knobs
from fabricflow.layout_search.candidate_table import CandidateTable
from fabricflow.layout_search.compute_model import candidate_table, collective_needs, step_bound
from fabricflow.layout_search.group_structures import GroupStructures, Late
from fabricflow.layout_search.topk import TopK
from fabricflow.workload.step import BREAKDOWN_KEYS, DEFAULT_ORDER, StepResult, step_time

# Overlap switches that never lengthen a step when turned on (see BranchAndBound.dominators).
DOMINATING_OVERLAPS = ("tp_overlap", "pp_overlap", "ep_overlap")
NOTE_EVERY_S = 10.0
RANKINGS = ("bound", "class")
# ranking="class": a candidate is timed only if its class-level estimate is below the
# top_k-th answer times (1 + this): the model's largest overestimate of the full solve on
# random candidates of the benchmark cases (docs/optimize.md), rounded up.
CLASS_MARGIN = 0.5
FIRST_CHUNK, LAST_CHUNK = 64, 4096
# An expansion (cut bounds of a chunk of keys) should take at most this long, so that a
# budget is checked often enough: the chunk doubles only while expansions stay below it.
EXPAND_S = 0.25


@dataclasses.dataclass
class Counts:
    """What the visit did with the feasible candidates (see ``LayoutSearch.counts``)."""

    evaluated: int = 0
    failed: int = 0  # refused on the fabric (SpecError, RoutingError): infeasible
    over_budget: int = 0  # refused by the memory budget: not ruled out
    bounded: int = 0  # got the cut bound
    isolated: int = 0  # got the isolated bound (structure solved)
    pruned: int = 0
    unvisited: int = 0
    structures_opened: int = 0
    ranked: int = 0  # ranking="class": excluded by the class-level estimate


class BranchAndBound:
    """Best-first visit of a :class:`CandidateTable` (see the module doc)."""

    def __init__(self, model, gpu, fabric, table: CandidateTable, *, top_k: int, seed: int,
                 collectives: str, gpus: int, say: Callable[[str], None],
                 ranking: str = "bound", work: int | None = None, stack=None,
                 calibration=None, interval_level: float | None = None):  # fmt: skip
        self.model, self.gpu, self.fabric, self.table = model, gpu, fabric, table
        self.ranking = ranking
        self.work = work  # most group structures solved plus candidates timed
        self.stack = stack  # the software stack every candidate is timed with
        self.top_k, self.seed, self.collectives, self.gpus = top_k, seed, collectives, gpus
        self.say = say
        # a calibration's network constants time every collective, bounds included
        self.calibration, self.interval_level = calibration, interval_level
        self.structures = GroupStructures(
            model, fabric, table, seed=seed, collectives=collectives,
            cost=DEFAULT_COST if calibration is None else calibration.cost_model(),
        )  # fmt: skip
        self.top = TopK(top_k)
        self.counts = Counts()
        self.rows: list[dict] = []
        self.errors: list[str] = []
        self.stopped = "exhausted"
        self.done: set = set()
        self._heap: list = []  # (bound, level, sequence, key, combo, structure)
        self._sequence = 0
        self._pending: dict[int, list] = {}  # unopened structure -> [(key, combo, bound)]
        self._opened: set[int] = set()
        self._deferred: dict[tuple, list] = {}  # (key, dominator) -> [(combo, bound)]
        self._dominators: list | None = None
        self._last_note = time.monotonic()
        # ranking="class": each queued candidate's class-level step estimate, and those
        # excluded by it (never timed, not ruled out by a bound)
        self._estimate: dict[tuple, float] = {}
        self._ranked: set = set()
        self._deadline: float | None = None  # of the current run

    # ------------------------------------------------------------------ driver

    def run(self, deadline: float | None, *, quiet: bool = False) -> None:
        """Visit until the bound stops it, everything is timed, ``deadline`` passes or the
        work budget is spent (once a candidate is timed) or Ctrl-C; ``stopped`` says which
        (``bound``, ``exhausted``, ``budget``, ``work``, ``interrupted``).

        It may run again once more of the table is analysed (a budgeted search times its
        first candidate while the enumeration goes on): each run visits every feasible
        candidate analysed so far from scratch, keeping what was timed and solved."""
        table = self.table
        kept = self.counts
        self.counts = Counts(evaluated=kept.evaluated, failed=kept.failed,
                             over_budget=kept.over_budget,
                             structures_opened=kept.structures_opened)  # fmt: skip
        self._heap, self._pending, self._deferred = [], {}, {}
        self._estimate, self._ranked = {}, set()
        keys = np.flatnonzero(table.feasible & table.runnable.any(axis=1))
        order = keys[np.lexsort((table.memory_bytes[keys], table.bound_s[keys]))]
        pointer, chunk = 0, FIRST_CHUNK
        self._deadline = deadline
        try:
            while True:
                next_b1 = table.bound_s[order[pointer]] if pointer < len(order) else math.inf
                if not self._heap or self._heap[0][0] >= next_b1:
                    if pointer >= len(order):
                        self.stopped = "exhausted"
                        break
                    if next_b1 >= self.top.threshold():
                        self.stopped = "bound"
                        break
                    if self._spent(deadline):
                        break
                    began = time.monotonic()
                    self._expand(order[pointer : pointer + chunk])
                    pointer += len(order[pointer : pointer + chunk])
                    took = time.monotonic() - began
                    chunk = min(2 * chunk, LAST_CHUNK) if took < EXPAND_S else max(
                        chunk // 2, FIRST_CHUNK
                    )  # fmt: skip
                    continue
                if self.ranking == "class" and not self.done:
                    self._time_best_estimate()
                    continue
                if self._step(deadline):
                    break
        except Late:
            self.stopped = "budget"
        except KeyboardInterrupt:
            self.stopped = "interrupted"
            self._answer_after_interrupt()
        self._account(order[pointer:])
        c = self.counts
        if quiet:
            return
        self.say(
            f"timed {c.evaluated:,} candidates with contention ({c.structures_opened:,} group "
            f"structures solved), {c.bounded:,} got a network bound; stopped: {self.stopped}"
        )

    def _spent(self, deadline: float | None) -> bool:
        """True (and ``stopped`` set) when the wall budget or the work budget is spent and
        there is an answer (a candidate timed): the visit must stop."""
        if not self.counts.evaluated:
            return False
        if self.work is not None and self.counts.structures_opened + self.counts.evaluated >= (
            self.work
        ):
            self.stopped = "work"
            return True
        if self._late(deadline):
            self.stopped = "budget"
            return True
        return False

    def _answer_after_interrupt(self) -> None:
        """Ctrl-C before any candidate was timed: time the best-bounded candidate waiting
        (a second Ctrl-C gives up: the search then has no answer)."""
        if self.counts.evaluated or not self._heap:
            return
        try:
            while self._heap and not self.counts.evaluated:
                _, _, _, key, combo, sid = heapq.heappop(self._heap)
                if (key, combo) not in self.done and (key, combo) not in self._ranked:
                    self._time(key, combo, sid)
        except (KeyboardInterrupt, Late):
            pass

    def _step(self, deadline: float | None) -> bool:
        """Take the best waiting candidate; True when the visit must stop."""
        bound, level, _, key, combo, sid = self._heap[0]
        if bound >= self.top.threshold():
            self.stopped = "bound"
            return True
        heapq.heappop(self._heap)
        if (key, combo) in self.done or (level == 2 and sid in self._opened):
            return False  # timed already, or stale (re-queued with its isolated bound)
        if (key, combo) in self._ranked or self._ranked_out(key, combo):
            return False
        if self._spent(deadline):
            heapq.heappush(self._heap, (bound, level, -1, key, combo, sid))
            return True
        self._note(bound)
        if level == 2 and self.counts.evaluated:
            try:  # its engine batches check the budget (an answer exists)
                self._open(sid)
            except (Late, KeyboardInterrupt):
                heapq.heappush(self._heap, (bound, level, -1, key, combo, sid))
                raise
            return False
        # the first candidate is timed at once (its evaluation solves its structure), so
        # that a budget or Ctrl-C from now on always has an answer to return
        self._time(key, combo, sid)
        return False

    def _time(self, key: int, combo: int, sid: int) -> None:
        """Time one candidate, open its structure (solved by now) and release the
        candidates that waited for it (their bound: at least its time)."""
        time_s = self._evaluate(key, combo)
        if sid not in self._opened:
            self._open(sid)
        released = self._deferred.pop((key, combo), [])
        if released:
            others = np.asarray([c for c, _ in released], dtype=np.int64)
            bounds = np.maximum(np.asarray([b for _, b in released]), time_s)
            keys = np.full(len(others), key, dtype=np.int64)
            self._push(keys, others, bounds, self.structures.ids(keys, others))

    def _time_best_estimate(self) -> None:
        """``ranking="class"``: time the queued candidate with the lowest class-level
        estimate first, so that the estimate has an answer to be compared with before
        any structure is opened for a candidate it would set aside."""
        queued = [(self._estimate.get((e[3], e[4]), math.inf), e[3], e[4], e[5])
                  for e in self._heap]  # fmt: skip
        _, key, combo, sid = min(queued)
        self._time(key, combo, sid)

    def _late(self, deadline: float | None) -> bool:
        return deadline is not None and time.monotonic() > deadline

    def _note(self, bound: float) -> None:
        if time.monotonic() - self._last_note > NOTE_EVERY_S:
            self._last_note = time.monotonic()
            c = self.counts
            self.say(
                f"  {c.evaluated:,} timed, {c.bounded:,} network-bounded, "
                f"{c.structures_opened:,} structures solved; best "
                f"{self.top.threshold():.4g} s (top {self.top_k}), next bound {bound:.4g} s"
            )

    # ------------------------------------------------------------------ bounds

    def _expand(self, keys: np.ndarray) -> None:
        """Give the runnable candidates of ``keys`` their cut bound and queue them (or
        defer them behind their dominator, or prune them at once)."""
        table = self.table
        k_idx, combos = np.nonzero(table.runnable[keys])
        cand_keys = keys[k_idx]
        if self.done:  # timed in an earlier run (the first candidate of a budgeted search)
            width = table.runnable.shape[1]
            done = np.asarray([k * width + c for k, c in self.done], dtype=np.int64)
            fresh = ~np.isin(cand_keys * width + combos, done)
            cand_keys, combos = cand_keys[fresh], combos[fresh]
        sids = self.structures.ids(cand_keys, combos)
        bounds = self.bound(cand_keys, combos, sids, isolated=False)
        self.counts.bounded += len(bounds)
        dominators = self.dominators(cand_keys, combos)
        deferred = np.zeros(len(combos), dtype=bool)
        for i in np.flatnonzero(dominators != combos).tolist():
            key, dom = int(cand_keys[i]), int(dominators[i])
            if (key, dom) not in self.done:
                # waits for its dominator's time, a lower bound of its own
                self._deferred.setdefault((key, dom), []).append((int(combos[i]), bounds[i]))
                deferred[i] = True
        keep = ~deferred
        self._push(cand_keys[keep], combos[keep], bounds[keep], sids[keep])

    def _push(self, keys, combos, bounds, sids) -> None:
        """Queue candidates: with their isolated bound where their structure is open,
        else waiting for it; those already no better than the K-th answer are pruned."""
        threshold = self.top.threshold()
        opened = np.isin(sids, list(self._opened)) if self._opened else np.zeros(len(sids), bool)
        if opened.any():
            idx = np.flatnonzero(opened & (bounds < threshold))
            if len(idx):
                bounds = bounds.copy()
                isolated = self.bound(keys[idx], combos[idx], sids[idx], isolated=True)
                self.counts.isolated += len(idx)
                bounds[idx] = np.maximum(bounds[idx], isolated)
        alive = bounds < threshold
        self.counts.pruned += int((~alive).sum())
        if self.ranking == "class" and alive.any():
            idx = np.flatnonzero(alive)
            estimate = self.bound(keys[idx], combos[idx], sids[idx], isolated=False, classed=True)
            pairs = zip(keys[idx].tolist(), combos[idx].tolist(), strict=True)
            self._estimate.update(zip(pairs, estimate.tolist(), strict=True))
            out = idx[estimate >= self.top.threshold() * (1.0 + CLASS_MARGIN)]
            for key, combo in zip(keys[out].tolist(), combos[out].tolist(), strict=True):
                self._exclude(key, combo)
            alive[out] = False
        for b, key, combo, sid, is_open in zip(
            bounds[alive].tolist(), keys[alive].tolist(), combos[alive].tolist(),
            sids[alive].tolist(), opened[alive].tolist(), strict=True,
        ):  # fmt: skip
            level = 3 if is_open else 2
            heapq.heappush(self._heap, (b, level, self._sequence, key, combo, sid))
            self._sequence += 1
            if not is_open:
                self._pending.setdefault(sid, []).append((key, combo, b))

    def _ranked_out(self, key: int, combo: int) -> bool:
        """``ranking="class"``: True (and the candidate excluded) when its class-level
        estimate exceeds the ``top_k``-th answer by more than :data:`CLASS_MARGIN`: it is
        not timed, although no bound rules it out."""
        if self.ranking != "class":
            return False
        if self._estimate.get((key, combo), 0.0) < self.top.threshold() * (1.0 + CLASS_MARGIN):
            return False
        self._exclude(key, combo)
        return True

    def _exclude(self, key: int, combo: int) -> None:
        """Count ``(key, combo)`` as ranked out by the class-level model, with the siblings
        (overlap off) that waited for its time: the full model never makes them faster."""
        self._ranked.add((key, combo))
        self.counts.ranked += 1
        for other, _ in self._deferred.pop((key, combo), []):
            if (key, other) not in self.done and (key, other) not in self._ranked:
                self._ranked.add((key, other))
                self.counts.ranked += 1

    def _open(self, sid: int) -> None:
        """Solve structure ``sid`` alone on the fabric and re-queue its waiting candidates
        with their isolated bound. :class:`Late` (the budget ran out between two engine
        batches) or Ctrl-C leaves the structure unopened, its candidates waiting."""
        self._opened.add(sid)
        self.counts.structures_opened += 1
        pending = self._pending.pop(sid, [])
        waiting = [
            (k, c, b)
            for k, c, b in pending
            if (k, c) not in self.done and (k, c) not in self._ranked
        ]
        if not waiting:
            return
        keys = np.asarray([w[0] for w in waiting], dtype=np.int64)
        combos = np.asarray([w[1] for w in waiting], dtype=np.int64)
        bounds = np.asarray([w[2] for w in waiting])
        # past the deadline the engine batches stop (raise Late) once there is an answer
        self.structures.deadline = self._deadline if self.counts.evaluated else None
        try:
            self._push(keys, combos, bounds, np.full(len(keys), sid, dtype=np.int64))
        except (Late, KeyboardInterrupt):
            self._opened.discard(sid)
            self.counts.structures_opened -= 1
            self._pending[sid] = pending
            raise
        finally:
            self.structures.deadline = None

    def bound(self, keys, combos, sids, *, isolated: bool, classed: bool = False) -> np.ndarray:
        """Lower bound of the step time of candidates ``(keys[i], combos[i])``: the step
        model's composition (:func:`.compute_model.step_bound`) with each collective at its cut
        bound, or (``isolated``) at its time alone on the fabric; never below the compute
        bound. ``classed``: the composition with the class-level estimates of the
        collectives instead (:mod:`.class_model`: an estimate, not a bound)."""
        table = self.table
        b1 = table.bound_s[keys]
        if not len(keys):
            return b1.astype(np.float64)
        rows = table.rows(keys)
        for knob in table.network_knobs:
            if knob in rows:  # a Layout field searched among the network knobs
                values = np.asarray(table.searched[knob])
                rows[knob] = values[table.network_column(knob, combos)]
        # no TP comm-GEMM overlap where a TP group spans scale-up domains (as step_time)
        overlap = np.broadcast_to(np.asarray(rows.get("tp_overlap", True), dtype=bool), keys.shape)
        rows["tp_overlap"] = overlap & self.structures.tp_in_one_domain(sids)
        candidates = candidate_table(rows)
        needs = collective_needs(self.model, candidates)
        if classed:
            seconds = self.structures.classed(needs, sids)
        else:
            seconds = self.structures.comm(needs, sids, isolated=isolated)
        bound = step_bound(self.model, self.gpu, candidates, seconds, self.stack)
        return np.maximum(bound, b1)

    def dominators(self, keys: np.ndarray, combos: np.ndarray) -> np.ndarray:
        """For each candidate, the candidate of the same key and structure with every
        dominating overlap switch on (or itself). Turning TP, PP or EP overlap on never
        lengthens the step: each exposed part becomes ``max(0, c - hidden)`` instead of
        ``c`` with the same collective time ``c``, and the step is non-decreasing in each
        part (see docs/optimize.md), so the dominator's step time bounds the others from
        below. DP overlap is not such a switch: overlapped, the gradient reduction shares
        the fabric with the pipeline and expert traffic of the last backward passes
        (:mod:`fabricflow.collective.coupling`), so on a congested fabric it can take longer
        than running alone after the backward pass; both settings are timed."""
        table = self.table
        if self._dominators is None:
            network = table.network_knobs
            lengths = [len(table.searched[k]) for k in network]
            strides = np.cumprod([1, *lengths[::-1]])[:-1][::-1]
            switches = [
                k
                for k in DOMINATING_OVERLAPS
                if k in network and set(table.searched[k]) == {True, False}
            ]
            variants = []
            for group in (switches, [k for k in switches if k != "tp_overlap"]):
                codes = table.net_codes.copy()
                for knob in group:
                    codes[:, network.index(knob)] = table.searched[knob].index(True)
                variants.append((codes * strides).sum(axis=1) if network else np.zeros(1, int))
            self._dominators = variants
        out = combos.copy()
        for variant in self._dominators[::-1]:  # the fuller variant wins where runnable
            candidate = variant[combos]
            ok = table.runnable[keys, candidate]
            out = np.where(ok, candidate, out)
        return out

    # ------------------------------------------------------------------ full evaluation

    def kwargs(self, key: int, combo: int) -> dict:
        """``step_time`` keyword arguments of candidate ``(key, combo)``."""
        table = self.table
        changes = {
            knob: table.value(knob, key, combo)
            for knob in table.network_knobs
            if knob in knobs.layout_fields()
        }
        layout = table.layout(key)
        if changes:
            layout = dataclasses.replace(layout, **changes)
        order = table.value("order", key, combo)
        placement = table.value("placement", key, combo)
        if placement == "topology-aware":
            order = DEFAULT_ORDER  # the placement picks the rank order itself
        out: dict = {"layout": layout, "order": order, "placement": placement}
        if placement == "scattered":
            out["placement_seed"] = self.seed
        routing = table.value("routing", key, combo)
        if routing != "auto":
            out["routing"] = routing
        algorithms = {}
        for dim in ("tp", "cp", "ep", "pp", "dp"):
            algorithm = table.value(f"algorithm_{dim}", key, combo)
            if algorithm != "auto":
                algorithms[dim] = algorithm
        if algorithms:
            out["algorithms"] = algorithms
        if self.collectives != "fabric":
            out["collectives"] = self.collectives
        return out

    def _evaluate(self, key: int, combo: int) -> float:
        """Time one candidate with the full model; returns its step time (0 if refused)."""
        self.done.add((key, combo))
        kwargs = self.kwargs(key, combo)
        try:
            result = step_time(
                self.model, self.gpu, fabric=self.fabric, stack=self.stack,
                calibration=self.calibration, interval_level=self.interval_level, **kwargs,
            )  # fmt: skip
        except (SpecError, RoutingError) as error:
            self.counts.failed += 1
            self.errors.append(str(error))
            return 0.0
        except MemoryBudgetError as error:
            # a candidate this machine cannot time is not ruled out: the search is then
            # not exhaustive (counted as failed, its reason kept in ``errors``)
            self.counts.failed += 1
            self.counts.over_budget += 1
            self.errors.append(str(error))
            return 0.0
        self.counts.evaluated += 1
        t = result.step_time_s
        answer = self.top.add(t, kwargs["layout"], (kwargs, result))
        self.rows.append(self._row(key, combo, result, answer))
        return t

    def _row(self, key: int, combo: int, result: StepResult, answer: int) -> dict:
        table = self.table
        row: dict = {}
        for knob in knobs.known_knobs():
            row[knob] = int(table.sizes["dp"][key]) if knob == "dp" else table.value(
                knob, key, combo
            )  # fmt: skip
        if row.get("placement") == "topology-aware":
            row["order"] = result.details["order"]  # the order the placement picked
        row["step_time_s"] = result.step_time_s
        row["lower_bound_s"] = float(table.bound_s[key])
        row["mfu"] = result.mfu
        row["tokens_per_gpu_s"] = result.tokens_per_s / self.gpus
        row["memory_gib_per_gpu"] = result.memory_gib_per_gpu
        row["answer"] = answer
        for part in BREAKDOWN_KEYS:
            row[f"{part}_s"] = float(result.breakdown.get(part, 0.0))
        return row

    # ------------------------------------------------------------------ accounting

    def _account(self, unexpanded: np.ndarray) -> None:
        """Feasible candidates neither timed nor pruned yet: pruned when the bound stopped
        the visit, unvisited when the budget or Ctrl-C did."""
        table = self.table
        left = int(table.runnable[unexpanded].sum()) if len(unexpanded) else 0
        if len(unexpanded) and self.done:
            # candidates of unexpanded keys timed early are not left over
            done_keys = np.fromiter((k for k, _ in self.done), dtype=np.int64)
            left -= int(np.isin(done_keys, unexpanded).sum())
        # a level-2 entry of an opened structure is stale: re-queued (or pruned) since
        waiting = {(e[3], e[4]) for e in self._heap if e[1] == 3 or e[5] not in self._opened}
        waiting.update(
            (key, combo) for (key, _), others in self._deferred.items() for combo, _ in others
        )
        left += len(waiting - self.done - self._ranked)
        if self.stopped in ("bound", "exhausted"):
            self.counts.pruned += left
        else:
            self.counts.unvisited += left
