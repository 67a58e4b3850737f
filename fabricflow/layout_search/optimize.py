"""Branch and bound over parallel layouts, rank orders, placements and collective algorithms.

:func:`optimize_layout` enumerates the product of the searched knobs as integer-coded
numpy columns (:mod:`.candidate_table`), checks feasibility and memory and computes a true lower
bound of the step time for each distinct compute key (:mod:`.compute_model`), then visits
candidates best-first over tighter bounds (cut bounds of the fabric, then each group
structure's collectives solved alone) and times those that can still win with contention
on the fabric (:func:`fabricflow.step_time`; :mod:`.branch_and_bound`). It stops when the next bound
is no better than the ``top_k``-th best answer found: every candidate left could at best
tie, so the result is exact (``exhaustive=True``). The network part of a candidate
(routing and max-min rates of each group set) is solved once per process
(:mod:`fabricflow.collective.structure_cache`), so candidates that share a group structure
and differ in micro-batch, recompute, ZeRO or interleaving cost milliseconds.

``budget_s`` bounds the wall time of the whole search, enumeration included;
``budget_work`` bounds its work (group structures solved plus candidates timed), which
does not depend on the machine's load, so a search under it answers the same on every run.
Ctrl-C stops it at any phase: the best found so far is returned with ``exhaustive=False``
and its counts (the first candidate the visit takes is timed at once, so that there is an
answer; a stop before it times the best-bounded candidate examined so far first).
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from fabricflow.errors import RoutingError, SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.layout_search import knobs
from fabricflow.layout_search.branch_and_bound import RANKINGS, BranchAndBound
from fabricflow.layout_search.candidate_table import CandidateTable, build_table
from fabricflow.layout_search.compute_model import ComputeModel
from fabricflow.layout_search.gpu_counts import best_count, sweep_dataset
from fabricflow.layout_search.infeasible import raise_infeasible
from fabricflow.layout_search.uncertainty import ROBUST_SEEDS, indistinguishable, robust_rank
from fabricflow.workload.calibration import as_calibration
from fabricflow.workload.gpu import GpuSpec, load_gpu
from fabricflow.workload.intervals import DEFAULT_LEVEL, check_level
from fabricflow.workload.model_spec import ModelSpec, load_model
from fabricflow.workload.stack import Stack, load_stack
from fabricflow.workload.step import StepResult, step_time

OBJECTIVES = ("step_time", "tokens_per_gpu", "step_time_upper")
# Keys analysed per chunk of the enumeration (the budget and Ctrl-C are checked between).
ANALYSIS_CHUNK = 512


@dataclasses.dataclass
class LayoutSearch:
    """Outcome of :func:`optimize_layout`.

    Attributes:
        best_kwargs: ``layout``, ``order``, ``placement`` (and ``placement_seed``, ``algorithms``,
            ``collectives`` when they matter): ``ff.step_time(model, gpu, fabric=fabric,
            **best_kwargs)`` re-times the winner. (A Ctrl-C before any candidate could be
            timed raises :class:`SearchInterrupted`, which carries the counts.)
        best: the winner's :class:`StepResult`.
        top: the ``top_k`` best distinct answers as ``(kwargs, StepResult)`` pairs, best
            first: variants of one layout with the same step time (e.g. two placements
            whose traffic lands alike) are one answer, represented by the fastest
            (:mod:`.topk`); every variant is in ``candidates``.
        candidates: ``xarray.Dataset`` over ``candidate`` (one per timed candidate):
            every knob, ``step_time_s``, ``lower_bound_s``, ``mfu``, ``tokens_per_gpu_s``,
            ``memory_gib_per_gpu``, each breakdown part (``<part>_s``) and ``answer``
            (variants of one answer share its number). Built from ``rows`` on first use,
            so a search that never reads it does not import xarray.
        rows: the timed candidates' rows (one dict each), in the order they were timed.
        counts: ``considered`` (distinct candidates examined: checked for feasibility and
            bounded, or refused by a rule), ``infeasible``, ``bounded`` (feasible, given a
            network bound), ``pruned`` (feasible, proven unable to beat the ``top_k``-th
            best answer by a lower bound), ``evaluated`` (timed with contention),
            ``unvisited`` (feasible, neither timed nor pruned when the budget ran out or
            on Ctrl-C), ``unexamined`` (distinct candidates the enumeration had not
            reached when it was stopped), ``structures`` (group structures solved),
            ``ranked_by_class_model`` (``ranking="class"``: feasible candidates not timed
            because their class-level estimate could not win; 0 otherwise).
            ``evaluated + pruned + infeasible + unvisited + ranked_by_class_model ==
            considered``.
        exhaustive: True when every candidate was timed or excluded by a lower bound
            (never when the class-level model excluded one).
        seconds: wall time of the search.
        space_size: the product of the searched knobs' value counts (before removing
            settings that are no-ops for a layout, e.g. sequence parallelism at tp = 1).
        objective: ``step_time``, ``tokens_per_gpu`` or ``step_time_upper``.
        interval_level: the level of the prediction intervals. calibration: the
            :class:`~fabricflow.workload.calibration.Calibration` applied, or None.
        upper_s: under ``step_time_upper``, each answer of ``top``'s upper quantile
            (:mod:`.uncertainty`), seconds.
        stopped: ``bound``, ``exhausted``, ``budget`` (wall seconds), ``work`` (the work
            budget) or ``interrupted``.
        searched: knob -> values searched; fixed: every other knob's value.
    """

    best_kwargs: dict
    best: StepResult
    top: list
    counts: dict
    exhaustive: bool
    seconds: float
    space_size: int = 0
    objective: str = "step_time"
    stopped: str = "bound"
    searched: dict = dataclasses.field(default_factory=dict)
    fixed: dict = dataclasses.field(default_factory=dict)
    gpus: int = 0
    global_batch: int = 0
    seq_len: int = 0
    sweep: Any = None  # xarray.Dataset over ``gpus`` when a list of GPU counts was searched
    model: Any = dataclasses.field(default=None, repr=False)
    fabric: Any = dataclasses.field(default=None, repr=False)
    rows: list = dataclasses.field(default_factory=list, repr=False)
    interval_level: float = DEFAULT_LEVEL
    calibration: Any = dataclasses.field(default=None, repr=False)
    upper_s: list = dataclasses.field(default_factory=list)

    @functools.cached_property
    def candidates(self):
        """The ``xarray.Dataset`` of the timed candidates (see the class doc)."""
        return candidate_dataset(self.rows, self.counts, self.stopped, self.objective)

    def score(self, result: StepResult) -> float:
        """The objective's value of ``result`` (step seconds, or tokens per GPU-second)."""
        if self.objective == "tokens_per_gpu":
            return result.tokens_per_s / self.gpus
        if self.objective == "step_time_upper" and self.upper_s:
            return dict(zip((id(r) for _, r in self.top), self.upper_s, strict=True)).get(
                id(result), result.step_time_s
            )
        return result.step_time_s

    def to_dict(self) -> dict:
        """The JSON object of ``fabricflow optimize --json``."""
        best = self.best
        band = best.interval
        return {
            "best": flatten_kwargs(self.best_kwargs),
            "step_time_s": best.step_time_s,
            **(
                {
                    "step_time_interval_s": band.to_list(),
                    "step_time_interval_level": band.level,
                    "interval_method": band.method,
                }
                if band is not None
                else {}
            ),
            **({"step_time_upper_s": self.upper_s[0]} if self.upper_s else {}),
            "indistinguishable": indistinguishable(
                self.top,
                self.interval_level,
                best.details["rank_gpus"][0],
                self.calibration,
                flatten_kwargs,
                None if self.model is None else self.model.is_moe,
            ),
            "mfu": best.mfu,
            "tokens_per_gpu_s": best.tokens_per_s / self.gpus,
            "memory_gib_per_gpu": best.memory_gib_per_gpu,
            "breakdown": dict(best.breakdown),
            "objective": self.objective,
            "counts": dict(self.counts),
            "exhaustive": self.exhaustive,
            "stopped": self.stopped,
            "seconds": self.seconds,
            "space_size": self.space_size,
            "top": [
                {
                    **flatten_kwargs(kwargs),
                    "step_time_s": r.step_time_s,
                    **(
                        {"step_time_interval_s": r.interval.to_list()}
                        if r.interval is not None
                        else {}
                    ),
                    **({"step_time_upper_s": self.upper_s[i]} if self.upper_s else {}),
                    "mfu": r.mfu,
                    "memory_gib_per_gpu": r.memory_gib_per_gpu,
                    "breakdown": dict(r.breakdown),
                }
                for i, (kwargs, r) in enumerate(self.top)
            ],
        }


class SearchInterrupted(KeyboardInterrupt):
    """Ctrl-C came before the search could time any candidate: there is no best to
    return. ``counts``, ``seconds`` and ``space_size`` say how far it got;
    :meth:`to_dict` is the object ``fabricflow optimize --json`` prints (the commands'
    interrupted object, ``{"error": "Interrupted", "message": ...}``, with the counts)."""

    def __init__(self, counts: dict, seconds: float, space_size: int):
        super().__init__("interrupted before any candidate could be timed")
        self.counts, self.seconds, self.space_size = counts, seconds, space_size

    def message(self) -> str:
        c = self.counts
        return (
            f"interrupted after {self.seconds:.1f} s, before any candidate could be timed: "
            f"{c['considered']:,} candidates examined, {c['unexamined']:,} not yet"
        )

    def to_dict(self) -> dict:
        return {
            "error": "Interrupted",
            "message": self.message(),
            "counts": dict(self.counts),
            "exhaustive": False,
            "stopped": "interrupted",
            "seconds": self.seconds,
            "space_size": self.space_size,
        }


def flatten_kwargs(kwargs: dict) -> dict:
    """best_kwargs with the layout's fields flattened (JSON-able)."""
    out = dict(dataclasses.asdict(kwargs["layout"]))
    for key, value in kwargs.items():
        if key != "layout":
            out[key] = dict(value) if isinstance(value, dict) else value
    return out


def _check_int(value, field: str, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise SpecError(field, f"must be an integer >= {low}, got {value!r}")
    return int(value)


def optimize_layout(
    model: ModelSpec | str,
    gpu: GpuSpec | str,
    fabric: Fabric,
    *,
    gpus: int | list[int],
    global_batch: int,
    seq_len: int,
    precision: str = "bf16",
    fixed: dict | None = None,
    space: dict | None = None,
    objective: str = "step_time",
    top_k: int = 10,
    budget_s: float | None = None,
    budget_work: int | None = None,
    placement_seed: int = 0,
    collectives: str = "fabric",
    ranking: str = "bound",
    progress: Callable[[str], None] | None = None,
    calibration=None,
    interval_level: float = DEFAULT_LEVEL,
    stack: Stack | str | None = None,
) -> LayoutSearch:
    """Search the layout, rank order, placement and collective algorithms with the
    shortest step (or most tokens per GPU-second) of ``model`` on ``fabric``.

    Args:
        model, gpu: specs or preset names.
        fabric: the network (:func:`fabricflow.load_fabric`).
        gpus: GPUs in the job (dp follows from it); a list runs the capacity sweep of
            :func:`capacity_sweep` and returns the search of the count with the best
            ``objective``, its ``sweep`` attribute the Dataset.
        global_batch, seq_len: sequences per step and tokens per sequence.
        precision: ``bf16`` or ``fp8`` GEMMs.
        fixed: knob -> value pinned (``{"tp": 8, "order": "tp-cp-ep-dp-pp"}``).
        space: knob -> list of values; when given exactly its product is searched, every
            other knob takes its ``fixed`` value or its default. Default: the space of
            :func:`.knobs.default_space` with ``fixed`` knobs pinned.
        objective: ``step_time`` (minimise), ``tokens_per_gpu`` (maximise tokens per
            GPU-second; the same ranking for one GPU count) or ``step_time_upper`` (the
            ``top_k`` answers ranked again by an upper quantile of their step time, over
            ECMP hash seeds and the model's interval: :mod:`.uncertainty`).
        top_k: how many of the best distinct answers to return (exactly, when the search
            is exhaustive).
        budget_s: wall time of the whole search, enumeration included; past it the best
            found so far is returned (``exhaustive=False``) after at least one candidate
            is timed, within about a second (the budget is checked before every expansion,
            structure and candidate and between engine batches; only the first timed
            candidate, the answer, can run past it).
        budget_work: most group structures solved plus candidates timed (the enumeration
            and the bounds are not counted); past it the best found so far is returned
            (``stopped="work"``). Unlike ``budget_s`` it does not depend on the machine's
            speed or load: the same search answers the same every time.
        placement_seed: seed of the ``scattered`` placement (an integer >= 0).
        collectives: ``fabric`` (contention on the fabric) or ``alpha-beta`` (no contention).
        ranking: ``bound`` (every candidate is timed or ruled out by a lower bound: exact)
            or ``class``: on top of the bounds, a candidate whose class-level estimate
            (:mod:`.class_model`: link classes, ECMP hash collisions, no routing) exceeds the
            ``top_k``-th answer by more than the model's error margin is not timed; faster
            on hashed fabrics, ``exhaustive=False`` when it excluded any
            (``counts["ranked_by_class_model"]``).
        progress: called with a line of text at each stage (the CLI prints it on stderr).
        calibration: a :class:`~fabricflow.workload.calibration.Calibration` (or its
            file): its GPU parameters replace the GPU's in the bounds and the timings, its
            network parameters the collective model's constants.
        interval_level: level of the prediction intervals and of the indistinguishable
            answers (``to_dict()["indistinguishable"]``).
        stack: the software stack (:func:`fabricflow.load_stack`; None: the default
            preset): its choices are the values of the knobs neither searched nor pinned,
            its physical parameters time every candidate.
    """
    if isinstance(gpus, (list, tuple, np.ndarray)):
        return capacity_sweep(
            model, gpu, fabric, gpus=list(gpus), global_batch=global_batch, seq_len=seq_len,
            precision=precision, fixed=fixed, space=space, objective=objective, top_k=top_k,
            budget_s=budget_s, budget_work=budget_work, placement_seed=placement_seed,
            collectives=collectives,
            ranking=ranking, progress=progress, stack=stack, calibration=calibration,
            interval_level=interval_level,
        )  # fmt: skip
    started = time.monotonic()
    stack = stack if isinstance(stack, Stack) else load_stack(stack)
    model = load_model(model) if not isinstance(model, ModelSpec) else model
    spec = load_gpu(gpu) if not isinstance(gpu, GpuSpec) else gpu
    calibration = as_calibration(calibration)
    interval_level = check_level(interval_level)
    # the bounds see the calibrated GPU too
    gpu = spec if calibration is None else calibration.gpu_spec(spec)
    count, global_batch, seq_len, top_k = _check_arguments(
        fabric, gpus, global_batch, seq_len, top_k, objective, budget_s, collectives, progress
    )
    work = None if budget_work is None else _check_int(budget_work, "budget_work")
    placement_seed = _check_int(placement_seed, "placement_seed", low=0)
    require_connected(fabric, count)
    if ranking not in RANKINGS:
        raise SpecError("ranking", f"unknown ranking {ranking!r}; one of {list(RANKINGS)}")
    gpu.peak(precision)  # SpecError for fp8 on a chip without it
    say = progress or (lambda line: None)
    searched, single = knobs.resolve_space(
        model, fabric, gpus=count, global_batch=global_batch, seq_len=seq_len,
        precision=precision, fixed=fixed, space=space, defaults=stack.choices,
    )  # fmt: skip
    deadline = None if budget_s is None else started + float(budget_s)
    table = build_table(model, searched, single, count, global_batch, seq_len)
    visit = BranchAndBound(
        model, gpu, fabric, table, top_k=top_k, seed=placement_seed, collectives=collectives,
        gpus=count, say=say, ranking=ranking, work=work, stack=stack, calibration=calibration,
        interval_level=interval_level,
    )  # fmt: skip
    # under a wall budget the first candidate is timed as soon as one is feasible, while
    # the enumeration goes on: the budget then holds, an answer being there already
    first = None if deadline is None else (lambda: _time_first(visit, started))
    cut_short = _analyse(table, ComputeModel(model, gpu, count, stack), deadline, first)
    say(_space_line(table, started, cut_short))
    if table.feasible_candidates == 0 and not cut_short:
        raise_infeasible(model, gpu, table, count, global_batch)
    if table.feasible_candidates:
        # cut short: time the best-bounded candidate examined (if none is yet), then stop
        visit.run(started if cut_short else deadline)
    if cut_short:
        visit.stopped = cut_short if visit.stopped != "interrupted" else "interrupted"
    search = _result(visit, table, started, model, fabric, count, global_batch, seq_len, objective)
    search.interval_level, search.calibration = interval_level, calibration
    if objective == "step_time_upper":
        _rank_by_upper(search, model, gpu, fabric, stack, calibration, interval_level)
    return search


def _space_line(table, started: float, cut_short: str | None) -> str:
    """The progress line after the enumeration of ``table``: settings, distinct, examined
    and feasible candidates, compute keys, seconds since ``started`` (``time.monotonic``)
    and why the enumeration stopped early, if it did."""
    return (
        f"space: {table.space_size:,} settings, {table.distinct:,} distinct candidates, "
        f"{table.considered:,} examined, {table.feasible_candidates:,} feasible; "
        f"{int(table.analysed.sum()):,} compute keys ({time.monotonic() - started:.1f} s)"
        + (f"; enumeration stopped ({cut_short})" if cut_short else "")
    )


def _rank_by_upper(
    search: LayoutSearch, model, gpu, fabric, stack, calibration, interval_level: float
) -> None:
    """Ranks ``search.top`` again by an upper quantile of each answer's step time (over
    :data:`ROBUST_SEEDS` ECMP hash seeds and the model's interval at ``interval_level``:
    :func:`robust_rank`), setting ``top``, ``upper_s`` (seconds) and ``best``."""
    ranked = robust_rank(
        search.top,
        lambda kwargs: step_time(
            model,
            gpu,
            fabric=fabric,
            routing_seeds=ROBUST_SEEDS,
            stack=stack,
            calibration=calibration,
            interval_level=interval_level,
            **kwargs,
        ),  # fmt: skip
        interval_level,
    )
    search.top = [(kwargs, result) for kwargs, result, _ in ranked]
    search.upper_s = [upper for _, _, upper in ranked]
    search.best_kwargs, search.best = search.top[0]


def capacity_sweep(
    model,
    gpu,
    fabric,
    *,
    gpus: list[int],
    objective: str = "tokens_per_gpu",
    budget_s: float | None = None,
    progress=None,
    **options,
) -> LayoutSearch:
    """Search each GPU count of ``gpus``; returns the :class:`LayoutSearch` of the count
    with the best ``objective`` with ``.sweep`` (Dataset over ``gpus``: ``step_time_s``,
    ``mfu``, ``tokens_per_gpu_s``, ``tokens_per_s``, ``memory_gib_per_gpu``, the winning
    layout's sizes, ``order``, ``placement``, ``evaluated``, ``considered``, ``reason``;
    :func:`~fabricflow.layout_search.gpu_counts.sweep_dataset`).

    ``budget_s`` is shared by all counts; ``budget_work`` (in ``options``) bounds each
    count's search. Other options as :func:`optimize_layout`.
    """
    if not gpus:
        raise SpecError("gpus", "the GPU-count sweep needs at least one count")
    counts = sorted({int(g) for g in gpus})
    started = time.monotonic()
    searches = {}
    reasons = {}
    for count in counts:
        left = None if budget_s is None else max(budget_s - (time.monotonic() - started), 1e-3)
        if progress is not None:
            progress(f"{count} GPUs:")
        try:
            searches[count] = optimize_layout(
                model, gpu, fabric, gpus=count, objective=objective, budget_s=left,
                progress=progress, **options,
            )  # fmt: skip
        except SpecError as error:
            reasons[count] = str(error)
    if not searches:
        raise SpecError(
            "gpus",
            "no GPU count of the sweep has a feasible layout: "
            + "; ".join(f"{c}: {r}" for c, r in list(reasons.items())[:3]),
        )
    chosen = searches[best_count(searches, objective)]
    chosen.sweep = sweep_dataset(counts, searches, reasons, objective)
    chosen.seconds = time.monotonic() - started
    return chosen


def require_connected(fabric: Fabric, gpus: int) -> None:
    """RoutingError at once when the first ``gpus`` GPUs of ``fabric`` (where a job is
    placed) are not all joined by working links: every layout spanning them would fail on
    the fabric, one candidate after another."""
    parts = gpu_components(fabric)[:gpus]
    if len(parts) < 2 or (parts == parts[0]).all():
        return
    other = int(np.argmax(parts != parts[0]))
    sizes = np.bincount(gpu_components(fabric))
    raise RoutingError(
        f"fabric {fabric.name!r} has no path between GPU 0 and GPU {other} (server 0 and "
        f"server {other // max(fabric.gpus_per_node, 1)}): its GPUs fall "
        f"into {len(sizes)} parts not joined by working links (the largest holds "
        f"{int(sizes.max())} GPUs; e.g. no NIC links, or every uplink failed), and a job of "
        f"{gpus} GPUs spans more than one"
    )


def gpu_components(fabric: Fabric) -> np.ndarray:
    """int ``[G]``: the connected part (over working links) of each GPU of ``fabric``."""
    from scipy.sparse import coo_matrix  # deferred: scipy is slow to import
    from scipy.sparse.csgraph import connected_components

    up = np.asarray(fabric.capacity) > 0
    if fabric.link_up is not None:
        up &= np.asarray(fabric.link_up, dtype=bool)
    n = len(fabric.node_tier)
    graph = coo_matrix(
        (np.ones(int(up.sum())), (fabric.link_src[up], fabric.link_dst[up])), shape=(n, n)
    )
    _, labels = connected_components(graph, directed=True, connection="strong")
    return labels[np.asarray(fabric.gpu_node)]


def _check_arguments(fabric, gpus, global_batch, seq_len, top_k, objective, budget_s,
                     collectives, progress):  # fmt: skip
    """The integer arguments checked; SpecError naming the field otherwise."""
    if not isinstance(fabric, Fabric):
        raise SpecError(
            "fabric", f"expected a Fabric (ff.load_fabric), got {type(fabric).__name__}"
        )
    gpus = _check_int(gpus, "gpus")
    if gpus > fabric.num_gpus:
        raise SpecError("gpus", f"{gpus} exceeds the {fabric.num_gpus} GPUs of {fabric.name!r}")
    if objective not in OBJECTIVES:
        raise SpecError("objective", f"unknown objective {objective!r}; one of {list(OBJECTIVES)}")
    if budget_s is not None and (
        isinstance(budget_s, bool)
        or not isinstance(budget_s, numbers.Real)
        or not np.isfinite(float(budget_s))
        or not float(budget_s) > 0
    ):
        raise SpecError("budget_s", f"must be a finite number of seconds > 0, got {budget_s!r}")
    if collectives not in ("fabric", "alpha-beta"):
        raise SpecError("collectives", f"unknown {collectives!r}; one of ['fabric', 'alpha-beta']")
    if progress is not None and not callable(progress):
        raise SpecError("progress", f"must be a function taking one line of text, got {progress!r}")
    return (
        gpus,
        _check_int(global_batch, "global_batch"),
        _check_int(seq_len, "seq_len"),
        _check_int(top_k, "top_k"),
    )


def _time_first(visit: BranchAndBound, started: float) -> None:
    """Time the best-bounded candidate analysed so far (``started``: the deadline has
    passed for this visit, so it stops after one); Ctrl-C meanwhile stops the search."""
    visit.run(started, quiet=True)
    if visit.stopped == "interrupted":
        raise KeyboardInterrupt


def _analyse(table: CandidateTable, analyser: ComputeModel, deadline: float | None,
             first: Callable[[], None] | None = None) -> str | None:  # fmt: skip
    """Analyse the table's sized keys chunk by chunk; returns ``None`` when all are
    analysed, ``"budget"`` or ``"interrupted"`` when the budget (once a feasible key is
    found: a search under a budget returns an answer) or Ctrl-C stopped it (the chunks
    done so far stay recorded). ``first`` is called once, after the first chunk that
    has a feasible key."""
    todo = np.flatnonzero(table.sized_ok)
    try:
        for start in range(0, len(todo), ANALYSIS_CHUNK):
            late = deadline is not None and time.monotonic() > deadline
            if late and table.feasible.any():
                return "budget"
            keys = todo[start : start + ANALYSIS_CHUNK]
            table.record(keys, analyser.analyse(table.rows(keys)))
            if first is not None and table.feasible.any():
                first()
                first = None
    except KeyboardInterrupt:
        return "interrupted"
    return None


def _result(visit: BranchAndBound, table: CandidateTable, started, model, fabric, gpus, global_batch,
            seq_len, objective) -> LayoutSearch:  # fmt: skip
    if not len(visit.top) and visit.stopped == "budget":
        raise SpecError(
            "budget_s",
            f"the budget ran out before any feasible candidate was found "
            f"({table.considered:,} of {table.distinct:,} candidates examined); give it "
            "more time or a smaller space",
        )
    if not len(visit.top) and visit.stopped != "interrupted":
        raise SpecError(
            "space",
            "every feasible candidate failed on the fabric: "
            + "; ".join(sorted(set(visit.errors))[:3]),
        )
    top = visit.top.ranked()
    counts = _counts(visit, table)
    if not top:
        raise SearchInterrupted(counts, time.monotonic() - started, table.space_size)
    return LayoutSearch(
        best_kwargs=top[0][0],
        best=top[0][1],
        top=top,
        rows=visit.rows,
        counts=counts,
        exhaustive=visit.stopped in ("bound", "exhausted")
        and visit.counts.over_budget == 0
        and counts["unexamined"] == 0
        and counts["ranked_by_class_model"] == 0,
        seconds=time.monotonic() - started,
        space_size=table.space_size,
        objective=objective,
        stopped=visit.stopped,
        searched=table.searched,
        fixed=table.single,
        gpus=gpus,
        global_batch=global_batch,
        seq_len=seq_len,
        model=model,
        fabric=fabric,
    )


def _counts(visit: BranchAndBound, table: CandidateTable) -> dict:
    """The search's counts (see :class:`LayoutSearch`)."""
    c = visit.counts
    considered = table.considered
    unexamined = table.distinct - considered
    counts = {
        "considered": considered,
        "infeasible": int(considered - table.feasible_candidates + c.failed),
        "bounded": c.bounded,
        "pruned": c.pruned,
        "evaluated": c.evaluated,
        "unvisited": c.unvisited,
        "unexamined": int(unexamined),
        "structures": c.structures_opened,
        "ranked_by_class_model": c.ranked,
    }
    return counts


def candidate_dataset(rows: list[dict], counts: dict, stopped: str, objective: str):
    """``xarray.Dataset`` over ``candidate`` of the timed candidates' rows."""
    import xarray as xr  # deferred: xarray is slow to import and only the result needs it

    data = {}
    if rows:
        for name in rows[0]:
            values = [r[name] for r in rows]
            if isinstance(values[0], (bool, np.bool_)):
                array = np.asarray(values, dtype=bool)
            elif isinstance(values[0], (int, np.integer)):
                array = np.asarray(values, dtype=np.int64)
            elif isinstance(values[0], float):
                array = np.asarray(values, dtype=np.float64)
            else:
                array = np.asarray([str(v) for v in values], dtype=str)
            data[name] = ("candidate", array)
    ds = xr.Dataset(data, coords={"candidate": np.arange(len(rows))})
    ds.attrs.update(
        {f"count_{k}": v for k, v in counts.items()} | {"stopped": stopped, "objective": objective}
    )
    return ds
