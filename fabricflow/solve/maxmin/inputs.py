"""Host-side checks of solver inputs: clear errors naming the field, before any jit.

The jitted kernels never raise (they report a status); everything a user can get wrong
is caught here with a :class:`~fabricflow.errors.SpecError` that names the argument, the
offending index and the allowed values.
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.memory_budget import check_memory


class FlowProblem(NamedTuple):
    """Checked numpy inputs of a flow solve. ``batch`` is ``None`` or the scenario count.

    Per-scenario arrays (``capacity``, ``weight``, ``demand``) are ``[B, ...]`` when
    ``batch`` is set (unbatched ones are broadcast), else unbatched.
    """

    links: np.ndarray  # int32 [F, H], -1 padded, -1 also where coef <= 0
    capacity: np.ndarray  # [L] or [B, L]
    weight: np.ndarray | None  # [F] or [B, F]
    demand: np.ndarray | None  # [F] or [B, F]
    coef: np.ndarray | None  # [F, H] (0 where links == -1)
    batch: int | None


def as_array(name: str, values) -> np.ndarray:
    """``np.asarray(values)``; ragged nesting (rows of different lengths) is a SpecError."""
    try:
        return np.asarray(values)
    except (ValueError, TypeError) as error:
        # paths of different hop counts are the usual cause: say how to square them
        hint = "; pad shorter paths with -1" if name == "links" else ""
        raise SpecError(
            name, f"must be a rectangular array (rows of one length){hint}: {error}"
        ) from None


def check_links(links, num_links: int) -> np.ndarray:
    """int32 ``[F, H]`` link ids in ``-1..num_links-1`` (``-1`` = padding)."""
    links = as_array("links", links)
    if links.ndim != 2:
        raise SpecError("links", f"must be an int array [flows, hops], got shape {links.shape}")
    if links.size and not np.issubdtype(links.dtype, np.integer):
        raise SpecError("links", f"must hold integer link ids, got dtype {links.dtype}")
    if links.size:
        bad = (links < -1) | (links >= num_links)
        if bad.any():
            flow, hop = np.argwhere(bad)[0]
            raise SpecError(
                "links",
                f"link ids must lie in 0..{num_links - 1} (or -1 for "
                f"padding); flow {flow} hop {hop} has {int(links[flow, hop])}",
            )
    return np.ascontiguousarray(links, dtype=np.int32)


def check_values(
    name: str,
    values,
    shape_tail: tuple[int, ...],
    *,
    positive: bool = False,
    allow_inf: bool = True,
) -> tuple[np.ndarray, int | None]:
    """A float array of shape ``shape_tail`` or ``[B, *shape_tail]``: no NaN, no negatives.

    Returns ``(array, batch or None)``. Keeps float64 (the solver picks its dtype).
    """
    array = as_array(name, values)
    if array.dtype == object or not (np.issubdtype(array.dtype, np.number) or array.dtype == bool):
        raise SpecError(name, f"must be numeric, got dtype {array.dtype}")
    if np.issubdtype(array.dtype, np.complexfloating):  # astype(float64) would drop .imag
        raise SpecError(name, f"must be real numbers, got dtype {array.dtype}")
    array = array.astype(np.float64) if not np.issubdtype(array.dtype, np.floating) else array
    if array.shape == shape_tail:
        batch = None
    elif array.ndim == len(shape_tail) + 1 and array.shape[1:] == shape_tail:
        batch = array.shape[0]
    else:
        raise SpecError(
            name,
            f"must have shape {list(shape_tail)} (or [batch, "
            f"{', '.join(map(str, shape_tail))}] for scenarios), got {list(array.shape)}",
        )
    if np.isnan(array).any():
        raise SpecError(name, f"contains NaN at index {_first(np.isnan(array))}")
    low = array <= 0 if positive else array < 0
    if low.any():
        rule = "> 0" if positive else ">= 0"
        index = _first(low)
        raise SpecError(name, f"values must be {rule}; index {index} has {array[index]}")
    if not allow_inf and np.isinf(array).any():
        raise SpecError(name, f"values must be finite; index {_first(np.isinf(array))} is inf")
    return array, batch


def check_problem(links, capacity, weight=None, demand=None, coef=None) -> FlowProblem:
    """Check and normalise the inputs of a max-min solve (see :func:`max_min_rates`)."""
    capacity_arr = as_array("capacity", capacity)
    if capacity_arr.ndim not in (1, 2):
        raise SpecError(
            "capacity", f"must be [links] or [batch, links], got shape {capacity_arr.shape}"
        )
    num_links = capacity_arr.shape[-1]
    links = check_links(links, num_links)
    num_flows = links.shape[0]
    capacity_arr, batch = check_values("capacity", capacity_arr, (num_links,))
    batches = [("capacity", batch)]
    if weight is not None:
        weight, b = check_values("weight", weight, (num_flows,), positive=True, allow_inf=False)
        batches.append(("weight", b))
    if demand is not None:
        demand, b = check_values("demand", demand, (num_flows,))
        batches.append(("demand", b))
    if coef is not None:
        coef, b = check_values("coef", coef, links.shape, allow_inf=False)
        if b is not None:
            raise SpecError(
                "coef", f"must have the shape of links {list(links.shape)}, got {list(coef.shape)}"
            )
        unused = (links < 0) | (coef <= 0)
        links = np.where(unused, -1, links).astype(np.int32)
        coef = np.where(unused, 0.0, coef)
    batched = [(name, b) for name, b in batches if b is not None]
    sizes = {b for _, b in batched}
    if len(sizes) > 1:
        # Blame the first input that disagrees with the first batched one.
        first_name, first = batched[0]
        name, b = next((name, b) for name, b in batched if b != first)
        raise SpecError(
            name,
            f"has a batch of {b} scenarios but {first_name} has {first}; batched inputs "
            "must agree on the batch size",
        )
    return FlowProblem(links, capacity_arr, weight, demand, coef, sizes.pop() if sizes else None)


# Largest accepted share tolerance: beyond ~1e-3, links whose shares differ by more than
# float rounding are frozen together and the rates are no longer max-min fair.
MAX_RTOL = 1e-3
MAX_INT32 = 2**31 - 1


def check_rtol(rtol, field: str = "rtol") -> float | None:
    """``None`` (the dtype's default) or a real number in ``[0, MAX_RTOL]``."""
    if rtol is None:
        return None
    if (
        isinstance(rtol, bool)
        or not isinstance(rtol, numbers.Real)
        or not (0 <= float(rtol) <= MAX_RTOL)
    ):
        raise SpecError(
            field,
            f"must be a number in [0, {MAX_RTOL:g}] (relative tolerance for "
            f"calling two shares equal; default a few float ulps), got {rtol!r}",
        )
    return float(rtol)


def check_count(value, field: str, meaning: str) -> int | None:
    """``None`` (the default bound) or an integer in ``1..2**31 - 1``."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or not (1 <= int(value) <= MAX_INT32)
    ):
        raise SpecError(
            field,
            f"must be an integer in 1..{MAX_INT32} ({meaning}; default: "
            f"enough for any input), got {value!r}",
        )
    return int(value)


def solve_bytes(num_entries: int, num_flows: int, num_links: int, batch: int | None) -> int:
    """Estimated peak bytes of a max-min solve: ids, coefficients and per-entry
    temporaries once (a block-diagonal batch holds its entries once per scenario in the
    JAX backend, counted by the caller), and ~12 float/int vectors per flow and per link
    (state, levels, masks) per scenario."""
    scenarios = batch or 1
    return int(num_entries * 16 + scenarios * (num_entries * 8 + num_flows * 48 + num_links * 40))


def check_solve_memory(
    num_entries: int,
    num_flows: int,
    num_links: int,
    batch: int | None,
    what: str,
    *,
    budget: int | None = None,
) -> None:
    """Refuse, before allocating, a solve whose working set exceeds the memory budget.

    The budget is the shared policy of :func:`fabricflow.memory_budget.memory_budget` (or
    ``budget`` bytes); raises :class:`~fabricflow.errors.MemoryBudgetError`.
    """
    scenarios = batch or 1
    estimate = solve_bytes(num_entries, num_flows, num_links, batch)
    check_memory(
        estimate,
        f"{what} ({num_flows} flows x {num_entries // max(num_flows, 1)} "
        f"hops, {num_links} links, {scenarios} scenario(s))",
        hint="solve fewer scenarios at once or split the flows",
        budget=budget,
    )


def _first(mask: np.ndarray):
    index = tuple(int(i) for i in np.argwhere(mask)[0])
    return index[0] if len(index) == 1 else index
