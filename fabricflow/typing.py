"""Shape-annotated array types of the public API.

Each alias is ``Annotated[NDArray[dtype], "shape"]``: static type checkers see the numpy
dtype, and the metadata string documents the shape in named axes, separated by spaces,
leading axes first. The names come from a small vocabulary:

========== ============ ========================================================
axis       letter       meaning
========== ============ ========================================================
flows      ``F``        flows of a problem (one row of ``links`` each)
hops       ``H``        link slots per route row, padded at the end with ``-1``
links      ``L``        directed links of the fabric (link ids ``0 .. L-1``)
nodes      ``N``        nodes of the fabric (GPUs and switches)
gpus       ``G``        GPUs (accelerators), GPU indices ``0 .. num_gpus-1``
scenarios  ``B``        what-if scenarios solved in one batched (vmapped) call
paths      ``K``        candidate paths per flow
num_groups, group_size  collective groups and their members
records    ``R``        time samples recorded by a simulation
========== ============ ========================================================

Units are SI, as everywhere in fabricflow: bytes, seconds, bytes/s. A ``*Batch`` alias
has the scenario axis in front; the solvers accept either form and return the same.

Example::

    from fabricflow.typing import Capacity, LinkIds, Rates

    def my_solver(links: LinkIds, capacity: Capacity) -> Rates: ...

The shape strings can be read back with ``typing.get_type_hints(f, include_extras=True)``
and ``typing.get_args``. This module imports only numpy and the standard library (no
JAX), so annotating a signature with it costs nothing at import time. JAX arrays passed
where these aliases are used are converted by the functions as documented there.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
from numpy.typing import ArrayLike, NDArray

# Index arrays.
LinkIds = Annotated[NDArray[np.int32], "flows hops"]
"""int32 ``[F, H]``: link id of each hop of each flow, ``-1`` padded (``Routes.links``)."""

PathLinkIds = Annotated[NDArray[np.int32], "flows paths hops"]
"""int32 ``[F, K, H]``: link ids of ``K`` candidate paths per flow, ``-1`` padded."""

GpuIndex = Annotated[NDArray[np.integer], "flows"]
"""int ``[F]``: a GPU index per flow (source or destination), ``0 .. num_gpus-1``."""

NodeIds = Annotated[NDArray[np.int32], "links"]
"""int32 ``[L]``: a node id per link (``Fabric.link_src`` / ``link_dst``)."""

GpuNodes = Annotated[NDArray[np.int32], "gpus"]
"""int32 ``[G]``: a node (or domain) id per GPU (``Fabric.gpu_node``, ``gpu_domain``)."""

Groups = Annotated[NDArray[np.integer], "num_groups group_size"]
"""int ``[num_groups, group_size]``: GPU indices of the members of each collective group."""

# Per-entry and per-link values.
Coef = Annotated[NDArray[np.floating], "flows hops"]
"""float ``[F, H]``: fraction of the flow carried by each entry of ``links`` (0 on padding)."""

Capacity = Annotated[NDArray[np.floating], "links"]
"""float ``[L]``: link capacity, bytes/s (0 for a failed link)."""

CapacityBatch = Annotated[NDArray[np.floating], "scenarios links"]
"""float ``[B, L]``: one capacity vector per what-if scenario, bytes/s."""

Latency = Annotated[NDArray[np.floating], "links"]
"""float ``[L]``: link latency, seconds."""

LinkValues = Annotated[NDArray[np.floating], "links"]
"""float ``[L]``: any per-link quantity (load in bytes/s, utilization as a fraction)."""

# Per-flow values.
Rates = Annotated[NDArray[np.floating], "flows"]
"""float ``[F]``: flow rates, in the units of the capacities (bytes/s for a fabric)."""

RatesBatch = Annotated[NDArray[np.floating], "scenarios flows"]
"""float ``[B, F]``: flow rates of every scenario of a batched solve."""

Weights = Annotated[NDArray[np.floating], "flows"]
"""float ``[F]``: max-min weights, > 0 (a flow of weight 2 gets twice the share)."""

WeightsBatch = Annotated[NDArray[np.floating], "scenarios flows"]
"""float ``[B, F]``: max-min weights per scenario."""

Demands = Annotated[NDArray[np.floating], "flows"]
"""float ``[F]``: most a flow will use, in the units of the capacities (``inf``: no cap)."""

DemandsBatch = Annotated[NDArray[np.floating], "scenarios flows"]
"""float ``[B, F]``: demands per scenario."""

Sizes = Annotated[NDArray[np.floating], "flows"]
"""float ``[F]``: bytes each flow carries."""

Times = Annotated[NDArray[np.floating], "flows"]
"""float ``[F]``: a time per flow, seconds (start times, finish times)."""

GroupSeconds = Annotated[NDArray[np.floating], "num_groups"]
"""float ``[num_groups]``: a duration per collective group, seconds."""

RecordTimes = Annotated[NDArray[np.floating], "records"]
"""float ``[R]``: sample times of a simulation's records, seconds."""

# Inputs. Public functions accept anything numpy converts (lists, numpy or JAX arrays);
# these aliases name the shape the argument must have once converted.
LinkIdsLike = Annotated[ArrayLike, "flows hops"]
"""int ``[F, H]`` (or ``[B, F, H]`` where a function says so): link ids, ``-1`` padded."""
CoefLike = Annotated[ArrayLike, "flows hops"]
"""float ``[F, H]``: fraction of the flow on each entry of the matching link ids."""
CapacityLike = Annotated[ArrayLike, "links"]
"""float ``[L]``, or ``[B, L]`` for a batch of scenarios: capacities, bytes/s."""
FlowValuesLike = Annotated[ArrayLike, "flows"]
"""float ``[F]``, or ``[B, F]``: a value per flow (weights, demands, sizes, start times)."""
GpuIndexLike = Annotated[ArrayLike, "flows"]
"""int ``[F]``: a GPU index per flow, ``0 .. num_gpus-1``."""
GroupsLike = Annotated[ArrayLike, "num_groups group_size"]
"""int ``[num_groups, group_size]`` (or ``[group_size]``: one group): GPU indices."""


__all__ = [
    "CapacityLike",
    "CoefLike",
    "FlowValuesLike",
    "GpuIndexLike",
    "GroupsLike",
    "LinkIdsLike",
    "Capacity",
    "CapacityBatch",
    "Coef",
    "Demands",
    "DemandsBatch",
    "GpuIndex",
    "GpuNodes",
    "GroupSeconds",
    "Groups",
    "Latency",
    "LinkIds",
    "LinkValues",
    "NodeIds",
    "PathLinkIds",
    "Rates",
    "RatesBatch",
    "RecordTimes",
    "Sizes",
    "Times",
    "Weights",
    "WeightsBatch",
]
