"""Layout tables: many candidate layouts as numpy columns, one per :class:`Layout` field.

The compute and memory models evaluate a whole table at once (arrays of seconds and bytes,
one entry per row); the per-layout API (:class:`Layout`, :func:`fabricflow.step_time`,
:func:`~fabricflow.workload.gpu_memory.memory_per_gpu`) runs the same code on a one-row table.

A table is built from layouts or from columns by
:func:`fabricflow.workload.layout.layout_table`, beside :class:`Layout` (this module sits
below it and knows the columns, not the Layout class)::

    table = layout_table([Layout(tp=8, dp=4), Layout(tp=4, dp=8)])
    table = layout_table(tp=np.array([1, 2, 4, 8]), dp=np.array([8, 4, 2, 1]), seq_len=4096)

Columns not given take the :class:`Layout` default; a scalar is broadcast to every row.
Integer fields are int64, switches bool, fractions float64, names numpy strings;
``pp_split`` is an object column of tuples (``None`` = the automatic split).
:func:`table_problems` checks every row at once, with the rules and messages of
:meth:`Layout.validate` (which calls it on one row).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

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


def as_column(name: str, value, n: int) -> np.ndarray:
    """``value`` (scalar or sequence) as the ``[n]`` column of field ``name``, of the
    field's kind (int64, bool, float64, numpy strings, or an object column of tuples);
    :class:`SpecError` naming ``layout.<name>`` for values of the wrong kind."""
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
    "as_column",
    "first_problem",
    "only_row",
]
