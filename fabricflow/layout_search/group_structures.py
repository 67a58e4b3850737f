"""Group structures of a search's candidates and lower bounds of their collectives.

A candidate's *structure* is everything its network traffic depends on: the sizes (tp,
cp, pp, dp, ep), the rank order (for ``topology-aware`` placement: the order it picks),
the placement, the routing and the collective algorithms. Candidates of one structure
differ only in message sizes and in how the step hides communication, so the expensive
part (routing and max-min rates of each group set) is shared.

:class:`GroupStructures` gives, for arrays of candidates, the structure ids and two lower
bounds of each collective of :data:`~fabricflow.workload.compute.COLLECTIVES`:

* ``cut``: seconds per byte from the fabric's cuts (:mod:`.cut_bound`) times the bytes; no
  routing, cheap;
* ``isolated``: the step model's own collective time alone on the fabric
  (:func:`fabricflow.collective.comm.collective_timer`: the same call, cache and seed ``step_time``
  uses, so the solve is shared with the later full evaluation); a lower bound of the
  coupled time (coupling never shortens a collective). It needs the structure *opened*:
  its group sets routed and solved, which the branch and bound does when a candidate of
  the structure reaches the front of its queue
  (:class:`~fabricflow.layout_search.branch_and_bound.BranchAndBound`).
"""

from __future__ import annotations

import time
from collections import OrderedDict

import numpy as np

from fabricflow.collective import structure_cache
from fabricflow.collective.comm import collective_timer, prepared_collectives
from fabricflow.collective.nccl_cost import DEFAULT_COST, CostModel
from fabricflow.errors import RoutingError, SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.layout_search.candidate_table import CandidateTable
from fabricflow.layout_search.class_model import ClassModel
from fabricflow.layout_search.cut_bound import OPS, CutBound
from fabricflow.workload.compute import COLLECTIVES
from fabricflow.workload.model_spec import ModelSpec
from fabricflow.workload.placement import DEFAULT_ORDER, parse_order, place, topology_aware_order

_DIMENSION_OF = {"tp": "tp", "cp": "cp", "pp": "pp", "dp": "dp", "ep": "ep", "edp": "dp"}
# The dimensions of each group set (``dp`` is the data x context gradient group).
_SET_DIMS = {"tp": ("tp",), "cp": ("cp",), "pp": ("pp",), "dp": ("dp", "cp"), "ep": ("ep",),
             "edp": ("dp",)}  # fmt: skip
# Structures whose group arrays are kept (a 16k-GPU structure's sets weigh ~0.8 MB).
GROUP_MEMO = 64
# Collectives (group set, op) prepared per engine call when structures are opened.
PREPARE_BATCH = 16
STRUCTURE_KNOBS = ("order", "placement", "routing", "algorithm_tp", "algorithm_cp", "algorithm_ep",
                   "algorithm_pp", "algorithm_dp")  # fmt: skip


class Late(Exception):
    """The search's deadline passed between two engine batches of :meth:`GroupStructures.comm`."""


class GroupStructures:
    """Structure ids, placements and collective lower bounds of a table's candidates.

    Args:
        model, fabric, table: the search's.
        seed: seed of the ``scattered`` placement.
        collectives: ``fabric`` (bounds from cuts and isolated solves) or ``alpha-beta``
            (isolated = the estimate of each collective alone; no cut bound).
    """

    def __init__(
        self, model: ModelSpec, fabric: Fabric, table: CandidateTable, *, seed: int,
        collectives: str, cost: CostModel = DEFAULT_COST,
    ):  # fmt: skip
        self.model, self.fabric, self.table = model, fabric, table
        self.cost = cost  # the collective model's constants (a calibration's)
        self.seed, self.collectives = seed, collectives
        self.cut = CutBound(fabric) if collectives == "fabric" else None
        self.fingerprint = (
            structure_cache.fabric_fingerprint(fabric) if collectives == "fabric" else None
        )
        self.structures: list[tuple] = []  # id -> structure tuple
        self._ids: dict[tuple, int] = {}
        self._aware: dict[int, int] = {}  # key -> code of the order topology-aware picks
        self._orders: list[str] = self._values("order")
        self.representative: list[tuple[int, int]] = []  # id -> a (key, combo) of it
        self._groups: OrderedDict[int, dict | None] = OrderedDict()  # LRU, GROUP_MEMO
        self._seconds: dict[tuple, float] = {}
        self._rates: dict[tuple, dict[str, float]] = {}
        self._classed: dict[tuple, float] = {}
        self._asked: set[tuple] = set()  # group sets handed to the engine (_prepare)
        self.class_model: ClassModel | None = None  # built on first use
        # monotonic seconds: isolated bounds raise Late past it, between engine batches
        # (set by the visit while it opens a structure; None: never)
        self.deadline: float | None = None

    # ------------------------------------------------------------------ identification

    def ids(self, keys: np.ndarray, combos: np.ndarray) -> np.ndarray:
        """int64 ``[n]``: the structure id of each candidate ``(keys[i], combos[i])``."""
        table = self.table
        if not len(keys):
            return np.zeros(0, dtype=np.int64)
        cols = [table.sizes[d][keys] for d in ("tp", "cp", "pp", "dp", "ep")]
        order = table.network_column("order", combos).astype(np.int64)
        placement = table.network_column("placement", combos)
        aware = self._aware_mask(placement)
        if aware.any():
            order = order.copy()
            order[aware] = [self._aware_order(int(k)) for k in keys[aware]]
        cols += [order, placement]
        cols += [table.network_column(knob, combos) for knob in STRUCTURE_KNOBS[2:]]
        rows, first, inverse = np.unique(
            np.stack(cols, axis=1), axis=0, return_index=True, return_inverse=True
        )
        local = np.empty(len(rows), dtype=np.int64)
        for i, row in enumerate(map(tuple, rows.tolist())):
            if row not in self._ids:
                self._ids[row] = len(self.structures)
                self.structures.append(row)
                self.representative.append((int(keys[first[i]]), int(combos[first[i]])))
            local[i] = self._ids[row]
        return local[inverse.reshape(-1)]

    def _aware_mask(self, placement_codes: np.ndarray) -> np.ndarray:
        aware = [i for i, v in enumerate(self._values("placement")) if v == "topology-aware"]
        return np.isin(placement_codes, aware)

    def _values(self, knob: str) -> list:
        table = self.table
        return list(table.searched[knob]) if knob in table.network_knobs else [table.single[knob]]

    def _aware_order(self, key: int) -> int:
        """Order code (index into the orders, extended) that topology-aware picks for key."""
        if key not in self._aware:
            order = "-".join(topology_aware_order(self.table.layout(key), self.model))
            if order not in self._orders:
                self._orders.append(order)
            self._aware[key] = self._orders.index(order)
        return self._aware[key]

    def value(self, sid: int, knob: str):
        """The value of structure knob ``knob`` (:data:`STRUCTURE_KNOBS`) of ``sid``."""
        code = self.structures[sid][5 + STRUCTURE_KNOBS.index(knob)]
        return self._orders[code] if knob == "order" else self._values(knob)[code]

    def groups(self, sid: int) -> dict[str, np.ndarray] | None:
        """Group sets ``[num_groups, group_size]`` of structure ``sid`` by name (``tp``,
        ``cp``, ``pp``, ``dp`` = data x context, and ``ep``, ``edp`` for MoE), placed
        exactly as ``step_time`` places them; ``None`` if the placement is refused."""
        if sid in self._groups:
            self._groups.move_to_end(sid)
        else:
            key, _ = self.representative[sid]
            placement = self.value(sid, "placement")
            order = DEFAULT_ORDER if placement == "topology-aware" else self.value(sid, "order")
            try:
                where = place(
                    self.table.layout(key), self.fabric.num_gpus, order=order,
                    placement=placement, seed=self.seed, gpus_per_node=self.fabric.gpus_per_node,
                    fabric=self.fabric, model=self.model,
                )  # fmt: skip
            except SpecError:
                self._groups[sid] = None
                return None
            sets = {
                "tp": where.groups("tp"), "cp": where.groups("cp"), "pp": where.groups("pp"),
                "dp": where.groups(("dp", "cp")),
            }  # fmt: skip
            if self.model.is_moe:
                sets["ep"] = where.groups("ep", expert=True)
                sets["edp"] = where.groups("dp", expert=True)
            self._groups[sid] = sets
            while len(self._groups) > GROUP_MEMO:
                self._groups.popitem(last=False)
        return self._groups[sid]

    def tp_in_one_domain(self, sids: np.ndarray) -> np.ndarray:
        """bool ``[n]``: every TP group of structure ``sids[i]`` lies in one scale-up domain,
        the condition ``step_time`` puts on Transformer Engine's TP comm-GEMM overlap
        (False for a refused placement)."""
        out = np.zeros(len(sids), dtype=bool)
        for sid in np.unique(sids):
            groups = self.groups(int(sid))
            if groups is not None:
                domains = self.fabric.gpu_domain[groups["tp"]]
                out[sids == sid] = bool(np.all(domains == domains[:, :1]))
        return out

    # ------------------------------------------------------------------ collective bounds

    def comm(self, needs: dict, sids: np.ndarray, *, isolated: bool) -> dict:
        """Collective key -> float64 ``[n]``: lower bounds of each candidate's collective
        seconds (slowest group), from the cuts, or (``isolated``) the step model's
        collective alone on the fabric (solving what is not solved yet). ``needs``:
        :func:`.compute_model.collective_needs` of the candidates' rows."""
        if isolated and self.collectives == "fabric":
            self._prepare(needs, sids)
        out = {}
        for key, (size, issued) in needs.items():
            name, op = COLLECTIVES[key]
            out[key] = self._seconds_of(sids, name, op, size, isolated, issued)
        return out

    def _prepare(self, needs: dict, sids: np.ndarray) -> None:
        """Route and solve, in engine batches (:func:`~fabricflow.collective.comm.
        prepared_collectives`: twin phases once, the max-min solves of a batch together),
        every group set the isolated bounds of these candidates need and this search has
        not asked for yet; each lands in the process-wide cache under the key
        ``step_time`` looks up. A batch the collective model refuses leaves its sets to be
        prepared one by one (:meth:`_isolated`), which records each refusal."""
        batches: dict[str, dict[tuple, tuple]] = {}
        for key, (size, issued) in needs.items():
            name, op = COLLECTIVES[key]
            for sid in np.unique(sids[(size > 0) & issued]).tolist():
                groups = self.groups(sid)
                if groups is None or name not in groups or groups[name].shape[1] < 2:
                    continue
                algorithm = self.value(sid, f"algorithm_{_DIMENSION_OF[name]}")
                routing = self.value(sid, "routing")
                memo = (self.set_key(sid, name), op, algorithm, routing)
                if memo not in self._asked:
                    self._asked.add(memo)
                    batches.setdefault(routing, {})[memo] = (op, groups[name], algorithm)
        left = [memo for requests in batches.values() for memo in requests]
        for routing, requests in batches.items():
            todo = list(requests.values())
            for start in range(0, len(todo), PREPARE_BATCH):
                if self.deadline is not None and time.monotonic() > self.deadline:
                    self._asked.difference_update(left)  # asked again when reopened
                    raise Late
                del left[: len(todo[start : start + PREPARE_BATCH])]
                try:
                    prepared_collectives(
                        self.fabric, todo[start : start + PREPARE_BATCH], routing=routing,
                        seed=0, fingerprint=self.fingerprint, cost=self.cost,
                    )  # fmt: skip
                except (SpecError, RoutingError):
                    pass

    def classed(self, needs: dict, sids: np.ndarray) -> dict:
        """Collective key -> float64 ``[n]``: the class-level estimate of each candidate's
        collective seconds (:mod:`.class_model`; an estimate, not a bound)."""
        out = {}
        for key, (size, issued) in needs.items():
            name, op = COLLECTIVES[key]
            seconds = np.zeros(len(sids))
            idx = np.flatnonzero((size > 0) & issued)
            if len(idx):
                pairs, inverse = np.unique(
                    np.stack([sids[idx].astype(np.float64), size[idx]], axis=1),
                    axis=0, return_inverse=True,
                )  # fmt: skip
                values = [self._class_seconds(int(i), name, op, b) for i, b in pairs.tolist()]
                seconds[idx] = np.asarray(values)[inverse.reshape(-1)]
            out[key] = seconds
        return out

    def _class_seconds(self, sid: int, name: str, op: str, nbytes: float) -> float:
        """The class-level estimate of ``op`` at ``nbytes`` on set ``name`` of ``sid``: its
        per-byte contended part once per group set (:meth:`set_key`), the alpha-beta part
        once per size."""
        if self.class_model is None:
            self.class_model = ClassModel(self.fabric)
        memo = (self.set_key(sid, name), op)
        if (*memo, nbytes) not in self._classed:
            groups = self.groups(sid)
            if groups is None or name not in groups:
                self._classed[(*memo, nbytes)] = 0.0
                return 0.0
            if memo not in self._classed:
                self._classed[memo] = self.class_model.seconds_per_byte(groups[name], op)
            alone = self.class_model.alone(groups[name], op, nbytes)
            self._classed[(*memo, nbytes)] = max(alone, nbytes * self._classed[memo])
        return self._classed[(*memo, nbytes)]

    def _seconds_of(self, sids, name, op, size, isolated, wanted) -> np.ndarray:
        """Seconds ``[n]`` of ``op`` on group set ``name`` at ``size`` for each structure
        (0 where ``wanted`` is False or the size is 0)."""
        out = np.zeros(len(sids))
        use = (size > 0) & wanted
        if not use.any():
            return out
        idx = np.flatnonzero(use)
        unique_sids, which = np.unique(sids[idx], return_inverse=True)
        rates = np.asarray([self._cut_rate(int(sid), name, op) for sid in unique_sids.tolist()])
        out[idx] = rates[which.reshape(-1)] * size[idx]
        if not isolated:
            return out
        pairs, inverse = np.unique(
            np.stack([sids[idx].astype(np.float64), size[idx]], axis=1),
            axis=0, return_inverse=True,
        )  # fmt: skip
        values = np.empty(len(pairs))
        for i, (sid, nbytes) in enumerate(pairs.tolist()):
            values[i] = self._isolated(int(sid), name, op, nbytes)
        out[idx] = np.maximum(out[idx], values[inverse.reshape(-1)])
        return out

    def _cut_rate(self, sid: int, name: str, op: str) -> float:
        """Cut-bound seconds per byte of ``op`` on group set ``name`` of ``sid``, memoised
        by what fixes the set (:meth:`set_key`), so structures sharing a set share it."""
        if self.cut is None:
            return 0.0
        memo = self.set_key(sid, name)
        if memo not in self._rates:
            groups = self.groups(sid)
            rates = dict.fromkeys(OPS, 0.0)
            if groups is not None and name in groups:
                rates = self.cut.seconds_per_byte(groups[name])
            self._rates[memo] = rates
        return self._rates[memo][op]

    def set_key(self, sid: int, name: str) -> tuple:
        """What fixes group set ``name`` of structure ``sid``: the placement (which GPU each
        rank gets) and, along the rank order, the stride and size of each dimension of the
        set (size-1 dimensions dropped). Two structures with the same key have the same
        groups (possibly listed in another order)."""
        tp, cp, pp, dp, ep = self.structures[sid][:5]
        dims = parse_order(self.value(sid, "order"))
        if name in ("ep", "edp"):
            sizes = {"tp": tp, "ep": ep, "dp": dp * cp // max(ep, 1), "pp": pp}
            dims = tuple(d for d in dims if d != "cp")
        else:
            sizes = {"tp": tp, "cp": cp, "dp": dp, "pp": pp}
            dims = tuple(d for d in dims if d != "ep")
        wanted = _SET_DIMS[name]
        stride, pattern = 1, []
        for dim in dims:
            if dim in wanted and sizes[dim] > 1:
                pattern.append((stride, sizes[dim]))
            stride *= sizes[dim]
        return (self.value(sid, "placement"), tuple(pattern))

    def _isolated(self, sid: int, name: str, op: str, nbytes: float) -> float:
        """The step model's seconds of ``op`` at ``nbytes`` on set ``name`` of ``sid``
        alone on the fabric (0 where it is refused: the full evaluation refuses it too)."""
        memo = (sid, name, op, nbytes)
        if memo not in self._seconds:
            groups = self.groups(sid)
            if groups is None or name not in groups or groups[name].shape[1] < 2:
                self._seconds[memo] = 0.0
                return 0.0
            try:
                self._seconds[memo] = float(np.max(self._timer(sid, name, op)(nbytes)))
            except (SpecError, RoutingError):
                self._seconds[memo] = 0.0
        return self._seconds[memo]

    def _timer(self, sid: int, name: str, op: str):
        """The step model's ``size -> seconds [G]`` of ``op`` on group set ``name`` (its
        solve lives in the bounded process-wide cache, never held here)."""
        groups = self.groups(sid)
        assert groups is not None
        algorithm = self.value(sid, f"algorithm_{_DIMENSION_OF[name]}")
        return collective_timer(
            self.fabric, op, groups[name], backend=self.collectives, seed=0, algorithm=algorithm,
            fingerprint=self.fingerprint, routing=self.value(sid, "routing"), cost=self.cost,
        )  # fmt: skip
