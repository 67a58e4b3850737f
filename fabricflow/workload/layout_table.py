"""Layout tables: many candidate layouts as numpy columns, one per :class:`Layout` field.

The compute and memory models evaluate a whole table at once (arrays of seconds and bytes,
one entry per row); the per-layout API (:class:`Layout`, :func:`fabricflow.step_time`,
:func:`~fabricflow.workload.gpu_memory.memory_per_gpu`) runs the same code on a one-row table,
asked one way: :func:`for_layout` (a table function for one layout, returning its row).

A table is built from layouts or from columns::

    table = layout_table([Layout(tp=8, dp=4), Layout(tp=4, dp=8)])
    table = layout_table(tp=np.array([1, 2, 4, 8]), dp=np.array([8, 4, 2, 1]), seq_len=4096)
    cost = for_layout(layer_cost_table, Layout(tp=8), model=m, gpu=g, moe=False)  # one row

Columns not given take the :class:`Layout` default; a scalar is broadcast to every row.
Integer fields are int64, switches bool, fractions float64, names numpy strings;
``pp_split`` is an object column of tuples (``None`` = the automatic split).
:func:`table_problems` checks every row at once, with the rules and messages of
:meth:`Layout.validate` (which calls it on one row).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from fabricflow.errors import SpecError

# Field kinds; every Layout field is in exactly one (checked on import of layout.py).
INT_COLUMNS = (
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "vpp",
    "micro_batch",
    "global_batch",
    "seq_len",
    "zero",
    "expert_tp",
    "microbatch_group",
    "recompute_layers",
)
BOOL_COLUMNS = (
    "sequence_parallel",
    "dp_overlap",
    "tp_overlap",
    "pp_overlap",
    "ep_overlap",
    "cuda_graphs",
    "fused_cross_entropy",
    "tp_backward_overlap",
    "grad_accum_fusion",
    "fp8_activation_cache",
    "moe_router_fusion",
    "cpu_binding",
    "fp8_dispatch",
    "fp8_norm_fusion",
)
FLOAT_COLUMNS = (
    "moe_imbalance",
    "framework_efficiency",
    "offload_optimizer",
    "offload_weights",
    "offload_activations",
    "moe_capacity_factor",
)
NAME_COLUMNS = (
    "recompute",
    "precision",
    "grad_reduce_dtype",
    "adam_moments_dtype",
    "pipeline_schedule",
    "recompute_modules",
    "cuda_graph_scope",
    "fp8_recipe",
    "dispatcher",
)
OBJECT_COLUMNS = ("pp_split",)


@dataclasses.dataclass(frozen=True, eq=False)
class LayoutTable:
    """``N`` layouts as columns.

    Attributes:
        columns: field name -> array ``[N]`` (see the module docstring for dtypes).
    """

    columns: Mapping[str, np.ndarray]

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def __getattr__(self, name: str) -> np.ndarray:
        columns = object.__getattribute__(self, "columns")
        if name in columns:
            return columns[name]
        raise AttributeError(name)

    def take(self, index) -> LayoutTable:
        """The rows ``index`` (an int array or a boolean mask), as a new table."""
        return LayoutTable({name: column[index] for name, column in self.columns.items()})

    def layout(self, row: int):
        """Row ``row`` as a :class:`Layout`."""
        from fabricflow.workload.layout import Layout

        values = {}
        for name, column in self.columns.items():
            value = column[row]
            if name in INT_COLUMNS:
                value = int(value)
            elif name in BOOL_COLUMNS:
                value = bool(value)
            elif name in FLOAT_COLUMNS:
                value = float(value)
            elif name in NAME_COLUMNS:
                value = str(value)
            values[name] = value
        return Layout(**values)

    # derived columns used by the models -------------------------------------------------
    @property
    def num_gpus(self) -> np.ndarray:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def num_micro_batches(self) -> np.ndarray:
        """Micro-batches per step per pipeline (``global_batch / (dp * micro_batch)``)."""
        return self.global_batch // np.maximum(self.dp * self.micro_batch, 1)

    @property
    def expert_tensor(self) -> np.ndarray:
        """Expert tensor-parallel size (``expert_tp``; 0: ``tp`` where ``ep`` divides
        ``cp x dp``, else 1; see :attr:`Layout.expert_tensor`)."""
        fits = (self.cp * self.dp) % np.maximum(self.ep, 1) == 0
        return np.where(self.expert_tp > 0, self.expert_tp, np.where(fits, self.tp, 1))

    @property
    def expert_dp(self) -> np.ndarray:
        """Data-parallel size of expert weights: ``tp * cp * dp / (ep * expert_tp)``."""
        return self.tp * self.cp * self.dp // np.maximum(self.ep * self.expert_tensor, 1)

    @property
    def schedule(self) -> np.ndarray:
        """The schedule run: ``1f1b``, ``interleaved`` or ``dualpipe`` (``auto`` resolved)."""
        auto = np.where(self.vpp > 1, "interleaved", "1f1b")
        return np.where(self.pipeline_schedule == "auto", auto, self.pipeline_schedule)

    @property
    def group_size(self) -> np.ndarray:
        """Micro-batches per virtual-stage group of the interleaved schedule
        (``microbatch_group``, 0 meaning ``pp``)."""
        return np.where(self.microbatch_group > 0, self.microbatch_group, self.pp)


def _layout_fields() -> list[dataclasses.Field]:
    from fabricflow.workload.layout import Layout

    return list(dataclasses.fields(Layout))


def layout_table(layouts: Iterable | None = None, **columns) -> LayoutTable:
    """A :class:`LayoutTable` from an iterable of :class:`Layout` or from columns.

    Column values are arrays (all of one length ``N``) or scalars (broadcast); fields not
    given take the :class:`Layout` default. Values of the wrong kind raise
    :class:`SpecError` naming ``layout.<field>``. Checks of the layout rules themselves
    (divisibility, sizes) are :func:`table_problems`' job.
    """
    fields = _layout_fields()
    names = [f.name for f in fields]
    if layouts is not None:
        if columns:
            raise SpecError("columns", "give layouts or columns, not both")
        rows = list(layouts)
        columns = {name: [getattr(row, name) for row in rows] for name in names}
        if not rows:
            return LayoutTable({name: _column(name, [], 0) for name in names})
    unknown = sorted(set(columns) - set(names))
    if unknown:
        raise SpecError(f"layout.{unknown[0]}", f"unknown layout field; known: {names}")
    lengths = {len(v) for v in columns.values() if not np.isscalar(v) and v is not None}
    lengths |= {
        len(v)
        for k, v in columns.items()
        if k in OBJECT_COLUMNS and isinstance(v, (list, np.ndarray))
    }
    if len(lengths) > 1:
        raise SpecError("columns", f"columns have different lengths {sorted(lengths)}")
    n = lengths.pop() if lengths else 1
    out = {}
    for f in fields:
        value = columns.get(f.name, f.default)
        out[f.name] = _column(f.name, value, n)
    return LayoutTable(out)


def for_layout(table_function: Callable, layout, /, **arguments):
    """``table_function`` asked about one :class:`Layout`: the one row of
    ``table_function(table=<the one-row table of layout>, **arguments)``.

    This is how the per-layout API runs the table models (one code path for one layout
    and for millions); ``table_function`` takes the table as its ``table`` argument and
    returns row-indexed results, reduced to their row by :func:`only_row`. Example::

        fwd, bwd = for_layout(head_cost_table, layout, model=model, gpu=gpu)  # floats
    """
    return only_row(table_function(table=layout_table([layout]), **arguments))


def only_row(result):
    """The row of a table function's result computed on a one-row table: an array
    ``[1, ...]`` -> its row ``[...]`` (a numpy scalar for ``[1]``); a tuple, list or dict
    of results -> each item's row; an object with a ``row(index)`` method (a result dataclass of
    arrays ``[N]``) -> ``row(0)``.

    Raises:
        TypeError: a result with no rows (a plain number, a string, ``None``).
    """
    if hasattr(result, "row"):
        return result.row(0)
    if isinstance(result, np.ndarray) and result.ndim >= 1:
        return result[0]
    if isinstance(result, (tuple, list)):
        return type(result)(only_row(item) for item in result)
    if isinstance(result, dict):
        return {key: only_row(value) for key, value in result.items()}
    raise TypeError(f"a table function's result has rows; got {type(result).__name__}")


def _column(name: str, value, n: int) -> np.ndarray:
    """``value`` (scalar or sequence) as the ``[n]`` column of field ``name``."""
    field = f"layout.{name}"
    if name in OBJECT_COLUMNS:
        if value is None or isinstance(value, tuple):
            column = np.empty(n, dtype=object)
            for i in range(n):
                column[i] = value
            return column
        column = np.empty(n, dtype=object)
        column[:] = [None if v is None else tuple(int(x) for x in v) for v in value]
        return column
    array = np.asarray(value)
    if array.ndim == 0:
        array = np.full(n, array[()])
    if array.shape != (n,):
        raise SpecError(field, f"expected {n} values, got shape {array.shape}")
    if name in INT_COLUMNS:
        if array.dtype.kind == "b" or (array.dtype.kind not in "iu" and n and not _whole(array)):
            raise SpecError(field, f"must be integers, got {array.dtype} values")
        return array.astype(np.int64)
    if name in BOOL_COLUMNS:
        if array.dtype.kind != "b" and n:
            raise SpecError(field, f"must be True or False, got {array.dtype} values")
        return array.astype(bool)
    if name in FLOAT_COLUMNS:
        if array.dtype.kind not in "fiu" or array.dtype.kind == "b":
            raise SpecError(field, f"must be numbers, got {array.dtype} values")
        return array.astype(np.float64)
    return array.astype(str)


def _whole(array: np.ndarray) -> bool:
    try:
        numbers = array.astype(np.float64)
    except (TypeError, ValueError):
        return False
    return bool(np.all(np.isfinite(numbers)) and np.all(numbers == np.round(numbers)))


def first_problem(problems: Iterable[tuple[str, np.ndarray, object]], n: int):
    """Fold ``(field, failed [N], message)`` checks, in order, into the first failure per row:
    ``(ok [N] bool, field [N] object, message [N] object)``; ``message`` may be a callable
    of the failing row indices returning one string per index."""
    ok = np.ones(n, dtype=bool)
    fields = np.full(n, None, dtype=object)
    messages = np.full(n, None, dtype=object)
    for field, failed, message in problems:
        new = np.asarray(failed, dtype=bool) & ok
        if not new.any():
            continue
        rows = np.flatnonzero(new)
        fields[rows] = field
        texts = message(rows) if callable(message) else [message] * len(rows)
        messages[rows] = list(texts)
        ok &= ~new
    return ok, fields, messages


__all__ = [
    "BOOL_COLUMNS",
    "FLOAT_COLUMNS",
    "INT_COLUMNS",
    "NAME_COLUMNS",
    "OBJECT_COLUMNS",
    "LayoutTable",
    "first_problem",
    "for_layout",
    "layout_table",
    "only_row",
]
