"""The candidate table of a layout search: every distinct candidate as integer codes.

A candidate is a pair ``(key, combo)``. A *key* is an assignment of the *compute* knobs
(the ones that change compute or memory: sizes, micro-batch, recompute, ZeRO, ...); a
*combo* is an assignment of the *network* knobs (rank order, placement, overlap switches,
routing, collective algorithms), which multiply the candidates without changing their
compute or memory. Both are enumerated as integer numpy columns (value index per knob);
the product is never materialised beyond what survives the size rules, and nothing here
runs a Python loop per candidate or per key.

:func:`build_table` applies the size rules (``dp`` from the GPU count, batch and stage
divisibility) as array operations and marks the settings that are no-ops for a key (an
order equal to another once size-1 dimensions are dropped, the overlap of a dimension of
size 1, ...) so that each distinct candidate is counted once. Feasibility, memory and the
compute bound of each key come later, from :mod:`.compute_model`, chunk by chunk
(:class:`CandidateTable.record`), so that a budget or Ctrl-C can stop the enumeration
with what it has examined.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fabricflow.layout_search import knobs
from fabricflow.workload.layout import Layout
from fabricflow.workload.model_spec import ModelSpec
from fabricflow.workload.placement import parse_order

SIZE_KNOBS = ("tp", "cp", "pp", "ep", "vpp", "micro_batch", "dp")
# Why a key that failed a size rule is infeasible (the rules of Layout.validate, as arrays).
SIZE_RULE_REASON = "no integer dp, or batch / stage divisibility"


@dataclasses.dataclass
class CandidateTable:
    """Every distinct candidate of a search space.

    Arrays over keys have length ``K`` (:attr:`num_keys`), over combos ``C``.

    Attributes:
        compute_knobs: searched knobs that change compute or memory (columns of
            ``key_codes``); network_knobs: the others (columns of ``net_codes``).
        searched: knob -> values; single: every other knob's value.
        key_codes: int32 ``[K, A]`` value index of each compute knob.
        columns: Layout field -> ``[K]`` values (every field of :class:`Layout`; network
            knobs that are Layout fields hold their default, a placeholder).
        sizes: ``tp``, ``cp``, ``pp``, ``ep``, ``dp`` -> int64 ``[K]``.
        sized_ok: bool ``[K]``: passes the size rules (the others are infeasible).
        net_codes: int32 ``[C, N]``; valid: bool ``[K, C]``, a distinct candidate;
            runnable: bool ``[K, C]``, valid and allowed by every knob rule.
        analysed: bool ``[K]``: feasibility, memory and bound known (:meth:`record`).
        feasible, bound_s, memory_bytes: ``[K]`` (False / inf / NaN until analysed).
        reason: object ``[K]``: why a key is infeasible ('' when feasible).
        space_size: the raw product of the searched knobs' value counts.
    """

    compute_knobs: list
    network_knobs: list
    searched: dict
    single: dict
    key_codes: np.ndarray
    columns: dict
    sizes: dict
    sized_ok: np.ndarray
    net_codes: np.ndarray
    valid: np.ndarray
    runnable: np.ndarray
    analysed: np.ndarray
    feasible: np.ndarray
    bound_s: np.ndarray
    memory_bytes: np.ndarray
    reason: np.ndarray
    space_size: int
    _layouts: dict = dataclasses.field(default_factory=dict, repr=False)

    @property
    def num_keys(self) -> int:
        return int(self.key_codes.shape[0])

    @property
    def examined(self) -> np.ndarray:
        """bool ``[K]``: keys the search has examined (refused by a size rule or analysed)."""
        return ~self.sized_ok | self.analysed

    @property
    def distinct(self) -> int:
        """Distinct candidates of the space (examined or not)."""
        return int(self.valid.sum())

    @property
    def considered(self) -> int:
        """Distinct candidates the search examined."""
        return int(self.valid[self.examined].sum())

    @property
    def feasible_candidates(self) -> int:
        return int(self.runnable[self.feasible].sum())

    def value(self, knob: str, key: int, combo: int | None = None):
        """The value of ``knob`` for candidate ``(key, combo)``."""
        if knob in self.compute_knobs:
            return self.searched[knob][self.key_codes[key, self.compute_knobs.index(knob)]]
        if knob in self.network_knobs and combo is not None:
            return self.searched[knob][self.net_codes[combo, self.network_knobs.index(knob)]]
        return self.single[knob]

    def network_column(self, knob: str, combos: np.ndarray) -> np.ndarray:
        """int ``[n]``: value index of network knob ``knob`` for each of ``combos`` (0 for
        a knob that is not searched: its single value)."""
        if knob in self.network_knobs:
            return self.net_codes[combos, self.network_knobs.index(knob)]
        return np.zeros(len(combos), dtype=np.int32)

    def layout(self, key: int) -> Layout:
        """The :class:`Layout` of ``key`` (network knobs at their placeholders), memoised."""
        if key not in self._layouts:
            kwargs = {name: _scalar(values[key]) for name, values in self.columns.items()}
            self._layouts[key] = Layout(**kwargs)
        return self._layouts[key]

    def rows(self, keys: np.ndarray) -> dict:
        """Layout field -> ``[len(keys)]`` values of ``keys`` (the columns, indexed)."""
        return {name: values[keys] for name, values in self.columns.items()}

    def record(self, keys: np.ndarray, bounds) -> None:
        """Store the :class:`~.compute_model.ComputeBounds` of ``keys`` (a chunk of sized keys)."""
        self.feasible[keys] = bounds.feasible
        self.bound_s[keys] = bounds.bound_s
        self.memory_bytes[keys] = bounds.memory_bytes
        reason = np.empty(len(keys), dtype=object)
        reason[:] = bounds.reason
        self.reason[keys] = reason
        self.analysed[keys] = True


def _scalar(value):
    """A numpy scalar as the Python value Layout expects (tuples stay tuples)."""
    return value.item() if isinstance(value, np.generic) else value


def grid(lengths: list[int]) -> np.ndarray:
    """int32 ``[prod(lengths), len(lengths)]``: every index combination, last fastest."""
    if not lengths:
        return np.zeros((1, 0), dtype=np.int32)
    return np.indices(lengths, dtype=np.int32).reshape(len(lengths), -1).T


def build_table(
    model: ModelSpec,
    searched: dict,
    single: dict,
    gpus: int,
    global_batch: int,
    seq_len: int,
) -> CandidateTable:
    """The candidate table of ``searched`` x ``single`` (sizes filtered, nothing analysed).

    Sizes are crossed first (a few hundred combinations), filtered by the size rules, then
    crossed with the other compute knobs; sequence parallelism is a no-op at ``tp = 1``,
    so its other values there are the same key (dropped, not counted).
    """
    network = [k for k in searched if k in knobs.NETWORK_KNOBS]
    compute = [k for k in searched if k not in knobs.NETWORK_KNOBS]
    sized = [k for k in compute if k in SIZE_KNOBS]
    other = [k for k in compute if k not in SIZE_KNOBS]
    size_codes = grid([len(searched[k]) for k in sized])
    size = _size_columns(searched, single, sized, size_codes)
    ok, dp = _size_rules(model, size, single, sized, gpus, global_batch)

    other_codes = grid([len(searched[k]) for k in other])
    n_size, n_other = size_codes.shape[0], other_codes.shape[0]
    s_idx = np.repeat(np.arange(n_size), n_other)
    o_idx = np.tile(np.arange(n_other), n_size)
    if "sequence_parallel" in other:
        spc = other_codes[o_idx, other.index("sequence_parallel")]
        keep = (size["tp"][s_idx] > 1) | (spc == 0)
        s_idx, o_idx = s_idx[keep], o_idx[keep]
    codes = np.zeros((len(s_idx), len(compute)), dtype=np.int32)
    for j, knob in enumerate(compute):
        if knob in sized:
            codes[:, j] = size_codes[s_idx, sized.index(knob)]
        else:
            codes[:, j] = other_codes[o_idx, other.index(knob)]
    columns = _layout_columns(searched, single, compute, network, codes, dp[s_idx])
    columns.update(global_batch=np.full(len(s_idx), global_batch, dtype=np.int64))
    columns.update(seq_len=np.full(len(s_idx), seq_len, dtype=np.int64))
    size = {k: v[s_idx] for k, v in size.items()}
    sizes = {**{k: size[k] for k in ("tp", "cp", "pp", "ep")}, "dp": dp[s_idx]}
    net_codes = grid([len(searched[k]) for k in network])
    sp = np.asarray(columns["sequence_parallel"], dtype=bool)
    valid, runnable = network_masks(searched, network, net_codes, sizes, sp)
    num_keys = len(s_idx)
    return CandidateTable(
        compute_knobs=compute, network_knobs=network, searched=searched, single=single,
        key_codes=codes, columns=columns, sizes=sizes, sized_ok=ok[s_idx], net_codes=net_codes,
        valid=valid, runnable=runnable, analysed=np.zeros(num_keys, dtype=bool),
        feasible=np.zeros(num_keys, dtype=bool), bound_s=np.full(num_keys, np.inf),
        memory_bytes=np.full(num_keys, np.nan),
        reason=np.full(num_keys, SIZE_RULE_REASON, dtype=object),
        space_size=knobs.product_size(searched),
    )  # fmt: skip


def _size_columns(searched, single, sized, size_codes) -> dict:
    def column(knob: str) -> np.ndarray:
        if knob in sized:
            values = np.asarray(searched[knob], dtype=np.int64)
            return values[size_codes[:, sized.index(knob)]]
        return np.full(size_codes.shape[0], int(single.get(knob, 1)), dtype=np.int64)

    out = {d: column(d) for d in ("tp", "cp", "pp", "ep", "vpp", "micro_batch")}
    if "dp" in sized or single.get("dp") is not None:
        out["dp_pinned"] = column("dp")
    return out


def _size_rules(model, size, single, sized, gpus, global_batch):
    """(ok, dp) over the size combinations: dp from the GPU count and the batch
    divisibility (rules of the layout, whose full check stays the judge, in
    :mod:`.compute_model`), and the space's own rule that pipeline stages divide the layers or
    the layers + 2 (embedding and loss as layers)."""
    ranks = size["tp"] * size["cp"] * size["pp"]
    dp = np.where(gpus % ranks == 0, gpus // np.maximum(ranks, 1), 0)
    if "dp_pinned" in size:
        dp = np.where(dp == size.pop("dp_pinned"), dp, 0)
    ok = dp > 0
    ok &= global_batch % np.maximum(dp * size["micro_batch"], 1) == 0
    stages = size["pp"] * size["vpp"]
    layers = model.num_layers
    ok &= (layers % stages == 0) | ((layers + 2) % stages == 0)
    ok &= (size["vpp"] == 1) | (size["pp"] > 1)
    return ok, dp


def _layout_columns(searched, single, compute, network, codes, dp) -> dict:
    """Layout field -> ``[K]`` values: searched compute knobs from their codes, network
    knobs that are Layout fields at their default (a valid placeholder: they change
    neither compute nor memory), every other field at its single value."""
    fields = knobs.layout_fields()
    num_keys = codes.shape[0]
    out: dict = {}
    for name, field in fields.items():
        if name == "dp":
            out[name] = dp.astype(np.int64)
        elif name in compute:
            values = searched[name]
            array = np.empty(len(values), dtype=object)
            array[:] = values
            picked = array[codes[:, compute.index(name)]]
            out[name] = _typed(picked, values)
        else:
            value = field.default if name in network else single[name]
            filled = np.empty(num_keys, dtype=object)
            filled[:] = [value] * num_keys if isinstance(value, tuple) else value
            out[name] = _typed(filled, [value])
    return out


def _typed(array: np.ndarray, values: list) -> np.ndarray:
    """``array`` (object) as bool / int64 / float64 when every value is one, else object."""
    if all(isinstance(v, (bool, np.bool_)) for v in values):
        return array.astype(bool)
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        return array.astype(np.int64)
    if all(isinstance(v, float) for v in values):
        return array.astype(np.float64)
    return array


def order_signature(order: str, sizes: dict[str, int], edp: int) -> tuple:
    """What a rank order decides for these sizes: the dense and the expert dimension
    sequences without the size-1 dimensions (orders with equal signatures place every
    group identically)."""
    dims = parse_order(order)
    dense = tuple(d for d in dims if d != "ep" and sizes[d] > 1)
    expert_sizes = {**sizes, "dp": edp}
    expert = tuple(d for d in dims if d != "cp" and expert_sizes[d] > 1)
    return dense, expert


def network_masks(searched, network, net_codes, sizes, sp):
    """(valid, runnable) bool ``[K, C]``: distinct candidates, and those a knob rule allows.

    A setting that is a no-op for a key (an order equal to an earlier one once size-1
    dimensions are dropped, overlap or algorithm of a dimension of size 1, TP overlap at
    tp = 1) keeps only its first value: the others are the same candidate again.
    ``tp_overlap`` without sequence parallelism at tp > 1 is a candidate Megatron refuses
    (runnable False, counted infeasible). The rules run once per distinct size signature
    (a few hundred), broadcast to the keys.
    """
    dp = sizes["dp"]
    num_keys, num_combos = len(dp), net_codes.shape[0]
    edp = dp * sizes["cp"] // np.maximum(sizes["ep"], 1)
    sig_cols = np.stack(
        [sizes["tp"], sizes["cp"], sizes["ep"], sizes["pp"], dp, edp, sp.astype(np.int64)],
        axis=1,
    )
    sigs, sig_of_key = np.unique(sig_cols, axis=0, return_inverse=True)
    sig_of_key = sig_of_key.reshape(-1)
    valid_sig = np.ones((len(sigs), num_combos), dtype=bool)
    runnable_sig = np.ones((len(sigs), num_combos), dtype=bool)
    for s, signature in enumerate(sigs.tolist()):
        valid_sig[s], runnable_sig[s] = _signature_masks(searched, network, net_codes, signature)
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


def _signature_masks(searched, network, net_codes, signature):
    """(valid, runnable) bool ``[C]`` of one size signature (tp, cp, ep, pp, dp, edp, sp)."""
    tp, cp, ep, pp, d, e, spv = signature
    sizes = {"tp": tp, "cp": cp, "ep": ep, "pp": pp, "dp": d}
    on = {"tp": tp > 1, "cp": cp > 1, "ep": ep > 1, "pp": pp > 1, "dp": d * cp > 1 or e > 1}
    valid = np.ones(net_codes.shape[0], dtype=bool)
    runnable = np.ones(net_codes.shape[0], dtype=bool)
    for j, knob in enumerate(network):
        col = net_codes[:, j]
        if knob == "order":
            seen: set = set()
            first = np.zeros(len(searched[knob]), dtype=bool)
            for v, order in enumerate(searched[knob]):
                key = order_signature(order, sizes, e)
                first[v] = key not in seen
                seen.add(key)
            valid &= first[col]
            continue
        dim = None
        if knob.startswith("algorithm_"):
            dim = knob[len("algorithm_") :]
        elif knob in ("tp_overlap", "pp_overlap", "ep_overlap", "dp_overlap"):
            dim = knob.split("_")[0]
        if dim is not None and not on[dim]:
            valid &= col == 0
        if knob == "tp_overlap" and tp > 1 and not spv:
            runnable &= ~np.asarray(searched[knob], dtype=bool)[col]
    return valid, runnable
