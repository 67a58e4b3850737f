"""``ff.route``: GPU-to-GPU flows -> padded :class:`Routes`, dispatched on fabric structure.

Structured fabrics (Clos, torus, dragonfly) have an arithmetic router for their
``Fabric.structure`` type, listed in :func:`routers`; any other fabric goes to the generic
shortest-path router. The memory a request needs is estimated (:func:`route_bytes`) and
checked against :func:`fabricflow.memory_budget.check_memory` before routing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from fabricflow.errors import SpecError, check_flag
from fabricflow.fabric.clos import ClosStructure
from fabricflow.fabric.dragonfly import DragonflyStructure
from fabricflow.fabric.fabric import Fabric
from fabricflow.fabric.torus import TorusStructure
from fabricflow.memory_budget import check_memory, out_of_memory
from fabricflow.routing import clos, dragonfly, generic, torus
from fabricflow.routing.route_limits import ROUTE_BYTES_PER_FLOW
from fabricflow.routing.routes import Routes
from fabricflow.typing import GpuIndexLike

Router = Callable[..., Routes]


class RouterEntry(NamedTuple):
    """One row of the router table."""

    route: Router
    # keyword options the router takes besides ``policy`` and ``seed``
    options: tuple[str, ...]
    # (structure, policy, options) -> (route entries per flow, peak bytes per entry)
    width: Callable[[Any, str, dict], tuple[int, int]]


@functools.cache
def routers() -> dict[type | None, RouterEntry]:
    """Structure type -> :class:`RouterEntry`: the router of a fabric, the keyword options
    it takes besides ``policy`` and ``seed``, and its route width for memory estimates.
    ``None``: fabrics without a structure (the generic shortest-path router).

    A plain table (built once); the routers import what they share from
    :mod:`fabricflow.routing.route_limits`, never this module.
    """
    return {
        ClosStructure: RouterEntry(clos.route_clos, ("k", "pxn"), clos.route_width),
        TorusStructure: RouterEntry(torus.route_torus, (), torus.route_width),
        DragonflyStructure: RouterEntry(dragonfly.route_dragonfly, (), dragonfly.route_width),
        None: RouterEntry(generic.route_generic, (), generic.route_width),
    }


def route(
    fabric: Fabric,
    src: GpuIndexLike,
    dst: GpuIndexLike,
    *,
    policy: str = "ecmp",
    seed: int = 0,
    **options,
) -> Routes:
    """Route flows ``src[i] -> dst[i]`` (GPU indices) over ``fabric``.

    Args:
        fabric: the network.
        src, dst: int arrays ``[F]`` of GPU indices ``0..num_gpus-1``; ``src != dst``.
        policy: routing policy. Every fabric: ``ecmp`` (seeded per-flow hash among
            equal-cost shortest paths). Clos adds ``multipath`` (split evenly over ``k``
            hashed equal-cost paths, ``coef`` set), ``spray`` (even split over all
            equal-cost paths) and ``adaptive`` (spray's max-min equivalent in one
            representative link per hop level, see :mod:`fabricflow.routing.clos`); torus ``dor`` (dimension order); dragonfly ``minimal`` and
            ``valiant``. The router names the policies it accepts when given another.
        seed: hash seed; the same seed gives the same routes.
        options: router-specific (e.g. ``k`` for multipath).

    Returns:
        :class:`Routes` with ``links`` int32 ``[F, H]`` (``-1`` padded).

    Raises:
        RoutingError: unreachable pairs (with their count and an example).
        SpecError: bad endpoints, seed, policy, or an option the router does not take
            (naming it and the accepted ones).
        MemoryBudgetError: the request would not fit in memory (estimated first; a
            ``MemoryError`` while routing is reported the same way).
    """
    if not isinstance(fabric, Fabric):
        raise SpecError(
            "fabric",
            f"expected a Fabric (fabricflow.load_fabric(name)), got {type(fabric).__name__}",
        )
    src_arr, dst_arr = validate_endpoints(fabric, src, dst)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**63:
        raise SpecError("seed", f"must be an integer in 0..2**63-1, got {seed!r}")
    table = routers()
    entry = table.get(type(fabric.structure), table[None])
    accepted = entry.options
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        kind = type(fabric.structure).__name__ if fabric.structure is not None else "a generic"
        raise SpecError(
            unknown[0],
            f"unknown routing option(s) {unknown} for {kind} fabric; "
            f"accepted: {list(accepted) or 'none'}",
            value=unknown[0],
            allowed=accepted,
        )
    if "pxn" in options:
        options["pxn"] = check_flag(options["pxn"], "pxn")
    check_memory(
        route_bytes(entry, fabric, src_arr.shape[0], policy, options),
        f"routing {src_arr.shape[0]:,} flows ({policy}) on fabric {fabric.name!r}",
        hint="route fewer flows at a time",
    )
    try:
        return entry.route(fabric, src_arr, dst_arr, policy=policy, seed=int(seed), **options)
    except MemoryError as error:
        raise out_of_memory(
            error, f"routing {src_arr.shape[0]:,} flows ({policy}) on fabric {fabric.name!r}"
        ) from error


def route_bytes(
    entry: RouterEntry, fabric: Fabric, num_flows: int, policy: str, options: dict
) -> int:
    """Estimated peak bytes of routing ``num_flows`` flows (Python ints: no overflow).

    Spray's width depends on the flows; :func:`fabricflow.routing.clos` checks it again
    once known.
    """
    width, per_entry = entry.width(fabric.structure, policy, options)
    return int(num_flows) * (ROUTE_BYTES_PER_FLOW + per_entry * width)


def validate_endpoints(fabric: Fabric, src, dst) -> tuple[np.ndarray, np.ndarray]:
    """Check flow endpoints and return them as int64 arrays."""
    try:
        src_arr = np.asarray(src)
    except (ValueError, TypeError) as error:  # ragged nesting
        raise SpecError("src", f"must be a 1-D array of GPU indices: {error}") from None
    try:
        dst_arr = np.asarray(dst)
    except (ValueError, TypeError) as error:
        raise SpecError("dst", f"must be a 1-D array of GPU indices: {error}") from None
    for name, arr in (("src", src_arr), ("dst", dst_arr)):
        if arr.ndim != 1:
            raise SpecError(name, f"must be a 1-D array of GPU indices, got shape {arr.shape}")
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise SpecError(name, f"must hold integer GPU indices, got dtype {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() >= fabric.num_gpus):
            bad = int(np.flatnonzero((arr < 0) | (arr >= fabric.num_gpus))[0])
            raise SpecError(
                name,
                f"GPU indices must lie in 0..{fabric.num_gpus - 1}; flow {bad} has {int(arr[bad])}",
            )
    if src_arr.shape != dst_arr.shape:
        raise SpecError("dst", f"shape {dst_arr.shape} differs from src shape {src_arr.shape}")
    same = np.flatnonzero(src_arr == dst_arr)
    if same.size:
        raise SpecError(
            "dst",
            f"{same.size} flow(s) have src == dst (e.g. flow {int(same[0])}, "
            f"GPU {int(src_arr[same[0]])}); a GPU does not send to itself over the fabric",
        )
    return src_arr.astype(np.int64), dst_arr.astype(np.int64)
