"""Branch and bound over parallel layouts, rank orders, placements and collective algorithms.

:func:`optimize_layout` enumerates the product of the searched knobs as integer-coded
numpy columns, checks feasibility and memory and computes a true lower bound of the step
time once per distinct analytic key (:mod:`.bound`), then times candidates with contention
on the fabric (:func:`fabricflow.step_time`) in increasing order of their bound. It stops
when the next bound is no better than the ``top_k``-th best step time found: every
candidate left could at best tie, so the result is exact (``exhaustive=True``). The
network part of a candidate (routing and max-min rates of each group set) is solved once
per process (:mod:`fabricflow.collective.structure_cache`), so candidates that share a group
structure and differ in micro-batch, recompute, ZeRO or interleaving cost milliseconds.
A ``budget_s`` or Ctrl-C stops the visit early: the best found so far is returned with
``exhaustive=False`` and its counts.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import numbers
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import MemoryBudgetError, RoutingError, SpecError
from ..fabric.fabric import Fabric
from ..workload.gpu import GpuSpec, load_gpu
from ..workload.layout import Layout
from ..workload.memory import GIB
from ..workload.model import ModelSpec, load_model
from ..workload.placement import parse_order
from ..workload.step import BREAKDOWN_KEYS, DEFAULT_ORDER, StepResult, step_time
from . import space as _space
from .bound import Evaluator
from .netbound import CutBound

OBJECTIVES = ("step_time", "tokens_per_gpu")
_DP_OPS = ("all_reduce", "reduce_scatter", "all_gather")
_OVERLAPS = ("tp_overlap", "dp_overlap", "pp_overlap", "ep_overlap")
# Overlap switches that never lengthen a step when turned on (see Search.dominator).
_DOMINATING_OVERLAPS = ("tp_overlap", "pp_overlap", "ep_overlap")
# The incumbent search (visiting order only): keys within this factor of the lowest
# compute bound, at most this many, estimated without contention.
INCUMBENT_SLACK = 1.6
INCUMBENT_KEYS = 500


@dataclasses.dataclass
class LayoutSearch:
    """Outcome of :func:`optimize_layout`.

    Attributes:
        best_kwargs: ``layout``, ``order``, ``placement`` (and ``seed``, ``algorithms``,
            ``collectives`` when they matter): ``ff.step_time(model, gpu, fabric=fabric,
            **best_kwargs)`` re-times the winner.
        best: the winner's :class:`StepResult`.
        top: the ``top_k`` best as ``(kwargs, StepResult)`` pairs, best first.
        candidates: ``xarray.Dataset`` over ``candidate`` (one per evaluated candidate):
            every knob, ``step_time_s``, ``lower_bound_s``, ``mfu``, ``tokens_per_gpu_s``,
            ``memory_gib_per_gpu`` and each breakdown part (``<part>_s``).
        counts: ``considered`` (every candidate of the space, each checked for feasibility
            and bounded), ``infeasible``, ``pruned`` (feasible, bound no better than the
            ``top_k``-th best), ``evaluated`` (timed with contention), ``unvisited``
            (feasible, left when the budget ran out or on Ctrl-C).
        exhaustive: True when nothing was skipped except by the bound.
        seconds: wall time of the search.
        space_size: the product of the searched knobs' value counts (before removing
            settings that are no-ops for a layout, e.g. sequence parallelism at tp = 1).
        objective: ``step_time`` or ``tokens_per_gpu``.
        stopped: ``bound``, ``exhausted``, ``budget`` or ``interrupted``.
        searched: knob -> values searched; fixed: every other knob's value.
    """

    best_kwargs: dict
    best: StepResult
    top: list
    candidates: Any
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

    def score(self, result: StepResult) -> float:
        """The objective's value of ``result`` (step seconds, or tokens per GPU-second)."""
        if self.objective == "tokens_per_gpu":
            return result.tokens_per_s / self.gpus
        return result.step_time_s

    def to_dict(self) -> dict:
        """The JSON object of ``fabricflow optimize --json``."""
        return {
            "best": flatten_kwargs(self.best_kwargs),
            "step_time_s": self.best.step_time_s,
            "mfu": self.best.mfu,
            "tokens_per_gpu_s": self.best.tokens_per_s / self.gpus,
            "memory_gib_per_gpu": self.best.memory_gib_per_gpu,
            "breakdown": dict(self.best.breakdown),
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
                    "mfu": r.mfu,
                    "memory_gib_per_gpu": r.memory_gib_per_gpu,
                    "breakdown": dict(r.breakdown),
                }
                for kwargs, r in self.top
            ],
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
    seed: int = 0,
    collectives: str = "fabric",
    progress: Callable[[str], None] | None = None,
) -> LayoutSearch:
    """Search the layout, rank order, placement and collective algorithms with the
    shortest step (or most tokens per GPU-second) of ``model`` on ``fabric``.

    Args:
        model, gpu: specs or preset names.
        fabric: the network (:func:`fabricflow.load_fabric`).
        gpus: GPUs in the job (dp follows from it); a list runs the capacity sweep of
            :func:`fabricflow.optimize.capacity.capacity_sweep` and returns the search of
            the count with the best ``objective``, its ``sweep`` attribute the Dataset.
        global_batch, seq_len: sequences per step and tokens per sequence.
        precision: ``bf16`` or ``fp8`` GEMMs.
        fixed: knob -> value pinned (``{"tp": 8, "order": "tp-cp-ep-dp-pp"}``).
        space: knob -> values; when given exactly its product is searched, every other
            knob takes its ``fixed`` value or its default. Default: the space of
            :func:`.space.default_space` with ``fixed`` knobs pinned.
        objective: ``step_time`` (minimise) or ``tokens_per_gpu`` (maximise tokens per
            GPU-second; the same ranking for one GPU count).
        top_k: how many of the best to return (exactly, when the search is exhaustive).
        budget_s: stop timing candidates after this many seconds (``exhaustive=False``).
        seed: seed of the ``scattered`` placement.
        collectives: ``fabric`` (contention on the fabric) or ``alpha-beta`` (no contention).
        progress: called with a line of text at each stage (the CLI prints it on stderr).
    """
    if isinstance(gpus, (list, tuple, np.ndarray)):
        from .capacity import capacity_sweep

        return capacity_sweep(
            model, gpu, fabric, gpus=list(gpus), global_batch=global_batch, seq_len=seq_len,
            precision=precision, fixed=fixed, space=space, objective=objective, top_k=top_k,
            budget_s=budget_s, seed=seed, collectives=collectives, progress=progress,
        )  # fmt: skip
    started = time.monotonic()
    model = load_model(model) if not isinstance(model, ModelSpec) else model
    gpu = load_gpu(gpu) if not isinstance(gpu, GpuSpec) else gpu
    if not isinstance(fabric, Fabric):
        raise SpecError(
            "fabric", f"expected a Fabric (ff.load_fabric), got {type(fabric).__name__}"
        )
    gpus = _check_int(gpus, "gpus")
    if gpus > fabric.num_gpus:
        raise SpecError("gpus", f"{gpus} exceeds the {fabric.num_gpus} GPUs of {fabric.name!r}")
    global_batch = _check_int(global_batch, "global_batch")
    seq_len = _check_int(seq_len, "seq_len")
    top_k = _check_int(top_k, "top_k")
    if objective not in OBJECTIVES:
        raise SpecError("objective", f"unknown objective {objective!r}; one of {list(OBJECTIVES)}")
    if budget_s is not None and (
        isinstance(budget_s, bool) or not isinstance(budget_s, numbers.Real) or not budget_s > 0
    ):
        raise SpecError("budget_s", f"must be a number of seconds > 0, got {budget_s!r}")
    if collectives not in ("fabric", "alpha-beta"):
        raise SpecError("collectives", f"unknown {collectives!r}; one of ['fabric', 'alpha-beta']")
    gpu.peak(precision)  # SpecError for fp8 on a chip without it
    say = progress or (lambda line: None)

    searched, single = _space.resolve_space(
        model, fabric, gpus=gpus, global_batch=global_batch, seq_len=seq_len,
        precision=precision, fixed=fixed, space=space,
    )  # fmt: skip
    table = _enumerate(model, gpu, fabric, searched, single, gpus, global_batch, seq_len)
    say(
        f"space: {table.space_size:,} settings, {table.considered:,} candidates, "
        f"{table.feasible_candidates:,} feasible; {table.num_keys:,} analytic keys "
        f"({time.monotonic() - started:.1f} s)"
    )
    if table.feasible_candidates == 0:
        _raise_infeasible(model, gpu, table, searched, single, gpus, global_batch, seq_len)
    visit = _Visit(
        model, gpu, fabric, table, objective=objective, top_k=top_k, seed=seed,
        collectives=collectives, gpus=gpus,
    )  # fmt: skip
    deadline = None if budget_s is None else started + float(budget_s)
    visit.run(deadline, say)
    if not visit.best:
        if visit.stopped in ("budget", "interrupted"):
            raise SpecError(
                "budget_s",
                f"the search stopped ({visit.stopped}) before any candidate was timed; "
                "give it more time",
            )
        raise SpecError(
            "space",
            "every feasible candidate failed on the fabric: "
            + "; ".join(sorted(set(visit.errors))[:3]),
        )
    ranked = sorted(visit.best, key=lambda item: (item[0], item[1]))
    top = [(item[2], item[3]) for item in ranked]
    counts = visit.counts()
    return LayoutSearch(
        best_kwargs=top[0][0],
        best=top[0][1],
        top=top,
        candidates=visit.dataset(),
        counts=counts,
        exhaustive=visit.stopped in ("bound", "exhausted") and visit.over_budget == 0,
        seconds=time.monotonic() - started,
        space_size=table.space_size,
        objective=objective,
        stopped=visit.stopped,
        searched=searched,
        fixed=single,
        gpus=gpus,
        global_batch=global_batch,
        seq_len=seq_len,
        model=model,
        fabric=fabric,
    )


# ---------------------------------------------------------------------------- enumeration


@dataclasses.dataclass
class _Table:
    """The enumerated space: analytic keys x network combinations, with validity masks."""

    analytic_knobs: list  # searched knobs that change compute or memory
    network_knobs: list  # searched knobs that do not
    searched: dict
    single: dict
    key_codes: np.ndarray  # int [K, A] value index per analytic knob
    layouts: list  # Layout per key (None where the prefilter rejected it)
    dp: np.ndarray  # int [K]
    feasible: np.ndarray  # bool [K]
    bound_s: np.ndarray  # [K]
    memory_bytes: np.ndarray  # [K]
    reason: list  # [K]
    net_codes: np.ndarray  # int [C, N]
    valid: np.ndarray  # bool [K, C]: a distinct candidate (no-op settings removed)
    runnable: np.ndarray  # bool [K, C]: valid and not refused by a knob rule
    space_size: int
    num_keys: int
    parts: dict  # name -> float64 [K] (Evaluator.parts)
    sizes: dict  # tp, cp, pp, ep, dp -> int [K]

    @property
    def considered(self) -> int:
        return int(self.valid.sum())

    @property
    def feasible_candidates(self) -> int:
        return int((self.runnable & self.feasible[:, None]).sum())


def _value(table: _Table, knob: str, key: int, combo: int | None = None):
    if knob in table.analytic_knobs:
        return table.searched[knob][table.key_codes[key, table.analytic_knobs.index(knob)]]
    if knob in table.network_knobs and combo is not None:
        return table.searched[knob][table.net_codes[combo, table.network_knobs.index(knob)]]
    return table.single[knob]


def _grid(lengths: list[int]) -> np.ndarray:
    """int32 ``[prod(lengths), len(lengths)]``: every index combination, last fastest."""
    if not lengths:
        return np.zeros((1, 0), dtype=np.int32)
    return np.indices(lengths, dtype=np.int32).reshape(len(lengths), -1).T


SIZE_KNOBS = ("tp", "cp", "pp", "ep", "vpp", "micro_batch", "dp")


def _enumerate(model, gpu, fabric, searched, single, gpus, global_batch, seq_len) -> _Table:
    fields = _space.layout_fields()
    network = [k for k in searched if k in _space.NETWORK_KNOBS]
    analytic = [k for k in searched if k not in _space.NETWORK_KNOBS]
    # Sizes first (few combinations), filtered, then crossed with the other analytic knobs:
    # the product is never materialised beyond what survives the size rules.
    sized = [k for k in analytic if k in SIZE_KNOBS]
    other = [k for k in analytic if k not in SIZE_KNOBS]
    size_codes = _grid([len(searched[k]) for k in sized])

    def size_column(knob: str) -> np.ndarray:
        if knob in sized:
            values = np.asarray(searched[knob], dtype=np.int64)
            return values[size_codes[:, sized.index(knob)]]
        return np.full(size_codes.shape[0], int(single.get(knob, 1)), dtype=np.int64)

    size = {d: size_column(d) for d in ("tp", "cp", "pp", "ep", "vpp", "micro_batch")}
    # Vectorised rules (a subset of Layout.validate's, which stays the judge): dp from the
    # GPU count, batch divisibility, pipeline stages dividing the layers (or layers + 2).
    ranks = size["tp"] * size["cp"] * size["pp"]
    dp = np.where(gpus % ranks == 0, gpus // np.maximum(ranks, 1), 0)
    if "dp" in sized:
        dp = np.where(dp == size_column("dp"), dp, 0)
    elif single.get("dp") is not None:
        dp = np.where(dp == int(single["dp"]), dp, 0)
    ok = dp > 0
    ok &= global_batch % np.maximum(dp * size["micro_batch"], 1) == 0
    stages = size["pp"] * size["vpp"]
    layers = model.num_layers
    ok &= (layers % stages == 0) | ((layers + 2) % stages == 0)
    m = global_batch // np.maximum(dp * size["micro_batch"], 1)
    ok &= (size["vpp"] == 1) | ((size["pp"] > 1) & (m % size["pp"] == 0))
    ok &= (dp * size["cp"]) % np.maximum(size["ep"], 1) == 0

    other_codes = _grid([len(searched[k]) for k in other])
    n_size, n_other = size_codes.shape[0], other_codes.shape[0]
    # Keys = sizes x other analytic knobs; sequence parallelism is a no-op at tp = 1, so
    # its other values there are the same candidate (dropped, not counted).
    s_idx = np.repeat(np.arange(n_size), n_other)
    o_idx = np.tile(np.arange(n_other), n_size)
    if "sequence_parallel" in other:
        spc = other_codes[o_idx, other.index("sequence_parallel")]
        keep = (size["tp"][s_idx] > 1) | (spc == 0)
        s_idx, o_idx = s_idx[keep], o_idx[keep]
    codes = np.zeros((len(s_idx), len(analytic)), dtype=np.int32)
    for j, knob in enumerate(analytic):
        if knob in sized:
            codes[:, j] = size_codes[s_idx, sized.index(knob)]
        else:
            codes[:, j] = other_codes[o_idx, other.index(knob)]
    keys = np.arange(len(s_idx))
    ok = ok[s_idx]
    dp = dp[s_idx]
    size = {k: v[s_idx] for k, v in size.items()}
    if "sequence_parallel" in other:
        sp = np.asarray(searched["sequence_parallel"], dtype=bool)[
            other_codes[o_idx, other.index("sequence_parallel")]
        ]
    else:
        sp = np.full(len(keys), bool(single["sequence_parallel"]))

    layouts: list = [None] * len(keys)
    base = {k: v for k, v in single.items() if k in fields}
    for knob in network:  # a valid placeholder: these do not change compute or memory
        if knob in fields:
            base[knob] = fields[knob].default
    base.update(global_batch=global_batch, seq_len=seq_len)
    todo = np.flatnonzero(ok)
    for i in todo:
        kwargs = dict(base)
        for j, knob in enumerate(analytic):
            kwargs[knob] = searched[knob][codes[i, j]]
        kwargs["dp"] = int(dp[i])
        layouts[i] = Layout(**kwargs)
    analysis = Evaluator(model, gpu).analyse([layouts[i] for i in todo])
    feasible = np.zeros(len(keys), dtype=bool)
    bound = np.full(len(keys), np.inf)
    memory = np.full(len(keys), np.nan)
    reason = ["no integer dp, or batch / stage divisibility"] * len(keys)
    feasible[todo] = analysis.feasible
    bound[todo] = analysis.bound_s
    memory[todo] = analysis.memory_bytes
    for i, why in zip(todo, analysis.reason, strict=True):
        reason[i] = why
    parts = {}
    for name, values in analysis.parts.items():
        parts[name] = np.full(len(keys), np.nan)
        parts[name][todo] = values

    net_codes = _grid([len(searched[k]) for k in network])
    valid, runnable = _network_masks(model, searched, single, network, net_codes, size, dp, sp)
    return _Table(
        analytic_knobs=analytic, network_knobs=network, searched=searched, single=single,
        key_codes=codes, layouts=layouts, dp=dp, feasible=feasible, bound_s=bound,
        memory_bytes=memory, reason=reason, net_codes=net_codes, valid=valid,
        runnable=runnable, space_size=_space.product_size(searched), num_keys=len(keys),
        parts=parts, sizes={**{k: size[k] for k in ("tp", "cp", "pp", "ep")}, "dp": dp},
    )  # fmt: skip


def _order_signature(order: str, sizes: dict[str, int], edp: int) -> tuple:
    """What a rank order decides for these sizes: the dense and the expert dimension
    sequences without the size-1 dimensions (orders with equal signatures place every
    group identically)."""
    dims = parse_order(order)
    dense = tuple(d for d in dims if d != "ep" and sizes[d] > 1)
    expert_sizes = {**sizes, "dp": edp}
    expert = tuple(d for d in dims if d != "cp" and expert_sizes[d] > 1)
    return dense, expert


def _network_masks(model, searched, single, network, net_codes, size, dp, sp):
    """(valid, runnable) bool ``[K, C]``: distinct candidates, and those a knob rule allows.

    A setting that is a no-op for a key (an order equal to an earlier one once size-1
    dimensions are dropped, overlap or algorithm of a dimension of size 1, TP overlap at
    tp = 1) keeps only its first value: the others are the same candidate again.
    ``tp_overlap`` without sequence parallelism at tp > 1 is a candidate Megatron refuses
    (runnable False, counted infeasible).
    """
    num_keys, num_combos = len(dp), net_codes.shape[0]
    edp = dp * size["cp"] // np.maximum(size["ep"], 1)
    # Signature of each key: which dimensions exist, and SP (for the tp_overlap rule).
    sig_cols = np.stack(
        [size["tp"], size["cp"], size["ep"], size["pp"], dp, edp, sp.astype(np.int64)], axis=1
    )
    sigs, sig_of_key = np.unique(sig_cols, axis=0, return_inverse=True)
    sig_of_key = sig_of_key.reshape(-1)
    valid_sig = np.ones((len(sigs), num_combos), dtype=bool)
    runnable_sig = np.ones((len(sigs), num_combos), dtype=bool)
    for s, (tp, cp, ep, pp, d, e, spv) in enumerate(sigs.tolist()):
        sizes = {"tp": tp, "cp": cp, "ep": ep, "pp": pp, "dp": d}
        on = {"tp": tp > 1, "cp": cp > 1, "ep": ep > 1, "pp": pp > 1, "dp": d * cp > 1 or e > 1}
        for j, knob in enumerate(network):
            col = net_codes[:, j]
            dim = None
            if knob == "order":
                seen: dict = {}
                first = np.zeros(len(searched[knob]), dtype=bool)
                for v, order in enumerate(searched[knob]):
                    signature = _order_signature(order, sizes, e)
                    if signature not in seen:
                        seen[signature] = v
                        first[v] = True
                valid_sig[s] &= first[col]
                continue
            if knob.startswith("algo_"):
                dim = knob[len("algo_") :]
            elif knob in ("tp_overlap", "pp_overlap", "ep_overlap", "dp_overlap"):
                dim = knob.split("_")[0]
            if dim is not None and not on[dim]:
                valid_sig[s] &= col == 0
            if knob == "tp_overlap" and tp > 1 and not spv:
                on_value = np.asarray(searched[knob], dtype=bool)[col]
                runnable_sig[s] &= ~on_value
    valid = valid_sig[sig_of_key]
    if "placement" in network and "order" in network:
        # topology-aware placement picks the rank order itself: one candidate per key,
        # represented by the first order searched
        aware = [i for i, value in enumerate(searched["placement"]) if value == "topology-aware"]
        if aware:
            placement_col = net_codes[:, network.index("placement")]
            order_col = net_codes[:, network.index("order")]
            valid &= ~(np.isin(placement_col, aware) & (order_col != 0))[None, :]
    runnable = valid & runnable_sig[sig_of_key]
    assert valid.shape == (num_keys, num_combos)
    return valid, runnable


# ---------------------------------------------------------------------------- the visit


class _Visit:
    """Times candidates in increasing bound order until the bound says stop."""

    def __init__(self, model, gpu, fabric, table: _Table, *, objective, top_k, seed,
                 collectives, gpus):  # fmt: skip
        self.model, self.gpu, self.fabric, self.table = model, gpu, fabric, table
        self.objective, self.top_k, self.seed = objective, top_k, seed
        self.collectives, self.gpus = collectives, gpus
        self.best: list = []  # max-heap by step time via negation: (-t, -tiebreak, kw, res)
        self._heap: list = []
        self.rows: list = []
        self.errors: list = []
        self.evaluated = 0
        self.failed = 0
        self.over_budget = 0  # candidates refused by the memory budget (not ruled out)
        self.stopped = "exhausted"
        self.visited_keys = 0
        self._pruned = 0
        self._unvisited = 0
        self._counter = 0
        self.bounded = 0
        self.done: set = set()
        self.deferred: dict = {}
        self._dominators: list | None = None
        self._rate_memo: dict = {}
        # The cut bound needs the fabric; with alpha-beta collectives (no fabric in the
        # times) the compute bound alone stays valid.
        self.cut = CutBound(fabric) if collectives == "fabric" else None

    def threshold(self) -> float:
        if len(self._heap) < self.top_k:
            return math.inf
        return -self._heap[0][0]

    def kwargs(self, key: int, combo: int) -> dict:
        table = self.table
        layout = table.layouts[key]
        changes = {
            knob: _value(table, knob, key, combo)
            for knob in table.network_knobs
            if knob in _space.layout_fields()
        }
        if changes:
            layout = dataclasses.replace(layout, **changes)
        order = _value(table, "order", key, combo)
        placement = _value(table, "placement", key, combo)
        if placement == "topology-aware":
            order = DEFAULT_ORDER  # the placement picks the rank order itself
        out: dict = {"layout": layout, "order": order, "placement": placement}
        if placement == "scattered":
            out["seed"] = self.seed
        routing = _value(table, "routing", key, combo)
        if routing != "auto":
            out["routing"] = routing
        algorithms = {}
        for dim in ("tp", "cp", "ep", "pp", "dp"):
            algo = _value(table, f"algo_{dim}", key, combo)
            if algo != "auto":
                algorithms[dim] = algo
        if algorithms:
            out["algorithms"] = algorithms
        if self.collectives != "fabric":
            out["collectives"] = self.collectives
        return out

    def run(self, deadline: float | None, say) -> None:
        """Best-first over candidates by their network bound, expanding keys lazily in
        order of the compute bound (a key's candidates get their network bound only when
        the compute bound says they might still win)."""
        table = self.table
        feasible_keys = np.flatnonzero(table.feasible & table.runnable.any(axis=1))
        # Best bound first; ties by memory (smaller first) for a stable, sensible order.
        order = feasible_keys[
            np.lexsort((table.memory_bytes[feasible_keys], table.bound_s[feasible_keys]))
        ]
        heap: list = []
        pointer = 0
        sequence = 0
        last_note = time.monotonic()
        chunk = 64
        try:
            if self.cut is not None:
                self._incumbent(order, deadline, say)
            while True:
                next_b1 = table.bound_s[order[pointer]] if pointer < len(order) else math.inf
                if not heap or heap[0][0] >= next_b1:
                    if pointer >= len(order):
                        self.stopped = "exhausted"
                        break
                    if next_b1 >= self.threshold():
                        self.stopped = "bound"
                        break
                    keys = order[pointer : pointer + chunk]
                    pointer += len(keys)
                    chunk = min(chunk * 2, 4096)
                    k_idx, combos = np.nonzero(table.runnable[keys])
                    bounds = self.network_bound(keys[k_idx], combos)
                    self.bounded += len(bounds)
                    dominators = self.dominator(keys[k_idx], combos)
                    for b, key, combo, dom in zip(
                        bounds.tolist(),
                        keys[k_idx].tolist(),
                        combos.tolist(),
                        dominators.tolist(),
                        strict=True,
                    ):
                        if dom != combo and (key, dom) not in self.done:
                            # waits for its dominator's time, a lower bound of its own
                            self.deferred.setdefault((key, dom), []).append((combo, b))
                            continue
                        heapq.heappush(heap, (b, sequence, key, combo))
                        sequence += 1
                    continue
                bound, _, key, combo = heap[0]
                if bound >= self.threshold():
                    self.stopped = "bound"
                    break
                heapq.heappop(heap)
                if (key, combo) in self.done:
                    continue
                if self._late(deadline):
                    heapq.heappush(heap, (bound, -1, key, combo))
                    self.stopped = "budget"
                    break
                if time.monotonic() - last_note > 10.0:
                    last_note = time.monotonic()
                    say(
                        f"  {self.evaluated:,} timed, {self.bounded:,} network-bounded; best "
                        f"{self.threshold():.4g} s (top {self.top_k}), next bound {bound:.4g} s"
                    )
                time_s = self._evaluate(key, combo)
                for other, b in self.deferred.pop((key, combo), []):
                    heapq.heappush(heap, (max(b, time_s), sequence, key, other))
                    sequence += 1
        except KeyboardInterrupt:
            self.stopped = "interrupted"
        left_keys = order[pointer:]
        unexpanded = int(table.runnable[left_keys].sum()) if len(left_keys) else 0
        if len(left_keys) and self.done:
            # candidates of unexpanded keys timed early (incumbent) are not left over
            done_keys = np.fromiter((k for k, _ in self.done), dtype=np.int64)
            unexpanded -= int(np.isin(done_keys, left_keys).sum())
        waiting = sum(1 for entry in heap if (entry[2], entry[3]) not in self.done)
        waiting += sum(
            1
            for (key, _), others in self.deferred.items()
            for other, _ in others
            if (key, other) not in self.done
        )
        if self.stopped in ("bound", "exhausted"):
            self._pruned = unexpanded + waiting
        else:
            self._unvisited = unexpanded + waiting
        say(
            f"timed {self.evaluated:,} candidates with contention, {self.bounded:,} got a "
            f"network bound; stopped: {self.stopped}"
        )

    def _late(self, deadline: float | None) -> bool:
        """Past the budget (once at least one candidate is timed: a search returns a
        result)."""
        if deadline is None or self.evaluated == 0:
            return False
        return time.monotonic() > deadline

    def _incumbent(self, order: np.ndarray, deadline, say) -> None:
        """Time a few promising candidates first, so that the bound prunes early.

        Promising = best under the contention-free alpha-beta estimate, among the keys
        whose compute bound is within :data:`INCUMBENT_SLACK` of the lowest (first runnable
        combination of each, at most :data:`INCUMBENT_KEYS` keys). Only the visiting
        order changes: every candidate whose bound beats the result is still timed.
        """
        table = self.table
        if not len(order):
            return
        low = table.bound_s[order[0]]
        pool = order[:INCUMBENT_KEYS][
            table.bound_s[order[:INCUMBENT_KEYS]] <= low * INCUMBENT_SLACK
        ]
        estimates = []
        for key in pool.tolist():
            combo = int(np.flatnonzero(table.runnable[key])[0])
            kwargs = self.kwargs(key, combo)
            kwargs["collectives"] = "alpha-beta"
            try:
                result = step_time(self.model, self.gpu, fabric=self.fabric, **kwargs)
            except (SpecError, RoutingError):
                continue
            estimates.append((result.step_time_s, key))
        estimates.sort()
        picked = [key for _, key in estimates[: max(self.top_k, 4)]]
        say(
            f"incumbent: {len(pool):,} keys estimated without contention, timing the "
            f"candidates of the best {len(picked)}"
        )
        for key in picked:
            combos = np.flatnonzero(table.runnable[key])
            # overlap-off settings are dominated: the visit times them only if they can win
            combos = combos[self.dominator(np.full(len(combos), key), combos) == combos]
            for combo in combos.tolist():
                if self._late(deadline):
                    return
                self._evaluate(key, combo)

    def network_bound(self, keys: np.ndarray, combos: np.ndarray) -> np.ndarray:
        """Lower bound of the step time of candidates ``(keys[i], combos[i])``: the
        compute bound plus what the data-parallel and pipeline traffic must at least add
        given the domain cuts it crosses (:mod:`.netbound`); see docs/optimize.md."""
        table = self.table
        out = table.bound_s[keys].astype(np.float64).copy()
        if self.cut is None or not len(keys):
            return out
        cols = [table.sizes[d][keys] for d in ("tp", "cp", "pp", "dp", "ep")]
        for knob in ("order", "placement"):
            if knob in table.network_knobs:
                cols.append(table.net_codes[combos, table.network_knobs.index(knob)])
            else:
                cols.append(np.zeros(len(keys), dtype=np.int64))
        structures, which = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
        which = which.reshape(-1)
        P = table.parts
        for s in range(len(structures)):
            idx = np.flatnonzero(which == s)
            k = keys[idx]
            r = self._rates(int(k[0]), int(combos[idx[0]]))
            grad = np.where(
                np.asarray([table.layouts[x].grad_reduce_dtype == "fp32" for x in k]), 4.0, 2.0
            )
            zero = np.asarray([table.layouts[x].zero for x in k])
            m, p, v = P["m"][k], P["pp"][k], P["vpp"][k]
            bwd, opt = P["backward_s"][k], P["optimizer_s"][k]
            sets = [("dense", P["dense"][k])]
            if self.model.is_moe:
                sets.append(("expert", P["expert"][k]))
            loss = np.zeros(len(k))  # zero 0-2: sum of max(0, reduce - backward)
            per_mb = np.zeros(len(k))  # zero 3: max over sets of one micro-batch's traffic
            for name, params in sets:
                ar, rs, ag = r[name]
                reduce = np.where(zero == 0, ar, rs) * grad * params
                loss += np.maximum(0.0, reduce - bwd)
                per_mb = np.maximum(per_mb, 2 * ag * 2.0 * params + rs * grad * params)
            pipeline = np.where(p > 1, 2 * (p * v - 1) * r["pp"] * P["hop_bytes"][k], 0.0)
            # TP per layer and micro-batch, overlapped at best (Jensen: the share-weighted
            # GEMM time hides no more than the per-kind ones), on the least loaded rank.
            ar, ag_tp, rs_tp = r["tp"]
            size = P["tp_bytes"][k]
            per_pass = np.where(
                P["sequence_parallel"][k] > 0, 2 * (ag_tp + rs_tp) * size, 2 * ar * size
            )
            tp_layer = P["passes_forward"][k] * np.maximum(
                0.0, per_pass - P["forward_gemm_s"][k]
            ) + np.maximum(0.0, per_pass - P["backward_gemm_s"][k])
            tp_rank = P["min_layers"][k] * tp_layer
            b1 = table.bound_s[k]
            share = P["bubble_share"][k]
            plain = b1 + (m + share) * tp_rank + loss
            sharded = np.maximum(
                b1 + (m + share) * tp_rank, m * per_mb + P["bubble_s"][k] + share * tp_rank + opt
            )
            out[idx] = np.where(zero == 3, sharded, plain) + pipeline
        return out

    def _rates(self, key: int, combo: int) -> dict:
        """Cut-bound seconds per byte of the DP (dense, expert) and PP group sets."""
        from ..workload.placement import place

        table = self.table
        layout = table.layouts[key]
        order = _value(table, "order", key, combo)
        placement = _value(table, "placement", key, combo)
        memo_key = (layout.tp, layout.cp, layout.pp, layout.dp, layout.ep, order, placement)
        if memo_key in self._rate_memo:
            return self._rate_memo[memo_key]
        if placement == "topology-aware":
            order = DEFAULT_ORDER  # the placement picks the rank order itself
        try:
            # exactly the call step_time makes, so the bound sees the groups it will time
            where = place(
                layout, self.fabric.num_gpus, order=order, placement=placement, seed=self.seed,
                gpus_per_node=self.fabric.gpus_per_node, fabric=self.fabric, model=self.model,
            )  # fmt: skip
        except (SpecError, TypeError):
            # a placement this helper cannot reproduce without step_time's arguments: no
            # network bound for it (zero rates keep the compute bound, which stays valid)
            rates = {"dense": (0.0,) * 3, "expert": (0.0,) * 3, "pp": 0.0, "tp": (0.0,) * 3}
            self._rate_memo[memo_key] = rates
            return rates
        cut = self.cut
        assert cut is not None  # only called with the fabric backend
        dense = where.groups(("dp", "cp"))
        rates = {
            "dense": tuple(cut.seconds_per_byte(dense, op) for op in _DP_OPS),
            "pp": cut.seconds_per_byte(where.groups("pp"), "sendrecv"),
            "tp": tuple(
                cut.seconds_per_byte(where.groups("tp"), op)
                for op in ("all_reduce", "all_gather", "reduce_scatter")
            ),
        }
        if self.model.is_moe:
            expert = where.groups("dp", expert=True)
            rates["expert"] = tuple(cut.seconds_per_byte(expert, op) for op in _DP_OPS)
        self._rate_memo[memo_key] = rates
        return rates

    def _evaluate(self, key: int, combo: int) -> float:
        """Time one candidate with contention; returns its step time (0 if refused)."""
        self.done.add((key, combo))
        kwargs = self.kwargs(key, combo)
        try:
            result = step_time(self.model, self.gpu, fabric=self.fabric, **kwargs)
        except (SpecError, RoutingError) as error:
            self.failed += 1
            self.errors.append(str(error))
            return 0.0
        except MemoryBudgetError as error:
            # a candidate this machine cannot time is not ruled out: the search is then
            # not exhaustive (counted as failed, its reason kept in ``errors``)
            self.failed += 1
            self.over_budget += 1
            self.errors.append(str(error))
            return 0.0
        self.evaluated += 1
        self._counter += 1
        t = result.step_time_s
        entry = (-t, -self._counter, kwargs, result)
        if len(self._heap) < self.top_k:
            heapq.heappush(self._heap, entry)
        elif t < -self._heap[0][0]:
            heapq.heapreplace(self._heap, entry)
        self.best = [(-e[0], -e[1], e[2], e[3]) for e in self._heap]
        self.rows.append(self._row(key, combo, kwargs, result))
        return t

    def dominator(self, keys: np.ndarray, combos: np.ndarray) -> np.ndarray:
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
                for k in _DOMINATING_OVERLAPS
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

    def _row(self, key, combo, kwargs, result: StepResult) -> dict:
        table = self.table
        row: dict = {"_key": key}
        for knob in _space.known_knobs():
            row[knob] = int(table.dp[key]) if knob == "dp" else _value(table, knob, key, combo)
        if row.get("placement") == "topology-aware":
            row["order"] = result.details["order"]  # the order the placement picked
        row["step_time_s"] = result.step_time_s
        row["lower_bound_s"] = float(table.bound_s[key])
        row["mfu"] = result.mfu
        row["tokens_per_gpu_s"] = result.tokens_per_s / self.gpus
        row["memory_gib_per_gpu"] = result.memory_gib_per_gpu
        for part in BREAKDOWN_KEYS:
            row[f"{part}_s"] = float(result.breakdown.get(part, 0.0))
        return row

    def counts(self) -> dict:
        table = self.table
        considered = table.considered
        infeasible = considered - table.feasible_candidates + self.failed
        return {
            "considered": considered,
            "infeasible": int(infeasible),
            "pruned": int(self._pruned),
            "evaluated": int(self.evaluated),
            "unvisited": int(self._unvisited),
        }

    def dataset(self):
        import xarray as xr

        rows = self.rows
        data = {}
        if rows:
            for name in rows[0]:
                if name == "_key":
                    continue
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
            {f"count_{k}": v for k, v in self.counts().items()}
            | {"stopped": self.stopped, "objective": self.objective}
        )
        return ds


class _Stop(Exception):
    pass


# ---------------------------------------------------------------------------- bad input


def _raise_infeasible(model, gpu, table: _Table, searched, single, gpus, global_batch, seq_len):
    """Say why nothing is feasible, and the closest feasible alternative when one exists."""
    has_layout = np.asarray([lay is not None for lay in table.layouts], dtype=bool)
    if not has_layout.any():
        near = closest_gpu_counts(model, searched, single, gpus, global_batch, seq_len)
        hint = f"; closest GPU counts that factorize: {near}" if near else ""
        raise SpecError(
            "gpus",
            f"{gpus} GPUs have no valid factorization tp x cp x pp x dp with these sizes "
            f"(dp x micro_batch must divide global_batch={global_batch}, pp x vpp the "
            f"{model.num_layers} layers){hint}",
        )
    memory = np.where(np.isfinite(table.memory_bytes), table.memory_bytes, np.inf)
    if np.isfinite(memory).any():
        k = int(np.argmin(memory))
        lay = table.layouts[k]
        pinned = [
            knob
            for knob in ("tp", "pp", "cp", "zero", "recompute", "micro_batch", "sequence_parallel")
            if knob in single and knob not in searched and knob in (_space.layout_fields())
            and single[knob] != _space.default_value(knob)
        ]  # fmt: skip
        helps = (
            f"unpin {pinned} or " if pinned else ""
        ) + "use more GPUs, a GPU with more HBM, or allow a larger tp/pp, ZeRO-3, full recompute"
        raise SpecError(
            "model",
            f"{model.name} fits no layout of the space on {gpus} x {gpu.name}: the smallest "
            f"needs {memory[k] / GIB:.1f} GiB per GPU (tp={lay.tp} pp={lay.pp} cp={lay.cp} "
            f"dp={lay.dp} zero={lay.zero} recompute={lay.recompute} micro_batch="
            f"{lay.micro_batch}) > {gpu.hbm / GIB:.1f} GiB; {helps}",
        )
    reasons = sorted({r for r in table.reason if r})
    raise SpecError("space", "no layout of the space is valid: " + "; ".join(reasons[:3]))


def closest_gpu_counts(model, searched, single, gpus, global_batch, seq_len, limit=4) -> list:
    """GPU counts near ``gpus`` for which some tp x cp x pp x dp of the space factorizes."""

    def values(knob):
        return searched.get(knob, [single.get(knob, _space.default_value(knob))])

    counts = set()
    for tp in values("tp"):
        for cp in values("cp"):
            for pp in values("pp"):
                stages_ok = any(
                    model.num_layers % (pp * v) == 0 or (model.num_layers + 2) % (pp * v) == 0
                    for v in values("vpp")
                )
                if not stages_ok:
                    continue
                for mb in values("micro_batch"):
                    if global_batch % mb:
                        continue
                    per = global_batch // mb
                    for d in (x for x in range(1, per + 1) if per % x == 0):
                        counts.add(tp * cp * pp * d)
    near = sorted(counts, key=lambda c: (abs(c - gpus), c))
    return sorted(near[:limit])
